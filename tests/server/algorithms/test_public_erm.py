"""The non-private public fit used by the source-only baseline."""

import numpy as np
import pytest

from privadapt.server.algorithms.public_erm import accuracy, fit_linear

RNG = np.random.default_rng(5)
FEATURES = RNG.normal(size=(300, 4))
TRUTH = np.array([1.5, -2.0, 0.5, 3.0])
TARGETS = FEATURES @ TRUTH + 0.1 * RNG.normal(size=300)


def test_unconstrained_squared_fit_is_least_squares():
    weights = fit_linear(FEATURES, TARGETS, "squared", radius=100.0)
    expected, *_ = np.linalg.lstsq(FEATURES, TARGETS, rcond=None)
    np.testing.assert_allclose(weights, expected, rtol=1e-5, atol=1e-6)


def test_active_constraint_gives_kkt_point_on_the_sphere():
    weights = fit_linear(FEATURES, TARGETS, "squared", radius=1.0)
    assert np.linalg.norm(weights) == pytest.approx(1.0, abs=1e-9)
    # KKT: the gradient points straight back along -w.
    gradient = 2 * FEATURES.T @ (FEATURES @ weights - TARGETS) / len(TARGETS)
    cosine = gradient @ weights / (np.linalg.norm(gradient) * np.linalg.norm(weights))
    assert cosine == pytest.approx(-1.0, abs=1e-4)


def test_logistic_fit_classifies_separable_data():
    labels = np.sign(FEATURES @ TRUTH)
    weights = fit_linear(FEATURES, labels, "logistic", radius=5.0)
    assert accuracy(weights, FEATURES, labels) > 0.95
    assert np.linalg.norm(weights) <= 5.0 + 1e-12


def test_unknown_loss_is_refused():
    with pytest.raises(ValueError, match="loss"):
        fit_linear(FEATURES, TARGETS, "hinge", radius=1.0)
