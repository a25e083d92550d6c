"""The NAS kernel (seed 001, Alg. 1): each target's average of a site's t
nearest clipped points, through the real site path; its range checks and its
sensitivity on adversarial neighbours (a record among the t nearest of every
target point, ties, fewer than t records)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.client.site import Site
from privadapt.common.data.dataset import Dataset
from privadapt.common.federation import Query, ReleaseForm
from privadapt.common.kernels import get_kernel
from privadapt.common.kernels.nearest_source_averages import NearestSourceParams
from privadapt.common.mechanisms import Adjacency
from privadapt.common.numerics.fixed_point import FixedPointCodec
from privadapt.common.numerics.geometry import clip_rows_to_norm

KERNEL = get_kernel("nearest_source_averages")
DIM = 3
RNG = np.random.default_rng(12)
TARGETS = clip_rows_to_norm(RNG.normal(size=(6, DIM)), 0.5)
FEATURES = RNG.normal(scale=0.4, size=(30, DIM))
_LEDGERS = itertools.count()


def release(tmp_path, features: np.ndarray, t: int, adjacency: Adjacency, bits: int,
            targets: np.ndarray = TARGETS) -> np.ndarray:
    policy = SitePolicy("s", math.inf, 1e-5, adjacency=adjacency, allow_non_private=True)
    ledger = PrivacyLedger(tmp_path / f"l{next(_LEDGERS)}.db", policy, create=True)
    params = {"targets": targets, "t": t}
    mechanism = KERNEL.mechanism(NearestSourceParams(targets, t), math.inf, adjacency, dim=DIM)
    query = Query("job", "q", KERNEL.name, params, mechanism, fractional_bits=bits,
                  form=ReleaseForm.PER_SITE)
    data = Dataset(features, np.zeros(len(features)), tuple(f"x{i}" for i in range(DIM)))
    (block,) = Site(data, policy, ledger).answer(query, 1).blocks
    return FixedPointCodec(bits).decode(block)


def brute_force(features: np.ndarray, t: int, targets: np.ndarray = TARGETS) -> np.ndarray:
    clipped = clip_rows_to_norm(features, 0.5)
    squared = ((clipped[None, :, :] - targets[:, None, :]) ** 2).sum(axis=2)
    order = np.argsort(squared, axis=1, kind="stable")[:, :t]
    return clipped[order].sum(axis=1) / t


@pytest.mark.parametrize("t", [1, 5, 30, 50])  # 50 > n: the missing points count as 0
def test_without_noise_each_row_is_the_average_of_the_t_nearest(tmp_path, t):
    got = release(tmp_path, FEATURES, t, Adjacency.REPLACE_ONE, 40)
    np.testing.assert_allclose(got, brute_force(FEATURES, t), atol=1e-11)


def test_ties_go_to_the_earlier_record(tmp_path):
    # Two records at exactly the same distance (0.125) from the target.
    targets = np.array([[0.25, 0.0, 0.0]])
    for first, second in (([0.375, 0, 0], [0.125, 0, 0]), ([0.125, 0, 0], [0.375, 0, 0])):
        features = np.vstack([first, second, FEATURES + 5.0])
        got = release(tmp_path, features, 1, Adjacency.REPLACE_ONE, 40, targets)
        np.testing.assert_array_equal(got[0], first)


@pytest.mark.parametrize("bad, match", [(0, "'t'"), (5000, "'t'"), (2.5, "'t'"),
                                        (True, "'t'")])
def test_t_is_range_checked(bad, match):
    with pytest.raises(ValueError, match=match):
        KERNEL.Params.from_wire({"targets": TARGETS, "t": bad}, DIM)


def test_sensitivity_is_the_whole_release_over_every_target():
    params = NearestSourceParams(TARGETS, 4)
    for adjacency in Adjacency:
        assert KERNEL.sensitivities(params, adjacency, "l2", DIM) == (
            pytest.approx(math.sqrt(6) / 4),)
        # Theorem 5.9's b = n sqrt(d)/(t epsilon) is this L1 over epsilon.
        assert KERNEL.sensitivities(params, adjacency, "l1", DIM) == (
            pytest.approx(6 * math.sqrt(DIM) / 4),)


def neighbours(adjacency: Adjacency, record: np.ndarray, position: int, base: np.ndarray):
    if adjacency == Adjacency.ADD_REMOVE_ONE:
        return base, np.insert(base, position % (len(base) + 1), record, axis=0)
    changed = base.copy()
    changed[position % len(base)] = record
    return base, changed


def check(tmp_path, adjacency, record, position, t, bits, base=FEATURES, targets=TARGETS):
    first, second = (release(tmp_path, f, t, adjacency, bits, targets)
                     for f in neighbours(adjacency, record, position, base))
    typed = NearestSourceParams(targets, t)
    policy = SitePolicy("s", math.inf, 1e-5, adjacency=adjacency, allow_non_private=True)
    records = policy.range_records(len(base) + 1)
    difference = np.abs(first - second)
    for norm, moved in (("l1", difference.sum()), ("l2", float(np.linalg.norm(difference)))):
        (bound,) = KERNEL.charged_sensitivities(typed, adjacency, norm, DIM, bits, records)
        assert moved <= bound, (norm, moved, bound)


@pytest.mark.parametrize("adjacency", list(Adjacency))
@pytest.mark.parametrize("t", [1, 3, 30])
def test_adversarial_neighbours_differ_by_at_most_the_charge(tmp_path, adjacency, t):
    # A far record on the opposite side of every target moves every row by
    # nearly 1/t when the others cluster: the worst case of the derivation.
    clustered = clip_rows_to_norm(np.tile(TARGETS.mean(axis=0), (20, 1))
                                  + 0.01 * RNG.normal(size=(20, DIM)), 0.5)
    direction = -TARGETS.mean(axis=0) / np.linalg.norm(TARGETS.mean(axis=0))
    for base in (FEATURES, clustered, clustered[:2]):
        for position, record in enumerate([direction * 0.5, direction * 1e300,
                                           TARGETS[0].copy(), base[0].copy(), np.zeros(DIM)]):
            for bits in (16, 40):
                check(tmp_path, adjacency, record, 3 * position, t, bits, base)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(record=st.lists(st.floats(-2, 2), min_size=DIM, max_size=DIM),
       position=st.integers(0, 100), adjacency=st.sampled_from(list(Adjacency)),
       t=st.integers(1, 35), duplicate=st.booleans())
def test_random_neighbours_differ_by_at_most_the_charge(tmp_path, record, position,
                                                        adjacency, t, duplicate):
    base = np.vstack([FEATURES, FEATURES[:10]]) if duplicate else FEATURES  # ties
    check(tmp_path, adjacency, np.array(record), position, t, 40, base)


def test_a_query_whose_work_is_unbounded_is_refused_from_its_parameters():
    from privadapt.common.kernels.nearest_source_averages import MAX_TARGET_COORDINATES

    too_many = np.zeros((MAX_TARGET_COORDINATES // DIM + 1, DIM))
    with pytest.raises(ValueError, match="target coordinates"):
        KERNEL.Params.from_wire({"targets": too_many, "t": 1}, DIM)


def test_every_record_tied_for_every_target_is_answered_by_the_earliest_in_bounded_work():
    # A memory attack: targets at the origin and every
    # record clipped onto the sphere (all tie for every target); the k-d tree
    # version made each record a candidate of each target (4.3 GB at
    # n = 20,000, m = 1,024). Brute force in blocks gives the exact answer.
    rng = np.random.default_rng(0)
    records = rng.normal(size=(3000, DIM))
    records *= 3.0 / np.linalg.norm(records, axis=1, keepdims=True)
    data = Dataset(records, np.zeros(len(records)), tuple(f"x{i}" for i in range(DIM)))
    params = KERNEL.Params.from_wire({"targets": np.zeros((512, DIM)), "t": 2}, DIM)
    (out,) = KERNEL.compute(data, params, {})
    clipped = clip_rows_to_norm(records, 0.5)
    # Ties on the sphere are exact only up to each pair's rounding; the
    # chosen two are the nearest by (pair distance, index).
    squared = np.zeros(len(clipped))
    for j in range(DIM):
        squared = squared + clipped[:, j] * clipped[:, j]
    first_two = np.lexsort((np.arange(len(clipped)), squared))[:2]
    np.testing.assert_array_equal(out, np.tile(clipped[first_two].sum(axis=0) / 2, (512, 1)))
