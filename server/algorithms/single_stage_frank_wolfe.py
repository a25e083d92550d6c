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

Reconstruction. Alg. 1 takes eta as an input; Theorem 4 only says "there exists
a choice of K and eta". We default to eta = 1 / sqrt(K), the standard choice for
non-convex Frank-Wolfe (gap O(1/sqrt K)). With noise in the q-step, line 8's
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

from privadapt.server.algorithms.simplex_iterate import SimplexIterate
from privadapt.server.algorithms.smoothed_discrepancy import SmoothedDiscrepancy, exact_vertex


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
    part of L_T and must be 0), public ``labels`` y_i and Lambda = ``radius``."""
    if objective.regularization != 0:
        raise ValueError("L_T has no l2 term on q: pass an objective with regularization 0")
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations!r}")
    eta = 1.0 / math.sqrt(iterations) if step_size is None else float(step_size)
    if not 0.0 < eta <= 1.0:
        raise ValueError(f"step_size must be in (0, 1], got {step_size!r}")
    features = objective.source_features
    labels = np.asarray(labels, dtype=float)
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
