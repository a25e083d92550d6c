"""The smoothed-discrepancy gradient kernel (seed 003, Alg. 2 and 3 at a single
holder): its scores are n times the gradient of F~^lambda on the site's clipped
M_0; on adversarial and hypothesis-generated neighbours, through the real
``Site.answer``, no score moves by more than its charged sensitivity (and the
vector by no more than its charged L2 sensitivity); bad parameters are refused."""

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
from privadapt.common.federation import Query
from privadapt.common.kernels import get_kernel
from privadapt.common.kernels.grid_rounding import score_rounding_charged
from privadapt.common.mechanisms import Adjacency
from privadapt.common.numerics.fixed_point import FixedPointCodec
from privadapt.common.numerics.geometry import clip_rows_to_norm
from privadapt.server.algorithms.discrepancy_minimization.smoothed_discrepancy import (
    SmoothedDiscrepancy,
    second_moment,
)

KERNEL = get_kernel("smoothed_discrepancy_gradient")
DIM, NUM, R = 3, 10, 1.5
BITS = 40
NAMES = tuple(f"x{i}" for i in range(DIM))
RNG = np.random.default_rng(7)
TARGET = clip_rows_to_norm(RNG.normal(size=(NUM, DIM)), R)
POINTS = clip_rows_to_norm(RNG.normal(size=(6, DIM)) * 0.8, R)
WEIGHTS = RNG.dirichlet(np.ones(6))
_LEDGERS = itertools.count()


def wire(mu=30.0, scale=1.0, regularization=0.01, offsets=None, bound=0.0, weights=WEIGHTS):
    params = {"feature_norm": R, "source_points": POINTS, "weights": weights, "mu": mu,
              "scale": scale, "regularization": regularization, "offset_bound": bound}
    if offsets is not None:
        params["offsets"] = offsets
    return params


def release(tmp_path, features, params, adjacency=Adjacency.REPLACE_ONE):
    policy = SitePolicy("s", math.inf, 1e-5, adjacency=adjacency, allow_non_private=True)
    site = Site(Dataset(features, np.zeros(len(features)), NAMES), policy,
                PrivacyLedger(tmp_path / f"l{next(_LEDGERS)}.db", policy, create=True))
    typed = KERNEL.Params.from_wire(params, DIM)
    query = Query("job", "q", KERNEL.name, params,
                  KERNEL.mechanism(typed, math.inf, adjacency, dim=DIM), fractional_bits=BITS)
    (block,) = site.answer(query, 1).blocks
    return FixedPointCodec(BITS).decode(block)


def charges(params, adjacency):
    typed = KERNEL.Params.from_wire(params, DIM)
    policy = SitePolicy("s", math.inf, 1e-5, adjacency=adjacency)
    records = policy.range_records(NUM + 1)
    (error,) = KERNEL.computation_errors(typed, DIM, records)
    per_score = score_rounding_charged(KERNEL.score_sensitivities(typed, adjacency, DIM), BITS,
                                       error, KERNEL.max_abs_sum(typed, records))
    (l2,) = KERNEL.charged_sensitivities(typed, adjacency, "l2", DIM, BITS, records)
    return np.array(per_score), l2


def assert_within(tmp_path, before, after, params, adjacency=Adjacency.REPLACE_ONE):
    first = release(tmp_path, before, params, adjacency)
    second = release(tmp_path, after, params, adjacency)
    per_score, l2 = charges(params, adjacency)
    moved = np.abs(first - second)
    assert np.all(moved <= per_score), (moved, per_score)
    assert float(np.linalg.norm(moved)) <= l2
    return moved / per_score


def test_the_scores_are_n_times_the_gradient_on_the_clipped_target(tmp_path):
    far = TARGET.copy()
    far[0] *= 1e6  # the site clips it back to norm R
    scores = release(tmp_path, far, wire())
    objective = SmoothedDiscrepancy(POINTS, second_moment(clip_rows_to_norm(far, R)), 30.0, 0.01)
    np.testing.assert_allclose(scores / NUM, objective.value_and_gradient(WEIGHTS)[1],
                               atol=1e-9)


def worst_replacement():
    """Replace a record orthogonal to the top eigenvector of M(q) by one along it:
    the largest move of M(q) in the direction the softmax weights most."""
    matrix = second_moment(TARGET) - second_moment(POINTS, WEIGHTS)
    values, vectors = np.linalg.eigh(matrix)
    top = vectors[:, np.argmax(np.abs(values))]
    before = TARGET.copy()
    before[0] = R * vectors[:, np.argmin(np.abs(values))]
    after = before.copy()
    after[0] = R * top
    return before, after


@pytest.mark.parametrize("mu", [0.5, 30.0, 1e4])
def test_the_worst_replacement_stays_within_the_charge(tmp_path, mu):
    before, after = worst_replacement()
    used = assert_within(tmp_path, before, after, wire(mu=mu))
    if mu < 100:  # (a saturated softmax moves far less than mu allows)
        assert used.max() > 0.05  # the adversarial pair is not a trivial one


def test_alg1_scores_with_public_losses_stay_within_the_charge(tmp_path):
    before, after = worst_replacement()
    offsets = np.linspace(0, 2.0, 6)
    assert_within(tmp_path, before, after, wire(scale=4.0, offsets=offsets, bound=2.0))


def test_adding_a_record_stays_within_the_add_remove_charge(tmp_path):
    before, after = worst_replacement()
    assert_within(tmp_path, before, np.vstack([before, after[0]]), wire(),
                  Adjacency.ADD_REMOVE_ONE)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), mu=st.sampled_from([1e-3, 1.0, 50.0, 2.0**20]),
       where=st.integers(0, NUM - 1), scale=st.sampled_from([1.0, 1e-6, 1e9]))
def test_hypothesis_replacements_stay_within_the_charge(tmp_path, seed, mu, where, scale):
    rng = np.random.default_rng(seed)
    before = clip_rows_to_norm(rng.normal(size=(NUM, DIM)) * scale, R)
    after = before.copy()
    after[where] = rng.normal(size=DIM) * scale
    after = clip_rows_to_norm(after, R)
    weights = rng.dirichlet(np.ones(6))
    assert_within(tmp_path, before, after, wire(mu=mu, weights=weights))


def test_the_selection_sensitivity_is_per_point_and_below_the_papers():
    typed = KERNEL.Params.from_wire(wire(mu=30.0), DIM)
    ours = np.array(KERNEL.score_sensitivities(typed, Adjacency.REPLACE_ONE, DIM))
    np.testing.assert_allclose(ours, 30.0 * R**2 * np.sum(POINTS**2, axis=1), rtol=1e-12)
    r_hat_squared = np.max(np.sum(POINTS**2, axis=1))
    assert ours.max() <= 0.5 * 2 * 30.0 * R**2 * r_hat_squared * (1 + 1e-12)  # paper x n


@pytest.mark.parametrize(("change", "message"), [
    ({"source_points": POINTS * 10}, "norm above feature_norm"),
    ({"weights": WEIGHTS * 2}, "simplex"),
    ({"weights": -WEIGHTS}, "simplex"),
    ({"mu": 2.0**21}, "mu"),
    ({"mu": 0.0}, "mu"),
    ({"scale": math.inf}, "scale"),
    ({"regularization": -1.0}, "regularization"),
    ({"offsets": np.full(6, 3.0), "offset_bound": 2.0}, "offset_bound"),
])
def test_bad_public_parameters_are_refused(change, message):
    with pytest.raises(ValueError, match=message):
        KERNEL.Params.from_wire({**wire(), **change}, DIM)


def test_a_selection_over_the_scores_is_answered_at_one_site(tmp_path):
    from privadapt.common.mechanisms import ReportNoisyMin

    policy = SitePolicy("s", 5.0, 1e-5)
    site = Site(Dataset(TARGET, np.zeros(NUM), NAMES), policy,
                PrivacyLedger(tmp_path / "sel.db", policy, create=True))
    typed = KERNEL.Params.from_wire(wire(), DIM)
    sensitivity = max(KERNEL.score_sensitivities(typed, Adjacency.REPLACE_ONE, DIM))
    mechanism = ReportNoisyMin(sensitivity, 4 * sensitivity)
    query = Query("job", "q", KERNEL.name, wire(), mechanism, form="per_site")
    (index,) = site.answer(query, 1).blocks
    assert 0 <= int(index[0]) < 6


def test_softmax_weights_of_tied_eigenvalues_sum_to_one_at_huge_scales():
    # mu ||A|| = 2^400: a log-partition of 2^400 + log 2 rounds to 2^400, and
    # normalising by it gave each of two tied top eigenvalues weight 1 (sum 2).
    from privadapt.common.numerics.smoothed_spectral import smoothed_spectrum

    for top in (1.0, 2.0**60, 2.0**400):
        _, _, signed = smoothed_spectrum(np.diag([top, top, 0.0]), 1.0)
        assert math.fsum(np.abs(signed)) <= 1.0 + 1e-12
        if top > 2.0**60 - 1:
            assert signed[1:] == pytest.approx([0.5, 0.5])
