"""The weighted discrepancy as a spectral norm, its softmax smoothing, and
Frank-Wolfe over the simplex: the non-private core of seed 003's two-stage
discrepancy minimisation.

Paper: ../shared/seeds/003_17bffd62ba7ccf9f.txt ("Principled approaches for
private adaptation from a public source"), Sections 4 and 6, Appendices B, C.2
and E.1. Without noise, stage 1 is the discrepancy minimisation of Cortes and
Mohri (2014) (the DM baseline of seed 000, ``experiments/baselines/dm.py``).

* Lemma 1 (Sec. 4.1, proof in App. B): for the squared loss and linear
  hypotheses ||w|| <= Lambda,
      dis(P-hat, q) = 4 Lambda^2 ||M(q)||_2,   M(q) = M_0 - sum_i q_i x_i x_i^T,
  M_0 = (1/n) sum_j x~_j x~_j^T the target's second moment, x_i the source
  points, q in the simplex Delta_m. The factor is 4 Lambda^2, not Lambda^2:
  the supremum runs over u = w - w' with ||u|| <= 2 Lambda (App. B's proof).
* Sec. 4.2: F(q) = (1/mu) log Tr exp(mu M(q)) smooths lambda_max(M(q)); for
  both signs of the spectrum the paper uses M~(q) = diag(M(q), -M(q)) and
  F~(q) = f(M~(q)), f(A) = (1/mu) log Tr exp(mu A). Since the eigenvalues of
  M~ are +-lambda_i(M), F~ = (1/mu) log sum_i 2 cosh(mu lambda_i); we compute
  it from one ``eigh`` of the d x d matrix M(q) with a log-sum-exp (max-shift)
  (the math lives in ``common/numerics/smoothed_spectral.py``, shared with the site
  kernel that scores vertices on a private M_0).
* Gradient (eq. (4) for F, App. C.2 for F~):
      [grad F~(q)]_i = -<grad f(M~), diag(M_i, -M_i)> = -x_i^T G x_i,
      G = V diag(w+ - w-) V^T,  w+-_k = exp(+-mu lambda_k) / sum_l 2 cosh(mu lambda_l),
  V the eigenvectors of M(q): the softmax-weighted eigenprojector of
  exp(mu M) - exp(-mu M) over Tr exp(mu M~).
* Sec. 6, eq. (5): stage 1 minimises the smoothed discrepancy with an l2 term,
  F~^lambda(q) = F~(q) + (lambda / 2) ||q||^2 (Alg. 2, line 4), over Delta_m.
* Frank-Wolfe (Alg. 2 without its Laplace noise): the linear minimisation
  oracle over Delta_m is the vertex e_j, j = argmin_i grad_i (line 10), and
  q_{k+1} = (1 - eta_k) q_k + eta_k e_j (line 11). The Frank-Wolfe gap
  <grad(q_k), q_k - e_j> bounds F~^lambda(q_k) - min F~^lambda (convexity) and
  is the stopping criterion. Optional away steps (Lacoste-Julien and Jaggi,
  2015; not in the paper) for the non-private baseline.

OCR / reconstruction.
* The approximation bound (3) prints lambda_max <= F <= lambda_max +
  log(rank M(q)) / mu, and Corollary 1 prints log(2 min{m + n, d}) / mu for
  F~. The sum in F runs over all d eigenvalues, zeros included (each adds
  exp(0) = 1), so the bound that holds is ||M||_2 <= F~ <= ||M||_2 +
  log(2d) / mu; it is tight at M = 0, where F~ = log(2d) / mu exactly
  (``smoothing_error_bound``; a test checks the tight case).
* App. C.2 prints "|[grad F~]_i| = -x_i^T [...] x_i / (...)": the absolute
  value bars are spurious; the line is the gradient itself, as rebuilt above
  from "grad F~(q) = -<grad f(M~(q)), diag(M_i, -M_i)>" one line earlier.
* Alg. 2's step prints eta_k = 3 / (k + 2) (k from 1, so eta_1 = 1). We offer
  the standard open-loop 2 / (k + 2) (k from 0, so the first step also lands
  on a vertex) and an exact line search (the default); a private variant
  chooses its own schedule through ``step_rule``.

Extension point for the noisy Frank-Wolfe of Alg. 2 (not built here): pass a
``select_vertex`` that adds Laplace noise to the gradient before the argmin
and ``step_rule="open_loop"``. The line search, the gap and ``history`` read
the exact objective and gradient, i.e. the private M_0: a private run must use
a fixed number of iterations (``tolerance=0``) and not release the history.
Federated route (a) of DESIGN.md section 5 passes a noisy M_0 as
``target_moment``; everything here is then post-processing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from scipy import optimize

from privadapt.common.numerics.smoothed_spectral import (
    smoothed_norm_and_vertex_gradient,
    smoothed_spectral_norm_gradient,
    smoothed_spectrum,
)
from privadapt.common.validation import frozen_value
from privadapt.server.algorithms.discrepancy_minimization.simplex_iterate import SimplexIterate

VertexSelector = Callable[[np.ndarray], int]
StepRule = Literal["line_search", "open_loop"]


def second_moment(features: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """sum_i p_i x_i x_i^T with p = ``weights`` (uniform 1/n when None)."""
    features = np.asarray(features, dtype=float)
    if weights is None:
        return features.T @ features / len(features)
    return features.T @ (np.asarray(weights, dtype=float)[:, None] * features)


def spectral_norm(matrix: np.ndarray) -> float:
    """||A||_2 = max_k |lambda_k(A)| of a symmetric matrix."""
    return float(np.max(np.abs(np.linalg.eigvalsh(matrix))))


def discrepancy(source_features: np.ndarray, weights: np.ndarray, target_moment: np.ndarray,
                radius: float) -> float:
    """dis(P-hat, q) = 4 Lambda^2 ||M_0 - sum_i q_i x_i x_i^T||_2 (Lemma 1)."""
    matrix = target_moment - second_moment(source_features, weights)
    return 4.0 * radius**2 * spectral_norm(matrix)


def smoothing_error_bound(dim: int, mu: float) -> float:
    """log(2d) / mu: F~ - ||M||_2 lies in [0, this] (bound (3) rebuilt, see above)."""
    return math.log(2 * dim) / mu


def smoothed_spectral_norm(matrix: np.ndarray, mu: float) -> float:
    """F~ = f(diag(A, -A)) = (1/mu) log sum_k 2 cosh(mu lambda_k(A))."""
    return smoothed_spectrum(matrix, mu)[0]


@frozen_value
class SmoothedDiscrepancy:
    """F~^lambda(q) = F~(M(q)) + (lambda/2) ||q||^2 over q in Delta_m (Alg. 2, line 4).

    ``source_features`` (m, d) are the public x_i; ``target_moment`` (d, d) is
    M_0 (exact here; a noisy release in a private route); ``mu`` > 0 the
    softmax parameter; ``regularization`` lambda >= 0 of eq. (5).
    """

    source_features: np.ndarray
    target_moment: np.ndarray
    mu: float
    regularization: float = 0.0

    def __post_init__(self) -> None:
        features = np.asarray(self.source_features, dtype=float)
        moment = np.asarray(self.target_moment, dtype=float)
        if features.ndim != 2 or len(features) == 0:
            raise ValueError(f"source_features must be a non-empty (m, d) array, "
                             f"got shape {features.shape}")
        if moment.shape != (features.shape[1], features.shape[1]):
            raise ValueError(f"target_moment must be ({features.shape[1]}, "
                             f"{features.shape[1]}), got {moment.shape}")
        if not (np.all(np.isfinite(features)) and np.all(np.isfinite(moment))):
            raise ValueError("source_features and target_moment must be finite")
        if not (math.isfinite(self.mu) and self.mu > 0):
            raise ValueError(f"mu must be finite and > 0, got {self.mu!r}")
        if not (math.isfinite(self.regularization) and self.regularization >= 0):
            raise ValueError(f"regularization must be finite and >= 0, "
                             f"got {self.regularization!r}")
        self.source_features = features
        # Symmetrise: a noisy release of M_0 need not be symmetric, eigh assumes it.
        self.target_moment = 0.5 * (moment + moment.T)

    @property
    def num_source(self) -> int:
        return len(self.source_features)

    def matrix(self, weights: np.ndarray) -> np.ndarray:
        """M(q) = M_0 - sum_i q_i x_i x_i^T (Lemma 1)."""
        return self.target_moment - second_moment(self.source_features, weights)

    def vertex_matrix(self, index: int) -> np.ndarray:
        """M(e_j) = M_0 - x_j x_j^T."""
        point = self.source_features[index]
        return self.target_moment - np.outer(point, point)

    def value(self, weights: np.ndarray) -> float:
        smooth = smoothed_spectral_norm(self.matrix(weights), self.mu)
        return smooth + 0.5 * self.regularization * float(weights @ weights)

    def value_and_gradient(self, weights: np.ndarray) -> tuple[float, np.ndarray]:
        """F~^lambda(q) and its gradient, -x_i^T G x_i + lambda q_i (eq. (4), App. C.2)."""
        smooth, vertex_gradient = smoothed_norm_and_vertex_gradient(
            self.source_features, self.matrix(weights), self.mu)
        value = smooth + 0.5 * self.regularization * float(weights @ weights)
        return value, vertex_gradient + self.regularization * weights


def exact_vertex(gradient: np.ndarray) -> int:
    """The linear minimisation oracle over Delta_m: argmin_i gradient_i (the
    vertex e_i minimising <gradient, v>); Alg. 2, line 10 without the noise."""
    return int(np.argmin(gradient))


def open_loop_step(iteration: int) -> float:
    """eta_k = 2 / (k + 2), k = 0, 1, ...: the standard Frank-Wolfe schedule."""
    return 2.0 / (iteration + 2.0)


def line_search_step(objective: SmoothedDiscrepancy, weights: np.ndarray,
                     direction: np.ndarray, max_step: float = 1.0,
                     change: np.ndarray | None = None, start: np.ndarray | None = None
                     ) -> float:
    """argmin over eta in [0, max_step] of F~^lambda(q + eta d), exact to ~1e-12.

    M is affine in q, so along the segment M = M(q) + eta C with
    C = -sum_i d_i x_i x_i^T, and phi(eta) is convex; its derivative
    <G(eta), C> + lambda <q + eta d, d> is increasing, and its root is found by
    Brent's method. The Frank-Wolfe direction is d = e_j - q (max_step 1); the
    away direction d = q - e_a (max_step q_a / (1 - q_a)). ``start`` M(q) and
    ``change`` C may be passed from a :class:`SimplexIterate` (O(d^2) each
    there); by default they are rebuilt (O(m d^2) each).
    """
    start = objective.matrix(weights) if start is None else start
    change = -second_moment(objective.source_features, direction) if change is None else change
    along = float(weights @ direction)  # <q + eta d, d> = along + eta * squared
    squared = float(direction @ direction)

    def slope(eta: float) -> float:
        _, gradient_matrix = smoothed_spectral_norm_gradient(start + eta * change, objective.mu)
        return (float(np.sum(gradient_matrix * change))
                + objective.regularization * (along + eta * squared))

    if slope(0.0) >= 0.0:
        return 0.0
    if slope(max_step) <= 0.0:
        return max_step
    return float(optimize.brentq(slope, 0.0, max_step, xtol=1e-12))


@dataclass(frozen=True)
class FrankWolfeResult:
    """``weights`` q-hat; ``value`` F~^lambda(q-hat); ``gap`` its Frank-Wolfe gap
    (an upper bound on value - min); per-iteration ``values`` and ``gaps``
    (before each step, then at q-hat); ``converged``: gap <= tolerance."""

    weights: np.ndarray
    value: float
    gap: float
    iterations: int
    converged: bool
    values: list[float] = field(default_factory=list)
    gaps: list[float] = field(default_factory=list)


def frank_wolfe(
    objective: SmoothedDiscrepancy,
    *,
    iterations: int = 500,
    tolerance: float = 1e-6,
    initial_weights: np.ndarray | None = None,
    step_rule: StepRule = "line_search",
    away_steps: bool = False,
    select_vertex: VertexSelector = exact_vertex,
    rank_one: bool = True,
) -> FrankWolfeResult:
    """Minimise ``objective`` over the simplex by Frank-Wolfe (Alg. 2 without noise).

    Starts at ``initial_weights`` (default uniform 1/m, the unweighted source),
    stops after ``iterations`` steps or when the Frank-Wolfe gap is at most
    ``tolerance`` (``tolerance=0``: always run every step). ``step_rule`` is
    ``"line_search"`` (exact, monotone) or ``"open_loop"`` (2 / (k + 2));
    ``select_vertex`` maps a gradient to the vertex index to move towards
    (the hook for a noisy oracle).

    ``away_steps`` (line search only; not in the paper): away-step
    Frank-Wolfe (Lacoste-Julien and Jaggi, 2015). When it gains more, step
    away from the worst vertex in the support, a = argmax_{i : q_i > 0}
    grad_i (d = q - e_a), instead of towards e_j. Plain Frank-Wolfe can only
    shrink a coordinate geometrically and zig-zags towards a minimiser on a
    face of the simplex at rate O(1/k); away steps empty coordinates and
    reach such a minimiser far sooner, which the non-private DM baseline wants.

    ``rank_one`` (default): M(q) and the line search's direction of change are
    kept by O(d^2) rank-one updates (``simplex_iterate.py``, derived there);
    False rebuilds them by O(m d^2) GEMMs each step (the tested reference).
    """
    if iterations < 0:
        raise ValueError(f"iterations must be >= 0, got {iterations!r}")
    if not tolerance >= 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance!r}")
    if step_rule not in ("line_search", "open_loop"):
        raise ValueError(f"step_rule must be 'line_search' or 'open_loop', got {step_rule!r}")
    if away_steps and step_rule != "line_search":
        raise ValueError("away_steps needs step_rule='line_search'")
    iterate = SimplexIterate(objective, _checked_initial(initial_weights, objective.num_source),
                             rank_one=rank_one)
    values: list[float] = []
    gaps: list[float] = []
    for iteration in range(iterations + 1):
        value, gradient = iterate.value_and_gradient()
        gap = float(gradient @ iterate.weights - gradient.min())
        values.append(value)
        gaps.append(gap)
        if iteration == iterations or gap <= tolerance:
            break
        vertex = select_vertex(gradient)
        if away_steps:
            _away_or_toward_step(iterate, gradient, vertex)
            continue
        step = (line_search_step(objective, iterate.weights, _toward(vertex, iterate.weights),
                                 change=iterate.toward_change(vertex), start=iterate.matrix)
                if step_rule == "line_search" else open_loop_step(iteration))
        iterate.step_toward(vertex, step)
    weights = iterate.weights
    return FrankWolfeResult(weights=weights, value=values[-1], gap=gaps[-1],
                            iterations=len(values) - 1, converged=gaps[-1] <= tolerance,
                            values=values, gaps=gaps)


def _toward(vertex: int, weights: np.ndarray) -> np.ndarray:
    """The Frank-Wolfe direction e_j - q."""
    direction = -weights
    direction[vertex] += 1.0
    return direction


def _away_or_toward_step(iterate: SimplexIterate, gradient: np.ndarray, vertex: int) -> None:
    """One step of away-step Frank-Wolfe (Lacoste-Julien and Jaggi, 2015, Alg. 1)."""
    weights = iterate.weights
    support = np.flatnonzero(weights > 0)
    away = int(support[np.argmax(gradient[support])])
    toward_gain = float(gradient @ weights - gradient[vertex])
    away_gain = float(gradient[away] - gradient @ weights)
    if toward_gain >= away_gain or weights[away] >= 1.0:
        step = line_search_step(iterate.objective, weights, _toward(vertex, weights),
                                change=iterate.toward_change(vertex), start=iterate.matrix)
        iterate.step_toward(vertex, step)
        return
    # Away from e_a: d = q - e_a, feasible up to q_a / (1 - q_a), where q_a hits 0.
    direction = weights.copy()
    direction[away] -= 1.0
    max_step = float(weights[away] / (1.0 - weights[away]))
    step = line_search_step(iterate.objective, weights, direction, max_step=max_step,
                            change=iterate.away_change(away), start=iterate.matrix)
    # A "drop" step empties the coordinate exactly.
    iterate.step_away(away, step, drop=step >= max_step)


def _checked_initial(initial_weights: np.ndarray | None, num_source: int) -> np.ndarray:
    if initial_weights is None:
        return np.full(num_source, 1.0 / num_source)
    weights = np.array(initial_weights, dtype=float)
    if weights.shape != (num_source,):
        raise ValueError(f"initial_weights must have shape ({num_source},), got {weights.shape}")
    if np.any(weights < 0) or not math.isclose(float(weights.sum()), 1.0, abs_tol=1e-9):
        raise ValueError("initial_weights must lie in the simplex (>= 0, summing to 1)")
    return weights
