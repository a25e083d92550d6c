"""KMM (experiments baseline): weights follow the density ratio, respect their
constraints, and the weighted fit recovers the target's regression."""

import numpy as np

from experiments.baselines.kmm import (
    KernelMeanMatching,
    _project,
    weighted_least_squares,
)


def covariate_shift(seed=0, m=300, n=200):
    rng = np.random.default_rng(seed)
    source = rng.normal(0.0, 1.0, size=(m, 1))
    target = rng.normal(1.0, 0.5, size=(n, 1))
    return source, target


def test_kmm_weights_are_larger_where_the_target_density_is_larger():
    source, target = covariate_shift()
    weights = KernelMeanMatching(gamma=0.5, upper_bound=20.0).fit(source, target).weights_
    near_target = np.abs(source[:, 0] - 1.0) < 0.5
    far_left = source[:, 0] < -0.5
    assert weights[near_target].mean() > 3 * max(weights[far_left].mean(), 1e-3)
    # Rank agreement with the true density ratio p_T / p_S.
    ratio = np.exp(-((source[:, 0] - 1) ** 2) / (2 * 0.25) + source[:, 0] ** 2 / 2)
    assert np.corrcoef(np.argsort(np.argsort(weights)), np.argsort(np.argsort(ratio)))[0, 1] > 0.7


def test_kmm_weights_respect_box_and_mean_constraints():
    source, target = covariate_shift(seed=1)
    model = KernelMeanMatching(gamma=0.5, upper_bound=3.0, epsilon=0.05).fit(source, target)
    assert model.weights_.min() >= 0.0
    assert model.weights_.max() <= 3.0 + 1e-12
    assert abs(model.weights_.mean() - 1.0) <= 0.05 + 1e-9


def test_projection_lands_in_the_set_and_is_closest():
    rng = np.random.default_rng(2)
    v = rng.normal(2.0, 3.0, size=50)
    projected = _project(v, 4.0, 20.0, 30.0)
    assert projected.min() >= 0 and projected.max() <= 4.0
    assert 20.0 - 1e-6 <= projected.sum() <= 30.0 + 1e-6
    for _ in range(200):  # no feasible point is closer
        other = _project(projected + 0.3 * rng.normal(size=50), 4.0, 20.0, 30.0)
        assert np.linalg.norm(v - projected) <= np.linalg.norm(v - other) + 1e-9


def test_kmm_weighted_least_squares_beats_unweighted_under_misspecification():
    # y = x^2 fitted by a line: the best line depends on where x lives.
    rng = np.random.default_rng(3)
    source, target = covariate_shift(seed=3, m=400, n=400)
    design = lambda x: np.hstack([x, np.ones((len(x), 1))])  # noqa: E731
    y_source = source[:, 0] ** 2 + 0.05 * rng.normal(size=len(source))
    y_target = target[:, 0] ** 2
    weights = KernelMeanMatching(gamma=0.5, upper_bound=20.0).fit(source, target).weights_
    kmm = weighted_least_squares(design(source), y_source, weights)
    plain = weighted_least_squares(design(source), y_source, np.ones(len(source)))
    mse = lambda w: np.mean((design(target) @ w - y_target) ** 2)  # noqa: E731
    assert mse(kmm) < 0.5 * mse(plain)
