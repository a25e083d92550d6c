"""Mirror descent over the simplex with the p-norm potential, p = 1 + 1/log m
(seed 003, Alg. 3; ../shared/seeds/003_17bffd62ba7ccf9f.txt, Sec. 6 and App. E.2).

Alg. 3 line 10 prints the step as q_{k+1} = argmin_{q in Delta_m} <g_k, q - q_k>
+ ||q - q_k||_p^2 / (eta (p - 1)). Its analysis (App. E.2) is that of mirror
descent with the potential Phi(q) = ||q||_p^2 / (p - 1) (1-strongly convex in
||.||_1 up to a constant, D_Phi <= 2 log m, citing [NY83, NJLS09]), so we read
the distance as Phi's Bregman divergence D_Phi(q, q_k), the step of that analysis:

    q_{k+1} = argmin_{q in Delta_m} <eta g_k - grad Phi(q_k), q> + Phi(q).

Solving the step. For q >= 0, grad Phi(q)_i = 2 ||q||_p^{2-p} q_i^{p-1} / (p - 1).
With theta = (p - 1) (eta g_k - grad Phi(q_k)) / 2, the KKT conditions are
||q||_p^{2-p} q_i^{p-1} = (nu - theta_i)_+ for a multiplier nu. Writing
v_i = (nu - theta_i)_+^{1/(p-1)} and q = t v, homogeneity gives
t = ||v||_p^{p-2}, and sum q = 1 becomes h(nu) = ||v||_p^{p-2} sum_i v_i = 1.
h is continuous and increasing in nu (degree-1 homogeneous in v, v increasing),
0 at nu = min theta, so one bracketed root find (Brent) solves the step. The
exponent 1/(p - 1) = log m is large; v is computed relative to its largest
entry so nothing overflows.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy import optimize


def mirror_exponent(num_points: int) -> float:
    """p = 1 + 1 / log m (Alg. 3 line 4; m >= 3 so that p < 2)."""
    if num_points < 3:
        raise ValueError(f"p-norm mirror descent needs m >= 3 points, got {num_points}")
    return 1.0 + 1.0 / math.log(num_points)


def potential_gradient(weights: np.ndarray, p: float) -> np.ndarray:
    """grad Phi(q) = 2 ||q||_p^{2-p} q^{p-1} / (p - 1) for q >= 0."""
    norm = float(np.linalg.norm(weights, ord=p))
    return 2.0 * norm ** (2.0 - p) * np.power(weights, p - 1.0) / (p - 1.0)


def _simplex_point(theta: np.ndarray, p: float) -> np.ndarray:
    """argmin over the simplex of <theta', q> + Phi(q), with theta =
    (p - 1) theta' / 2 (module docstring)."""
    exponent = 1.0 / (p - 1.0)
    low = float(theta.min())
    spread = float(theta.max()) - low

    def direction(nu: float) -> np.ndarray:
        base = np.maximum(nu - theta, 0.0)
        top = float(base.max())
        return (base / top) ** exponent if top > 0 else base

    def excess(nu: float) -> float:
        # h(nu) - 1 with v written as top^exponent * u (u = direction(nu)):
        # h = top^(exponent (p - 1)) ||u||_p^(p-2) sum u = top ||u||_p^(p-2) sum u.
        u = direction(nu)
        top = float(np.max(np.maximum(nu - theta, 0.0)))
        if top == 0.0:
            return -1.0
        return top * float(np.linalg.norm(u, ord=p)) ** (p - 2.0) * float(u.sum()) - 1.0

    high = low + max(spread, 1.0)
    while excess(high) < 0.0:
        high = low + 2.0 * (high - low)
    nu = optimize.brentq(excess, low, high, xtol=1e-15, rtol=1e-14)
    u = direction(nu)
    return u / u.sum()


def mirror_step(weights: np.ndarray, gradient: np.ndarray, step: float, p: float) -> np.ndarray:
    """One step q_{k+1} of the module docstring from q_k = ``weights``."""
    dual = step * gradient - potential_gradient(weights, p)
    return _simplex_point(0.5 * (p - 1.0) * dual, p)


def mirror_descent(
    gradient_at: Callable[[int, np.ndarray], np.ndarray],
    num_points: int,
    *,
    iterations: int,
    step: float,
    initial_weights: np.ndarray | None = None,
) -> np.ndarray:
    """Alg. 3 lines 7-12: K = ``iterations`` steps from q_1 (uniform by default)
    with the (possibly noisy) gradient ``gradient_at(k, q_k)``; returns the
    average (1/K) sum_{k=1}^K q_k."""
    p = mirror_exponent(num_points)
    weights = (np.full(num_points, 1.0 / num_points) if initial_weights is None
               else np.array(initial_weights, dtype=float))
    total = np.zeros(num_points)
    for iteration in range(iterations):
        total += weights
        weights = mirror_step(weights, gradient_at(iteration, weights), step, p)
    return total / iterations
