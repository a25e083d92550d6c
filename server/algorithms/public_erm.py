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
    weights: np.ndarray, features: np.ndarray, labels: np.ndarray, loss: str
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
    return value, gradient


def fit_linear(
    features: np.ndarray,
    labels: np.ndarray,
    loss: Literal["logistic", "squared"],
    radius: float,
) -> np.ndarray:
    """argmin over ||w|| <= radius of the mean loss on public (features, labels)."""
    if loss not in ("logistic", "squared"):
        raise ValueError(f"loss must be 'logistic' or 'squared', got {loss!r}")
    if not radius > 0:
        raise ValueError(f"radius must be > 0, got {radius!r}")
    ball = {
        "type": "ineq",
        "fun": lambda w: radius**2 - w @ w,
        "jac": lambda w: -2.0 * w,
    }
    result = optimize.minimize(
        _objective, np.zeros(features.shape[1]), args=(features, labels, loss), jac=True,
        method="SLSQP", constraints=[ball], options={"maxiter": 2000, "ftol": 1e-12},
    )
    if not result.success:
        raise RuntimeError(f"public fit did not converge: {result.message}")
    norm = np.linalg.norm(result.x)
    # SLSQP may sit a rounding error outside the constraint.
    return result.x if norm <= radius else result.x * (radius / norm)


def accuracy(weights: np.ndarray, features: np.ndarray, labels: np.ndarray) -> float:
    """Share of records whose label (+1/-1) has the sign of w.x (ties count as +1)."""
    predictions = np.where(features @ weights >= 0, 1.0, -1.0)
    return float(np.mean(predictions == labels))
