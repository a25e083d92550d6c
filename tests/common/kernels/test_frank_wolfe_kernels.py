"""The two kernels of private Frank-Wolfe (seed 002): infinity-norm clipped
gradient sums and the l1 ball's 2d vertex scores. Their values, their
refusals, and their sensitivities on adversarial neighbours through the real
site path (the selection's admission, compute and grid rounding)."""

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
from privadapt.common.federation import Query, ReleaseForm
from privadapt.common.kernels.l1_vertex_scores import (
    L1VertexScores,
    L1VertexScoresParams,
    scores_from_gradient,
    vertex,
)
from privadapt.common.kernels.linear_gradient import LinearGradientParams
from privadapt.common.kernels.linf_gradient import LinfGradient
from privadapt.common.mechanisms import Adjacency, ReportNoisyMin

DIM = 4
NUM = 15
RNG = np.random.default_rng(7)
FEATURES = RNG.uniform(-1, 1, size=(NUM, DIM))
LABELS = RNG.normal(size=NUM)
NAMES = tuple(f"x{i}" for i in range(DIM))
SCORES = L1VertexScores()
GRADIENT = LinfGradient()


def dataset(features=FEATURES, labels=LABELS) -> Dataset:
    return Dataset(np.asarray(features, float), np.asarray(labels, float), NAMES)


def clipped_gradients(features, labels, weights, clip):
    """The reference: 2 (w.x - y) x scaled to infinity norm <= clip."""
    rows = 2.0 * (features @ weights - labels)[:, None] * features
    largest = np.abs(rows).max(axis=1)
    return rows * np.minimum(1.0, clip / np.maximum(largest, 1e-300))[:, None]


def test_the_gradient_is_the_sum_of_infinity_norm_clipped_gradients():
    weights = np.array([0.5, -1.0, 2.0, 0.0])
    params = LinearGradientParams(weights, "squared", 0.3)
    (value,) = GRADIENT.compute(dataset(), params, {})
    np.testing.assert_allclose(value, clipped_gradients(FEATURES, LABELS, weights, 0.3).sum(0))


def test_the_scores_are_plus_and_minus_h_times_the_clipped_gradient_at_center_plus_offset():
    center, offset = np.array([0.2, 0.0, -0.1, 0.3]), np.array([0.5, -0.5, 0.0, 0.25])
    params = L1VertexScoresParams(offset, 1.5, 0.3, "squared", center)
    (scores,) = SCORES.compute(dataset(), params, {})
    gradient = clipped_gradients(FEATURES, LABELS, center + offset, 0.3).sum(0)
    np.testing.assert_allclose(scores, np.r_[1.5 * gradient, -1.5 * gradient])
    np.testing.assert_allclose(scores, scores_from_gradient(gradient, 1.5))
    # Score j is <vertex(j), g>.
    for index in range(2 * DIM):
        assert scores[index] == pytest.approx(vertex(index, DIM, 1.5) @ gradient)


def test_each_record_term_is_within_the_clip_in_every_entry():
    record = (np.array([1e8, -3.0, 0.0, 1e-9]), -1e12)
    data = dataset(record[0][None, :], [record[1]])
    (value,) = GRADIENT.compute(data, LinearGradientParams(np.ones(DIM), "squared", 0.7), {})
    assert np.max(np.abs(value)) == pytest.approx(0.7)
    params = L1VertexScoresParams(np.zeros(DIM), 3.0, 0.7)
    (scores,) = SCORES.compute(data, params, {})
    assert np.max(np.abs(scores)) <= 3.0 * 0.7


def test_sensitivities_follow_the_clip():
    params = L1VertexScoresParams(np.zeros(DIM), 2.0, 0.5)
    assert SCORES.score_sensitivities(params, Adjacency.REPLACE_ONE, DIM) == (2.0,) * (2 * DIM)
    assert SCORES.score_sensitivities(params, Adjacency.ADD_REMOVE_ONE, DIM) == (1.0,) * (2 * DIM)
    assert SCORES.l2_sensitivities(params, Adjacency.REPLACE_ONE) == (
        pytest.approx(2.0 * math.sqrt(2 * DIM)),)
    gradient = LinearGradientParams(np.zeros(DIM), "squared", 0.5)
    assert GRADIENT.l2_sensitivities(gradient, Adjacency.ADD_REMOVE_ONE) == (0.5 * 2.0,)
    assert GRADIENT.l2_sensitivities(gradient, Adjacency.REPLACE_ONE) == (2.0,)
    assert GRADIENT.sensitivities(gradient, Adjacency.REPLACE_ONE, "l1", DIM) == (4.0,)


def test_params_round_trip_the_wire():
    params = L1VertexScoresParams(np.array([0.1, 0.0, -0.2, 0.0]), 1.0, 2.0, "logistic",
                                  np.ones(DIM))
    again = L1VertexScoresParams.from_wire(params.to_wire(), DIM)
    assert again.to_wire().keys() == params.to_wire().keys()
    np.testing.assert_array_equal(again.point, params.point)
    plain = L1VertexScoresParams(np.zeros(DIM), 1.0, 2.0)
    assert "center" not in plain.to_wire()
    assert L1VertexScoresParams.from_wire(plain.to_wire(), DIM).center is None


@pytest.mark.parametrize(("change", "message"), [
    ({"offset": np.array([1.0, 1.0, 0.0, 0.0])}, "l1 ball"),
    ({"offset": np.array([np.nan, 0, 0, 0])}, "NaN"),
    ({"offset": np.zeros(DIM + 1)}, "shape"),
    ({"radius": 0.0}, "radius"),
    ({"radius": 2.0**201}, "radius"),
    ({"clip_norm": math.inf}, "clip_norm"),
    ({"clip_norm": 2.0**-201}, "clip_norm"),
    ({"loss": "hinge"}, "loss"),
    ({"center": np.array([0, 0, 0, np.inf])}, "center"),
    ({"center": np.zeros(DIM - 1)}, "center"),
])
def test_bad_params_are_refused_naming_the_parameter(change, message):
    wire = {"offset": np.zeros(DIM), "radius": 1.0, "clip_norm": 1.0, "loss": "squared",
            **change}
    with pytest.raises(ValueError, match=message):
        L1VertexScoresParams.from_wire(wire, DIM)


# Adversarial neighbours through the site's own selection path.

_LEDGERS = itertools.count()
FRACTIONAL_BITS = 32


def site_scores(tmp_path, data: Dataset, wire: dict, adjacency: Adjacency):
    """What a site selects on (its kernel's scores, rounded onto its grid as it
    rounds them) and the per-score sensitivity it charges for the selection."""
    policy = SitePolicy("s", 100.0, 1e-5, adjacency=adjacency)
    site = Site(data, policy, PrivacyLedger(tmp_path / f"l{next(_LEDGERS)}.db", policy,
                                             create=True))
    mechanism = ReportNoisyMin(1e300, 1.0, adjacency=adjacency)  # declares enough
    query = Query("job", "q1", SCORES.name, wire, mechanism, fractional_bits=FRACTIONAL_BITS,
                  form=ReleaseForm.PER_SITE)
    admitted = site._admission.admit(query, 1)
    (scores,) = admitted.kernel.compute(data, admitted.params, {})
    codec = admitted.codec
    return codec.decode(codec.encode(scores)), admitted.charged.sensitivity


def neighbours(adjacency: Adjacency, record: tuple[np.ndarray, float], position: int):
    if adjacency == Adjacency.REPLACE_ONE:
        features, labels = FEATURES.copy(), LABELS.copy()
        features[position], labels[position] = record
        return dataset(), dataset(features, labels)
    return dataset(), dataset(np.vstack([FEATURES, record[0]]), np.r_[LABELS, record[1]])


MAGNITUDES = [0.0, 1e-12, 1e-3, 1.0, 1e3, 1e12, 1e300]
record = st.tuples(
    st.lists(st.sampled_from(MAGNITUDES + [-m for m in MAGNITUDES]), min_size=DIM,
             max_size=DIM).map(np.array),
    st.sampled_from(MAGNITUDES + [-m for m in MAGNITUDES]))


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(record=record, position=st.integers(0, NUM - 1), adjacency=st.sampled_from(list(Adjacency)),
       radius=st.sampled_from([1e-6, 1.0, 1e6]), clip=st.sampled_from([1e-6, 1.0, 1e6]))
def test_neighbours_move_no_score_beyond_the_charged_sensitivity(
        tmp_path, record, position, adjacency, radius, clip):
    wire = {"offset": np.array([radius / 2, 0.0, -radius / 4, 0.0]), "radius": radius,
            "clip_norm": clip, "loss": "squared", "center": np.array([1.0, -1.0, 0.5, 0.0])}
    outcomes = []
    for data in neighbours(adjacency, record, position):
        try:
            outcomes.append(site_scores(tmp_path, data, wire, adjacency))
        except QueryRefusedError as err:  # the codec's range: public things only
            outcomes.append(str(err))
    (before, charged), (after, _) = outcomes if not isinstance(outcomes[0], str) else (
        (outcomes[0], None), (outcomes[1], None))
    if charged is None:
        assert before == after
        return
    assert np.max(np.abs(after - before)) <= charged


@pytest.mark.parametrize("adjacency", list(Adjacency))
def test_the_worst_replacement_reaches_the_clip_in_every_score(tmp_path, adjacency):
    # Records whose gradients sit at +C in every entry, replaced by ones at -C.
    features = np.ones((NUM, DIM))
    labels = np.full(NUM, -1e6)  # 2 (w.x - y) x = +2e6 x: clipped to +C
    wire = {"offset": np.zeros(DIM), "radius": 2.0, "clip_norm": 0.5, "loss": "squared"}
    before, charged = site_scores(tmp_path, dataset(features, labels), wire, adjacency)
    if adjacency == Adjacency.REPLACE_ONE:
        labels = labels.copy()
        labels[0] = 1e6
        after, _ = site_scores(tmp_path, dataset(features, labels), wire, adjacency)
        expected = 2 * 2.0 * 0.5
    else:
        after, _ = site_scores(tmp_path, dataset(features[1:], labels[1:]), wire, adjacency)
        expected = 2.0 * 0.5
    np.testing.assert_allclose(np.abs(after - before), expected)
    assert expected <= charged <= expected * (1 + 1e-6)
