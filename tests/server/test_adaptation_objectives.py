"""The objectives F (6) and J (7) of seed 000: gradients against finite
differences, the rebuilt k1 bracket bounds 1 - sum q from above, and the
softmax max term brackets the exact one."""

import math

import numpy as np
import pytest

from privadapt.server.algorithms.adaptation_objectives import (
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
