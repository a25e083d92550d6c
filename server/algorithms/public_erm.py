"""Non-private empirical risk minimisation on public data at the coordinator.

The "train on source" baseline of seed 000: a linear model fitted to the public
source sample, constrained to the same ball ||w|| <= Lambda as the private
algorithms so the comparison is between the same hypothesis class. The
constrained minimiser of a convex loss over the ball is either the
unconstrained minimiser or, by the KKT conditions, the ridge solution
w(lambda) = argmin L(w) + lambda ||w||^2 with ||w(lambda)|| = Lambda, found by
bisection on lambda.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from scipy import optimize, special


def _objective(
    weights: np.ndarray, features: np.ndarray, labels: np.ndarray, loss: str, ridge: float
) -> tuple[float, np.ndarray]:
    margins = features @ weights
    n = len(labels)
    if loss == "squared":
        residual = margins - labels
        value = float(residual @ residual) / n
        gradient = 2.0 * features.T @ residual / n
    else:
        value = float(np.mean(np.logaddexp(0.0, -labels * margins)))
        gradient = features.T @ (-labels * special.expit(-labels * margins)) / n
    return value + ridge * float(weights @ weights), gradient + 2.0 * ridge * weights


def _ridge_fit(
    features: np.ndarray, labels: np.ndarray, loss: str, ridge: float, start: np.ndarray
) -> np.ndarray:
    result = optimize.minimize(
        _objective, start, args=(features, labels, loss, ridge), jac=True, method="L-BFGS-B",
        options={"maxiter": 2000, "gtol": 1e-10},
    )
    return result.x


def fit_linear(
    features: np.ndarray,
    labels: np.ndarray,
    loss: Literal["logistic", "squared"],
    radius: float,
) -> np.ndarray:
    """argmin over ||w|| <= radius of the mean loss on public (features, labels)."""
    if loss not in ("logistic", "squared"):
        raise ValueError(f"loss must be 'logistic' or 'squared', got {loss!r}")
    start = np.zeros(features.shape[1])
    weights = _ridge_fit(features, labels, loss, 0.0, start)
    if np.linalg.norm(weights) <= radius:
        return weights
    low, high = 0.0, 1.0
    while np.linalg.norm(_ridge_fit(features, labels, loss, high, start)) > radius:
        low, high = high, high * 4.0
    for _ in range(40):
        middle = 0.5 * (low + high)
        weights = _ridge_fit(features, labels, loss, middle, start)
        if np.linalg.norm(weights) > radius:
            low = middle
        else:
            high = middle
    weights = _ridge_fit(features, labels, loss, high, start)
    norm = np.linalg.norm(weights)
    return weights if norm <= radius else weights * (radius / norm)


def accuracy(weights: np.ndarray, features: np.ndarray, labels: np.ndarray) -> float:
    """Share of records whose label (+1/-1) has the sign of w.x (ties count as +1)."""
    predictions = np.where(features @ weights >= 0, 1.0, -1.0)
    return float(np.mean(predictions == labels))
