"""The gradient of seed 003's smoothed discrepancy at the site that holds the
whole private target: the scores of noisy Frank-Wolfe (Alg. 2, a selection)
and the vector of noisy mirror descent (Alg. 3, a Gaussian release)
(../shared/seeds/003_17bffd62ba7ccf9f.txt, Sec. 4.2, 6, App. C.2, E).

Public parameters (the coordinator's): the source points x_1..x_m (each of norm
at most r, the clip radius), the current weights q (in the simplex), the
smoothing mu, a scale c (1 for F~^lambda; 4 Lambda^2 for Alg. 1's L_T), the
regularisation lambda, and optional offsets o_i with |o_i| <= B_o (Alg. 1's
public losses (w.x_i - y_i)^2). The site clips its records to ||x~|| <= r,
forms M_0 = (1/n) sum_j x~_j x~_j^T and M(q) = M_0 - sum_i q_i x_i x_i^T, and
releases one block of m scores, scaled by its (public) n:

    s_i = n (c [grad F~(q)]_i + lambda q_i + o_i),   [grad F~(q)]_i = -x_i^T G x_i,

G = dF~/dA at A = M(q) (``common/numerics/smoothed_spectral.py``). Scaling by n makes
the sensitivity a function of public parameters alone (as ``exact_discrepancy``
releases n d-hat); the coordinator divides by n.

Sensitivity, replace-one (the paper's adjacency; n fixed). Replacing x~ by x~'
moves M_0 by D = (x~' x~'^T - x~ x~^T) / n. A difference of two positive
semi-definite matrices of norms at most r^2 has its eigenvalues in [-r^2, r^2]
(-x~ x~^T <= D n <= x~' x~'^T), so ||D||_2 <= r^2 / n: half the paper's
2 r^2 / n (Thm. 2 uses the triangle inequality). f(A) = (1/mu) log Tr exp(mu A)
has a gradient that is mu-Lipschitz from the spectral to the trace norm
(the paper's "mu-smoothness of f", Thm. 2; Nesterov 2007), and diag(M, -M) moves
by the same ||D||_2, so (Hoelder, as Thm. 2)

    |delta [grad F~]_i| = |<delta grad f, diag(x_i x_i^T, -x_i x_i^T)>|
                        <= ||delta grad f||_(1) ||x_i||^2 <= mu ||x_i||^2 r^2 / n.

The terms lambda q_i and o_i are public constants. So score i moves by at most
c mu r^2 ||x_i||^2 (per candidate; the paper's 2 mu r^2 r-hat^2 / n after our
factor 2 and the n-scaling), and the vector by c mu r^2 sqrt(sum_i ||x_i||^4) in
L2 (each entry's bound, then the norm; the paper's sqrt(m) bound for Alg. 3 with
r-hat^2 in place of each ||x_i||^2).

Add/remove (n -> n' = n +- 1, public to the coordinator only after the fact,
so a bound must hold for both): M_0' - M_0 = (x~ x~^T - S/n) / (n + 1) when
adding x~ to a sample of sum S (the reverse for removing), a difference of
two PSD matrices of norms at most r^2, so again ||D||_2 <= r^2 / max(n, n').
Then n' g' - n g = max(n, n') (g' - g) + (n' - n) g for the larger side, with
|g| <= ||x_i||^2 (Cor. 1, part 4), and the public terms move by
|n' - n| (lambda q_i + |o_i|): per score c ||x_i||^2 (mu r^2 + 1) + lambda q_i + B_o.

Range checks (``from_wire``): every source point of norm at most r (the bounds
of the error analysis below use it), q >= 0 summing to 1 within 1e-9, mu in
(0, 2^20], c in (0, 2^20], lambda in [0, 2^20], |o_i| <= B_o <= 2^20, m at most
:data:`MAX_POINTS`. Nothing here reads the data to decide a refusal.

Floating point. The released value sits within a public bound of the exact
function of the clipped records (``computation_errors``): the Gram sum's proved
BLAS bound (``blocked_gram``) moved into G by at most mu d e_gram / n in trace
norm; the backward-stable ``eigh`` of M(q) (entries at most 2 r^2) perturbs
it by O(d u ||M||), moved into G by mu times that; forming G, the projections
and the dropped directions (``NEGLIGIBLE_WEIGHT``) add a few d u ||x||^2; the
public terms a few ulps.

The eigen-solver's share is checked, not assumed: from ``eigh``'s
own output the site proves (``smoothed_spectral.eigen_error_bound``, the
residual A V - V Lambda and the orthogonality defect V^T V - I, both by
error-free split products) that an exactly orthogonal Q within eta of V
diagonalises some A' within eps of A; then G(A') is within mu eps of G(A) in
trace norm (the mu-smoothness above) and V diag(s) V^T within 2 eta + eta^2
of G(A'), so each score's eigen error is at most ||x_i||^2 (mu eps + 2 eta +
eta^2) (times n c). The site checks that this fits the charged share
mu 2 r^2 2^-36 + 16 (d + 2) u per ||x_i||^2 (measured: at most about 0.6 of
it, the 2 eta part dominating at tiny r; the mu part at most ~1e-4 of its
share) and otherwise refuses and disables the kernel exactly as
``exact_discrepancy`` does (its docstring: one bit, once per site restart,
only where LAPACK broke its documented accuracy). The charge's term for the
projections and the weights' rounding was 16 (d + 2) u and stays so; the
certified orthogonality term is charged beside it (+16 (d + 2) u r^2 per
record, negligible next to the sensitivity c mu r^2 ||x_i||^2).

Timing (the question asked of ``exact_discrepancy``: is the work fixed by
public things?). The eigen check is one ``eigh`` and two proved products of
size d, whatever the data; it stops early only when V is too far from
orthogonal to bound (eta >= 1/2), and then the site refuses anyway, in
public words, with the kernel disabled (the refusal already says it). An
empty sample (n = 0, private under add/remove) used to return at once; it
now runs the same eigen work on M_0 = 0 and discards it. What remains: the
Gram sum's time is linear in n (as every kernel's), BLAS and LAPACK time
depends on values. The projections once kept only the eigen-directions of
non-negligible weight, so their product's width (m x d times the number
kept, with m up to 2^16 chosen by the coordinator) depended on the private
spectrum; they now project on all d and weigh the negligible ones 0
(``smoothed_spectral._vertex_gradient``; the same terms, so the same charge).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, MutableMapping
from typing import Any

import numpy as np

from privadapt.common.data.dataset import Dataset
from privadapt.common.errors import UncertifiedComputationError
from privadapt.common.kernels.base import (
    Kernel,
    KernelParams,
    check_bound,
    readonly,
    register,
    wire_values,
)
from privadapt.common.kernels.blocked_gram import BLOCK_RECORDS, gram, gram_error
from privadapt.common.mechanisms import Adjacency
from privadapt.common.numerics.geometry import clip_rows_to_norm
from privadapt.common.numerics.smoothed_spectral import (
    NEGLIGIBLE_WEIGHT,
    certified_vertex_gradient,
)
from privadapt.common.validation import check_finite_array, frozen_value

#: The most source points (candidates) one query may carry.
MAX_POINTS = 2**16
#: The largest mu, scale, lambda and offset bound a site accepts.
MAX_FACTOR = 2.0**20
#: How far q's sum may sit from 1, and a point's norm above r (float rounding).
SIMPLEX_SLACK = 1e-9
NORM_SLACK = 2.0**-40
#: The eigen solver's charged error relative to ||M||, checked (module docstring).
SOLVER_ERROR = 2.0**-36
_UNIT = 2.0**-53


def _check_factor(name: str, value: Any, *, zero_ok: bool) -> float:
    value = float(value)
    low_ok = value >= 0 if zero_ok else value > 0
    if not (math.isfinite(value) and low_ok and value <= MAX_FACTOR):
        interval = "[0" if zero_ok else "(0"
        raise ValueError(f"parameter {name!r} must be in {interval}, 2^20], got {value!r}")
    return value


@frozen_value(eq=False)
class SmoothedDiscrepancyGradientParams(KernelParams):
    """``feature_norm`` r; ``source_points`` (m, d), norms <= r; ``weights`` q
    (m,) in the simplex; ``mu``; ``scale`` c; ``regularization`` lambda;
    ``offsets`` (m,) or None, with ``offset_bound`` B_o >= max |o_i|."""

    feature_norm: float
    source_points: np.ndarray
    weights: np.ndarray
    mu: float
    scale: float = 1.0
    regularization: float = 0.0
    offsets: np.ndarray | None = None
    offset_bound: float = 0.0

    def __post_init__(self) -> None:
        radius = check_bound("parameter 'feature_norm'", self.feature_norm)
        self.feature_norm = radius
        points = check_finite_array("parameter 'source_points'", self.source_points,
                                    (None, None))
        if not 1 <= points.shape[0] <= MAX_POINTS or points.shape[1] < 1:
            raise ValueError(f"parameter 'source_points' must hold 1 to {MAX_POINTS} points "
                             f"of at least one feature, got shape {points.shape}")
        if float(np.max(np.linalg.norm(points, axis=1))) > radius * (1 + NORM_SLACK):
            raise ValueError("parameter 'source_points' has a point of norm above "
                             "feature_norm: clip the public source to the same radius")
        self.source_points = readonly(points)
        weights = check_finite_array("parameter 'weights'", self.weights, (points.shape[0],))
        if np.any(weights < 0) or abs(math.fsum(weights) - 1.0) > SIMPLEX_SLACK:
            raise ValueError("parameter 'weights' must lie in the simplex (>= 0, sum 1)")
        self.weights = readonly(weights)
        self.mu = _check_factor("mu", self.mu, zero_ok=False)
        self.scale = _check_factor("scale", self.scale, zero_ok=False)
        self.regularization = _check_factor("regularization", self.regularization, zero_ok=True)
        bound = _check_factor("offset_bound", self.offset_bound, zero_ok=True)
        self.offset_bound = bound
        if self.offsets is not None:
            offsets = check_finite_array("parameter 'offsets'", self.offsets,
                                         (points.shape[0],))
            if float(np.max(np.abs(offsets))) > bound:
                raise ValueError("parameter 'offsets' exceeds 'offset_bound'")
            self.offsets = readonly(offsets)

    @classmethod
    def from_wire(cls, params: Mapping[str, Any], dim: int
                  ) -> SmoothedDiscrepancyGradientParams:
        values = wire_values(params, ("feature_norm", "source_points", "weights", "mu"))
        optional = {key: params[key] for key in
                    ("scale", "regularization", "offsets", "offset_bound") if key in params}
        parsed = cls(**values, **optional)
        if parsed.source_points.shape[1] != dim:
            raise ValueError(f"parameter 'source_points' must have d = {dim} features, "
                             f"got shape {parsed.source_points.shape}")
        return parsed

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {
            "feature_norm": self.feature_norm, "source_points": self.source_points,
            "weights": self.weights, "mu": self.mu, "scale": self.scale,
            "regularization": self.regularization, "offset_bound": self.offset_bound}
        if self.offsets is not None:
            wire["offsets"] = self.offsets
        return wire

    @property
    def squared_norms(self) -> np.ndarray:
        """||x_i||^2 of every source point."""
        return np.einsum("ij,ij->i", self.source_points, self.source_points)


@register
class SmoothedDiscrepancyGradient(Kernel):
    """n (c grad F~(q) + lambda q + o) on the site's clipped M_0: one block (m,)."""

    name = "smoothed_discrepancy_gradient"
    Params = SmoothedDiscrepancyGradientParams
    certifies_own_error = True

    def work(self, params: SmoothedDiscrepancyGradientParams, dim: int,
             num_records: int) -> float:
        # Every record against every public source point.
        return float(num_records) * max(dim, 1) * params.source_points.shape[0]

    def output_shapes(self, params: SmoothedDiscrepancyGradientParams, dim: int
                      ) -> tuple[tuple[int, ...]]:
        return ((params.source_points.shape[0],),)

    def score_sensitivities(self, params: SmoothedDiscrepancyGradientParams,
                            adjacency: Adjacency, dim: int) -> tuple[float, ...]:
        # Module docstring, per source point.
        r2 = params.feature_norm**2
        norms = params.squared_norms
        if Adjacency(adjacency) == Adjacency.REPLACE_ONE:
            bounds = params.scale * params.mu * r2 * norms
        else:
            bounds = (params.scale * norms * (params.mu * r2 + 1.0)
                      + params.regularization * params.weights + params.offset_bound)
        return tuple(math.nextafter(float(b), math.inf) for b in bounds)

    def l2_sensitivities(self, params: SmoothedDiscrepancyGradientParams,
                         adjacency: Adjacency) -> tuple[float]:
        per_score = self.score_sensitivities(params, adjacency, params.source_points.shape[1])
        return (math.nextafter(math.sqrt(math.fsum(s * s for s in per_score)), math.inf),)

    def max_abs_sum(self, params: SmoothedDiscrepancyGradientParams, num_records: int) -> float:
        # |grad_i| <= ||x_i||^2 <= r^2 (Cor. 1, part 4), q_i <= 1.
        per_record = (params.scale * params.feature_norm**2 * (1 + NORM_SLACK) ** 2
                      + params.regularization + params.offset_bound)
        return num_records * per_record

    def computation_errors(self, params: SmoothedDiscrepancyGradientParams, dim: int,
                           max_records: int) -> tuple[float]:
        # Module docstring. Scores are n times a per-record-free quantity, n <= N.
        r2 = params.feature_norm**2 * (1 + NORM_SLACK) ** 2
        mu, scale, records = params.mu, params.scale, max(1, int(max_records))
        gram_part = scale * mu * r2 * dim * gram_error(records, r2)  # n cancels
        solver = records * scale * r2 * (self.eigen_allowance(params, dim)
                                          + mu * 2.0 * r2 * 16 * (dim + 2) * _UNIT
                                          + dim * NEGLIGIBLE_WEIGHT + 16 * (dim + 2) * _UNIT)
        public = 8 * _UNIT * self.max_abs_sum(params, records)
        return (gram_part + solver + public,)

    @staticmethod
    def eigen_allowance(params: SmoothedDiscrepancyGradientParams, dim: int) -> float:
        """The eigen-solver's charged error per unit ||x_i||^2 and per record
        scaling: what the certificate must fit (module docstring)."""
        r2 = params.feature_norm**2 * (1 + NORM_SLACK) ** 2
        return params.mu * 2.0 * r2 * SOLVER_ERROR + 16 * (dim + 2) * _UNIT

    def compute(self, data: Dataset, params: SmoothedDiscrepancyGradientParams,
                state: MutableMapping[str, Any]) -> tuple[np.ndarray]:
        num = data.num_records
        # At least one block, empty for an empty sample: skipping the block's
        # clipping and product made the empty site's reply 25 us faster than
        # its one-record neighbour's (benchmarks/certificate_timing.py).
        blocks = (clip_rows_to_norm(data.features[start:start + BLOCK_RECORDS],
                                    params.feature_norm)
                  for start in range(0, max(num, 1), BLOCK_RECORDS))
        # An empty sample's M_0 is taken as 0: the eigen work runs all the
        # same (n is private under add/remove: an early return would time it),
        # and its result, times n = 0, is discarded below.
        target = gram(blocks, data.dim) / max(num, 1)
        points = params.source_points
        matrix = target - points.T @ (params.weights[:, None] * points)
        _, gradient, error = certified_vertex_gradient(points, 0.5 * (matrix + matrix.T),
                                                       params.mu)
        if num == 0:
            return (np.zeros(points.shape[0]),)
        allowance = self.eigen_allowance(params, data.dim)
        if not error <= allowance:
            # Never released: the site refuses in public words (module docstring).
            raise UncertifiedComputationError(
                f"smoothed_discrepancy_gradient: the certified eigen error {error:.3g} "
                f"exceeds the charged {allowance:.3g}")
        public = params.regularization * params.weights
        if params.offsets is not None:
            public = public + params.offsets
        return (num * (params.scale * gradient + public),)
