"""The loss_difference_histogram kernel: per candidate, counts of
|l(w_k) - l(w_0)| in public bins; every record in exactly one bin per
candidate, so neighbours move the block by at most sqrt(2 K) (replace-one)
or sqrt(K) (add/remove) whatever the records; typed Params that refuse bad
edges; work that grows with the candidates."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privadapt.common.data.dataset import Dataset
from privadapt.common.data.record_parts import RecordPart
from privadapt.common.kernels import get_kernel
from privadapt.common.kernels.loss_difference_histogram import LossDifferenceHistogramParams
from privadapt.common.losses import loss_values
from privadapt.common.mechanisms import Adjacency

DIM = 3
RNG = np.random.default_rng(23)
CANDIDATES = RNG.normal(size=(3, DIM)) * 2
REFERENCE = RNG.normal(size=DIM)
EDGES = np.array([[0.1, 1.0, 10.0], [0.5, 2.0, 8.0], [1e-3, 1e-2, 1e3]])
FEATURES = RNG.normal(size=(25, DIM))
LABELS = RNG.normal(size=25) * 2
KERNEL = get_kernel("loss_difference_histogram")


def params(loss="squared", candidates=CANDIDATES, reference=REFERENCE, edges=EDGES):
    return LossDifferenceHistogramParams(candidates, reference, loss, edges)


def counts(features, labels, p=None):
    data = Dataset(np.atleast_2d(np.asarray(features, float)), np.asarray(labels, float),
                   tuple(f"x{i}" for i in range(DIM)))
    (value,) = KERNEL.compute(data, p or params(), {})
    return value


def test_each_row_counts_every_record_once_in_the_bin_of_its_difference():
    got = counts(FEATURES, LABELS)
    assert got.shape == (3, 4)
    np.testing.assert_array_equal(got.sum(axis=1), 25)
    diff = np.abs(loss_values("squared", FEATURES @ CANDIDATES.T, LABELS[:, None])
                  - loss_values("squared", FEATURES @ REFERENCE, LABELS)[:, None])
    for k in range(3):
        expected = np.histogram(diff[:, k], bins=[0.0, *EDGES[k], np.inf])[0]
        np.testing.assert_array_equal(got[k], expected)


@pytest.mark.parametrize("adjacency, moved", [(Adjacency.REPLACE_ONE, 2),
                                              (Adjacency.ADD_REMOVE_ONE, 1)])
def test_the_sensitivity_is_the_bins_one_record_moves(adjacency, moved):
    (l2,) = KERNEL.l2_sensitivities(params(), adjacency)
    assert l2 == pytest.approx(math.sqrt(moved * 3))


def test_a_query_on_a_part_is_charged_the_replace_one_sensitivity():
    mechanism = KERNEL.mechanism(params(), math.inf, Adjacency.REPLACE_ONE, dim=DIM,
                                 records=RecordPart("validation", 0.25, "job"))
    assert mechanism.sensitivities[0] == pytest.approx(math.sqrt(6))


def test_a_histogram_cannot_answer_a_selection():
    with pytest.raises(ValueError, match="not one vector of scores"):
        KERNEL.score_sensitivities(params(), Adjacency.REPLACE_ONE, DIM)


values = st.floats(-1e6, 1e6, allow_nan=False)
record = st.tuples(st.lists(values, min_size=DIM, max_size=DIM), values)


@settings(max_examples=80, deadline=None)
@given(old=record, new=record, position=st.integers(0, 24))
def test_replacing_one_record_moves_the_block_by_at_most_sqrt_2k(old, new, position):
    features, labels = FEATURES.copy(), LABELS.copy()
    features[position], labels[position] = old
    before = counts(features, labels)
    features[position], labels[position] = new
    change = counts(features, labels) - before
    assert np.all(np.abs(change).sum(axis=1) <= 2)
    (l2,) = KERNEL.l2_sensitivities(params(), Adjacency.REPLACE_ONE)
    assert np.linalg.norm(change) <= l2 + 1e-12


@settings(max_examples=80, deadline=None)
@given(extra=record)
def test_adding_one_record_moves_one_bin_per_candidate(extra):
    before = counts(FEATURES, LABELS)
    after = counts(np.vstack([FEATURES, extra[0]]), np.append(LABELS, extra[1]))
    np.testing.assert_array_equal((after - before).sum(axis=1), 1)
    (l2,) = KERNEL.l2_sensitivities(params(), Adjacency.ADD_REMOVE_ONE)
    assert np.linalg.norm(after - before) == pytest.approx(l2)


def test_losses_that_are_not_finite_fall_in_the_last_or_first_bin():
    x = np.array([[1e308, 0.0, 0.0]])
    big = np.array([[-10.0, 0.0, 0.0]])
    fine = np.zeros(DIM)
    edges = np.array([[1.0, 2.0]])
    only_candidate = counts(x, [1.0], params("logistic", big, fine, edges))
    both = counts(x, [1.0], params("logistic", big, big[0], edges))
    np.testing.assert_array_equal(only_candidate, [[0, 0, 1]])
    np.testing.assert_array_equal(both, [[1, 0, 0]])


def test_work_grows_with_the_candidates_and_the_reference():
    assert KERNEL.work(params(), DIM, 100) == 100 * DIM * 4


@pytest.mark.parametrize("edges, message", [
    (np.array([[1.0, 0.5, 2.0]] * 3), "increasing"),
    (np.array([[0.0, 0.5, 2.0]] * 3), "2\\^-200"),
    (np.ones((3, 0)), "1 to 63"),
    (np.ones((2, 3)), "shape"),
    (np.array([[1.0, np.inf, 2.0]] * 3), "NaN or infinite"),
])
def test_bad_edges_are_refused_naming_the_parameter(edges, message):
    with pytest.raises(ValueError, match=message):
        params(edges=edges)


def test_the_reference_must_have_a_candidates_shape():
    with pytest.raises(ValueError, match="reference"):
        params(reference=np.ones(DIM + 1))


@pytest.mark.parametrize("kernel", ["loss_difference_histogram", "validation_loss"])
def test_a_softmax_query_computes_its_margins_in_chunks_that_fit_the_working_memory(
        kernel, monkeypatch):
    # The margins of one chunk of records, (rows, C) per model, must stay
    # within CHUNK_RECORDS entries whatever the number of classes C the
    # coordinator sends: sized by K alone, a chunk of 8,192 records times
    # C = 65,536 classes (an admitted query) needs gigabytes, so whether a site
    # fails would depend on its private n (validation_loss.py sizes its chunks
    # by K C for this reason).
    from privadapt.common.kernels import base, validation_loss

    classes, n = 1024, 200
    largest = []
    own = validation_loss.record_products

    def recorded(features, weights):
        largest.append(features.shape[0] * (weights.shape[1] if weights.ndim == 2 else 1))
        return own(features, weights)

    monkeypatch.setattr(validation_loss, "record_products", recorded)
    rng = np.random.default_rng(3)
    data = Dataset(rng.normal(size=(n, DIM)), rng.integers(0, classes, n).astype(float),
                   tuple(f"x{i}" for i in range(DIM)))
    candidates, reference = rng.normal(size=(1, DIM, classes)), rng.normal(size=(DIM, classes))
    p = (LossDifferenceHistogramParams(candidates, reference, "softmax_cross_entropy",
                                       np.array([[1.0, 2.0]]))
         if kernel == "loss_difference_histogram"
         else validation_loss.ValidationLossParams(candidates, "softmax_cross_entropy", 1.0,
                                                   reference=reference))
    get_kernel(kernel).compute(data, p, {})
    assert largest and max(largest) <= base.CHUNK_RECORDS
