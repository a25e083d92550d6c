"""The NNA kernel (seed 001, Alg. 2): per-target counts and sums of clipped
private points, through the real site path; its range checks, its
sensitivity on adversarial neighbours, and the Laplace shares its noise is
made of."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.client.site import Site
from privadapt.common.data.dataset import Dataset
from privadapt.common.federation import Query
from privadapt.common.kernels import get_kernel
from privadapt.common.kernels.nearest_target_sums import (
    CLIP_NORM,
    MAX_TARGETS,
    NearestTargetParams,
)
from privadapt.common.mechanisms import Adjacency
from privadapt.common.noise.floating import SeededRandomBits, laplace_share
from privadapt.common.numerics.fixed_point import FixedPointCodec
from privadapt.common.numerics.geometry import clip_rows_to_norm

KERNEL = get_kernel("nearest_target_sums")
DIM = 3
RNG = np.random.default_rng(11)
TARGETS = clip_rows_to_norm(RNG.normal(size=(7, DIM)), 0.5)
FEATURES = RNG.normal(scale=0.4, size=(40, DIM))
_LEDGERS = itertools.count()


def dataset(features: np.ndarray) -> Dataset:
    return Dataset(features, np.zeros(len(features)), tuple(f"x{i}" for i in range(DIM)))


def release(tmp_path, features: np.ndarray, targets: np.ndarray, adjacency: Adjacency,
            bits: int) -> np.ndarray:
    """The decoded, noise-free release of a simulation site over ``features``."""
    policy = SitePolicy("s", math.inf, 1e-5, adjacency=adjacency, allow_non_private=True)
    ledger = PrivacyLedger(tmp_path / f"l{next(_LEDGERS)}.db", policy, create=True)
    params = {"targets": targets}
    mechanism = KERNEL.mechanism(NearestTargetParams(targets), math.inf, adjacency, dim=DIM)
    query = Query("job", "q", KERNEL.name, params, mechanism, fractional_bits=bits)
    share = Site(dataset(features), policy, ledger).answer(query, 1)
    (block,) = share.blocks
    return FixedPointCodec(bits).decode(block)


def brute_force(features: np.ndarray, targets: np.ndarray) -> np.ndarray:
    clipped = clip_rows_to_norm(features, CLIP_NORM)
    cells = np.argmin(((clipped[:, None, :] - targets[None]) ** 2).sum(axis=2), axis=1)
    out = np.zeros((len(targets), DIM + 1))
    np.add.at(out, cells, np.column_stack([np.ones(len(cells)), clipped]))
    return out


def test_without_noise_the_release_is_each_cells_count_and_sum(tmp_path):
    got = release(tmp_path, FEATURES, TARGETS, Adjacency.ADD_REMOVE_ONE, 40)
    np.testing.assert_allclose(got, brute_force(FEATURES, TARGETS), atol=1e-12)
    assert got[:, 0].sum() == len(FEATURES)


@pytest.mark.parametrize("bad, match", [
    (np.full((2, DIM), np.nan), "finite"),
    (np.ones((2, DIM)), "norm above"),
    (np.zeros((2, DIM + 1)), "d = 3"),
    (np.zeros((0, DIM)), "at least one"),
    (np.zeros((MAX_TARGETS + 1, DIM)), "at most"),
    ([[0.1, "a", 0.2]], "shape|array"),
])
def test_targets_are_range_checked(bad, match):
    with pytest.raises(ValueError, match=match):
        KERNEL.Params.from_wire({"targets": bad}, DIM)


def test_declared_sensitivities_are_the_derived_ones():
    params = NearestTargetParams(TARGETS)
    add = Adjacency.ADD_REMOVE_ONE
    assert KERNEL.sensitivities(params, add, "l2", DIM) == (pytest.approx(math.sqrt(5) / 2),)
    assert KERNEL.sensitivities(params, add, "l1", DIM) == (pytest.approx(1 + math.sqrt(3) / 2),)
    replace = Adjacency.REPLACE_ONE
    assert KERNEL.sensitivities(params, replace, "l2", DIM) == (pytest.approx(math.sqrt(2.5)),)
    assert KERNEL.sensitivities(params, replace, "l1", DIM) == (pytest.approx(2 + math.sqrt(3)),)
    # The paper's constants (Theorems 5.10, 5.12) cover them: sqrt(d) + 1 and 2.
    assert KERNEL.sensitivities(params, add, "l1", DIM)[0] <= math.sqrt(DIM) + 1
    assert KERNEL.sensitivities(params, add, "l2", DIM)[0] <= 2


def neighbours(adjacency: Adjacency, record: np.ndarray, position: int
               ) -> tuple[np.ndarray, np.ndarray]:
    if adjacency == Adjacency.ADD_REMOVE_ONE:
        return FEATURES, np.insert(FEATURES, position % (len(FEATURES) + 1), record, axis=0)
    changed = FEATURES.copy()
    changed[position % len(FEATURES)] = record
    return FEATURES, changed


def check(tmp_path, adjacency: Adjacency, record: np.ndarray, position: int, bits: int,
          targets: np.ndarray = TARGETS) -> None:
    first, second = (release(tmp_path, f, targets, adjacency, bits)
                     for f in neighbours(adjacency, record, position))
    typed = NearestTargetParams(targets)
    policy = SitePolicy("s", math.inf, 1e-5, adjacency=adjacency, allow_non_private=True)
    records = policy.range_records(len(FEATURES) + 1)
    difference = np.abs(first - second)
    for norm, moved in (("l1", difference.sum()), ("l2", float(np.linalg.norm(difference)))):
        (bound,) = KERNEL.charged_sensitivities(typed, adjacency, norm, DIM, bits, records)
        assert moved <= bound, (norm, moved, bound)


def adversarial_records() -> list[np.ndarray]:
    """At the clip boundary, far out, exactly between two targets, on a target."""
    direction = np.array([1.0, -2.0, 0.5]) / np.linalg.norm([1.0, -2.0, 0.5])
    midpoint = (TARGETS[0] + TARGETS[1]) / 2
    return [direction * 0.5, direction * 0.5 * (1 + 1e-15), direction * 1e300, midpoint,
            TARGETS[2].copy(), -direction * 0.5, np.zeros(DIM)]


@pytest.mark.parametrize("adjacency", list(Adjacency))
@pytest.mark.parametrize("bits", [16, 40])
def test_adversarial_neighbours_differ_by_at_most_the_charge(tmp_path, adjacency, bits):
    for position, record in enumerate(adversarial_records()):
        check(tmp_path, adjacency, record, 5 * position, bits)


def test_neighbours_on_duplicated_targets_differ_by_at_most_the_charge(tmp_path):
    targets = np.vstack([TARGETS, TARGETS[:3]])  # ties between copies
    for adjacency in Adjacency:
        check(tmp_path, adjacency, TARGETS[1].copy(), 3, 40, targets)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(record=st.lists(st.floats(-2, 2), min_size=DIM, max_size=DIM),
       position=st.integers(0, 100), adjacency=st.sampled_from(list(Adjacency)),
       bits=st.sampled_from([16, 30, 40]))
def test_random_neighbours_differ_by_at_most_the_charge(tmp_path, record, position,
                                                        adjacency, bits):
    check(tmp_path, adjacency, np.array(record), position, bits)


@pytest.mark.parametrize("sites, colluding", [(3, 0), (4, 1), (1, 0)])
def test_honest_laplace_shares_sum_to_laplace(sites, colluding):
    source = SeededRandomBits(3)
    honest = sites - colluding
    total = sum(laplace_share(0.7, sites, colluding, 4000, source) for _ in range(honest))
    assert stats.kstest(total, stats.laplace(scale=0.7).cdf).pvalue > 0.01


def test_targets_whose_work_is_unbounded_are_refused_from_their_shape():
    from privadapt.common.kernels.nearest_target_sums import MAX_TARGET_COORDINATES, check_targets

    check_targets(np.zeros((10_000, 8)))  # the benchmark's size stays allowed
    with pytest.raises(ValueError, match="target coordinates"):
        check_targets(np.zeros((MAX_TARGET_COORDINATES // 63 + 1, 63)))


def test_one_record_moves_only_its_own_row_at_exact_ties():
    """Through the kernel, over many blocks of the grouped search: adding one
    record (exactly equidistant to several targets, or on a duplicated
    target) changes its own cell's row only; every other row is bitwise the
    same, and its cell is the lowest-index nearest target whatever the others."""
    rng = np.random.default_rng(21)
    axes = np.vstack([np.eye(DIM), -np.eye(DIM)]) * 0.25
    far = rng.normal(size=(40, DIM))
    far *= 0.45 / np.linalg.norm(far, axis=1, keepdims=True)  # farther than the axis targets
    targets = np.vstack([far, axes, axes[:2]])
    base = clip_rows_to_norm(rng.normal(scale=0.3, size=(1500, DIM)), 0.5)
    base[::7] = 0.0  # many records tie the six axis targets
    base[3::11] = axes[1] / 2  # ... or lie halfway to one of them
    before = KERNEL.compute(dataset(base), NearestTargetParams(targets), {})[0]
    for probe, cell in ((np.zeros(DIM), 40), (axes[1].copy(), 41), (axes[0] * 0.5, 40)):
        for position in (0, 700, 1500):
            after = KERNEL.compute(dataset(np.insert(base, position, probe, axis=0)),
                                   NearestTargetParams(targets), {})[0]
            moved = np.flatnonzero(np.any(after != before, axis=1))
            np.testing.assert_array_equal(moved, [cell])
            assert after[cell, 0] == before[cell, 0] + 1


def test_the_release_does_not_depend_on_how_records_are_chunked(monkeypatch):
    from privadapt.common.kernels import nearest_target_sums

    rng = np.random.default_rng(22)
    features = rng.normal(scale=0.4, size=(700, DIM))
    params = NearestTargetParams(TARGETS, moment_weight=2.0)
    whole = KERNEL.compute(dataset(features), params, {})[0]
    monkeypatch.setattr(nearest_target_sums, "SEARCH_RECORDS", 96)
    np.testing.assert_array_equal(KERNEL.compute(dataset(features), params, {})[0], whole)
