"""Seed 003's smoothed discrepancy (Sec. 4) and the Frank-Wolfe of its two-stage
discrepancy minimisation (Sec. 6, Alg. 2 without noise): the smoothing brackets
the spectral norm, the gradient is exact, Frank-Wolfe reaches the minimum."""

import math

import numpy as np
import pytest
from scipy import linalg, optimize

from privadapt.common.numerics.trust_region import quadratic_range_on_ball
from privadapt.server.algorithms.discrepancy_minimization.smoothed_discrepancy import (
    SmoothedDiscrepancy,
    discrepancy,
    frank_wolfe,
    second_moment,
    smoothed_spectral_norm,
    smoothed_spectral_norm_gradient,
    smoothing_error_bound,
    spectral_norm,
)


def symmetric(seed, dim=4, scale=1.0):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(dim, dim))
    return scale * (a + a.T) / 2


def shifted_problem(seed=0, m=30, n=40, dim=3):
    """Source N(0, I); target N(0.7, 0.5^2 I): the discrepancy can be reduced
    but not to zero."""
    rng = np.random.default_rng(seed)
    source = rng.normal(size=(m, dim))
    target = 0.7 + 0.5 * rng.normal(size=(n, dim))
    return source, second_moment(target)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("mu", [0.5, 5.0, 50.0])
def test_smoothed_norm_lies_between_spectral_norm_and_log_2d_over_mu(seed, mu):
    matrix = symmetric(seed)
    exact = spectral_norm(matrix)
    smooth = smoothed_spectral_norm(matrix, mu)
    assert exact <= smooth + 1e-12
    assert smooth <= exact + smoothing_error_bound(len(matrix), mu) + 1e-12


def test_smoothing_error_bound_is_attained_at_the_zero_matrix():
    # Bound (3) as printed (log rank / mu) fails here: rank 0, yet F~ = log(2d)/mu.
    for dim in (1, 3, 7):
        assert smoothed_spectral_norm(np.zeros((dim, dim)), 2.0) == pytest.approx(
            math.log(2 * dim) / 2.0, rel=1e-12)


def test_smoothed_norm_converges_to_spectral_norm_as_mu_grows():
    matrix = symmetric(1)
    errors = [smoothed_spectral_norm(matrix, mu) - spectral_norm(matrix)
              for mu in (0.1, 0.3, 1.0, 3.0)]
    assert np.all(np.diff(errors) < 0)
    assert smoothed_spectral_norm(matrix, 1e4) - spectral_norm(matrix) < 1e-6


def test_smoothed_norm_follows_the_negative_side_of_the_spectrum():
    # ||M||_2 = 5 comes from lambda_min = -5; the smoothing of lambda_max alone would give ~1.
    matrix = np.diag([-5.0, 1.0, 0.5])
    assert smoothed_spectral_norm(matrix, 1e3) == pytest.approx(5.0, abs=1e-2)


def test_smoothed_norm_and_gradient_are_finite_for_huge_mu_times_norm():
    matrix = symmetric(2, scale=10.0)
    value, direction = smoothed_spectral_norm_gradient(matrix, 1e8)
    assert value == pytest.approx(spectral_norm(matrix), abs=1e-7)
    assert np.all(np.isfinite(direction))


@pytest.mark.parametrize("regularization", [0.0, 0.3])
def test_gradient_matches_central_finite_differences(regularization):
    source, target_moment = shifted_problem(seed=3, m=12)
    objective = SmoothedDiscrepancy(source, target_moment, mu=3.0,
                                    regularization=regularization)
    weights = np.random.default_rng(4).dirichlet(np.ones(12))
    _, gradient = objective.value_and_gradient(weights)
    step = 1e-6
    numeric = np.array([
        (objective.value(weights + step * e) - objective.value(weights - step * e)) / (2 * step)
        for e in np.eye(12)])
    np.testing.assert_allclose(gradient, numeric, rtol=1e-6, atol=1e-7)


def test_gradient_matches_the_papers_matrix_exponential_formula():
    # App. C.2: [grad F~]_i = -x_i^T (e^{mu M} - e^{-mu M}) x_i / (Tr e^{mu M} + Tr e^{-mu M}).
    source, target_moment = shifted_problem(seed=5, m=10)
    mu = 2.0
    objective = SmoothedDiscrepancy(source, target_moment, mu=mu)
    weights = np.full(10, 0.1)
    matrix = objective.matrix(weights)
    plus, minus = linalg.expm(mu * matrix), linalg.expm(-mu * matrix)
    expected = -np.einsum("ij,jk,ik->i", source, plus - minus, source) / (
        np.trace(plus) + np.trace(minus))
    _, gradient = objective.value_and_gradient(weights)
    np.testing.assert_allclose(gradient, expected, rtol=1e-10)
    assert objective.value(weights) == pytest.approx(
        math.log(np.trace(plus) + np.trace(minus)) / mu, rel=1e-12)


def test_discrepancy_is_the_sup_over_the_hypothesis_ball_of_lemma_1():
    # dis = max over ||w||, ||w'|| <= Lambda of |E_target[((w-w').x)^2] - E_q[...]|:
    # u = w - w' ranges over the ball of radius 2 Lambda.
    source, target_moment = shifted_problem(seed=6)
    weights = np.random.default_rng(7).dirichlet(np.ones(len(source)))
    radius = 1.5
    gap_matrix = target_moment - second_moment(source, weights)
    low, high = quadratic_range_on_ball(gap_matrix, np.zeros(3), 0.0, 2 * radius)
    assert discrepancy(source, weights, target_moment, radius) == pytest.approx(
        max(abs(low), abs(high)), rel=1e-10)


def test_frank_wolfe_reaches_zero_discrepancy_when_the_target_is_a_reweighted_source():
    rng = np.random.default_rng(8)
    source = rng.normal(size=(40, 3))
    true_weights = rng.dirichlet(np.ones(40))
    objective = SmoothedDiscrepancy(source, second_moment(source, true_weights), mu=200.0)
    result = frank_wolfe(objective, iterations=1000, tolerance=1e-9)
    assert result.converged
    assert spectral_norm(objective.matrix(result.weights)) < 1e-6
    # F~ >= log(2d)/mu with equality only at M = 0.
    assert result.value == pytest.approx(smoothing_error_bound(3, 200.0), abs=1e-9)


def test_frank_wolfe_gap_shrinks_and_bounds_the_suboptimality():
    source, target_moment = shifted_problem(seed=9, m=15)
    objective = SmoothedDiscrepancy(source, target_moment, mu=5.0, regularization=0.01)
    minimum = frank_wolfe(objective, iterations=1000, tolerance=1e-10, away_steps=True).value
    result = frank_wolfe(objective, iterations=300, tolerance=0.0)
    assert min(result.gaps) < 1e-2 * result.gaps[0]
    assert np.all(np.diff(result.values) <= 1e-12)  # line search never goes up
    assert all(0 <= value - minimum <= gap + 1e-12
               for value, gap in zip(result.values, result.gaps, strict=True))
    assert result.weights.min() >= 0 and result.weights.sum() == pytest.approx(1.0)


def slsqp_minimum(objective):
    m = objective.num_source
    reference = optimize.minimize(
        objective.value_and_gradient, np.full(m, 1 / m), jac=True, method="SLSQP",
        bounds=[(0, 1)] * m,
        constraints=[{"type": "eq", "fun": lambda q: q.sum() - 1, "jac": lambda q: np.ones(m)}],
        options={"ftol": 1e-14, "maxiter": 500})
    assert reference.success
    return reference.fun


def test_away_step_frank_wolfe_matches_an_slsqp_reference_minimum():
    source, target_moment = shifted_problem(seed=10, m=8)
    objective = SmoothedDiscrepancy(source, target_moment, mu=10.0, regularization=0.05)
    reference = slsqp_minimum(objective)
    result = frank_wolfe(objective, iterations=1000, tolerance=1e-10, away_steps=True)
    assert result.converged
    assert result.value == pytest.approx(reference, abs=1e-8)
    # The minimiser is not uniform and has empty coordinates: the test would
    # catch a solver that never moves or never drops a point.
    assert objective.value(np.full(8, 1 / 8)) > reference + 1e-2
    assert np.sum(result.weights == 0) >= 1


def test_plain_frank_wolfe_approaches_the_slsqp_reference_minimum():
    source, target_moment = shifted_problem(seed=10, m=8)
    objective = SmoothedDiscrepancy(source, target_moment, mu=10.0, regularization=0.05)
    reference = slsqp_minimum(objective)
    result = frank_wolfe(objective, iterations=500, tolerance=0.0)
    assert 0 <= result.value - reference < 2e-3


def test_open_loop_steps_also_reach_the_minimum():
    # The schedule the noisy variant (Alg. 2) needs: no line search on private data.
    source, target_moment = shifted_problem(seed=11, m=15)
    objective = SmoothedDiscrepancy(source, target_moment, mu=5.0, regularization=0.01)
    best = frank_wolfe(objective, iterations=1000, tolerance=1e-10, away_steps=True).value
    open_loop = frank_wolfe(objective, iterations=300, tolerance=0.0, step_rule="open_loop")
    assert open_loop.iterations == 300
    assert open_loop.values[0] - best > 0.1
    assert 0 <= open_loop.value - best < 1e-3


def test_the_vertex_selector_hook_drives_the_steps():
    # A (noisy, in Alg. 2) oracle plugs in as select_vertex; here one that always
    # picks vertex 0 pulls q to e_0 under the open-loop schedule.
    source, target_moment = shifted_problem(seed=12, m=5)
    objective = SmoothedDiscrepancy(source, target_moment, mu=5.0)
    calls = []

    def always_first(gradient):
        calls.append(gradient.copy())
        return 0

    result = frank_wolfe(objective, iterations=10, tolerance=0.0, step_rule="open_loop",
                         select_vertex=always_first)
    assert len(calls) == 10
    np.testing.assert_allclose(result.weights, np.eye(5)[0])


@pytest.mark.parametrize("kwargs", [{"mu": 0.0}, {"mu": math.inf}, {"regularization": -1.0}])
def test_objective_rejects_bad_parameters(kwargs):
    source, target_moment = shifted_problem()
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        SmoothedDiscrepancy(source, target_moment, **{"mu": 1.0, **kwargs})


def test_objective_rejects_a_target_moment_of_the_wrong_size():
    source, _ = shifted_problem(dim=3)
    with pytest.raises(ValueError, match="target_moment"):
        SmoothedDiscrepancy(source, np.eye(4), mu=1.0)


def test_away_steps_need_the_line_search():
    source, target_moment = shifted_problem(m=4)
    objective = SmoothedDiscrepancy(source, target_moment, mu=1.0)
    with pytest.raises(ValueError, match="away_steps"):
        frank_wolfe(objective, away_steps=True, step_rule="open_loop")


def test_frank_wolfe_rejects_initial_weights_off_the_simplex():
    source, target_moment = shifted_problem(m=4)
    objective = SmoothedDiscrepancy(source, target_moment, mu=1.0)
    with pytest.raises(ValueError, match="simplex"):
        frank_wolfe(objective, initial_weights=np.array([0.5, 0.5, 0.5, -0.5]))
