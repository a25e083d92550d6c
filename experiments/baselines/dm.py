"""Discrepancy Minimisation (DM; Cortes and Mohri, 2014): a non-private comparator.

Experiments only, on pooled data (source and target features in one place); it
is the DM column of seed 000's Tables 1 and 3, and the non-private two-stage
algorithm that seed 003 (Section 6) privatises. Two stages:

1. Source weights q in the simplex Delta_m minimising the discrepancy to the
   target's unlabeled features. For the squared loss and linear hypotheses
   ||w|| <= Lambda it is dis(q) = 4 Lambda^2 ||M_0 - sum_i q_i x_i x_i^T||_2
   (seed 003, Lemma 1), M_0 the target's second moment. We minimise its softmax
   smoothing F~ plus (lambda / 2) ||q||^2 (seed 003, eq. (5) and Sec. 4.2) by
   (away-step, by default) Frank-Wolfe with exact line search
   (:mod:`privadapt.server.algorithms.discrepancy_minimization.smoothed_discrepancy`).
   Cortes and Mohri solve the same convex problem (the unsmoothed spectral norm) as an SDP; the
   smoothing error is at most log(2d) / mu in ||M||_2.
2. The q-weighted least squares on the labelled source: either over the ball
   ||w|| <= Lambda (seed 003, eq. (6); exact, as a trust-region subproblem,
   :mod:`privadapt.common.numerics.trust_region`) or, when ``ridge`` is given, its
   equivalent ridge form min sum_i q_i (w.x_i - y_i)^2 + ridge ||w||^2
   (``weighted_least_squares`` of the KMM baseline).

The model is linear without intercept, as in the papers; append a constant
feature for one (it then also enters the second moments, so stage 1 matches
means too).
"""

from __future__ import annotations

import math

import numpy as np

from experiments.baselines.kmm import weighted_least_squares
from privadapt.common.numerics.trust_region import maximize_quadratic_on_ball
from privadapt.server.algorithms.discrepancy_minimization.smoothed_discrepancy import (
    FrankWolfeResult,
    SmoothedDiscrepancy,
    discrepancy,
    frank_wolfe,
    second_moment,
    spectral_norm,
)

# Default mu: the smoothing error log(2d)/mu is this fraction of ||M_0||_2, the
# scale of the discrepancies being compared.
DEFAULT_RELATIVE_SMOOTHING = 0.01


class DiscrepancyMinimization:
    """DM source weights and weighted linear fit.

    Parameters: ``radius`` Lambda (the hypothesis ball; constrains stage 2
    unless ``ridge`` is given, and scales ``discrepancy_``); ``mu`` the softmax
    parameter (None: log(2d) / (0.01 ||M_0||_2)); ``regularization`` lambda of
    seed 003's eq. (5); ``ridge`` (None: ball-constrained stage 2);
    ``iterations``, ``tolerance`` (Frank-Wolfe gap) and ``away_steps`` (away-step
    Frank-Wolfe, which empties coordinates and converges faster; False: plain
    Frank-Wolfe as in seed 003) of stage 1.

    ``fit(source_x, source_y, target_x)`` sets ``weights_`` (q, summing to 1),
    ``coef_`` (w), ``mu_``, ``discrepancy_`` (4 Lambda^2 ||M(q)||_2 at the
    found q), ``source_discrepancy_`` (the same at uniform q, the unweighted
    source) and ``stage_one_`` (the :class:`FrankWolfeResult`).
    """

    def __init__(self, *, radius: float = 1.0, mu: float | None = None,
                 regularization: float = 0.0, ridge: float | None = None,
                 iterations: int = 1000, tolerance: float = 1e-6,
                 away_steps: bool = True) -> None:
        self.radius = radius
        self.mu = mu
        self.regularization = regularization
        self.ridge = ridge
        self.iterations = iterations
        self.tolerance = tolerance
        self.away_steps = away_steps

    def fit(self, source_x: np.ndarray, source_y: np.ndarray,
            target_x: np.ndarray) -> DiscrepancyMinimization:
        source_x, source_y, target_x = self._checked(source_x, source_y, target_x)
        target_moment = second_moment(target_x)
        mu = self.mu if self.mu is not None else _default_mu(target_moment)
        objective = SmoothedDiscrepancy(source_x, target_moment, mu, self.regularization)
        stage_one = frank_wolfe(objective, iterations=self.iterations,
                                tolerance=self.tolerance, away_steps=self.away_steps)
        weights = stage_one.weights
        if self.ridge is None:
            coef = ball_weighted_least_squares(source_x, source_y, weights, self.radius)
        else:
            coef = weighted_least_squares(source_x, source_y, weights, self.ridge)
        uniform = np.full(len(source_x), 1.0 / len(source_x))
        self.mu_ = mu
        self.weights_ = weights
        self.coef_ = coef
        self.stage_one_: FrankWolfeResult = stage_one
        self.discrepancy_ = discrepancy(source_x, weights, target_moment, self.radius)
        self.source_discrepancy_ = discrepancy(source_x, uniform, target_moment, self.radius)
        return self

    def predict(self, features: np.ndarray) -> np.ndarray:
        if not hasattr(self, "coef_"):
            raise ValueError("DiscrepancyMinimization is not fitted: call fit first")
        features = np.asarray(features, dtype=float)
        if features.ndim != 2 or features.shape[1] != len(self.coef_):
            raise ValueError(f"features must be 2-d with {len(self.coef_)} columns, "
                             f"got shape {features.shape}")
        return features @ self.coef_

    def _checked(self, source_x: np.ndarray, source_y: np.ndarray,
                 target_x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        source_x, target_x = np.asarray(source_x, float), np.asarray(target_x, float)
        source_y = np.asarray(source_y, float)
        if source_x.ndim != 2 or target_x.ndim != 2 or source_x.shape[1] != target_x.shape[1]:
            raise ValueError(f"source_x and target_x must be 2-d with the same columns, got "
                             f"{source_x.shape} and {target_x.shape}")
        if len(source_x) == 0 or len(target_x) == 0:
            raise ValueError("source_x and target_x must each have at least one row")
        if source_y.shape != (len(source_x),):
            raise ValueError(f"source_y must have shape ({len(source_x)},), "
                             f"got {source_y.shape}")
        if not all(np.all(np.isfinite(a)) for a in (source_x, source_y, target_x)):
            raise ValueError("source_x, source_y and target_x must be finite (no NaN or inf)")
        if not (math.isfinite(self.radius) and self.radius > 0):
            raise ValueError(f"radius must be finite and > 0, got {self.radius!r}")
        if self.ridge is not None and not self.ridge >= 0:
            raise ValueError(f"ridge must be >= 0 or None, got {self.ridge!r}")
        return source_x, source_y, target_x


def ball_weighted_least_squares(features: np.ndarray, labels: np.ndarray,
                                weights: np.ndarray, radius: float) -> np.ndarray:
    """argmin over ||w|| <= radius of sum_i q_i (w.x_i - y_i)^2 (seed 003, eq. (6)).

    The loss is w^T A w - 2 b^T w + c with A = X^T Q X, b = X^T Q y; its minimum
    on the ball is minus the maximum of w^T (-A) w + 2 b^T w - c, an exact
    trust-region solve.
    """
    weights = np.asarray(weights, float) / np.sum(weights)
    gram = features.T @ (weights[:, None] * features)
    moment = features.T @ (weights * labels)
    constant = float(weights @ labels**2)
    return maximize_quadratic_on_ball(-gram, moment, -constant, radius).weights


def _default_mu(target_moment: np.ndarray) -> float:
    scale = spectral_norm(target_moment)
    if scale == 0:
        raise ValueError("target_x is all zeros: give mu explicitly")
    return math.log(2 * len(target_moment)) / (DEFAULT_RELATIVE_SMOOTHING * scale)
