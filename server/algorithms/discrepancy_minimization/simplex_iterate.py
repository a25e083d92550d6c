"""A Frank-Wolfe iterate q over the simplex together with M(q), kept by rank-one
updates instead of rebuilt, for speed (seed 003, Lemma 1).

Derivation. With M(q) = M_0 - sum_i q_i x_i x_i^T (Lemma 1) and
S(q) = sum_i q_i x_i x_i^T = M_0 - M(q), a Frank-Wolfe step towards the
vertex e_j, q' = (1 - eta) q + eta e_j, gives

    M(q') = M_0 - (1 - eta) S(q) - eta x_j x_j^T
          = (1 - eta) (M_0 - S(q)) + eta (M_0 - x_j x_j^T)
          = (1 - eta) M(q) + eta M(e_j),

using (1 - eta) + eta = 1 for the M_0 term (q stays in the simplex). An away
step from e_a, q' = (1 + eta) q - eta e_a, gives likewise
M(q') = (1 + eta) M(q) - eta M(e_a). Either is O(d^2), where rebuilding
S(q) = X^T diag(q) X is one O(m d^2) GEMM. The line search's direction of
change, -sum_i d_i x_i x_i^T for d = e_j - q (resp. q - e_a), is
M(e_j) - M(q) (resp. M(q) - M(e_a)): O(d^2) too, where it was a second GEMM.
The cached ||q||^2 of the l2 term follows the same way,
||q'||^2 = (1 - eta)^2 ||q||^2 + 2 eta (1 - eta) q_j + eta^2 (towards e_j),
(1 + eta)^2 ||q||^2 - 2 eta (1 + eta) q_a + eta^2 (away from e_a).

What is left per iteration is the gradient's one ``eigh`` and one GEMM
(``common/numerics/smoothed_spectral.py``), and O(m) for q itself.

Rounding. A step towards e_j contracts the accumulated error by (1 - eta)
and adds a few ulps of ||M||; an away step can grow it by (1 + eta). So M(q)
is rebuilt from q every :data:`REBUILD_EVERY` updates, which bounds the drift
whatever the steps (a test checks 1e-10 against rebuilding over many steps).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from privadapt.common.numerics.smoothed_spectral import smoothed_norm_and_vertex_gradient

if TYPE_CHECKING:
    from privadapt.server.algorithms.discrepancy_minimization.smoothed_discrepancy import (
        SmoothedDiscrepancy,
    )

#: Updates between two rebuilds of M(q) from q (bounds the rounding drift).
REBUILD_EVERY = 256


class SimplexIterate:
    """q in the simplex with M(q) and ||q||^2 cached for ``objective``.

    ``rank_one=False`` rebuilds M(q) from q after every update (the reference
    the rank-one updates are tested and benchmarked against)."""

    def __init__(self, objective: SmoothedDiscrepancy, weights: np.ndarray, *,
                 rank_one: bool = True) -> None:
        self.objective = objective
        self.rank_one = rank_one
        self.weights = np.array(weights, dtype=float)
        self._rebuild()

    def _rebuild(self) -> None:
        self.matrix = self.objective.matrix(self.weights)
        self.squared_norm = float(self.weights @ self.weights)
        self._updates = 0

    def value_and_gradient(self) -> tuple[float, np.ndarray]:
        """F~^lambda(q) and its gradient from the cached M(q): one eigh, one GEMM."""
        objective = self.objective
        smooth, vertex_gradient = smoothed_norm_and_vertex_gradient(
            objective.source_features, self.matrix, objective.mu)
        value = smooth + 0.5 * objective.regularization * self.squared_norm
        return value, vertex_gradient + objective.regularization * self.weights

    def toward_change(self, vertex: int) -> np.ndarray:
        """d M / d eta along d = e_j - q: M(e_j) - M(q)."""
        return self.objective.vertex_matrix(vertex) - self.matrix

    def away_change(self, vertex: int) -> np.ndarray:
        """d M / d eta along d = q - e_a: M(q) - M(e_a)."""
        return self.matrix - self.objective.vertex_matrix(vertex)

    def step_toward(self, vertex: int, step: float) -> None:
        """q <- (1 - eta) q + eta e_j and M <- (1 - eta) M + eta M(e_j)."""
        old = float(self.weights[vertex])
        self.weights *= 1.0 - step
        self.weights[vertex] += step
        if self._keep_cache():
            self.matrix = (1.0 - step) * self.matrix + step * self.objective.vertex_matrix(vertex)
            self.squared_norm = ((1.0 - step) ** 2 * self.squared_norm
                                 + 2.0 * step * (1.0 - step) * old + step * step)

    def step_away(self, vertex: int, step: float, *, drop: bool = False) -> None:
        """q <- (1 + eta) q - eta e_a and M <- (1 + eta) M - eta M(e_a); ``drop``
        empties q_a exactly (a drop step) and clips rounding below 0."""
        old = float(self.weights[vertex])
        self.weights *= 1.0 + step
        self.weights[vertex] -= step
        if drop:
            self.weights[vertex] = 0.0
        np.maximum(self.weights, 0.0, out=self.weights)
        if self._keep_cache():
            self.matrix = (1.0 + step) * self.matrix - step * self.objective.vertex_matrix(vertex)
            self.squared_norm = ((1.0 + step) ** 2 * self.squared_norm
                                 - 2.0 * step * (1.0 + step) * old + step * step)

    def _keep_cache(self) -> bool:
        """True to update the cache by rank one; False after rebuilding it."""
        self._updates += 1
        if self.rank_one and self._updates < REBUILD_EVERY:
            return True
        self._rebuild()
        return False
