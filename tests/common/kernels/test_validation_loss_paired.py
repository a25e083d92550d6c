"""The validation_loss kernel with a reference: each record contributes its
paired loss difference to the reference, clipped to [-C_k, C_k] and divided
by C_k; neighbouring datasets move the release by at most what the kernel
declares under each adjacency (checked by brute force, records far outside
any bound included), losses that are not finite never refuse, and the wire
carries the reference only when there is one (the digest of a query without
it is the one of before)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privadapt.common.data.dataset import Dataset
from privadapt.common.data.record_parts import RecordPart
from privadapt.common.federation import Query
from privadapt.common.kernels import get_kernel
from privadapt.common.kernels.validation_loss import (
    ValidationLossParams,
    loss_differences,
    paired_terms,
)
from privadapt.common.losses import loss_values
from privadapt.common.mechanisms import Adjacency
from privadapt.common.secure.query_digest import query_digest
from privadapt.common.wire.messages import param_from_proto, param_to_proto

DIM = 3
RNG = np.random.default_rng(17)
CANDIDATES = RNG.normal(size=(3, DIM)) * 2
REFERENCE = RNG.normal(size=DIM)
CLIPS = np.array([0.5, 2.0, 8.0])
FEATURES = RNG.normal(size=(25, DIM))
LABELS = RNG.normal(size=25) * 2
KERNEL = get_kernel("validation_loss")


def params(clips=CLIPS, loss="squared", candidates=CANDIDATES, reference=REFERENCE):
    return ValidationLossParams(candidates, loss, clips, reference=reference)


def release(features, labels, p):
    data = Dataset(np.atleast_2d(np.asarray(features, float)), np.asarray(labels, float),
                   tuple(f"x{i}" for i in range(DIM)))
    (value,) = KERNEL.compute(data, p, {})
    return value


def test_each_record_contributes_its_clipped_difference_over_the_clip():
    own = loss_values("squared", FEATURES @ CANDIDATES.T, LABELS[:, None])
    base = loss_values("squared", FEATURES @ REFERENCE, LABELS)[:, None]
    expected = (np.clip(own - base, -CLIPS, CLIPS) / CLIPS).sum(axis=0)
    np.testing.assert_allclose(release(FEATURES, LABELS, params()), expected, rtol=1e-12)


def test_a_candidate_equal_to_the_reference_scores_zero_and_a_better_one_below_it():
    # The reference itself as a candidate, and the least-squares fit (better
    # than the reference on the squared loss summed over these records).
    best = np.linalg.lstsq(FEATURES, LABELS, rcond=None)[0]
    unclipped = params(clips=np.array([1e6, 1e6]), candidates=np.stack([REFERENCE, best]))
    sums = release(FEATURES, LABELS, unclipped)
    assert sums[0] == 0.0 and sums[1] < 0


@pytest.mark.parametrize("adjacency, per_entry", [(Adjacency.REPLACE_ONE, 2.0),
                                                  (Adjacency.ADD_REMOVE_ONE, 1.0)])
def test_sensitivities_depend_on_the_adjacency_not_on_the_clips(adjacency, per_entry):
    for clips in (CLIPS, 1e-3, 1e3):
        p = params(clips)
        assert KERNEL.score_sensitivities(p, adjacency, DIM) == (per_entry,) * 3
        (l2,) = KERNEL.l2_sensitivities(p, adjacency)
        assert l2 == pytest.approx(per_entry * math.sqrt(3))
        assert KERNEL.max_abs_sum(p, 10) == 10.0


def test_a_query_on_a_record_part_is_charged_the_replace_one_sensitivity():
    # Replacing a record can move it into or out of a part: the mechanism
    # takes the larger of the two adjacencies, here replace-one's 2 sqrt(K).
    part = RecordPart("validation", 0.25, "job")
    for records in (RecordPart.ALL, part):
        mechanism = KERNEL.mechanism(params(), math.inf, Adjacency.REPLACE_ONE, dim=DIM,
                                     records=records)
        assert mechanism.sensitivities[0] == pytest.approx(2 * math.sqrt(3))


values = st.floats(-1e6, 1e6, allow_nan=False)
record = st.tuples(st.lists(values, min_size=DIM, max_size=DIM), values)
losses = st.sampled_from(["squared", "logistic"])


@settings(max_examples=80, deadline=None)
@given(old=record, new=record, position=st.integers(0, 24), loss=losses)
def test_replacing_one_record_moves_each_entry_by_at_most_two(old, new, position, loss):
    features, labels = FEATURES.copy(), LABELS.copy()
    if loss == "logistic":
        labels = np.where(labels > 0, 1.0, -1.0)
    features[position], labels[position] = old
    before = release(features, labels, params(loss=loss))
    features[position], labels[position] = new
    change = np.abs(release(features, labels, params(loss=loss)) - before)
    # Up to the one rounding of each float sum (the site charges it on top).
    assert np.all(change <= 2.0 * (1 + 1e-12))
    (l2,) = KERNEL.l2_sensitivities(params(loss=loss), Adjacency.REPLACE_ONE)
    assert np.linalg.norm(change) <= l2 * (1 + 1e-12)


@settings(max_examples=80, deadline=None)
@given(extra=record, loss=losses)
def test_adding_or_removing_one_record_moves_each_entry_by_at_most_one(extra, loss):
    before = release(FEATURES, LABELS, params(loss=loss))
    after = release(np.vstack([FEATURES, extra[0]]), np.append(LABELS, extra[1]),
                    params(loss=loss))
    change = np.abs(after - before)
    assert np.all(change <= 1.0 * (1 + 1e-12))
    (l2,) = KERNEL.l2_sensitivities(params(loss=loss), Adjacency.ADD_REMOVE_ONE)
    assert np.linalg.norm(change) <= l2 * (1 + 1e-12)


def test_an_extreme_record_moves_each_entry_by_exactly_the_declared_bound():
    # A record where the candidates are far worse than the reference (terms
    # +1) replaced by one where they are far better (terms -1): the bound 2 is
    # attained, so it is tight.
    reference = np.zeros(DIM)
    candidates = np.array([[1.0, 0, 0], [0, 1.0, 0], [1.0, 1.0, 0]])
    p = params(clips=np.ones(3), candidates=candidates, reference=reference)
    worse = (np.array([100.0, 100.0, 0.0]), 0.0)  # candidates miss by 100+, reference by 0
    better = (np.array([100.0, 100.0, 0.0]), 150.0)
    features, labels = FEATURES.copy(), LABELS.copy()
    features[0], labels[0] = worse
    first = release(features, labels, p)
    features[0], labels[0] = better
    second = release(features, labels, p)
    np.testing.assert_allclose(first - second, 2.0)


def test_losses_that_are_not_finite_count_plus_one_minus_one_or_zero():
    # Logistic losses overflow for margins near the float range: only the
    # candidate's (+1), only the reference's (-1), both (0).
    x = np.array([[1e308, 0.0, 0.0]])
    big = np.array([[-10.0, 0.0, 0.0]])  # candidate margin -1e309: inf
    fine = np.array([0.0, 0.0, 0.0])
    assert paired_terms(x, np.array([1.0]), params(np.ones(1), "logistic", big, fine))[0, 0] \
        == 1.0
    assert paired_terms(x, np.array([1.0]), params(np.ones(1), "logistic", fine[None],
                                                   big[0]))[0, 0] == -1.0
    assert paired_terms(x, np.array([1.0]), params(np.ones(1), "logistic", big, big[0]))[0, 0] \
        == 0.0
    diff = loss_differences(x, np.array([1.0]), big, fine, "logistic")
    assert diff[0, 0] == np.inf


def test_a_softmax_record_whose_label_is_no_class_contributes_zero():
    candidates = RNG.normal(size=(2, DIM, 3))
    reference = RNG.normal(size=(DIM, 3))
    p = ValidationLossParams(candidates, "softmax_cross_entropy", 1.0, reference=reference)
    terms = paired_terms(FEATURES[:3], np.array([0.0, 7.0, np.nan]), p)
    assert np.all(terms[1:] == 0.0) and np.any(terms[0] != 0.0)
    assert np.all(np.abs(terms) <= 1.0)


@pytest.mark.parametrize("reference", [None, REFERENCE])
def test_the_wire_round_trips_with_and_without_a_reference(reference):
    sent = ValidationLossParams(CANDIDATES, "squared", CLIPS, reference=reference)
    wire = {key: param_from_proto(param_to_proto(value))
            for key, value in sent.to_wire().items()}
    again = ValidationLossParams.from_wire(wire, DIM)
    np.testing.assert_array_equal(again.bounds, CLIPS)
    if reference is None:
        assert "reference" not in wire and again.reference is None
    else:
        np.testing.assert_array_equal(again.reference, REFERENCE)
        assert again.paired


def test_without_a_reference_the_wire_and_digest_are_those_of_before():
    # The encoding of before, written out: the keys the kernel always had.
    before = {"candidates": CANDIDATES, "loss": "squared", "loss_bound": 2.0}
    now = ValidationLossParams(CANDIDATES, "squared", 2.0).to_wire()
    assert list(now) == list(before)
    mechanism = KERNEL.mechanism(ValidationLossParams(CANDIDATES, "squared", 2.0), 2.0,
                                 Adjacency.REPLACE_ONE, dim=DIM)

    def digest(wire):
        return query_digest(Query("job", "q", "validation_loss", wire, mechanism), 1)

    assert digest(now) == digest(before)
    paired = ValidationLossParams(CANDIDATES, "squared", 2.0, reference=REFERENCE).to_wire()
    assert digest(paired) != digest(before)


@pytest.mark.parametrize("kwargs, message", [
    ({"reference": np.ones(DIM + 1)}, "reference"),
    ({"reference": np.array([1.0, np.nan, 0.0])}, "NaN or infinite"),
    ({"score_offsets": np.ones(3)}, "score_offsets"),
    ({"loss_bound": np.array([1.0, 0.0, 1.0])}, "clips > 0"),
])
def test_bad_paired_parameters_are_refused_naming_the_parameter(kwargs, message):
    arguments = {"candidates": CANDIDATES, "loss": "squared", "loss_bound": CLIPS,
                 "reference": REFERENCE, **kwargs}
    with pytest.raises(ValueError, match=message):
        ValidationLossParams(**arguments)
