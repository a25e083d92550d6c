"""Typed kernel parameters: every kernel's Params round-trips the wire dict the
site receives, refuses malformed input naming the parameter, and is frozen;
every kernel answers the local-block questions (empty unless it has some)."""

import dataclasses
import math

import numpy as np
import pytest

from privadapt.common.data.dataset import Dataset
from privadapt.common.kernels import get_kernel, registered_kernels
from privadapt.common.kernels.linear_gradient import LinearGradientParams
from privadapt.common.kernels.reweighted_gradient import ReweightedGradientParams
from privadapt.common.mechanisms import Adjacency

DIM = 3

REWEIGHTED = {
    "weights": np.array([0.4, -0.3, 0.8]), "step": 2, "objective": "convex", "loss": "squared",
    "alpha": 0.4, "total_private_records": 20, "feature_norm": 1.5, "label_bound": 1.0,
    "radius": 2.0, "k1": 0.2, "k2": 0.3, "kinf": 0.1, "mu": 40.0, "inverse_square_sum": 0.01,
    "log_partition": 4.0, "step_size": 50.0, "weight_noise": True,
}
WIRE = {
    "record_count": {},
    "linear_gradient": {"weights": np.array([0.5, -1.0, 2.0]), "loss": "logistic",
                        "clip_norm": 0.7},
    "second_moments": {"feature_norm": 1.5, "label_bound": 2.0},
    "exact_discrepancy": {"feature_norm": 2.0, "label_bound": 1.0, "radius": 1.5,
                          "public_moments": np.eye(DIM + 1)},
    "reweighted_gradient": REWEIGHTED,
    "reweighted_gradient/softmax": {**REWEIGHTED, "objective": "smooth",
                                    "loss": "softmax_cross_entropy", "num_classes": 2,
                                    "weights": np.arange(2.0 * DIM)},
    "validation_loss": {"candidates": np.arange(2.0 * DIM).reshape(2, DIM), "loss": "squared",
                        "loss_bound": 4.0},
    "smoothed_discrepancy_gradient": {
        "feature_norm": 1.5, "source_points": np.array([[1.0, 0.0, 0.5], [0.0, -1.0, 0.2]]),
        "weights": np.array([0.25, 0.75]), "mu": 10.0, "scale": 4.0, "regularization": 0.001,
        "offset_bound": 2.0, "offsets": np.array([1.5, -0.5])},
    "nearest_target_sums/weighted": {"targets": np.array([[0.1, 0.2, 0.0], [-0.3, 0.0, 0.2]]),
                                     "clip_norm": 0.5, "count_weight": 2.0,
                                     "moment_weight": 3.0},
    "validation_loss/softmax": {"candidates": np.ones((2, DIM, 3)),
                                "loss": "softmax_cross_entropy", "loss_bound": 2.0},
    "validation_loss/paired": {"candidates": np.arange(2.0 * DIM).reshape(2, DIM),
                               "loss": "logistic", "loss_bound": np.array([0.5, 2.0]),
                               "reference": np.array([0.1, 0.0, -0.2])},
    "loss_difference_histogram": {"candidates": np.arange(2.0 * DIM).reshape(2, DIM),
                                  "reference": np.array([0.1, 0.0, -0.2]), "loss": "squared",
                                  "edges": np.array([[0.25, 1.0], [0.5, 4.0]])},
    "nearest_target_sums": {"targets": np.array([[0.1, 0.2, -0.3], [0.0, 0.5, 0.1]])},
    "nearest_source_averages": {"targets": np.array([[0.1, 0.2, -0.3]]), "t": 3},
    "linf_gradient": {"weights": np.array([0.5, -1.0, 2.0]), "loss": "squared",
                      "clip_norm": 0.7},
    "l1_vertex_scores": {"offset": np.array([0.5, 0.0, -0.25]), "radius": 1.0,
                         "clip_norm": 0.7, "loss": "squared"},
    "l1_vertex_scores/centered": {"offset": np.zeros(DIM), "radius": 1.0, "clip_norm": 0.7,
                                  "loss": "logistic", "center": np.array([1.0, 2.0, 3.0])},
    "regularized_erm": {"loss": "squared", "regularization": 2.0, "radius": 1.5,
                        "clip_norm": 0.7, "label_bound": 1.0, "iterations": 50},
}


def kernel_of(case: str):
    return get_kernel(case.split("/")[0])


def assert_same_wire(got: dict, expected: dict) -> None:
    assert list(got) == list(expected)
    for key, value in expected.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(got[key], value)
        else:
            assert got[key] == value and type(got[key]) is type(value), key


def test_every_registered_kernel_has_a_round_trip_case():
    shipped = {name for name in registered_kernels() if not name.startswith("test_")}
    assert {case.split("/")[0] for case in WIRE} >= shipped


@pytest.mark.parametrize("case", sorted(WIRE))
def test_to_wire_gives_back_exactly_the_dict_the_site_received(case):
    params = kernel_of(case).Params.from_wire(WIRE[case], DIM)
    assert_same_wire(params.to_wire(), WIRE[case])
    again = kernel_of(case).Params.from_wire(params.to_wire(), DIM)
    assert_same_wire(again.to_wire(), WIRE[case])


@pytest.mark.parametrize("case", sorted(set(WIRE) - {"record_count"}))
def test_a_missing_parameter_is_named(case):
    wire = dict(WIRE[case])
    key = next(iter(wire))
    del wire[key]
    with pytest.raises(ValueError, match=key):
        kernel_of(case).Params.from_wire(wire, DIM)


@pytest.mark.parametrize(("case", "key", "value"), [
    ("record_count", "anything", 1.0),
    ("linear_gradient", "clip_norm", True),
    ("linear_gradient", "clip_norm", "1.0"),
    ("linear_gradient", "weights", np.ones(DIM + 1)),
    ("linear_gradient", "loss", "softmax_cross_entropy"),
    ("second_moments", "label_bound", 0.0),
    ("second_moments", "feature_norm", math.nan),
    ("exact_discrepancy", "public_moments", np.eye(DIM)),
    ("exact_discrepancy", "radius", -1.0),
    ("reweighted_gradient", "weight_noise", 1),
    ("reweighted_gradient", "step", 1.0),
    ("reweighted_gradient", "kinf", -0.1),
    ("reweighted_gradient/softmax", "num_classes", 3),
    ("nearest_target_sums/weighted", "targets", np.array([[1.1, 0.0, 0.0]])),  # beyond 2 r
    ("nearest_target_sums/weighted", "targets", np.zeros((2, DIM + 1))),
    ("nearest_target_sums/weighted", "count_weight", 0.0),  # weights then have the wrong size
])
def test_malformed_input_is_refused_naming_the_parameter(case, key, value):
    with pytest.raises(ValueError, match="weights" if key == "num_classes" else key):
        kernel_of(case).Params.from_wire({**WIRE[case], key: value}, DIM)


@pytest.mark.parametrize(("case", "key"), [("linear_gradient", "weights"),
                                         ("l1_vertex_scores", "offset")])
@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_non_finite_vector_from_the_wire_is_refused_in_the_constructors_words(case, key, bad):
    sent = np.array(WIRE[case][key], dtype=np.float64)
    sent[1] = bad
    with pytest.raises(ValueError, match=rf"parameter '{key}' holds NaN or infinite values"):
        kernel_of(case).Params.from_wire({**WIRE[case], key: sent}, DIM)


def test_params_built_directly_validate_themselves():
    with pytest.raises(ValueError, match="loss"):
        LinearGradientParams(np.ones(DIM), "hinge", 1.0)
    with pytest.raises(ValueError, match="clip_norm"):
        LinearGradientParams(np.ones(DIM), "squared", -1.0)
    with pytest.raises(ValueError, match="alpha"):
        ReweightedGradientParams(**{**REWEIGHTED, "alpha": 1.0})


def test_params_are_frozen_and_their_arrays_read_only():
    sent = np.array([0.5, -1.0, 2.0])
    params = LinearGradientParams.from_wire({**WIRE["linear_gradient"], "weights": sent}, DIM)
    with pytest.raises(dataclasses.FrozenInstanceError):
        params.clip_norm = 5.0  # type: ignore[misc]
    with pytest.raises(ValueError, match="read-only"):
        params.weights[0] = 9.0
    sent[0] = 9.0  # the sender's array is not the kernel's
    assert params.weights[0] == 0.5


@pytest.mark.parametrize("name", ["record_count", "linear_gradient", "second_moments",
                                  "exact_discrepancy"])
def test_kernels_without_local_blocks_answer_with_empty_defaults(name):
    kernel = get_kernel(name)
    params = kernel.Params.from_wire(WIRE[name], DIM)
    data = Dataset(np.ones((4, DIM)), np.ones(4), tuple(f"x{i}" for i in range(DIM)))
    state: dict = {}
    assert not kernel.per_record_state
    assert kernel.local_block_shapes(params, 4) == ()
    assert kernel.local_l2_sensitivities(params, Adjacency.REPLACE_ONE) == ()
    assert kernel.compute_local(data, params, state) == ()
    assert kernel.apply_local(data, params, state, ()) is None
    assert state == {}
