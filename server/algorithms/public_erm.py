"""Non-private empirical risk minimisation on public data at the coordinator.

The "train on source" baseline of seed 000: a linear model fitted to the public
source sample, constrained to the same ball ||w|| <= Lambda as the private
algorithms so the comparison is between the same hypothesis class. The
constrained minimiser of a convex loss over the ball is either the
unconstrained minimiser or, by the KKT conditions, the ridge solution
w(lambda) = argmin L(w) + lambda ||w||^2 with ||w(lambda)|| = Lambda, found by
bisection on lambda.

Multi-class: the softmax cross-entropy of W in R^{d x C} over the Frobenius
ball ||W||_F <= Lambda (the class of the multi-class PNCnvxAdap), labels the
class indices 0..C-1; also the warm start that algorithm can take.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import optimize

from privadapt.common.data.schema import INTERCEPT_NAME
from privadapt.common.losses import (
    LOSSES,
    SOFTMAX_CROSS_ENTROPY,
    Loss,
    class_indices,
    loss_derivative,
    loss_values,
    softmax_cross_entropy_terms,
)
from privadapt.common.numerics.geometry import project_to_ball
from privadapt.common.validation import check_int_at_least, check_one_of, check_positive


def _objective(
    weights: np.ndarray, features: np.ndarray, labels: np.ndarray, loss: str
) -> tuple[float, np.ndarray]:
    n = len(labels)
    if loss == SOFTMAX_CROSS_ENTROPY:
        # labels: class indices; weights: W flattened row-major.
        matrix = weights.reshape(features.shape[1], -1)
        losses, residuals = softmax_cross_entropy_terms(features @ matrix, labels)
        return float(np.mean(losses)), (features.T @ residuals / n).reshape(-1)
    margins = features @ weights
    value = float(np.sum(loss_values(loss, margins, labels))) / n
    return value, features.T @ loss_derivative(loss, margins, labels) / n


def fit_linear(
    features: np.ndarray,
    labels: np.ndarray,
    loss: Loss,
    radius: float,
    num_classes: int | None = None,
) -> np.ndarray:
    """argmin over ||w|| <= radius of the mean loss on public (features, labels):
    w of shape (d,), or for the softmax cross-entropy (``num_classes`` C, labels
    0..C-1) W of shape (d, C) with ||W||_F <= radius."""
    check_one_of("loss", loss, LOSSES)
    check_positive("radius", radius)
    if loss == SOFTMAX_CROSS_ENTROPY:
        num_classes = check_int_at_least("num_classes", num_classes, 2)
        classes = class_indices(labels, num_classes)
        fitted = _fit_in_ball(features, classes, loss, radius, features.shape[1] * num_classes)
        return fitted.reshape(features.shape[1], num_classes)
    return _fit_in_ball(features, labels, loss, radius, features.shape[1])


def _fit_in_ball(
    features: np.ndarray, labels: np.ndarray, loss: str, radius: float, size: int
) -> np.ndarray:
    ball = {
        "type": "ineq",
        "fun": lambda w: radius**2 - w @ w,
        "jac": lambda w: -2.0 * w,
    }
    result = optimize.minimize(
        _objective, np.zeros(size), args=(features, labels, loss), jac=True,
        method="SLSQP", constraints=[ball], options={"maxiter": 2000, "ftol": 1e-12},
    )
    if not result.success:
        raise RuntimeError(f"public fit did not converge: {result.message}")
    # SLSQP may sit a rounding error outside the constraint.
    return project_to_ball(result.x, radius)


def accuracy(weights: np.ndarray, features: np.ndarray, labels: np.ndarray) -> float:
    """Share of records whose label (+1/-1) has the sign of w.x (ties count as +1);
    for W of shape (d, C), whose class index is argmax_c (x W)_c."""
    if np.ndim(weights) == 2:
        return float(np.mean(np.argmax(features @ weights, axis=1) == labels))
    predictions = np.where(features @ weights >= 0, 1.0, -1.0)
    return float(np.mean(predictions == labels))


def intercept_column(features: np.ndarray, feature_names: Sequence[str] | None) -> int | None:
    """The public source's intercept column: the one named ``intercept`` (a
    schema's, :data:`~privadapt.common.data.schema.INTERCEPT_NAME`) when the
    source carries names; else the only column that is one non-zero value on
    every public record. None when there is none or the constant columns are
    ambiguous (a split rule can make a one-hot column constant on the source
    alone, e.g. marital status on the married, and a constant fitted on it
    would not be constant on the target)."""
    if feature_names is not None and INTERCEPT_NAME in feature_names:
        return list(feature_names).index(INTERCEPT_NAME)
    if features.shape[0] == 0:
        return None
    first = features[0]
    constant = np.flatnonzero(np.all(features == first, axis=0) & (first != 0))
    return int(constant[0]) if constant.size == 1 else None


def public_constant_model(features: np.ndarray, labels: np.ndarray, loss: str, radius: float,
                          feature_names: Sequence[str] | None = None) -> np.ndarray | None:
    """The free public-constant candidate (module docstring): ``fit_linear``
    on the intercept column alone, embedded in R^d; None when the public
    source has no intercept column."""
    column = intercept_column(features, feature_names)
    if column is None:
        return None
    weights = np.zeros(features.shape[1])
    weights[column] = fit_linear(features[:, [column]], labels, loss, radius)[0]
    return weights
