"""The validation_loss kernel: K clipped loss sums, whose change on neighbouring
datasets never exceeds the declared sqrt(K) L, whatever the records hold; typed
Params that round-trip and refuse bad input; the mechanism it builds."""

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

DIM, K, C = 3, 4, 3
BOUND = 2.0
RNG = np.random.default_rng(11)
BINARY_CANDIDATES = RNG.normal(size=(K, DIM)) * 3
SOFTMAX_CANDIDATES = RNG.normal(size=(K, DIM, C)) * 3
BASE_FEATURES = RNG.normal(size=(20, DIM))
KERNEL = get_kernel("validation_loss")


def params(loss):
    candidates = SOFTMAX_CANDIDATES if loss == "softmax_cross_entropy" else BINARY_CANDIDATES
    return ValidationLossParams(candidates, loss, BOUND)


def base_labels(loss):
    if loss == "softmax_cross_entropy":
        return RNG.integers(0, C, size=20).astype(float)
    return np.where(RNG.normal(size=20) > 0, 1.0, -1.0)


def dataset(features, labels):
    return Dataset(np.atleast_2d(np.asarray(features, float)), np.asarray(labels, float),
                   tuple(f"x{i}" for i in range(DIM)))


def release(features, labels, loss):
    (value,) = KERNEL.compute(dataset(features, labels), params(loss), {})
    return value


def test_the_release_is_the_clipped_loss_sum_of_each_candidate():
    labels = base_labels("logistic")
    expected = [np.minimum(loss_values("logistic", BASE_FEATURES @ w, labels), BOUND).sum()
                for w in BINARY_CANDIDATES]
    np.testing.assert_allclose(release(BASE_FEATURES, labels, "logistic"), expected)


def test_softmax_candidates_score_their_cross_entropy():
    labels = base_labels("softmax_cross_entropy")
    expected = []
    for weights in SOFTMAX_CANDIDATES:
        logits = BASE_FEATURES @ weights
        losses = np.log(np.exp(logits).sum(axis=1)) - logits[np.arange(20), labels.astype(int)]
        expected.append(np.minimum(losses, BOUND).sum())
    np.testing.assert_allclose(release(BASE_FEATURES, labels, "softmax_cross_entropy"),
                               expected)


def test_an_overflowing_loss_counts_as_the_bound():
    huge = np.full((1, DIM), 1e300)
    value = release(huge, [1.0], "squared")
    np.testing.assert_array_equal(value, np.full(K, BOUND))


coordinate = st.one_of(
    st.floats(min_value=-1e300, max_value=1e300, allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, 1e300, -1e300, 1e-300, 1e150, -1e150]),
)
binary_record = st.tuples(st.lists(coordinate, min_size=DIM, max_size=DIM), coordinate)
softmax_record = st.tuples(st.lists(coordinate, min_size=DIM, max_size=DIM),
                           st.integers(0, C - 1).map(float))


def assert_within_sensitivity(before, after, adjacency):
    declared = KERNEL.l2_sensitivities(params("squared"), adjacency)[0]
    assert declared == pytest.approx(math.sqrt(K) * BOUND)
    change = after - before
    assert np.linalg.norm(change) <= declared * (1 + 1e-12)
    assert np.max(np.abs(change)) <= BOUND * (1 + 1e-12)


@pytest.mark.parametrize("loss", ["squared", "logistic"])
@settings(max_examples=60, deadline=None)
@given(old=binary_record, new=binary_record, position=st.integers(0, 19))
def test_replace_one_never_moves_the_release_beyond_sqrt_k_l(loss, old, new, position):
    features, labels = BASE_FEATURES.copy(), base_labels(loss)
    features[position], labels[position] = old[0], old[1]
    before = release(features, labels, loss)
    features[position], labels[position] = new[0], new[1]
    assert_within_sensitivity(before, release(features, labels, loss), Adjacency.REPLACE_ONE)


@settings(max_examples=60, deadline=None)
@given(old=softmax_record, new=softmax_record, position=st.integers(0, 19))
def test_replace_one_holds_for_the_softmax_cross_entropy(old, new, position):
    loss = "softmax_cross_entropy"
    features, labels = BASE_FEATURES.copy(), base_labels(loss)
    features[position], labels[position] = old[0], old[1]
    before = release(features, labels, loss)
    features[position], labels[position] = new[0], new[1]
    assert_within_sensitivity(before, release(features, labels, loss), Adjacency.REPLACE_ONE)


@pytest.mark.parametrize("loss", ["squared", "logistic"])
@settings(max_examples=60, deadline=None)
@given(extra=binary_record)
def test_adding_one_record_never_moves_the_release_beyond_sqrt_k_l(loss, extra):
    labels = base_labels(loss)
    before = release(BASE_FEATURES, labels, loss)
    after = release(np.vstack([BASE_FEATURES, extra[0]]), np.r_[labels, extra[1]], loss)
    assert_within_sensitivity(before, after, Adjacency.ADD_REMOVE_ONE)


def test_the_worst_replacement_reaches_the_bound_in_every_entry():
    # A perfectly fitted record replaced by one every candidate gets badly wrong.
    features, labels = np.zeros((1, DIM)), np.array([0.0])
    before = release(features, labels, "squared")
    after = release(features, np.array([1e10]), "squared")
    np.testing.assert_allclose(after - before, np.full(K, BOUND))


def test_the_mechanism_declares_at_least_the_kernel_sensitivity():
    mechanism = KERNEL.mechanism(params("logistic"), 2.0, Adjacency.REPLACE_ONE, dim=DIM)
    (sensitivity,) = mechanism.sensitivities
    assert sensitivity >= math.sqrt(K) * BOUND
    assert sensitivity == pytest.approx(math.sqrt(K) * BOUND, rel=1e-4)  # plus grid rounding
    assert mechanism.noise_scales[0] == pytest.approx(2.0 * sensitivity)


@pytest.mark.parametrize("loss", ["squared", "softmax_cross_entropy"])
def test_params_round_trip_the_wire(loss):
    sent = params(loss).to_wire()
    again = ValidationLossParams.from_wire(sent, DIM)
    np.testing.assert_array_equal(again.candidates, sent["candidates"])
    assert (again.loss, again.loss_bound) == (loss, BOUND)


@pytest.mark.parametrize(("key", "value", "message"), [
    ("candidates", np.ones((K, DIM + 1)), "d = 3"),
    ("candidates", np.ones(DIM), "candidates"),
    ("candidates", np.full((K, DIM), np.nan), "candidates"),
    ("candidates", np.ones((0, DIM)), "candidates"),
    ("candidates", "w", "candidates"),
    ("loss", "hinge", "loss"),
    ("loss_bound", 0.0, "loss_bound"),
    ("loss_bound", math.inf, "loss_bound"),
    ("loss_bound", True, "loss_bound"),
])
def test_bad_input_is_refused_naming_the_parameter(key, value, message):
    wire = {**params("squared").to_wire(), key: value}
    with pytest.raises(ValueError, match=message):
        ValidationLossParams.from_wire(wire, DIM)


def test_softmax_needs_three_dimensional_candidates_with_two_classes_or_more():
    with pytest.raises(ValueError, match="candidates"):
        ValidationLossParams(BINARY_CANDIDATES, "softmax_cross_entropy", BOUND)
    with pytest.raises(ValueError, match="C >= 2"):
        ValidationLossParams(np.ones((K, DIM, 1)), "softmax_cross_entropy", BOUND)


def test_softmax_labels_that_are_not_class_indices_score_the_loss_bound():
    # Refusing them would reveal a label at no charge: each such
    # record scores L, the worst a record can, on every candidate.
    np.testing.assert_array_equal(
        release(BASE_FEATURES, np.full(20, 0.5), "softmax_cross_entropy"), 20 * BOUND)
