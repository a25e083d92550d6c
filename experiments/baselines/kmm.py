"""Kernel Mean Matching (Huang et al., 2006): a non-private comparator.

Experiments only, on pooled data (source and target in one place); it is the
KMM column of seed 000's Tables 1 and 4. KMM picks source weights beta whose
weighted source mean embedding matches the target's in an RBF kernel's
feature space:

    minimise   1/2 beta' K beta - kappa' beta
    subject to 0 <= beta_i <= B,  |mean(beta) - 1| <= eps,

K_ij = k(x_i, x_j) over source points, kappa_i = (m / n') sum_j k(x_i, x'_j)
over target points x'_j. Solver: accelerated projected gradient (FISTA) with
step 1 / lambda_max(K); the projection onto the box intersected with the
slab on sum(beta) is exact (clip(v - tau, 0, B) with tau found by bisection).
The objective is convex, so this reaches the QP's optimum; SLSQP would need
O(m^2) memory per Jacobian and is far slower past a few hundred points.

The weighted fit that follows is ridge-regularised weighted least squares
(``weighted_least_squares``) or weighted logistic regression
(``weighted_logistic``, L-BFGS).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, special


def rbf_kernel(a: np.ndarray, b: np.ndarray, gamma: float) -> np.ndarray:
    """exp(-gamma ||a_i - b_j||^2)."""
    squared = (np.sum(a**2, axis=1)[:, None] + np.sum(b**2, axis=1)[None, :]
               - 2.0 * a @ b.T)
    return np.exp(-gamma * np.maximum(squared, 0.0))


def median_heuristic_gamma(points: np.ndarray, seed: int = 0, sample: int = 500) -> float:
    """1 / (2 median^2) of pairwise distances over a random subsample."""
    rng = np.random.default_rng(seed)
    chosen = points[rng.choice(len(points), size=min(sample, len(points)), replace=False)]
    squared = np.sum((chosen[:, None, :] - chosen[None, :, :]) ** 2, axis=2)
    median = float(np.median(squared[np.triu_indices(len(chosen), 1)]))
    return 1.0 / (2.0 * median) if median > 0 else 1.0


def _project(v: np.ndarray, upper: float, low_sum: float, high_sum: float) -> np.ndarray:
    """Euclidean projection onto {0 <= b <= upper, low_sum <= sum(b) <= high_sum}."""
    clipped = np.clip(v, 0.0, upper)
    total = clipped.sum()
    if low_sum <= total <= high_sum:
        return clipped
    target = high_sum if total > high_sum else low_sum
    lo, hi = float(np.min(v) - upper), float(np.max(v))  # sum(clip(v - tau)) falls in tau
    for _ in range(100):
        tau = 0.5 * (lo + hi)
        if np.clip(v - tau, 0.0, upper).sum() > target:
            lo = tau
        else:
            hi = tau
    return np.clip(v - 0.5 * (lo + hi), 0.0, upper)


class KernelMeanMatching:
    """KMM source weights; ``fit(source, target)`` sets ``weights_`` (mean ~ 1)."""

    def __init__(self, gamma: float | None = None, upper_bound: float = 1000.0,
                 epsilon: float | None = None, iterations: int = 2000) -> None:
        self.gamma = gamma
        self.upper_bound = upper_bound
        self.epsilon = epsilon
        self.iterations = iterations

    def fit(self, source: np.ndarray, target: np.ndarray) -> KernelMeanMatching:
        source, target = np.asarray(source, float), np.asarray(target, float)
        if source.ndim != 2 or target.ndim != 2 or source.shape[1] != target.shape[1]:
            raise ValueError(f"source and target must be 2-d with the same columns, got "
                             f"{source.shape} and {target.shape}")
        if not self.upper_bound > 0:
            raise ValueError(f"upper_bound must be > 0, got {self.upper_bound!r}")
        m = len(source)
        gamma = self.gamma if self.gamma is not None else median_heuristic_gamma(
            np.vstack([source, target]))
        # Huang et al.'s default slack: eps = (sqrt(m) - 1) / sqrt(m).
        eps = self.epsilon if self.epsilon is not None else (math.sqrt(m) - 1) / math.sqrt(m)
        kernel = rbf_kernel(source, source, gamma)
        kappa = (m / len(target)) * rbf_kernel(source, target, gamma).sum(axis=1)
        lipschitz = float(np.linalg.eigvalsh(kernel)[-1]) if m <= 3000 else float(m)
        low, high = m * (1.0 - eps), m * (1.0 + eps)
        beta = _project(np.ones(m), self.upper_bound, low, high)
        momentum, previous, t = beta.copy(), beta.copy(), 1.0
        for _ in range(self.iterations):
            gradient = kernel @ momentum - kappa
            beta = _project(momentum - gradient / lipschitz, self.upper_bound, low, high)
            t_next = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * t * t))
            momentum = beta + ((t - 1.0) / t_next) * (beta - previous)
            previous, t = beta, t_next
        self.gamma_ = gamma
        self.weights_ = beta
        self.objective_ = float(0.5 * beta @ kernel @ beta - kappa @ beta)
        return self


def weighted_least_squares(features: np.ndarray, labels: np.ndarray, weights: np.ndarray,
                           ridge: float = 1e-6) -> np.ndarray:
    """argmin_w sum_i weights_i (w.x_i - y_i)^2 / sum(weights) + ridge ||w||^2."""
    weights = np.asarray(weights, float) / np.sum(weights)
    gram = features.T @ (weights[:, None] * features) + ridge * np.eye(features.shape[1])
    return np.linalg.solve(gram, features.T @ (weights * labels))


def weighted_logistic(features: np.ndarray, labels: np.ndarray, weights: np.ndarray,
                      ridge: float = 1e-4) -> np.ndarray:
    """argmin_w sum_i weights_i log(1 + exp(-y_i w.x_i)) / sum(weights) + ridge ||w||^2
    (labels +1/-1)."""
    weights = np.asarray(weights, float) / np.sum(weights)

    def fun(w):
        margins = labels * (features @ w)
        value = float(weights @ np.logaddexp(0.0, -margins)) + ridge * float(w @ w)
        slope = -weights * labels * special.expit(-margins)
        return value, features.T @ slope + 2.0 * ridge * w

    result = optimize.minimize(fun, np.zeros(features.shape[1]), jac=True, method="L-BFGS-B")
    return result.x
