"""Kernels: correct sums, and sensitivity that holds on neighbouring datasets,
including adversarial records (huge norms, extreme labels)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privadapt.common.data.dataset import Dataset
from privadapt.common.kernels import get_kernel, registered_kernels
from privadapt.common.kernels.second_moments import symmetric_from_triangle
from privadapt.common.mechanisms import Adjacency

DIM = 4
RNG = np.random.default_rng(0)
BASE_FEATURES = RNG.normal(size=(30, DIM))
BASE_LABELS = np.sign(RNG.normal(size=30))

QUERIES = {
    "linear_gradient/logistic": (
        "linear_gradient",
        {"weights": np.array([0.5, -1.0, 2.0, 0.1]), "loss": "logistic", "clip_norm": 0.7},
    ),
    "linear_gradient/squared": (
        "linear_gradient",
        {"weights": np.array([0.5, -1.0, 2.0, 0.1]), "loss": "squared", "clip_norm": 1.3},
    ),
    "second_moments": ("second_moments", {"feature_norm": 1.5, "label_bound": 2.0}),
    "record_count": ("record_count", {}),
}

coordinate = st.one_of(
    st.floats(min_value=-1e300, max_value=1e300, allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, 1e300, -1e300, 1e-300, 1e150, -1e150]),
)
record = st.tuples(st.lists(coordinate, min_size=DIM, max_size=DIM), coordinate)


def dataset(features, labels) -> Dataset:
    names = tuple(f"x{i}" for i in range(DIM))
    return Dataset(np.asarray(features, float), np.asarray(labels, float), names)


def typed(kernel_name, params):
    """The query's params as the site parses them."""
    return get_kernel(kernel_name).Params.from_wire(params, DIM)


def release(name, data):
    kernel_name, params = QUERIES[name]
    blocks = get_kernel(kernel_name).compute(data, typed(kernel_name, params), {})
    return np.concatenate([b.ravel() for b in blocks])


def sensitivity(name, adjacency):
    kernel_name, params = QUERIES[name]
    return get_kernel(kernel_name).sensitivities(typed(kernel_name, params), adjacency, "l2",
                                                 DIM)[0]


def assert_within(change, bound):
    assert np.all(np.isfinite(change))
    assert np.linalg.norm(change) <= bound * (1 + 1e-9) + 1e-9


@pytest.mark.parametrize("name", sorted(QUERIES))
@settings(max_examples=60, deadline=None)
@given(position=st.integers(0, 29), replacement=record)
def test_replacing_one_record_moves_release_at_most_the_sensitivity(name, position, replacement):
    features, label = replacement
    neighbour_features = BASE_FEATURES.copy()
    neighbour_labels = BASE_LABELS.copy()
    neighbour_features[position] = features
    neighbour_labels[position] = label
    change = release(name, dataset(neighbour_features, neighbour_labels)) - release(
        name, dataset(BASE_FEATURES, BASE_LABELS)
    )
    assert_within(change, sensitivity(name, Adjacency.REPLACE_ONE))


@pytest.mark.parametrize("name", sorted(QUERIES))
@settings(max_examples=60, deadline=None)
@given(extra=record)
def test_adding_one_record_moves_release_at_most_the_sensitivity(name, extra):
    features, label = extra
    bigger = dataset(np.vstack([BASE_FEATURES, features]), np.append(BASE_LABELS, label))
    change = release(name, bigger) - release(name, dataset(BASE_FEATURES, BASE_LABELS))
    assert_within(change, sensitivity(name, Adjacency.ADD_REMOVE_ONE))


@pytest.mark.parametrize("name", ["linear_gradient/logistic", "linear_gradient/squared"])
def test_gradient_sensitivity_is_attained_by_opposite_extreme_records(name):
    # The bound 2C is tight: for a huge x orthogonal to w (margin 0) the two
    # labels +1 and -1 give clipped gradients -C u and +C u.
    _, params = QUERIES[name]
    direction = np.array([2.0, 1.0, 0.0, 0.0]) / np.sqrt(5.0)
    assert params["weights"] @ direction == pytest.approx(0.0)
    one = release(name, dataset([1e6 * direction], [1.0]))
    other = release(name, dataset([1e6 * direction], [-1.0]))
    assert np.linalg.norm(one - other) == pytest.approx(2 * params["clip_norm"], rel=1e-9)


def test_gradient_kernel_matches_per_record_reference():
    kernel_name, params = QUERIES["linear_gradient/logistic"]
    data = dataset(BASE_FEATURES * 3, BASE_LABELS)
    expected = np.zeros(DIM)
    for x, y in zip(data.features, data.labels, strict=True):
        gradient = -y * x / (1 + math.exp(y * (params["weights"] @ x)))
        norm = np.linalg.norm(gradient)
        expected += gradient * min(1.0, params["clip_norm"] / norm)
    (total,) = get_kernel(kernel_name).compute(data, typed(kernel_name, params), {})
    np.testing.assert_allclose(total, expected, rtol=1e-10)


def test_squared_gradient_without_active_clipping_is_the_plain_gradient():
    params = {"weights": np.ones(DIM) * 0.1, "loss": "squared", "clip_norm": 1e9}
    data = dataset(BASE_FEATURES, BASE_LABELS)
    (total,) = get_kernel("linear_gradient").compute(data, typed("linear_gradient", params), {})
    expected = 2 * BASE_FEATURES.T @ (BASE_FEATURES @ params["weights"] - BASE_LABELS)
    np.testing.assert_allclose(total, expected, rtol=1e-10)


def test_second_moments_match_clipped_outer_products():
    params = {"feature_norm": 1.0, "label_bound": 0.5}
    data = dataset(BASE_FEATURES, BASE_LABELS * 3)
    (triangle,) = get_kernel("second_moments").compute(data, typed("second_moments", params), {})
    moments = symmetric_from_triangle(triangle)
    x = BASE_FEATURES / np.maximum(1.0, np.linalg.norm(BASE_FEATURES, axis=1))[:, None]
    z = np.column_stack([x, np.clip(BASE_LABELS * 3, -0.5, 0.5)])
    np.testing.assert_allclose(moments, z.T @ z, rtol=1e-12)


def test_gradient_kernel_is_chunk_invariant(monkeypatch):
    from privadapt.common.kernels import base

    rng = np.random.default_rng(3)
    data = dataset(rng.normal(size=(1000, DIM)), np.sign(rng.normal(size=1000)))
    kernel_name, params = QUERIES["linear_gradient/squared"]
    (whole,) = get_kernel(kernel_name).compute(data, typed(kernel_name, params), {})
    monkeypatch.setattr("privadapt.common.kernels.linear_gradient.BLOCK_RECORDS", 7)
    assert base.CHUNK_RECORDS != 7  # blocks of 7 records, summed in order: the same sum
    (chunked,) = get_kernel(kernel_name).compute(data, typed(kernel_name, params), {})
    np.testing.assert_allclose(chunked, whole, rtol=1e-10)


def test_record_count_is_free_under_replace_one_only():
    kernel = get_kernel("record_count")
    params = typed("record_count", {})
    assert kernel.sensitivities(params, Adjacency.REPLACE_ONE, "l2", DIM) == (0.0,)
    assert kernel.sensitivities(params, Adjacency.ADD_REMOVE_ONE, "l2", DIM) == (1.0,)


def test_l1_sensitivity_bounds_l2_by_sqrt_of_size():
    params = typed(*QUERIES["second_moments"])
    kernel = get_kernel("second_moments")
    l2 = kernel.sensitivities(params, Adjacency.REPLACE_ONE, "l2", DIM)[0]
    l1 = kernel.sensitivities(params, Adjacency.REPLACE_ONE, "l1", DIM)[0]
    # The released block is the (DIM+1)(DIM+2)/2 entries of the upper triangle.
    assert l1 == pytest.approx(l2 * math.sqrt((DIM + 1) * (DIM + 2) / 2))


@pytest.mark.parametrize(
    "params,message",
    [
        ({"weights": np.ones(3), "loss": "logistic", "clip_norm": 1.0}, "shape"),
        ({"weights": np.ones(DIM), "loss": "hinge", "clip_norm": 1.0}, "loss"),
        ({"weights": np.ones(DIM), "loss": "logistic", "clip_norm": -1.0}, "clip_norm"),
        ({"weights": np.ones(DIM), "loss": "logistic", "clip_norm": float("inf")}, "clip_norm"),
        ({"weights": np.full(DIM, np.nan), "loss": "logistic", "clip_norm": 1.0}, "NaN"),
    ],
)
def test_malformed_gradient_params_are_rejected(params, message):
    with pytest.raises(ValueError, match=message):
        get_kernel("linear_gradient").Params.from_wire(params, DIM)


def test_unknown_kernel_names_the_registered_ones():
    with pytest.raises(KeyError, match="linear_gradient"):
        get_kernel("raw_records")
    assert {"linear_gradient", "second_moments", "record_count"} <= set(registered_kernels())
