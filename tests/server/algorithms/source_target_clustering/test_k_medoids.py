"""AkM, PAM and the STC cost against exhaustive search and each other (seed 001)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from privadapt.server.algorithms.source_target_clustering import (
    accelerated_k_medoids,
    exhaustive_k_medoids,
    pam_k_medoids,
    stc_cost,
)


def _instance(seed: int, n: int, m: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    target = rng.normal(size=(n, d)) + rng.integers(0, 3, size=(n, 1))
    source = rng.normal(size=(m, d)) + 2.0
    return target, source


def test_cost_is_the_mean_distance_to_source_or_chosen_centres():
    target = np.array([[0.0, 0.0], [3.0, 0.0], [10.0, 0.0]])
    source = np.array([[0.0, 1.0]])
    # x0 -> source at 1, x1 -> itself at 0, x2 -> x1 at 7.
    assert stc_cost(target, source, target[[1]]) == pytest.approx((1.0 + 0.0 + 7.0) / 3)
    assert stc_cost(target, None, target[[0, 2]]) == pytest.approx(3.0 / 3)


@pytest.mark.parametrize("seed", range(8))
def test_akm_and_pam_near_the_exhaustive_optimum_on_tiny_instances(seed):
    target, source = _instance(seed, n=12, m=5, d=2)
    gaps = {}
    for k in (1, 2, 3):
        _, optimum = exhaustive_k_medoids(target, k, source=source)
        akm = stc_cost(target, source, target[accelerated_k_medoids(target, k, source=source,
                                                                    seed=seed)])
        pam = stc_cost(target, source, target[pam_k_medoids(target, k, source=source)])
        assert akm >= optimum * (1 - 1e-9) and pam >= optimum * (1 - 1e-9)
        gaps[k] = (akm - optimum) / optimum, (pam - optimum) / optimum
    # Reported gap (relative): local search may miss the optimum, never by much here.
    assert max(g for pair in gaps.values() for g in pair) < 0.25, gaps


def test_relative_gaps_over_many_tiny_instances_are_small_on_average():
    akm_gaps, pam_gaps = [], []
    for seed in range(30):
        target, source = _instance(100 + seed, n=10, m=4, d=3)
        _, optimum = exhaustive_k_medoids(target, 3, source=source)
        akm_gaps.append(stc_cost(target, source, target[accelerated_k_medoids(
            target, 3, source=source, seed=seed)]) / optimum - 1)
        pam_gaps.append(stc_cost(target, source, target[pam_k_medoids(
            target, 3, source=source)]) / optimum - 1)
    assert np.mean(akm_gaps) < 0.03 and np.mean(pam_gaps) < 0.03, (np.mean(akm_gaps),
                                                                   np.mean(pam_gaps))


@pytest.mark.parametrize("with_source", [True, False])
def test_akm_is_close_to_pam_on_mid_size_instances(with_source):
    target, source = _instance(7, n=600, m=300, d=5)
    source = source if with_source else None
    for k in (5, 15):
        akm = stc_cost(target, source, target[accelerated_k_medoids(target, k, source=source,
                                                                    seed=1)])
        pam = stc_cost(target, source, target[pam_k_medoids(target, k, source=source)])
        assert akm <= pam * 1.05, (k, akm, pam)


def test_akm_returns_k_distinct_target_indices_and_is_reproducible():
    target, source = _instance(3, n=300, m=50, d=4)
    first = accelerated_k_medoids(target, 10, source=source, seed=5)
    assert len(set(first.tolist())) == 10 and first.min() >= 0 and first.max() < 300
    np.testing.assert_array_equal(first, accelerated_k_medoids(target, 10, source=source,
                                                               seed=5))


def test_a_source_covering_the_target_leaves_the_choice_free_of_cost():
    target, _ = _instance(4, n=50, m=1, d=2)
    indices = accelerated_k_medoids(target, 3, source=target.copy(), seed=0)
    assert stc_cost(target, target, target[indices]) == pytest.approx(0.0, abs=1e-7)


def test_solvers_refuse_bad_k_and_non_finite_points():
    target, source = _instance(0, n=5, m=2, d=2)
    for solver in (functools.partial(accelerated_k_medoids, seed=0), pam_k_medoids):
        with pytest.raises(ValueError, match="k must be"):
            solver(target, 6, source=source)
        bad = target.copy()
        bad[0, 0] = np.nan
        with pytest.raises(ValueError, match="non-finite"):
            solver(bad, 2, source=source)
    assert len(accelerated_k_medoids(target, 0, source=source, seed=0)) == 0
