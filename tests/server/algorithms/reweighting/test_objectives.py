"""The objectives F (6) and J (7) of seed 000: gradients against finite
differences, the rebuilt k1 bracket bounds 1 - sum q from above, and the
softmax max term brackets the exact one."""

import math

import numpy as np
import pytest

from privadapt.server.algorithms.reweighting.objectives import (
    AdaptationSample,
    ReweightingHyperparameters,
    objective_and_gradient,
    objective_value,
    sum_coefficients,
    weight_lower_bounds,
)

M, N, DIM = 7, 5, 3
RNG = np.random.default_rng(11)
SAMPLE = AdaptationSample(RNG.normal(size=(M, DIM)) / 2, np.sign(RNG.normal(size=M)),
                          RNG.normal(size=(N, DIM)) / 2, np.sign(RNG.normal(size=N)))
LOWER = weight_lower_bounds(M, N, 0.4)


def hyper(mu=30.0):
    return ReweightingHyperparameters(alpha=0.4, k1=0.3, k2=0.2, kinf=0.1, mu=mu,
                                      discrepancy=0.05)


def point(seed):
    rng = np.random.default_rng(seed)
    return rng.normal(size=DIM), LOWER * (1 + rng.uniform(0.1, 2.0, size=M + N))


def finite_differences(w, u, h, objective, loss, step=1e-6):
    def f(w_, u_):
        return objective_value(w_, u_, SAMPLE, h, objective, loss)

    grad_w = np.array([(f(w + step * e, u) - f(w - step * e, u)) / (2 * step)
                       for e in np.eye(DIM)])
    # Relative steps in u: its coordinates live on the scale of their bounds.
    grad_u = np.array([(f(w, u + step * LOWER[i] * e) - f(w, u - step * LOWER[i] * e))
                       / (2 * step * LOWER[i]) for i, e in enumerate(np.eye(M + N))])
    return grad_w, grad_u


@pytest.mark.parametrize(("objective", "loss", "mu"), [
    ("convex", "squared", math.inf), ("convex", "squared", 50.0),
    ("smooth", "logistic", 30.0), ("smooth", "squared", 30.0),
])
@pytest.mark.parametrize("seed", [0, 1])
def test_gradient_matches_finite_differences(objective, loss, mu, seed):
    w, u = point(seed)
    _, grad_w, grad_u = objective_and_gradient(w, u, SAMPLE, hyper(mu), objective, loss)
    fd_w, fd_u = finite_differences(w, u, hyper(mu), objective, loss)
    np.testing.assert_allclose(grad_w, fd_w, rtol=1e-6, atol=1e-9 * np.max(np.abs(grad_w)))
    np.testing.assert_allclose(grad_u, fd_u, rtol=1e-5, atol=1e-7 * np.max(np.abs(grad_u)))


def test_k1_bracket_is_an_upper_bound_of_one_minus_total_weight():
    # (alpha^2/m^2) sum_pub u + ((1-alpha)^2/n^2) sum_priv u - 1 >= 1 - sum 1/u on
    # the constraint set, with equality at the reference weights u = bounds.
    coefficients = sum_coefficients(M, N, 0.4)
    assert float(coefficients @ LOWER) - 1 == pytest.approx(1 - np.sum(1 / LOWER))
    for seed in range(20):
        _, u = point(seed)
        assert float(coefficients @ u) - 1 >= 1 - np.sum(1 / u)


def test_softmax_max_term_lies_within_log_count_over_mu_of_the_exact_one():
    w, u = point(3)
    base = ReweightingHyperparameters(alpha=0.4, kinf=1.0, mu=math.inf)
    exact = objective_value(w, u, SAMPLE, base)
    for mu in (10.0, 100.0, 1000.0):
        smooth = objective_value(w, u, SAMPLE, ReweightingHyperparameters(alpha=0.4, kinf=1.0,
                                                                          mu=mu))
        assert exact <= smooth <= exact + math.log(M + N) / mu + 1e-12


def test_j_penalises_total_weight_as_printed_in_problem_7():
    w, u = point(4)
    plain = ReweightingHyperparameters(alpha=0.4, mu=5.0)
    with_l1 = ReweightingHyperparameters(alpha=0.4, k1=2.0, mu=5.0)
    difference = objective_value(w, u, SAMPLE, with_l1, "smooth", "squared") - \
        objective_value(w, u, SAMPLE, plain, "smooth", "squared")
    assert difference == pytest.approx(2.0 * (1 - np.sum(1 / u)))


def test_f_is_defined_for_the_squared_loss_only_and_j_needs_a_finite_mu():
    w, u = point(5)
    with pytest.raises(ValueError, match="squared"):
        objective_value(w, u, SAMPLE, hyper(), "convex", "logistic")
    with pytest.raises(ValueError, match="mu"):
        objective_value(w, u, SAMPLE, hyper(math.inf), "smooth", "logistic")


@pytest.mark.parametrize(("field", "value"), [("alpha", 0.0), ("alpha", 1.0), ("k2", -1.0),
                                              ("mu", 0.0), ("discrepancy", math.nan)])
def test_hyperparameters_are_validated(field, value):
    arguments = {"alpha": 0.5, field: value}
    with pytest.raises(ValueError, match=field):
        ReweightingHyperparameters(**arguments)


# J (7) with the softmax cross-entropy of a multi-class linear model W (d x C).

CLASSES = 3
CLASS_SAMPLE = AdaptationSample(SAMPLE.public_features, RNG.integers(0, CLASSES, size=M),
                                SAMPLE.private_features, RNG.integers(0, CLASSES, size=N))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_softmax_cross_entropy_gradient_of_j_matches_finite_differences(seed):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=DIM * CLASSES)
    _, u = point(seed)
    h = hyper(30.0)

    def j(w_, u_):
        return objective_value(w_, u_, CLASS_SAMPLE, h, "smooth", "softmax_cross_entropy")

    _, grad_w, grad_u = objective_and_gradient(w, u, CLASS_SAMPLE, h, "smooth",
                                               "softmax_cross_entropy")
    step = 1e-6
    fd_w = np.array([(j(w + step * e, u) - j(w - step * e, u)) / (2 * step)
                     for e in np.eye(DIM * CLASSES)])
    fd_u = np.array([(j(w, u + step * LOWER[i] * e) - j(w, u - step * LOWER[i] * e))
                     / (2 * step * LOWER[i]) for i, e in enumerate(np.eye(M + N))])
    np.testing.assert_allclose(grad_w, fd_w, rtol=1e-6, atol=1e-9 * np.max(np.abs(grad_w)))
    np.testing.assert_allclose(grad_u, fd_u, rtol=1e-5, atol=1e-7 * np.max(np.abs(grad_u)))


def test_softmax_cross_entropy_takes_w_as_a_matrix_or_flattened_row_major():
    rng = np.random.default_rng(7)
    matrix = rng.normal(size=(DIM, CLASSES))
    _, u = point(7)
    flat = objective_and_gradient(matrix.reshape(-1), u, CLASS_SAMPLE, hyper(), "smooth",
                                  "softmax_cross_entropy")
    shaped = objective_and_gradient(matrix, u, CLASS_SAMPLE, hyper(), "smooth",
                                    "softmax_cross_entropy")
    assert shaped[1].shape == (DIM, CLASSES)
    assert shaped[0] == pytest.approx(flat[0], rel=1e-14)
    np.testing.assert_allclose(shaped[1].reshape(-1), flat[1], rtol=1e-14)


def test_softmax_cross_entropy_with_two_classes_is_the_logistic_loss_of_the_difference():
    # l(W; x, y) = log(1 + exp(-s (W_1 - W_0).x)) with s = +1 for y = 1, -1 for y = 0.
    rng = np.random.default_rng(8)
    matrix = rng.normal(size=(DIM, 2))
    _, u = point(8)
    classes = AdaptationSample(SAMPLE.public_features, (SAMPLE.public_labels + 1) / 2,
                               SAMPLE.private_features, (SAMPLE.private_labels + 1) / 2)
    softmax = objective_value(matrix, u, classes, hyper(), "smooth", "softmax_cross_entropy")
    logistic = objective_value(matrix[:, 1] - matrix[:, 0], u, SAMPLE, hyper(), "smooth",
                               "logistic")
    assert softmax == pytest.approx(logistic, rel=1e-12)


def test_softmax_cross_entropy_refuses_labels_that_are_not_class_indices():
    w, u = np.zeros(DIM * CLASSES), point(9)[1]
    bad = AdaptationSample(SAMPLE.public_features, np.full(M, 0.5), SAMPLE.private_features,
                           np.zeros(N))
    with pytest.raises(ValueError, match="class indices"):
        objective_value(w, u, bad, hyper(), "smooth", "softmax_cross_entropy")
