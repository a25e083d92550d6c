"""The validation_loss kernel with one loss bound per candidate (seed 004's
grid search): each column clipped to its own L_k, moving by at most L_k on
neighbours, a bound of 0 making a constant column, public score offsets that
move nothing, and the float64 tensors on the wire."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privadapt.common.data.dataset import Dataset
from privadapt.common.kernels import get_kernel
from privadapt.common.kernels.validation_loss import ValidationLossParams
from privadapt.common.losses import loss_values
from privadapt.common.mechanisms import Adjacency
from privadapt.common.wire.messages import param_from_proto, param_to_proto

DIM = 3
RNG = np.random.default_rng(5)
CANDIDATES = RNG.normal(size=(4, DIM)) * 3
BOUNDS = np.array([0.5, 2.0, 8.0, 2.0])
FEATURES = RNG.normal(size=(30, DIM))
LABELS = RNG.normal(size=30) * 2
KERNEL = get_kernel("validation_loss")


def params(bounds=BOUNDS, offsets=None, loss="squared"):
    return ValidationLossParams(CANDIDATES, loss, bounds, offsets)


def release(features, labels, p):
    data = Dataset(np.atleast_2d(np.asarray(features, float)), np.asarray(labels, float),
                   tuple(f"x{i}" for i in range(DIM)))
    (value,) = KERNEL.compute(data, p, {})
    return value


def test_each_candidate_is_clipped_to_its_own_bound():
    expected = [np.minimum(loss_values("squared", FEATURES @ w, LABELS), b).sum()
                for w, b in zip(CANDIDATES, BOUNDS, strict=True)]
    np.testing.assert_allclose(release(FEATURES, LABELS, params()), expected, rtol=1e-12)


def test_sensitivities_are_the_bounds_and_their_euclidean_norm():
    for adjacency in Adjacency:
        assert KERNEL.score_sensitivities(params(), adjacency, DIM) == tuple(BOUNDS)
        (l2,) = KERNEL.l2_sensitivities(params(), adjacency)
        assert l2 == pytest.approx(math.sqrt(np.sum(BOUNDS**2)))
    assert KERNEL.max_abs_sum(params(), 10) == 80.0


def test_one_scalar_bound_keeps_its_old_sensitivity():
    (l2,) = KERNEL.l2_sensitivities(params(2.0), Adjacency.REPLACE_ONE)
    assert l2 == math.sqrt(4) * 2.0
    assert params(2.0).to_wire()["loss_bound"] == 2.0


values = st.floats(-1e3, 1e3, allow_nan=False)
record = st.tuples(st.lists(values, min_size=DIM, max_size=DIM), values)


@settings(max_examples=60, deadline=None)
@given(old=record, new=record, position=st.integers(0, 29))
def test_replace_one_moves_entry_k_by_at_most_its_bound(old, new, position):
    features, labels = FEATURES.copy(), LABELS.copy()
    features[position], labels[position] = old
    before = release(features, labels, params())
    features[position], labels[position] = new
    change = np.abs(release(features, labels, params()) - before)
    assert np.all(change <= BOUNDS * (1 + 1e-12))
    assert np.linalg.norm(change) <= KERNEL.l2_sensitivities(params(), Adjacency.REPLACE_ONE)[0]


@settings(max_examples=60, deadline=None)
@given(extra=record)
def test_adding_one_record_moves_entry_k_by_at_most_its_bound(extra):
    before = release(FEATURES, LABELS, params())
    after = release(np.vstack([FEATURES, extra[0]]), np.append(LABELS, extra[1]), params())
    assert np.all(np.abs(after - before) <= BOUNDS * (1 + 1e-12))


def test_a_bound_of_zero_makes_a_constant_column_and_offsets_are_added_once():
    bounds = np.array([0.0, 2.0, 8.0, 2.0])
    offsets = np.array([30.0, 1.0, 0.0, -1.0])
    p = params(bounds, offsets)
    plain = release(FEATURES, LABELS, params(bounds))
    assert plain[0] == 0.0
    np.testing.assert_array_equal(release(FEATURES, LABELS, p), plain + offsets)
    assert KERNEL.score_sensitivities(p, Adjacency.ADD_REMOVE_ONE, DIM)[0] == 0.0
    # Offsets are constants: neighbours differ exactly as without them.
    moved = release(FEATURES[1:], LABELS[1:], p) - release(FEATURES, LABELS, p)
    np.testing.assert_allclose(moved, release(FEATURES[1:], LABELS[1:], params(bounds))
                               - plain)
    (with_offsets,) = KERNEL.computation_errors(p, DIM, 100)
    (without,) = KERNEL.computation_errors(params(bounds), DIM, 100)
    assert with_offsets > without


@pytest.mark.parametrize("offsets", [None, np.array([1.0, 2.0, 3.0, 4.0])])
def test_per_candidate_bounds_round_trip_the_wire_as_float64_tensors(offsets):
    sent = params(offsets=offsets)
    wire = {key: param_from_proto(param_to_proto(value))
            for key, value in sent.to_wire().items()}
    assert np.asarray(wire["loss_bound"]).dtype == np.float64
    again = ValidationLossParams.from_wire(wire, DIM)
    np.testing.assert_array_equal(again.bounds, BOUNDS)
    if offsets is None:
        assert again.score_offsets is None and "score_offsets" not in wire
    else:
        np.testing.assert_array_equal(again.score_offsets, offsets)


@pytest.mark.parametrize("bounds, message", [
    (np.array([1.0, 2.0]), "shape"),
    (np.array([1.0, -2.0, 1.0, 1.0]), "at least one positive"),
    (np.zeros(4), "at least one positive"),
    (np.array([1.0, np.inf, 1.0, 1.0]), "NaN or infinite"),
])
def test_bad_bounds_are_refused_naming_the_parameter(bounds, message):
    with pytest.raises(ValueError, match=message):
        params(bounds)


def test_offsets_of_the_wrong_length_are_refused():
    with pytest.raises(ValueError, match="score_offsets"):
        params(offsets=np.ones(3))


def test_a_coordinator_cannot_make_a_site_score_millions_of_candidates():
    # Time and memory grow with K, which the coordinator chooses; the refusal
    # depends on the parameters only.
    from privadapt.common.kernels.validation_loss import MAX_CANDIDATES, ValidationLossParams

    with pytest.raises(ValueError, match="more than the 4096"):
        ValidationLossParams(np.zeros((MAX_CANDIDATES + 1, 2)), "logistic", 1.0)
    assert ValidationLossParams(np.zeros((MAX_CANDIDATES, 2)), "logistic", 1.0).num_candidates


def _sum_per_bound(features, labels, p):
    """The kernel's previous form, the reference: one exact sum per distinct
    bound, each on its own bound's grid."""
    from privadapt.common.kernels.exact_sum import ExactSum
    from privadapt.common.kernels.validation_loss import clipped_losses

    terms = clipped_losses(features, labels, p)
    sums = np.zeros(p.num_candidates)
    for bound in np.unique(p.bounds):
        if bound > 0:
            columns = np.flatnonzero(p.bounds == bound)
            total = ExactSum((len(columns),))
            total.add_terms(terms[:, columns], float(bound))
            sums[columns] = total.value()
    return sums


@settings(max_examples=60, deadline=None)
@given(exponents=st.lists(st.integers(-199, 200), min_size=4, max_size=4),
       fractions=st.lists(st.floats(0.5, 1.0), min_size=4, max_size=4),
       zero=st.integers(-1, 3), scale=st.sampled_from([1e-150, 1e-3, 1.0, 1e3, 1e150]))
def test_one_exact_sum_equals_a_sum_per_bound_bit_for_bit(exponents, fractions, zero, scale):
    # One exact sum over columns scaled to a common grid (a sum per distinct
    # bound cost 5.7x as much) must release the same float64s as
    # a sum per bound, down to the last bit, at bounds from 2^-200 to 2^200
    # and losses far below and above them.
    bounds = np.array([math.ldexp(f, e) for f, e in zip(fractions, exponents, strict=True)])
    if zero >= 0:
        bounds[zero] = 0.0
    if not np.any(bounds > 0):
        bounds[0] = 1.0
    p = params(bounds)
    features, labels = FEATURES * scale, LABELS * scale
    assert np.array_equal(release(features, labels, p), _sum_per_bound(features, labels, p))


def test_distinct_bounds_cost_what_one_bound_costs():
    # Counted, not timed: K distinct bounds take one exact sum, so the work the
    # site's estimate counts (n d K) is the work done.
    from privadapt.common.kernels import exact_sum

    calls = []
    original = exact_sum.ExactSum.add_terms

    def counting(self, terms, bound):
        calls.append(terms.shape)
        return original(self, terms, bound)

    p = params(np.array([0.5, 2.0, 8.0, 3.0]))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(exact_sum.ExactSum, "add_terms", counting)
        release(FEATURES, LABELS, p)
    assert calls == [(len(FEATURES), 4)]
