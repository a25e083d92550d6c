"""Single-stage Frank-Wolfe over the simplex times the ball (seed 003, Alg. 1,
Sec. 5; ../shared/seeds/003_17bffd62ba7ccf9f.txt) on

    L_T(q, w) = sum_i q_i (w.x_i - y_i)^2 + 4 Lambda^2 F~_T(q),   q in Delta_m, ||w|| <= Lambda.

Each round k (lines 5-14): the q-step moves towards the vertex
v_q = argmin_i [grad_q L]_i (line 7, with noise in the private per-iteration
route, through ``select_vertex``), with the gap estimate
G_q = -<grad_q, v_q - q> (line 8); the w-step moves towards
u = argmin_{||u|| <= Lambda} <grad_w, u> = -Lambda grad_w / ||grad_w|| (line 12)
with G_w = -<grad_w, u - w> (line 13). grad_w = 2 sum_i q_i (w.x_i - y_i) x_i
involves public data only, so it is not privatised (Sec. 5: sigma_w = 0).
Both steps use the constant step size eta (lines 9, 14), and the output is the
iterate (q^{k*}, w^{k*}) minimising G_q^k + G_w^k (line 16).

Step size. Alg. 1 takes eta as an input; Corollary 2 (App. D) instantiates
Theorem 4's choice for L_T:

    eta = sqrt(2) (Lambda r-hat + Y) / (Lambda r-hat sqrt((1 + 2 mu r-hat^2) K)),

r-hat = max_i ||x_i|| over the public source and Y the diameter of the labels
(here of the public labels, max y_i - min y_i): public quantities only, so the
step costs no privacy. This is the default (``corollary2_step_size``). It was
eta = 1 / sqrt(K), the generic non-convex Frank-Wolfe rule; on Section 7's
data (mu ~ 27, r-hat ~ 1.09, Y ~ 1.2, K = 1,000) that is ~2.7 times
Corollary 2's eta ~ 0.012, and the w-step, a Frank-Wolfe step to the sphere
||u|| = Lambda on an ill-conditioned least-squares problem, then zigzags
around an iterate of about half the norm of the target's least-squares w: the
non-private test MSE was 0.0019 against public-only 0.0009 (Corollary 2's step:
0.0006; README of experiments/seed003/results for the numbers and commands).

With noise in the q-step, line 8's
G_q includes the noise b at the chosen vertex, which only the data holder has;
the coordinator-side version here reads the gap with the gradient it was given
(the exact one on a released M_0: post-processing).

Starting point (line 3, "arbitrary"): q^0 uniform (the unweighted source) and
w^0 = 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from privadapt.server.algorithms.discrepancy_minimization.simplex_iterate import SimplexIterate
from privadapt.server.algorithms.discrepancy_minimization.smoothed_discrepancy import (
    SmoothedDiscrepancy,
    exact_vertex,
)


@dataclass(frozen=True)
class SingleStageResult:
    """The chosen iterate (``weights`` q-hat, ``coef`` w-hat), its round
    ``best_iteration`` and gap estimate ``gap``, and every round's gap."""

    weights: np.ndarray
    coef: np.ndarray
    best_iteration: int
    gap: float
    gaps: np.ndarray


def squared_losses(features: np.ndarray, labels: np.ndarray, coef: np.ndarray) -> np.ndarray:
    """(w.x_i - y_i)^2 for every public point."""
    residuals = features @ coef - labels
    return residuals * residuals


def ball_vertex(gradient: np.ndarray, radius: float) -> np.ndarray:
    """argmin_{||u|| <= radius} <gradient, u> (line 12); 0 for a zero gradient."""
    norm = float(np.linalg.norm(gradient))
    return np.zeros_like(gradient) if norm == 0.0 else -radius * gradient / norm


def corollary2_step_size(features: np.ndarray, labels: np.ndarray, *, radius: float,
                         mu: float, iterations: int) -> float:
    """Corollary 2's eta (module docstring) from the public source, capped at 1;
    1 when every public point is 0 (then L_T does not depend on w)."""
    r_hat = float(np.sqrt(np.max(np.einsum("ij,ij->i", features, features))))
    if r_hat == 0.0:
        return 1.0
    label_range = float(np.max(labels) - np.min(labels))
    eta = math.sqrt(2.0) * (radius * r_hat + label_range) / (
        radius * r_hat * math.sqrt((1.0 + 2.0 * mu * r_hat * r_hat) * iterations))
    return min(1.0, eta)


def single_stage_frank_wolfe(
    objective: SmoothedDiscrepancy,
    labels: np.ndarray,
    *,
    radius: float,
    iterations: int,
    step_size: float | None = None,
    select_vertex: Callable[[np.ndarray], int] = exact_vertex,
) -> SingleStageResult:
    """Alg. 1 on L_T with F~ from ``objective`` (its ``regularization`` is not
    part of L_T and must be 0), public ``labels`` y_i and Lambda = ``radius``;
    ``step_size`` eta defaults to Corollary 2's (:func:`corollary2_step_size`)."""
    if objective.regularization != 0:
        raise ValueError("L_T has no l2 term on q: pass an objective with regularization 0")
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations!r}")
    features = objective.source_features
    labels = np.asarray(labels, dtype=float)
    eta = (corollary2_step_size(features, labels, radius=radius, mu=objective.mu,
                                iterations=iterations)
           if step_size is None else float(step_size))
    if not 0.0 < eta <= 1.0:
        raise ValueError(f"step_size must be in (0, 1], got {step_size!r}")
    weight_on_discrepancy = 4.0 * radius * radius
    # M(q) by rank-one updates (simplex_iterate.py): the step is q <- (1 - eta) q + eta e_j.
    iterate = SimplexIterate(objective, np.full(objective.num_source, 1.0 / objective.num_source))
    q = iterate.weights
    w = np.zeros(features.shape[1])
    best = (math.inf, -1, q.copy(), w)
    gaps = np.empty(iterations)
    for k in range(iterations):
        residuals = features @ w - labels
        _, discrepancy_gradient = iterate.value_and_gradient()
        q_gradient = residuals * residuals + weight_on_discrepancy * discrepancy_gradient
        vertex = select_vertex(q_gradient)
        gap_q = float(q_gradient @ q - q_gradient[vertex])
        w_gradient = 2.0 * features.T @ (q * residuals)
        target = ball_vertex(w_gradient, radius)
        gap_w = -float(w_gradient @ (target - w))
        gaps[k] = gap_q + gap_w
        if gaps[k] < best[0]:
            best = (gaps[k], k, q.copy(), w.copy())
        iterate.step_toward(vertex, eta)  # updates q in place
        w = (1.0 - eta) * w + eta * target
    gap, index, best_q, best_w = best
    return SingleStageResult(best_q, best_w, index, float(gap), gaps)
