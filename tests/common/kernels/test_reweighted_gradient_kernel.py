"""The reweighted_gradient kernel (PCnvxAdap / PNCnvxAdap site side): its blocks
match the reference gradients of F and J, its sensitivities hold on neighbouring
datasets with adversarial records and any weights u, and its per-job state
survives a retried step without applying an update twice."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privadapt.common.data.dataset import Dataset
from privadapt.common.kernels import get_kernel
from privadapt.common.kernels.reweighted_gradient import ReweightedGradient
from privadapt.common.mechanisms import Adjacency
from privadapt.server.algorithms.reweighting.objectives import (
    AdaptationSample,
    ReweightingHyperparameters,
    objective_and_gradient,
)

DIM = 3
NUM = 12
RNG = np.random.default_rng(5)
FEATURES = RNG.normal(size=(NUM, DIM)) * 0.4
LABELS = RNG.normal(size=NUM) * 0.5
KERNEL: ReweightedGradient = get_kernel("reweighted_gradient")  # type: ignore[assignment]


def params(objective="convex", loss="squared", step=0, **changes):
    base = {
        "weights": np.array([0.4, -0.3, 0.8]), "step": step, "objective": objective,
        "loss": loss, "alpha": 0.4, "total_private_records": 20, "feature_norm": 1.5,
        "label_bound": 1.0, "radius": 2.0, "k1": 0.2, "k2": 0.3, "kinf": 0.1, "mu": 40.0,
        "inverse_square_sum": 0.01, "log_partition": 4.0, "step_size": 50.0,
    }
    base.update(changes)
    return base


def dataset(features, labels) -> Dataset:
    return Dataset(np.asarray(features, float), np.asarray(labels, float),
                   tuple(f"x{i}" for i in range(DIM)))


def lower(p) -> float:
    return p["total_private_records"] / (1 - p["alpha"])


def state_at(u: np.ndarray) -> dict:
    return {"reweighted_gradient": {"u": np.array(u, float), "next_step": 0}}


def typed(p):
    """The query's params as the site parses them."""
    return KERNEL.Params.from_wire(p, DIM)


def run(data, p, state, noise=None):
    """compute_local -> (noise) -> apply_local -> compute, as the site drives it."""
    p = typed(p)
    (local,) = KERNEL.compute_local(data, p, state)
    noised = local if noise is None else local + noise
    KERNEL.apply_local(data, p, state, (noised,))
    released = KERNEL.compute(data, p, state)
    return released, local


def test_blocks_match_the_reference_gradients_of_f_without_active_clipping():
    p = params(feature_norm=100.0, label_bound=100.0, radius=100.0)
    u = lower(p) * np.linspace(1.0, 3.0, NUM)
    (gradient, _, _), local = run(dataset(FEATURES, LABELS), p, state_at(u))
    # Reference: the private part of grad F with no public records' influence
    # (one public record far away in weight, u_pub huge, contributes ~nothing).
    sample = AdaptationSample(np.zeros((1, DIM)), np.zeros(1), FEATURES, LABELS)
    hyper = ReweightingHyperparameters(alpha=p["alpha"])
    _, grad_w, grad_u = objective_and_gradient(p["weights"], np.concatenate([[1e150], u]),
                                               sample, hyper)
    np.testing.assert_allclose(gradient / lower(p), grad_w, rtol=1e-12)
    np.testing.assert_allclose(-local / lower(p) ** 2, grad_u[1:], rtol=1e-12)


def test_update_is_the_projected_step_on_the_full_u_gradient():
    p = params(feature_norm=100.0, label_bound=100.0, radius=100.0, objective="smooth")
    u = lower(p) * np.linspace(1.0, 2.0, NUM)
    sample = AdaptationSample(np.zeros((0, DIM)), np.zeros(0), FEATURES, LABELS)
    hyper = ReweightingHyperparameters(alpha=p["alpha"], k1=p["k1"], k2=p["k2"],
                                       kinf=p["kinf"], mu=p["mu"])
    # With S and log Z the exact global values, the site's gradient is J's.
    exact = {"inverse_square_sum": float(np.sum(u**-2.0)),
             "log_partition": float(np.log(np.sum(np.exp(p["mu"] / u))))}
    state = state_at(u)
    run(dataset(FEATURES, LABELS), {**p, **exact}, state)
    _, _, grad_u = objective_and_gradient(p["weights"], u, sample, hyper, "smooth", "squared")
    expected = np.maximum(u - p["step_size"] * grad_u, lower(p))
    np.testing.assert_allclose(state["reweighted_gradient"]["u"], expected, rtol=1e-12)


def test_released_aggregates_are_scaled_sums_of_the_updated_weights():
    p = params(step_size=1e-300)  # a vanishing step: u_{t+1} = u_t
    u = lower(p) * np.linspace(1.0, 4.0, NUM)
    (_, squares, partition), _ = run(dataset(FEATURES, LABELS), p, state_at(u))
    ratio = lower(p) / u
    assert squares[0] == pytest.approx(np.sum(ratio**2), rel=1e-12)
    assert partition[0] == pytest.approx(np.sum(np.exp(p["mu"] * (1 / u - 1 / lower(p)))),
                                         rel=1e-12)


coordinate = st.one_of(
    st.floats(min_value=-1e300, max_value=1e300, allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, 1e300, -1e300, 1e-300, 1e150]),
)
record = st.tuples(st.lists(coordinate, min_size=DIM, max_size=DIM), coordinate)
weight_factor = st.floats(min_value=0.0, max_value=1e6)  # u_j = lower * (1 + factor)


def blocks_with(features, labels, u, p):
    released, local = run(dataset(features, labels), p, state_at(u))
    return released, local


@pytest.mark.parametrize(("objective", "loss"), [("convex", "squared"), ("smooth", "logistic")])
@settings(max_examples=40, deadline=None)
@given(position=st.integers(0, NUM - 1), replacement=record, old_factor=weight_factor,
       new_factor=weight_factor)
def test_replacing_one_record_moves_every_block_at_most_its_sensitivity(
    objective, loss, position, replacement, old_factor, new_factor
):
    p = params(objective, loss)
    u = lower(p) * np.linspace(1.0, 5.0, NUM)
    features, labels = FEATURES.copy(), LABELS.copy()
    # The replaced record's weight may be anything >= its bound on either side.
    u_old, u_new = u.copy(), u.copy()
    u_old[position] = lower(p) * (1 + old_factor)
    u_new[position] = lower(p) * (1 + new_factor)
    before = blocks_with(features, labels, u_old, p)
    features[position], labels[position] = replacement
    after = blocks_with(features, labels, u_new, p)
    bounds = KERNEL.l2_sensitivities(typed(p), Adjacency.REPLACE_ONE) + \
        KERNEL.local_l2_sensitivities(typed(p), Adjacency.REPLACE_ONE)
    changes = [a - b for a, b in zip(after[0], before[0], strict=True)] + [after[1] - before[1]]
    for change, bound in zip(changes, bounds, strict=True):
        assert np.all(np.isfinite(change))
        assert np.linalg.norm(change) <= bound * (1 + 1e-9) + 1e-9


@settings(max_examples=40, deadline=None)
@given(extra=record, factor=weight_factor)
def test_adding_one_record_moves_released_blocks_at_most_the_add_remove_sensitivity(extra, factor):
    p = params()
    u = lower(p) * np.linspace(1.0, 5.0, NUM)
    before, _ = blocks_with(FEATURES, LABELS, u, p)
    features = np.vstack([FEATURES, extra[0]])
    after, _ = blocks_with(features, np.append(LABELS, extra[1]),
                           np.append(u, lower(p) * (1 + factor)), p)
    bounds = KERNEL.l2_sensitivities(typed(p), Adjacency.ADD_REMOVE_ONE)
    for a, b, bound in zip(after, before, bounds, strict=True):
        assert np.linalg.norm(a - b) <= bound * (1 + 1e-9) + 1e-9


def test_one_extreme_record_reaches_the_add_remove_gradient_sensitivity():
    # w = Lambda e1, x = huge e1 (clipped to r e1), y = -Y: residual Lambda r + Y,
    # gradient 2 r (Lambda r + Y) = G at u = n/(1-alpha): the bound G is tight.
    p = params(weights=np.array([2.0, 0.0, 0.0]))
    (gradient, _, _), _ = blocks_with([[1e6, 0.0, 0.0]], [-5.0], np.array([lower(p)]), p)
    (bound, _, _) = KERNEL.l2_sensitivities(typed(p), Adjacency.ADD_REMOVE_ONE)
    assert np.linalg.norm(gradient) == pytest.approx(bound, rel=1e-12)


def test_weights_below_a_raised_bound_are_used_at_the_bound():
    # A coordinator that sends a larger n than before cannot make the site use
    # u_i below the new bound n/(1-alpha): sensitivities stay valid.
    bigger = params(total_private_records=80)
    stale = run(dataset(FEATURES, LABELS), bigger, state_at(np.full(NUM, lower(params()))))
    fresh = run(dataset(FEATURES, LABELS), bigger, state_at(np.full(NUM, lower(bigger))))
    for a, b in zip([*stale[0], stale[1]], [*fresh[0], fresh[1]], strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_retried_step_restarts_from_its_snapshot_and_applies_once():
    data = dataset(FEATURES, LABELS)
    state: dict = {}
    run(data, params(step=0), state)
    after_first = state["reweighted_gradient"]["u"].copy()
    run(data, params(step=0), state)  # the same step again (a retried round)
    np.testing.assert_array_equal(state["reweighted_gradient"]["u"], after_first)
    run(data, params(step=1), state)
    after_second = state["reweighted_gradient"]["u"].copy()
    run(data, params(step=1), state, noise=np.zeros(NUM))
    np.testing.assert_array_equal(state["reweighted_gradient"]["u"], after_second)
    assert not np.array_equal(after_first, after_second)


@pytest.mark.parametrize("steps", [[1], [0, 2], [0, 1, 3], [0, 1, 0]])
def test_steps_out_of_order_are_refused(steps):
    data = dataset(FEATURES, LABELS)
    state: dict = {}
    with pytest.raises(ValueError, match="step"):
        for step in steps:
            run(data, params(step=step), state)


@pytest.mark.parametrize(("key", "value"), [
    ("alpha", 1.0), ("alpha", -0.1), ("total_private_records", 0), ("step", -1),
    ("mu", 0.0), ("k2", -1.0), ("objective", "other"), ("loss", "hinge"),
    ("log_partition", math.inf), ("step_size", math.nan), ("step", 1.5),
])
def test_malformed_parameters_are_refused(key, value):
    with pytest.raises(ValueError, match=key):
        KERNEL.Params.from_wire(params(**{key: value}), DIM)


def test_without_weight_noise_there_is_no_local_block_and_the_update_is_exact():
    data = dataset(FEATURES, LABELS)
    assert KERNEL.local_block_shapes(typed(params(weight_noise=False)), NUM) == ()
    quiet = typed(params(weight_noise=False))
    assert KERNEL.local_l2_sensitivities(quiet, Adjacency.REPLACE_ONE) == ()
    noisy_state, quiet_state = {}, {}
    run(data, params(), noisy_state, noise=np.zeros(NUM))
    assert KERNEL.compute_local(data, typed(params(weight_noise=False)), quiet_state) == ()
    KERNEL.apply_local(data, typed(params(weight_noise=False)), quiet_state, ())
    KERNEL.compute(data, typed(params(weight_noise=False)), quiet_state)
    np.testing.assert_array_equal(quiet_state["reweighted_gradient"]["u"],
                                  noisy_state["reweighted_gradient"]["u"])


# Softmax cross-entropy (multi-class linear model W in R^{d x C}, labels 0..C-1).

CLASSES = 3
CLASS_LABELS = RNG.integers(0, CLASSES, size=NUM).astype(float)


def softmax_params(step=0, **changes):
    weights = np.array([[0.4, -0.3, 0.1], [0.2, 0.5, -0.6], [-0.3, 0.1, 0.2]]).reshape(-1)
    return params("smooth", "softmax_cross_entropy", step,
                  **{"weights": weights, "num_classes": CLASSES, **changes})


def test_softmax_blocks_match_the_reference_gradients_of_j_without_active_clipping():
    p = softmax_params(feature_norm=100.0, radius=100.0)
    u = lower(p) * np.linspace(1.0, 3.0, NUM)
    (gradient, _, _), local = run(dataset(FEATURES, CLASS_LABELS), p, state_at(u))
    sample = AdaptationSample(np.zeros((1, DIM)), np.zeros(1), FEATURES, CLASS_LABELS)
    hyper = ReweightingHyperparameters(alpha=p["alpha"], mu=p["mu"])
    _, grad_w, grad_u = objective_and_gradient(
        p["weights"], np.concatenate([[1e150], u]), sample, hyper, "smooth",
        "softmax_cross_entropy")
    np.testing.assert_allclose(gradient / lower(p), grad_w, rtol=1e-12)
    np.testing.assert_allclose(-local / lower(p) ** 2, grad_u[1:], rtol=1e-12)


def test_softmax_sensitivities_are_2g_and_b_from_the_clip_bounds():
    # G = sqrt(2) r, B = log(1 + (C-1) exp(sqrt(2) Lambda r)) (common/losses.py docstring).
    p = softmax_params()
    r, radius = p["feature_norm"], p["radius"]
    assert KERNEL.output_shapes(typed(p), DIM) == ((DIM * CLASSES,), (1,), (1,))
    gradient, squares, partition = KERNEL.l2_sensitivities(typed(p), Adjacency.REPLACE_ONE)
    assert gradient == pytest.approx(2 * math.sqrt(2) * r)
    assert (squares, partition) == (1.0, 1.0)
    (loss,) = KERNEL.local_l2_sensitivities(typed(p), Adjacency.REPLACE_ONE)
    assert loss == pytest.approx(math.log(1 + (CLASSES - 1) * math.exp(math.sqrt(2) * radius * r)))
    assert loss <= math.log(CLASSES) + 2 * radius * r  # the cruder log C + 2 Lambda r bound


class_record = st.tuples(st.lists(coordinate, min_size=DIM, max_size=DIM),
                         st.integers(0, CLASSES - 1))
adversarial_weights = st.one_of(
    st.just(None),  # the query's own W, inside the ball
    st.lists(st.floats(min_value=-1e300, max_value=1e300, allow_nan=False),
             min_size=DIM * CLASSES, max_size=DIM * CLASSES),  # far outside it
)


@settings(max_examples=60, deadline=None)
@given(position=st.integers(0, NUM - 1), replacement=class_record, old_factor=weight_factor,
       new_factor=weight_factor, weights=adversarial_weights)
def test_softmax_replacing_one_record_moves_every_block_at_most_its_sensitivity(
    position, replacement, old_factor, new_factor, weights
):
    p = softmax_params() if weights is None else softmax_params(weights=np.array(weights))
    u = lower(p) * np.linspace(1.0, 5.0, NUM)
    features, labels = FEATURES.copy(), CLASS_LABELS.copy()
    u_old, u_new = u.copy(), u.copy()
    u_old[position] = lower(p) * (1 + old_factor)
    u_new[position] = lower(p) * (1 + new_factor)
    before = blocks_with(features, labels, u_old, p)
    features[position], labels[position] = replacement
    after = blocks_with(features, labels, u_new, p)
    bounds = KERNEL.l2_sensitivities(typed(p), Adjacency.REPLACE_ONE) + \
        KERNEL.local_l2_sensitivities(typed(p), Adjacency.REPLACE_ONE)
    changes = [a - b for a, b in zip(after[0], before[0], strict=True)] + [after[1] - before[1]]
    for change, bound in zip(changes, bounds, strict=True):
        assert np.all(np.isfinite(change))
        assert np.linalg.norm(change) <= bound * (1 + 1e-9) + 1e-9


@settings(max_examples=40, deadline=None)
@given(extra=class_record, factor=weight_factor)
def test_softmax_adding_one_record_moves_released_blocks_at_most_g(extra, factor):
    p = softmax_params()
    u = lower(p) * np.linspace(1.0, 5.0, NUM)
    before, _ = blocks_with(FEATURES, CLASS_LABELS, u, p)
    after, _ = blocks_with(np.vstack([FEATURES, extra[0]]), np.append(CLASS_LABELS, extra[1]),
                           np.append(u, lower(p) * (1 + factor)), p)
    bounds = KERNEL.l2_sensitivities(typed(p), Adjacency.ADD_REMOVE_ONE)
    for a, b, bound in zip(after, before, bounds, strict=True):
        assert np.linalg.norm(a - b) <= bound * (1 + 1e-9) + 1e-9


@pytest.mark.parametrize("bad_label", [3.0, -1.0, 0.5, 1e300])
def test_softmax_record_whose_label_is_no_class_index_contributes_zero_terms(bad_label):
    """No refusal on the data (it would be an uncharged release): the record
    adds nothing to the gradient sum and has loss term 0, which the
    sensitivities cover."""
    p = softmax_params()
    u = lower(p) * np.linspace(1.0, 5.0, NUM)
    labels = CLASS_LABELS.copy()
    labels[4] = bad_label
    released, local = blocks_with(FEATURES, labels, u, p)
    without = np.delete(np.arange(NUM), 4)
    reference, reference_local = blocks_with(FEATURES[without], CLASS_LABELS[without],
                                             u[without], p)
    np.testing.assert_allclose(released[0], reference[0], rtol=1e-12, atol=1e-12)
    assert local[4] == 0.0
    np.testing.assert_allclose(local[without], reference_local, rtol=1e-12)


@pytest.mark.parametrize(("key", "value"), [
    ("num_classes", 1), ("num_classes", 2.5), ("num_classes", None), ("num_classes", True),
    ("weights", np.zeros(DIM)),
])
def test_softmax_malformed_parameters_are_refused(key, value):
    with pytest.raises(ValueError, match=key):
        KERNEL.Params.from_wire(softmax_params(**{key: value}), DIM)
