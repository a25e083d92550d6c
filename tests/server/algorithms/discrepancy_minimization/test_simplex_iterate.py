"""Frank-Wolfe's rank-one updates of M(q)
(server/algorithms/discrepancy_minimization/simplex_iterate.py) equal
rebuilding M(q) = M_0 - sum_i q_i x_i x_i^T from q, over many steps."""

import numpy as np
import pytest

from privadapt.server.algorithms.discrepancy_minimization import simplex_iterate
from privadapt.server.algorithms.discrepancy_minimization.simplex_iterate import SimplexIterate
from privadapt.server.algorithms.discrepancy_minimization.single_stage_frank_wolfe import (
    single_stage_frank_wolfe,
)
from privadapt.server.algorithms.discrepancy_minimization.smoothed_discrepancy import (
    SmoothedDiscrepancy,
    frank_wolfe,
    second_moment,
)

RNG = np.random.default_rng(7)
POINTS = RNG.normal(size=(120, 5)) / np.sqrt(5)
TARGET = RNG.normal(size=(300, 5)) / np.sqrt(5) + 0.3
OBJECTIVE = SmoothedDiscrepancy(POINTS, second_moment(TARGET), mu=15.0, regularization=1e-3)


def assert_cache_is_exact(iterate: SimplexIterate) -> None:
    np.testing.assert_allclose(iterate.matrix, OBJECTIVE.matrix(iterate.weights),
                               rtol=0, atol=1e-10)
    assert iterate.squared_norm == pytest.approx(float(iterate.weights @ iterate.weights),
                                                 rel=0, abs=1e-10)


@pytest.mark.parametrize("rebuild_every", [simplex_iterate.REBUILD_EVERY, 10**9])
def test_rank_one_updates_equal_rebuilding_over_many_steps(monkeypatch, rebuild_every):
    # 10**9: no periodic rebuild at all, so the derivation alone is on trial.
    monkeypatch.setattr(simplex_iterate, "REBUILD_EVERY", rebuild_every)
    rng = np.random.default_rng(0)
    iterate = SimplexIterate(OBJECTIVE, np.full(len(POINTS), 1 / len(POINTS)))
    for k in range(3000):
        if k % 3 == 2:  # an away step from a vertex in the support, within its range
            support = np.flatnonzero(iterate.weights > 0)
            away = int(rng.choice(support))
            if iterate.weights[away] < 1.0:
                limit = iterate.weights[away] / (1.0 - iterate.weights[away])
                iterate.step_away(away, float(rng.uniform(0, 0.5)) * limit)
        else:
            iterate.step_toward(int(rng.integers(len(POINTS))), 2.0 / (k + 2))
        if k % 100 == 0:
            assert_cache_is_exact(iterate)
    assert_cache_is_exact(iterate)
    value, gradient = iterate.value_and_gradient()
    expected_value, expected_gradient = OBJECTIVE.value_and_gradient(iterate.weights)
    assert value == pytest.approx(expected_value, abs=1e-10)
    np.testing.assert_allclose(gradient, expected_gradient, rtol=0, atol=1e-10)


def test_drop_step_empties_the_coordinate_and_keeps_the_cache_exact():
    weights = np.full(len(POINTS), 1 / len(POINTS))
    iterate = SimplexIterate(OBJECTIVE, weights)
    limit = weights[3] / (1 - weights[3])
    iterate.step_away(3, limit, drop=True)
    assert iterate.weights[3] == 0.0
    assert iterate.weights.sum() == pytest.approx(1.0)
    assert_cache_is_exact(iterate)


def test_line_search_directions_equal_the_rebuilt_ones():
    iterate = SimplexIterate(OBJECTIVE, RNG.dirichlet(np.ones(len(POINTS))))
    toward = -iterate.weights
    toward[4] += 1.0
    np.testing.assert_allclose(iterate.toward_change(4), -second_moment(POINTS, toward),
                               rtol=0, atol=1e-12)
    away = iterate.weights.copy()
    away[9] -= 1.0
    np.testing.assert_allclose(iterate.away_change(9), -second_moment(POINTS, away),
                               rtol=0, atol=1e-12)


@pytest.mark.parametrize("options", [
    {"step_rule": "open_loop"}, {"step_rule": "line_search"},
    {"step_rule": "line_search", "away_steps": True}])
def test_frank_wolfe_with_rank_one_updates_equals_the_rebuilt_run(options):
    runs = [frank_wolfe(OBJECTIVE, iterations=600, tolerance=0.0, rank_one=rank_one,
                        **options) for rank_one in (True, False)]
    np.testing.assert_allclose(runs[0].weights, runs[1].weights, rtol=0, atol=1e-10)
    np.testing.assert_allclose(runs[0].values, runs[1].values, rtol=0, atol=1e-10)


def test_single_stage_frank_wolfe_equals_alg1_with_rebuilt_moments():
    objective = SmoothedDiscrepancy(POINTS, second_moment(TARGET), mu=15.0)
    labels = POINTS.sum(axis=1)
    iterations = 400
    eta = 1 / np.sqrt(iterations)
    result = single_stage_frank_wolfe(objective, labels, radius=1.0, iterations=iterations,
                                      step_size=eta)
    # The reference: Alg. 1 with every gradient from a rebuilt M(q).
    q = np.full(len(POINTS), 1 / len(POINTS))
    w = np.zeros(POINTS.shape[1])
    gaps, iterates = [], []
    for _ in range(iterations):
        residuals = POINTS @ w - labels
        q_gradient = residuals**2 + 4.0 * objective.value_and_gradient(q)[1]
        vertex = int(np.argmin(q_gradient))
        w_gradient = 2.0 * POINTS.T @ (q * residuals)
        target = -w_gradient / np.linalg.norm(w_gradient)
        gaps.append(q_gradient @ q - q_gradient[vertex] - w_gradient @ (target - w))
        iterates.append(q.copy())
        q = (1 - eta) * q
        q[vertex] += eta
        w = (1 - eta) * w + eta * target
    np.testing.assert_allclose(result.gaps, gaps, rtol=0, atol=1e-10)
    np.testing.assert_allclose(result.weights, iterates[result.best_iteration],
                               rtol=0, atol=1e-10)
