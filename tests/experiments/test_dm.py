"""DM (experiments baseline): stage 1 weights shrink the discrepancy to the
target, stage 2 is the exact weighted fit, and together they beat the
unweighted source fit on a covariate-shift regression."""

import numpy as np
import pytest
from scipy import optimize

from experiments.baselines.dm import DiscrepancyMinimization, ball_weighted_least_squares
from experiments.baselines.kmm import weighted_least_squares

RADIUS = 20.0


def covariate_shift(seed=0, m=120, n=100, num_test=1000):
    """Source t ~ N(0, 1), target t ~ N(1, 0.5^2), y = sin(2t) + noise, fitted
    by a linear model on x = [t, t^2, 1] / 5: misspecified, so the fit depends
    on where the weight of the sample lies and reweighting pays off."""
    rng = np.random.default_rng(seed)

    def features(t):
        return np.c_[t, t**2, np.ones_like(t)] / 5.0

    def labels(t):
        return np.sin(2 * t) + 0.1 * rng.normal(size=len(t))

    source_t, target_t = rng.normal(0, 1, m), rng.normal(1, 0.5, n)
    test_t = rng.normal(1, 0.5, num_test)
    return (features(source_t), labels(source_t), features(target_t),
            features(test_t), labels(test_t), source_t)


@pytest.fixture(scope="module")
def fitted():
    source_x, source_y, target_x, test_x, test_y, source_t = covariate_shift()
    model = DiscrepancyMinimization(radius=RADIUS, iterations=200).fit(
        source_x, source_y, target_x)
    return model, (source_x, source_y, target_x, test_x, test_y, source_t)


def test_dm_beats_the_unweighted_source_fit_on_target_mse(fitted):
    model, (source_x, source_y, _, test_x, test_y, _) = fitted
    source_only = ball_weighted_least_squares(source_x, source_y, np.ones(len(source_y)),
                                              RADIUS)
    dm_mse = np.mean((model.predict(test_x) - test_y) ** 2)
    source_mse = np.mean((test_x @ source_only - test_y) ** 2)
    assert dm_mse < 0.5 * source_mse


def test_dm_weights_lie_in_the_simplex_and_shrink_the_discrepancy(fitted):
    model, _ = fitted
    assert model.weights_.min() >= 0
    assert model.weights_.sum() == pytest.approx(1.0)
    assert model.discrepancy_ < 0.1 * model.source_discrepancy_


def test_dm_weights_concentrate_where_the_target_lies(fitted):
    model, (*_, source_t) = fitted
    near_target = np.abs(source_t - 1.0) < 0.5
    far_left = source_t < -0.5
    assert model.weights_[near_target].sum() > 0.5
    assert model.weights_[far_left].sum() < 0.1


def test_ball_weighted_least_squares_matches_a_constrained_solver():
    source_x, source_y, *_ = covariate_shift(seed=1, m=40)
    weights = np.random.default_rng(2).dirichlet(np.ones(40))
    radius = 0.5  # smaller than the unconstrained minimiser's norm: the ball binds

    def loss(w):
        residual = source_x @ w - source_y
        return float(weights @ residual**2), 2 * source_x.T @ (weights * residual)

    reference = optimize.minimize(
        loss, np.zeros(3), jac=True, method="SLSQP",
        constraints=[{"type": "ineq", "fun": lambda w: radius**2 - w @ w}],
        options={"ftol": 1e-14, "maxiter": 500})
    coef = ball_weighted_least_squares(source_x, source_y, weights, radius)
    assert np.linalg.norm(coef) == pytest.approx(radius, rel=1e-9)
    assert loss(coef)[0] == pytest.approx(reference.fun, rel=1e-7)
    assert np.linalg.norm(weighted_least_squares(source_x, source_y, weights, 0.0)) > radius


def test_ridge_stage_is_the_kmm_baselines_weighted_least_squares():
    source_x, source_y, target_x, *_ = covariate_shift(seed=3, m=40)
    model = DiscrepancyMinimization(ridge=1e-3, iterations=50).fit(source_x, source_y,
                                                                    target_x)
    np.testing.assert_allclose(
        model.coef_, weighted_least_squares(source_x, source_y, model.weights_, 1e-3))


def test_default_mu_keeps_the_smoothing_error_at_one_percent_of_the_target_moment():
    source_x, source_y, target_x, *_ = covariate_shift(seed=4, m=20)
    model = DiscrepancyMinimization(iterations=5).fit(source_x, source_y, target_x)
    target_norm = np.linalg.norm(target_x.T @ target_x / len(target_x), 2)
    assert np.log(6) / model.mu_ == pytest.approx(0.01 * target_norm)


def test_fit_rejects_source_and_target_with_different_columns():
    source_x, source_y, target_x, *_ = covariate_shift(m=10)
    with pytest.raises(ValueError, match="same columns"):
        DiscrepancyMinimization().fit(source_x, source_y, target_x[:, :2])


def test_fit_rejects_labels_of_the_wrong_length():
    source_x, source_y, target_x, *_ = covariate_shift(m=10)
    with pytest.raises(ValueError, match="source_y"):
        DiscrepancyMinimization().fit(source_x, source_y[:-1], target_x)


def test_predict_before_fit_says_to_fit_first():
    with pytest.raises(ValueError, match="fit"):
        DiscrepancyMinimization().predict(np.zeros((2, 3)))
