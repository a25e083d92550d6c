"""NCnvxAdap / PNCnvxAdap (seed 000, Alg. 2) with the softmax cross-entropy of a
multi-class linear model: the constants G, beta and B hold on adversarial
records, the federated run is projected gradient descent on J, it adapts a
3-class covariate-shift problem well above chance, epsilon = inf is NCnvxAdap,
a private run charges what it plans, and sites refuse labels that are not
class indices."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.local_federation import LocalFederation
from privadapt.client.policy import SitePolicy
from privadapt.client.site import Site
from privadapt.common.data.dataset import Dataset
from privadapt.common.losses import (
    softmax_cross_entropy_bounds,
    softmax_cross_entropy_smoothness,
    softmax_cross_entropy_terms,
)
from privadapt.common.noise.floating import SeededRandomBits
from privadapt.common.numerics.geometry import clip_rows_to_norm
from privadapt.server.algorithms.public_erm import accuracy, fit_linear
from privadapt.server.algorithms.reweighting.descent import DataBounds, StepSizes
from privadapt.server.algorithms.reweighting.estimators import PNCnvxAdap
from privadapt.server.algorithms.reweighting.ncnvx_adap import ncnvx_adap, pncnvx_adap
from privadapt.server.algorithms.reweighting.objectives import (
    AdaptationSample,
    ReweightingHyperparameters,
    objective_value,
    reference_descent,
    weight_lower_bounds,
)

SOFTMAX = "softmax_cross_entropy"
M, N, DIM, CLASSES = 90, 45, 3, 3
BOUNDS = DataBounds(feature_norm=3.0, label_bound=1.0, radius=5.0, num_classes=CLASSES)
HYPER = ReweightingHyperparameters(alpha=0.5, k1=0.05, k2=0.05, kinf=0.05, mu=100.0,
                                   discrepancy=0.01)
TARGET_MEAN = np.array([0.3, -0.2])


def covariate_shift(num_classes=CLASSES, seed=3, test_size=2000):
    """Source and target share P(y | x) (a noisy linear argmax whose class
    boundaries meet at the target mean, so the target is balanced) and differ in
    P(x); features (x1, x2, 1), the last a bias, all of norm < 3 (no clipping at
r = 3). Returns (sample, test set)."""
    rng = np.random.default_rng(seed)
    angles = 2 * np.pi * np.arange(num_classes) / num_classes
    directions = 3.0 * np.stack([np.cos(angles), np.sin(angles)])
    truth = np.vstack([directions, -TARGET_MEAN @ directions])

    def draw(size, mean):
        x = np.column_stack([rng.normal(size=(size, 2)) * 0.6 + mean, np.ones(size)])
        noisy = x @ truth + 0.3 * rng.gumbel(size=(size, num_classes))
        return x, np.argmax(noisy, axis=1).astype(float)

    public, private = draw(M, np.array([-0.2, 0.3])), draw(N, TARGET_MEAN)
    return AdaptationSample(*public, *private), draw(test_size, TARGET_MEAN)


SAMPLE, TEST = covariate_shift()
LOWER = weight_lower_bounds(M, N, HYPER.alpha)
STEPS = StepSizes(0.2, 0.5 * LOWER[0] ** 3, 0.5 * LOWER[-1] ** 3)
# The plan settings PNCnvxAdap defaults, which the solver takes explicitly.
PLAN = {name: PNCnvxAdap.parameter_defaults()[name] for name in
        ("step_scale", "step_distance", "calibration", "aggregate_noise_ratio", "chain")}


def federation(tmp_path, sample=SAMPLE, labels=None, epsilon_cap=math.inf, tag="f"):
    labels = sample.private_labels if labels is None else labels
    sites = []
    for k, part in enumerate((slice(0, 20), slice(20, sample.num_private))):
        policy = SitePolicy(f"{tag}-{k}", epsilon_cap=epsilon_cap, delta_cap=1e-5,
                            allow_non_private=math.isinf(epsilon_cap))
        data = Dataset(sample.private_features[part], labels[part],
                       tuple(f"x{i}" for i in range(DIM)))
        sites.append(Site(data, policy, PrivacyLedger(tmp_path / f"{tag}-{k}.db", policy,
                                                        create=True),
                          SeededRandomBits(k)))
    return LocalFederation(sites)


def run(fed, sample=SAMPLE, bounds=BOUNDS, loss=SOFTMAX, **options):
    return ncnvx_adap(fed, sample.public_features, sample.public_labels, hyper=HYPER,
                      bounds=bounds, loss=loss, **{"seed": None, **PLAN, **options})


# The constants (common/losses.py), from the clip bounds alone.

coordinate = st.one_of(
    st.floats(min_value=-1e300, max_value=1e300, allow_nan=False),
    st.sampled_from([0.0, 1e300, -1e-300, 1e150]),
)


@settings(max_examples=200, deadline=None)
@given(x=st.lists(coordinate, min_size=DIM, max_size=DIM),
       direction=st.lists(st.floats(-1.0, 1.0), min_size=DIM * CLASSES, max_size=DIM * CLASSES),
       scale=st.floats(0.0, 1.0), label=st.integers(0, CLASSES - 1))
def test_per_record_loss_and_gradient_stay_within_b_and_g_on_adversarial_records(
    x, direction, scale, label
):
    # Unclipped formulas on any clipped x and any W in the ball: the derivation holds.
    r, radius = BOUNDS.feature_norm, BOUNDS.radius
    features = clip_rows_to_norm(np.array([x]), r)
    w = np.array(direction).reshape(DIM, CLASSES)
    norm = np.linalg.norm(w)
    w = w * (scale * radius / norm) if norm > 0 else w
    losses, residuals = softmax_cross_entropy_terms(features @ w, np.array([label]))
    loss_bound, gradient_bound = softmax_cross_entropy_bounds(r, radius, CLASSES)
    assert -1e-12 <= losses[0] <= loss_bound * (1 + 1e-12)
    gradient = np.outer(features[0], residuals[0])  # x (p - e_y)^T
    assert np.linalg.norm(gradient) <= gradient_bound * (1 + 1e-12)
    assert loss_bound <= math.log(CLASSES) + 2 * radius * r  # the cruder log C + 2 Lambda r bound


def test_with_two_classes_the_loss_bound_is_reached_and_the_gradient_bound_approached():
    r, radius = 2.0, 5.0
    x = np.array([[r, 0.0, 0.0]])
    w = np.zeros((DIM, 2))
    w[0] = [radius / math.sqrt(2), -radius / math.sqrt(2)]  # ||W||_F = Lambda
    losses, residuals = softmax_cross_entropy_terms(x @ w, np.array([1]))
    loss_bound, gradient_bound = softmax_cross_entropy_bounds(r, radius, 2)
    assert losses[0] == pytest.approx(loss_bound, rel=1e-12)
    assert np.linalg.norm(np.outer(x[0], residuals[0])) == pytest.approx(gradient_bound,
                                                                         rel=1e-5)


def softmax_hessian(x, w):
    """d^2 l / dW dW for W flattened row-major: (x x^T) kron (diag(p) - p p^T)."""
    logits = x @ w
    p = np.exp(logits - np.max(logits))
    p /= p.sum()
    return np.kron(np.outer(x, x), np.diag(p) - np.outer(p, p))


def test_hessian_formula_matches_finite_differences_of_the_gradient():
    rng = np.random.default_rng(0)
    x, w, label = rng.normal(size=DIM), rng.normal(size=(DIM, CLASSES)), 1

    def gradient(flat):
        _, residuals = softmax_cross_entropy_terms(x[None] @ flat.reshape(DIM, CLASSES),
                                                   np.array([label]))
        return np.outer(x, residuals[0]).reshape(-1)

    step, flat = 1e-6, w.reshape(-1)
    numeric = np.column_stack([(gradient(flat + step * e) - gradient(flat - step * e))
                               / (2 * step) for e in np.eye(DIM * CLASSES)])
    np.testing.assert_allclose(softmax_hessian(x, w), numeric, atol=1e-8)


@settings(max_examples=200, deadline=None)
@given(x=st.lists(st.floats(-10.0, 10.0), min_size=DIM, max_size=DIM),
       w=st.lists(st.floats(-20.0, 20.0), min_size=DIM * CLASSES, max_size=DIM * CLASSES))
def test_hessian_norm_is_at_most_r_squared_over_two(x, w):
    features = clip_rows_to_norm(np.array([x]), BOUNDS.feature_norm)[0]
    hessian = softmax_hessian(features, np.array(w).reshape(DIM, CLASSES))
    beta = softmax_cross_entropy_smoothness(BOUNDS.feature_norm)
    assert np.linalg.norm(hessian, 2) <= beta * (1 + 1e-12) + 1e-12


def test_hessian_norm_reaches_r_squared_over_two_at_two_equal_probabilities():
    x = np.array([2.0, 0.0, 0.0])  # ||x|| = r, W = 0 with C = 2: p = (1/2, 1/2)
    assert np.linalg.norm(softmax_hessian(x, np.zeros((DIM, 2))), 2) == pytest.approx(
        softmax_cross_entropy_smoothness(2.0), rel=1e-12)


# The algorithm.

def test_ncnvx_adap_is_projected_gradient_descent_on_j_with_w_a_d_by_c_matrix(tmp_path):
    result = run(federation(tmp_path), iterations=30, step_sizes=STEPS, return_average=True)
    iterates = reference_descent(SAMPLE, HYPER, objective="smooth", loss=SOFTMAX,
                                 radius=BOUNDS.radius, iterations=30, num_classes=CLASSES,
                                 step_sizes=(STEPS.weights, STEPS.public_weights,
                                             STEPS.private_weights))
    assert result.weights.shape == result.last_weights.shape == (DIM, CLASSES)
    np.testing.assert_allclose(result.last_weights.reshape(-1), iterates[-1][0], rtol=1e-7)
    np.testing.assert_allclose(result.weights.reshape(-1),
                               np.mean([w for w, _ in iterates], axis=0), rtol=1e-7)


def test_ncnvx_adap_decreases_j_and_beats_chance_on_a_three_class_covariate_shift(tmp_path):
    iterates = reference_descent(SAMPLE, HYPER, objective="smooth", loss=SOFTMAX,
                                 radius=BOUNDS.radius, iterations=200, num_classes=CLASSES,
                                 step_sizes=(STEPS.weights, STEPS.public_weights,
                                             STEPS.private_weights))
    values = [objective_value(w, u, SAMPLE, HYPER, "smooth", SOFTMAX) for w, u in iterates]
    start = objective_value(np.zeros(DIM * CLASSES), LOWER, SAMPLE, HYPER, "smooth", SOFTMAX)
    assert values[-1] < 0.6 * start
    assert np.all(np.diff(values) <= 1e-12)  # descent: the steps are below 1/smoothness
    result = run(federation(tmp_path), iterations=200, seed=0)  # default (curvature) steps
    assert np.bincount(TEST[1].astype(int)).min() > 0.3 * len(TEST[1])  # balanced: chance 1/3
    assert accuracy(result.weights, *TEST) > 0.75


def test_pncnvx_adap_at_infinite_epsilon_is_ncnvx_adap(tmp_path):
    plain = run(federation(tmp_path, tag="a"), iterations=25, seed=4)
    private = pncnvx_adap(federation(tmp_path, tag="b"), SAMPLE.public_features,
                          SAMPLE.public_labels, hyper=HYPER, bounds=BOUNDS, loss=SOFTMAX,
                          epsilon=math.inf, delta=0.0, iterations=25, seed=4, **PLAN)
    assert private.output_iteration == plain.output_iteration
    np.testing.assert_array_equal(private.weights, plain.weights)
    np.testing.assert_array_equal(private.last_weights, plain.last_weights)


def test_private_run_charges_the_planned_epsilon_with_the_softmax_sensitivities(tmp_path):
    result = pncnvx_adap(federation(tmp_path, epsilon_cap=2.0), SAMPLE.public_features,
                         SAMPLE.public_labels, hyper=HYPER, bounds=BOUNDS, loss=SOFTMAX,
                         epsilon=1.0, delta=1e-5, iterations=10, seed=1, **PLAN)
    for spent in result.privacy.values():
        assert spent.job.epsilon <= 1.0
        assert spent.job.epsilon == pytest.approx(1.0, rel=2e-3)
        assert len(spent.mechanisms) == 10
    # G = sqrt(2) r (w block: 2G, replace one), B = log(1 + (C-1) exp(sqrt(2) Lambda r)).
    (w_block, _, _), (u_block,) = (result.noise_plan.mechanism.blocks,
                                   result.noise_plan.mechanism.local_blocks)
    # 2G plus the rounding of the d C entries onto the coarsest grid (2^-16).
    rounding = math.sqrt(DIM * CLASSES) * 2**-16
    # plus the kernel's float error at up to 2^20 records (~1e-10 relative)
    assert w_block.sensitivity == pytest.approx(2 * math.sqrt(2) * 3.0 + rounding, rel=1e-9)
    assert u_block.sensitivity == pytest.approx(math.log(1 + 2 * math.exp(math.sqrt(2) * 15.0)))
    assert result.weights.shape == (DIM, CLASSES)


@pytest.mark.parametrize("bad_label", [3.0, -1.0, 1.5])
def test_a_private_label_that_is_no_class_index_is_no_refusal(tmp_path, bad_label):
    """Whether a site answers may not depend on its data: the record contributes
    zero terms, and the job is charged exactly as on the clean data."""
    charges = []
    for name, labels in (("clean", SAMPLE.private_labels.copy()), ("bad", None)):
        if labels is None:
            labels = SAMPLE.private_labels.copy()
            labels[25] = bad_label  # at the second site
        fed = federation(tmp_path, labels=labels, epsilon_cap=5.0, tag=name)
        pncnvx_adap(fed, SAMPLE.public_features, SAMPLE.public_labels, hyper=HYPER,
                    bounds=BOUNDS, loss=SOFTMAX, epsilon=1.0, delta=1e-5, iterations=3,
                    seed=None, **PLAN)
        charges.append(fed.privacy_spent(1e-5)[f"{name}-1"].mechanisms)
    assert charges[0] and charges[0] == charges[1]


def test_public_labels_that_are_not_class_indices_are_refused(tmp_path):
    with pytest.raises(ValueError, match="class indices"):
        ncnvx_adap(federation(tmp_path), SAMPLE.public_features,
                   np.full(M, float(CLASSES)), hyper=HYPER, bounds=BOUNDS, loss=SOFTMAX,
                   iterations=2, seed=None, **PLAN)


def test_num_classes_is_validated():
    with pytest.raises(ValueError, match="num_classes"):
        DataBounds(feature_norm=1.0, label_bound=1.0, radius=1.0, num_classes=1)


def test_a_public_fit_is_a_warm_start_of_shape_d_by_c(tmp_path):
    start = fit_linear(SAMPLE.public_features, SAMPLE.public_labels, SOFTMAX,
                       BOUNDS.radius, num_classes=CLASSES)
    assert start.shape == (DIM, CLASSES)
    assert np.linalg.norm(start) <= BOUNDS.radius * (1 + 1e-12)
    assert accuracy(start, SAMPLE.public_features, SAMPLE.public_labels) > 0.75
    result = run(federation(tmp_path), iterations=20, seed=0, initial_weights=start)
    assert accuracy(result.weights, *TEST) > 0.75


def test_two_classes_agree_in_accuracy_with_the_logistic_path(tmp_path):
    sample, test = covariate_shift(num_classes=2, seed=5)
    two = DataBounds(feature_norm=3.0, label_bound=1.0, radius=5.0, num_classes=2)
    softmax = run(federation(tmp_path, sample, tag="s"), sample, two, iterations=150, seed=0)
    signs = AdaptationSample(sample.public_features, 2 * sample.public_labels - 1,
                             sample.private_features, 2 * sample.private_labels - 1)
    logistic = run(federation(tmp_path, signs, tag="l"), signs, two, "logistic",
                   iterations=150, seed=0)
    softmax_accuracy = accuracy(softmax.weights, *test)
    logistic_accuracy = accuracy(logistic.weights, test[0], 2 * test[1] - 1)
    assert softmax_accuracy > 0.75
    assert softmax_accuracy == pytest.approx(logistic_accuracy, abs=0.05)
