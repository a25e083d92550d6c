"""Seed 001's private baselines end to end, in process: Synthetic 2's private
source split over 3 sites, DP Lloyd k-means and the DP mixture sampler each
produce a stand-in source inside the ball, near the real one when the budget
is large, and every site's ledger holds the run's budget."""

from __future__ import annotations

import math

import numpy as np
import pytest

from experiments.seed001 import datasets as ds
from privadapt.client.local_federation import LocalFederation
from privadapt.server.algorithms.source_target_clustering.private_kmeans import PrivateLloydKMeans
from privadapt.server.algorithms.source_target_clustering.private_mixture_sampler import (
    PrivateGaussianMixtureSampler,
)

DATA = ds.synthetic_2(seed=0)


def federation() -> LocalFederation:
    return LocalFederation.from_datasets(
        ds.split_across_sites(DATA.source, 3, seed=0), epsilon_cap=50.0, delta_cap=1e-5,
        adjacency="add_remove_one", noise_seed=11)


def distance_to_source(points: np.ndarray) -> np.ndarray:
    return np.linalg.norm(points[:, None] - DATA.source[None], axis=2).min(axis=1)


def test_splitting_keeps_every_record_once():
    sites = ds.split_across_sites(DATA.source, 3, seed=0)
    assert [s.num_records for s in sites] == [360, 360, 360]
    pooled = np.vstack([s.features for s in sites])
    np.testing.assert_array_equal(np.sort(pooled, axis=0), np.sort(DATA.source, axis=0))


BASELINES = {
    "private_kmeans": lambda budget: PrivateLloydKMeans(n_clusters=100, iterations=5, seed=0,
                                                        **budget),
    "dp_mixture": lambda budget: PrivateGaussianMixtureSampler(n_components=30, iterations=5,
                                                               n_samples=100, seed=0, **budget),
}


def standin(model) -> np.ndarray:
    return model.centres_ if hasattr(model, "centres_") else model.samples_


@pytest.mark.parametrize("name", sorted(BASELINES))
@pytest.mark.parametrize("budget", [{"epsilon": 3.0}, {"rho": 3.0}])
def test_each_baseline_gives_a_standin_source_and_spends_its_budget(name, budget):
    fed = federation()
    points = standin(BASELINES[name](budget).fit(fed))
    assert points.ndim == 2 and points.shape[1] == 2 and len(points) <= 100
    assert np.all(np.linalg.norm(points, axis=1) <= 0.5 * (1 + 1e-9))
    for spent in fed.privacy_spent(0.0 if "epsilon" in budget else 1e-6).values():
        assert len(spent.mechanisms) == 5
        if "epsilon" in budget:
            assert 3.0 * 0.99 <= spent.job.epsilon <= 3.0


@pytest.mark.parametrize("name", sorted(BASELINES))
def test_with_a_large_budget_the_standin_lies_on_the_source(name):
    points = standin(BASELINES[name]({"epsilon": 40.0}).fit(federation()))
    assert len(points) >= 10
    # Synthetic 2's clusters have standard deviation 0.01 (before scaling to
    # the ball, by about 0.5); the stand-in points sit within a few of them.
    assert np.median(distance_to_source(points)) < 0.03
    assert not math.isnan(points.sum())
