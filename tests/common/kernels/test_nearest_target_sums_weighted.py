"""The NNA kernel ``nearest_target_sums`` as seed 001's DP Lloyd and DP mixture
baselines query it (centres as its public points, a clip radius, count and
moment weights): its release is the per-centre weighted count, sums and
squared sums of the clipped records; on adversarial neighbouring datasets, run through the real
``Site.answer``, the release never moves by more than what the site charges,
in L1 (Laplace) and L2 (Gaussian), and the worst cases reach the bound."""

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
from privadapt.common.errors import QueryRefusedError
from privadapt.common.federation import Query
from privadapt.common.kernels import get_kernel
from privadapt.common.kernels.nearest_target_sums import MAX_TARGETS
from privadapt.common.mechanisms import Adjacency, LaplaceMechanism
from privadapt.common.numerics.fixed_point import FixedPointCodec

DIM = 3
NAMES = tuple(f"x{i}" for i in range(DIM))
KERNEL = get_kernel("nearest_target_sums")
CENTRES = np.array([[0.3, 0.0, 0.0], [-0.3, 0.0, 0.0], [0.0, 0.25, -0.1]])
BASE = np.random.default_rng(5).normal(scale=0.2, size=(10, DIM))
FRACTIONAL_BITS = 48
MAX_RECORDS = 64
_LEDGERS = itertools.count()


def wire(clip: float = 0.5, count_weight: float = 1.0, moment_weight: float | None = 2.0,
         centres: np.ndarray = CENTRES) -> dict:
    params = {"targets": centres, "clip_norm": clip, "count_weight": count_weight}
    if moment_weight is not None:
        params["moment_weight"] = moment_weight
    return params


def policy_for(adjacency: Adjacency) -> SitePolicy:
    # A small public bound on n under add/remove keeps the fixed-point range
    # check from refusing the modest clip bounds tested here.
    return SitePolicy("s", math.inf, 1e-5, adjacency=adjacency, allow_non_private=True,
                      max_records=MAX_RECORDS)


def release(tmp_path, features: np.ndarray, params: dict, adjacency: Adjacency
            ) -> np.ndarray | str:
    """The decoded, noise-free release of a simulation site holding
    ``features``, or its refusal's message."""
    policy = policy_for(adjacency)
    ledger = PrivacyLedger(tmp_path / f"l{next(_LEDGERS)}.db", policy, create=True)
    data = Dataset(features, np.zeros(len(features)), NAMES)
    typed = KERNEL.Params.from_wire(params, DIM)
    query = Query("job", "q", KERNEL.name, params,
                  KERNEL.mechanism(typed, math.inf, adjacency, dim=DIM),
                  fractional_bits=FRACTIONAL_BITS)
    try:
        (block,) = Site(data, policy, ledger).answer(query, 1).blocks
    except QueryRefusedError as err:
        return str(err)
    return FixedPointCodec(FRACTIONAL_BITS).decode(block)


def charged(params: dict, adjacency: Adjacency, norm: str, num_records: int) -> float:
    typed = KERNEL.Params.from_wire(params, DIM)
    policy = policy_for(adjacency)
    (bound,) = KERNEL.charged_sensitivities(typed, adjacency, norm, DIM, FRACTIONAL_BITS,
                                            policy.range_records(num_records))
    return bound


def moved(a: np.ndarray, b: np.ndarray, norm: str) -> float:
    difference = np.abs(a - b).ravel()
    return float(difference.sum() if norm == "l1" else np.linalg.norm(difference))


def neighbours(adjacency: Adjacency, old: np.ndarray, new: np.ndarray):
    """(D, D'): D' adds ``new`` (add/remove) or replaces record 0 by ``new``,
    whose record 0 is ``old``."""
    base = BASE.copy()
    base[0] = old
    if adjacency == Adjacency.ADD_REMOVE_ONE:
        return base, np.vstack([base, new])
    replaced = base.copy()
    replaced[0] = new
    return base, replaced


def within_charge(tmp_path, params, adjacency, old, new) -> list[tuple[float, float]]:
    first, second = (release(tmp_path, f, params, adjacency)
                     for f in neighbours(adjacency, old, new))
    if isinstance(first, str) or isinstance(second, str):
        assert first == second  # a refusal may depend on public things only
        return []
    out = []
    for norm in ("l1", "l2"):
        bound = charged(params, adjacency, norm, len(BASE) + 1)
        change = moved(first, second, norm)
        assert change <= bound, (norm, change, bound)
        out.append((change, bound))
    return out


def test_the_release_is_each_centres_weighted_count_sums_and_squared_sums(tmp_path):
    points = np.array([[0.25, 0.05, 0.0], [0.9, 0.0, 0.0], [-0.2, 0.1, 0.0], [0.0, 0.3, -0.2]])
    got = release(tmp_path, points, wire(count_weight=2.0, moment_weight=3.0),
                  Adjacency.REPLACE_ONE)
    clipped = points.copy()
    clipped[1] = [0.5, 0.0, 0.0]  # ||x|| <= 1/2
    expected = np.zeros((3, 1 + 2 * DIM))
    for x, j in zip(clipped, [0, 0, 1, 2], strict=True):
        expected[j] += np.concatenate([[2.0], x, 3.0 * x**2])
    np.testing.assert_allclose(got, expected, atol=1e-12)


CORNER = np.full(DIM, 0.5 / math.sqrt(DIM))  # ||x||_1 = sqrt(d) r on the clip sphere


@pytest.mark.parametrize("adjacency", list(Adjacency))
@pytest.mark.parametrize("new", [CORNER, -CORNER, np.array([1e300, 0.0, 0.0]),
                                 np.array([0.0, 0.0, 1e-300]), np.array([-7.0, 3.0, 2.0])])
def test_adversarial_neighbours_move_the_release_within_the_charge(tmp_path, adjacency, new):
    old = -new if adjacency == Adjacency.REPLACE_ONE else BASE[0]
    within_charge(tmp_path, wire(), adjacency, old, new)


def test_the_add_remove_worst_case_reaches_the_l1_bound(tmp_path):
    # x at the corner of the sphere: w + sqrt(d) r + v r^2 in L1, exactly up to rounding.
    (l1, _), (l2, _) = within_charge(tmp_path, wire(), Adjacency.ADD_REMOVE_ONE, BASE[0],
                                     CORNER)
    r, w, v = 0.5, 1.0, 2.0
    assert l1 == pytest.approx(w + math.sqrt(DIM) * r + v * r**2, rel=1e-9)
    assert l2 <= math.sqrt(w**2 + r**2 + v**2 * r**4)


def test_the_replace_worst_case_moves_two_rows_and_reaches_the_bound(tmp_path):
    # The old record goes to centre 1, the new to centre 0: two rows move.
    (l1, l1_bound), _ = within_charge(tmp_path, wire(moment_weight=None),
                                      Adjacency.REPLACE_ONE, -CORNER, CORNER)
    assert l1 == pytest.approx(2 * (1.0 + math.sqrt(DIM) * 0.5), rel=1e-9)
    assert l1 <= l1_bound


def test_a_same_centre_replacement_with_a_small_count_weight_is_charged_4r2(tmp_path):
    # r > w: a record replaced by its mirror image at one centre moves 2r in L2.
    centres = np.array([[0.0, 0.0, 0.4], [0.0, 0.0, -0.4]])
    old, new = np.array([0.5, 0.0, 0.0]), np.array([-0.5, 0.0, 0.0])
    params = wire(count_weight=0.01, moment_weight=None, centres=centres)
    _, (l2, bound) = within_charge(tmp_path, params, Adjacency.REPLACE_ONE, old, new)
    assert l2 == pytest.approx(1.0, rel=1e-9) and bound >= 1.0


coordinate = st.one_of(st.floats(-1.0, 1.0), st.sampled_from([1e300, -1e300, 1e-300, 0.0]))
record = st.lists(coordinate, min_size=DIM, max_size=DIM).map(np.array)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(old=record, new=record, adjacency=st.sampled_from(list(Adjacency)),
       count_weight=st.sampled_from([1e-3, 0.3, 1.0, 40.0]),
       moment_weight=st.sampled_from([None, 1e-3, 1.0, 50.0]),
       clip=st.sampled_from([2.0**-100, 0.5, 3.0, 2.0**100]))
def test_generated_neighbours_stay_within_the_charge(tmp_path, old, new, adjacency,
                                                     count_weight, moment_weight, clip):
    params = wire(clip, count_weight, moment_weight, CENTRES * 2 * clip)
    try:
        KERNEL.Params.from_wire(params, DIM)
    except ValueError:
        return  # refused on its public parameters alone, before any record is read
    within_charge(tmp_path, params, adjacency, scaled(old, clip), scaled(new, clip))


def scaled(point: np.ndarray, clip: float) -> np.ndarray:
    """A generated point scaled to the clip radius, its huge entries kept
    huge but finite (data loading refuses inf)."""
    with np.errstate(over="ignore"):
        out = point * 2 * clip
    return np.where(np.isfinite(out), out, np.sign(point) * 1e300)


def test_laplace_asks_for_the_kernels_own_l1_bound_not_sqrt_size_times_l2():
    typed = KERNEL.Params.from_wire(wire(), DIM)
    mechanism = KERNEL.mechanism(typed, 1 / 0.5, Adjacency.ADD_REMOVE_ONE, dim=DIM,
                                 noise="laplace")
    assert isinstance(mechanism, LaplaceMechanism)
    own = 1.0 + math.sqrt(DIM) * 0.5 + 2.0 * 0.25
    assert own < mechanism.sensitivity < own * 1.01
    assert mechanism.epsilon == pytest.approx(0.5)


@pytest.mark.parametrize(("change", "message"), [
    ({"targets": np.zeros((MAX_TARGETS + 1, DIM))}, "targets"),
    ({"targets": np.array([[0.0, 0.0, np.nan]])}, "targets"),
    ({"targets": np.array([[1.01, 0.0, 0.0]])}, "norm above 1.0"),  # beyond 2 r
    ({"targets": np.array([[0.7, 0.0, 0.0]]), "clip_norm": 0.3}, "norm above 0.6"),
    ({"count_weight": 2.0**201}, "count_weight"),
    ({"clip_norm": 0.0}, "clip_norm"),
    ({"moment_weight": -1.0}, "moment_weight"),
    ({"moment_weight": 2.0**150, "clip_norm": 2.0**30,
      "targets": np.zeros((1, DIM))}, "moment_weight' times clip_norm"),
])
def test_out_of_range_public_parameters_are_refused(change, message):
    with pytest.raises(ValueError, match=message):
        KERNEL.Params.from_wire({**wire(), **change}, DIM)
