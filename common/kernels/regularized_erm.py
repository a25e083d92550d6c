"""Regularized ERM solved at the site: the statistic of output perturbation
(seed 004, ../shared/seeds/004_2b354816f00c2aef.txt, the "output perturbation"
learner of Section 1 and Appendix D.3, after Chaudhuri, Monteleoni and
Sarwate 2011, in its sum form over sites).

The site clips every record, x_i -> x_i min(1, r / ||x_i||) (``clip_norm`` r)
and y_i -> max(-Y, min(Y, y_i)) (``label_bound`` Y), and releases (one block of
shape (d,)) an approximate minimiser over the ball C = {||w|| <= R}
(``radius``) of

    F_D(w) = sum_i l(w; x_i, y_i) + (lambda / 2) ||w||^2

(``regularization`` lambda, public), l the squared loss (w.x - y)^2 or the
logistic loss log(1 + exp(-y w.x)) (:mod:`privadapt.common.losses`). On C and
the clipped records l is convex and C^2, G-Lipschitz in w with G = 2 r (R r + Y)
(squared) or r Y (logistic) and beta_l-smooth with beta_l = 2 r^2 or
r^2 Y^2 / 4 (:func:`~privadapt.common.losses.loss_bounds`, ``loss_smoothness``).

Sensitivity of the exact minimiser (derivation). F_D is lambda-strongly convex,
so its minimiser w_D over the convex set C satisfies, for every w in C,

    F_D(w) >= F_D(w_D) + (lambda / 2) ||w - w_D||^2          (*)

(first-order optimality over C plus strong convexity). Let D' be a
neighbour and g = F_D' - F_D, a function of w only.
* Replace one record z by z': g(w) = l(w; z') - l(w; z) is 2G-Lipschitz on C.
  Apply (*) to F_D at w_D' and to F_D' at w_D and add:
  g(w_D) - g(w_D') >= lambda ||w_D - w_D'||^2, while the left side is at most
  2G ||w_D - w_D'||. So ||w_D - w_D'|| <= 2G / lambda.
* Add or remove one record: g = +-l(.; z), G-Lipschitz: ||w_D - w_D'|| <= G / lambda.
The bound holds for any n (the sum form: the regulariser does not scale with
n, so neither does the sensitivity) and any records (it comes from the clip).

The solver and its certified tolerance. The site cannot release w_D exactly;
it runs exactly T (``iterations``, public: the running time is then a
function of n and the public parameters only) steps of projected gradient
descent from w_0 = 0 with step eta = 1 / beta_n, beta_n = n beta_l + lambda:
w_{t+1} = P_C(w_t - eta grad F_D(w_t)). Since F_D is C^2 with Hessian
eigenvalues in [lambda, beta_n], the gradient step's Jacobian
I - eta Hess has eigenvalues in [0, 1 - lambda / beta_n], so it contracts
by q_n = 1 - lambda / beta_n; the projection is non-expansive and w_D is its
fixed point. So ||w_t - w_D|| <= q_n^t ||w_0 - w_D|| <= q_n^t R. In floating
point each step also errs by the computed gradient's error delta_g (times
eta) and the update's and projection's own rounding delta_p, and the error
obeys e_{t+1} <= q_n e_t + eta delta_g + delta_p, so

    ||w_T - w_D|| <= b := q_N^T R + delta_g / lambda + delta_p beta_N / lambda,

at every site of n <= N records (q_n, beta_n grow with n; N the site's public
bound on its records: n itself under replace-one). :func:`solver_error`
computes b, the float terms doubled for margin: delta_g from Higham's bound
on the blocked BLAS sum (:mod:`.blocked_gram`) plus each record's own
rounding of its margin and derivative, delta_p from a few ulps of the
update's magnitude. Then for neighbours D, D' the released values satisfy

    ||w_T(D) - w_T(D')|| <= ||w_D - w_D'|| + 2 b,

and the site charges exactly that (:meth:`RegularizedERM.charged_sensitivities`:
the sensitivity plus twice the certified tolerance, then the fixed-point
grid's rounding as every kernel). (The Frank-Wolfe gap would certify a data-
dependent tolerance, sqrt(2 g / lambda); a fixed T and the a priori bound make
the charge public and the running time data-independent instead.)

Safe ranges, refused before any record is read (``from_wire`` and the
charge, both functions of the public parameters and N): every bound in
[2^-200, 2^200] with finite products, T in [1, :data:`MAX_ITERATIONS`], T N d
at most :data:`MAX_WORK` multiply-adds, and the tolerance b at most
:data:`MAX_TOLERANCE_SHARE` of G / lambda (otherwise the iterations are too
few for N records: :func:`iterations_for` gives enough).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, MutableMapping
from typing import Any

import numpy as np

from privadapt.common.data.dataset import Dataset
from privadapt.common.kernels.base import (
    Kernel,
    KernelParams,
    check_bound,
    register,
    wire_values,
)
from privadapt.common.kernels.blocked_gram import BLOCK_RECORDS, gram_error, weighted_rows
from privadapt.common.kernels.exact_sum import FLOAT_UNIT_ROUNDOFF
from privadapt.common.kernels.grid_rounding import Norm, rounding_charged
from privadapt.common.losses import BINARY_LOSSES, BinaryLoss, loss_bounds, loss_smoothness
from privadapt.common.losses import loss_derivative as margin_derivative
from privadapt.common.mechanisms import Adjacency
from privadapt.common.numerics.geometry import clip_rows_to_norm, project_to_ball, record_products
from privadapt.common.validation import check_one_of, frozen_value

#: The most solver steps a query may ask for (the site's time grows with T).
MAX_ITERATIONS = 100_000
#: The most multiply-adds (T N d) one query may cost a site.
MAX_WORK = 2**36
#: The largest certified tolerance b, as a share of G / lambda: above it the
#: solver's error, not the data, would set the noise.
MAX_TOLERANCE_SHARE = 0.5
# Products of bounds stay far inside float range (R r, G, beta_l, G / lambda).
_PRODUCT_LIMIT = 2.0**300
_U = FLOAT_UNIT_ROUNDOFF


@frozen_value
class RegularizedERMParams(KernelParams):
    """``loss`` in {"squared", "logistic"}, ``regularization`` lambda,
    ``radius`` R, ``clip_norm`` r, ``label_bound`` Y and ``iterations`` T
    (module docstring)."""

    loss: BinaryLoss
    regularization: float
    radius: float
    clip_norm: float
    label_bound: float
    iterations: int

    def __post_init__(self) -> None:
        check_one_of("parameter 'loss'", self.loss, BINARY_LOSSES)
        for name in ("regularization", "radius", "clip_norm", "label_bound"):
            setattr(self, name, check_bound(f"parameter {name!r}", getattr(self, name)))
        steps = self.iterations
        if isinstance(steps, bool) or not isinstance(steps, int | np.integer) \
                or not 1 <= steps <= MAX_ITERATIONS:
            raise ValueError(f"parameter 'iterations' must be an integer in "
                             f"[1, {MAX_ITERATIONS}], got {steps!r}")
        self.iterations = int(steps)
        lipschitz, smoothness = self.lipschitz, self.smoothness
        for name, value in (("R r", self.radius * self.clip_norm), ("G", lipschitz),
                            ("beta_l", smoothness), ("G / lambda", self.sensitivity_unit),
                            ("G / beta_l", lipschitz / smoothness)):
            if not (math.isfinite(value) and 0 < value <= _PRODUCT_LIMIT):
                raise ValueError(f"the parameters make {name} = {value!r}, outside "
                                 f"(0, 2^300]: choose bounds of moderate size")

    @classmethod
    def from_wire(cls, params: Mapping[str, Any], dim: int) -> RegularizedERMParams:
        values = wire_values(params, ("loss", "regularization", "radius", "clip_norm",
                                      "label_bound", "iterations"))
        return cls(**values)

    def to_wire(self) -> dict[str, Any]:
        return {"loss": self.loss, "regularization": self.regularization,
                "radius": self.radius, "clip_norm": self.clip_norm,
                "label_bound": self.label_bound, "iterations": self.iterations}

    @property
    def lipschitz(self) -> float:
        """G: the per-record loss's Lipschitz constant in w on C."""
        return loss_bounds(self.loss, self.clip_norm, self.label_bound, self.radius)[1]

    @property
    def smoothness(self) -> float:
        """beta_l: the per-record loss's smoothness in w."""
        return loss_smoothness(self.loss, self.clip_norm, self.label_bound)

    @property
    def sensitivity_unit(self) -> float:
        """G / lambda: the exact minimiser's add/remove sensitivity."""
        return self.lipschitz / self.regularization


def solver_error(params: RegularizedERMParams, dim: int, max_records: int) -> float:
    """b: a public bound on ||w_T - w_D|| at any site of at most
    ``max_records`` records (module docstring); ``ValueError`` when the query
    is outside the safe ranges there (too much work, or too few iterations)."""
    records = max(1, int(max_records))
    steps, lam = params.iterations, params.regularization
    if steps * records * max(dim, 1) > MAX_WORK:
        raise ValueError(f"{steps} iterations over up to {records} records of {dim} features "
                         f"exceed the {MAX_WORK:.3g} multiply-adds a site runs for one query")
    lipschitz, smooth = params.lipschitz, params.smoothness
    beta = records * smooth + lam
    contraction = steps * math.log1p(-lam / beta) if lam < beta else -math.inf
    # Rounded upwards: lam / beta, log1p and the
    # product with T are each within an ulp or two, so the computed exponent
    # (<= 0) is within 8u of the true one relative to it; shrinking it by 8u
    # and inflating exp's and the radius product's rounding by 8u keeps the
    # bound at or above the exact R (1 - lambda / beta)^T.
    converged = params.radius * math.exp(contraction * (1 - 8 * _U)) * (1 + 8 * _U)
    # The computed gradient: each record's margin w.x within gamma_d R r (R
    # inflated for the projection's own rounding), its derivative within the
    # margin's error times l'' (2, or Y^2 / 4) plus a few ulps of |l'|, the
    # product with x within a few ulps of G; then the blocked BLAS sum.
    reach = params.radius * (1 + 2.0**-30) * params.clip_norm
    second = 2.0 if params.loss == "squared" else params.label_bound**2 / 4
    largest = lipschitz / params.clip_norm  # max |l'| on C
    margin_error = (dim + 2) * _U * reach * 1.01
    per_record = params.clip_norm * (second * margin_error + 8 * _U * largest) \
        + 8 * _U * lipschitz
    gradient_error = (records * per_record
                      + math.sqrt(dim) * gram_error(records, lipschitz * (1 + 2.0**-30))
                      + 4 * _U * lam * params.radius)
    # The update w - eta g and the projection: eta ||grad F|| <= max(G / beta_l, R).
    update_error = 2 * (dim + 16) * _U * (2 * params.radius + lipschitz / smooth)
    floating = 2 * (gradient_error / lam + update_error * beta / lam)
    bound = math.nextafter(converged + floating, math.inf)
    if not bound <= MAX_TOLERANCE_SHARE * params.sensitivity_unit:
        raise ValueError(
            f"{steps} iterations certify only ||w_T - w*|| <= {bound:.3g} at up to {records} "
            f"records, more than {MAX_TOLERANCE_SHARE:g} G / lambda = "
            f"{MAX_TOLERANCE_SHARE * params.sensitivity_unit:.3g}; ask for at least "
            f"{iterations_for(params, dim, records)} iterations (iterations_for)")
    return bound


def iterations_for(params: RegularizedERMParams, dim: int, max_records: int,
                   share: float = 0.01) -> int:
    """The least T whose convergence term q_N^T R is at most ``share`` G / lambda
    (the float terms come on top; capped at :data:`MAX_ITERATIONS`): what an
    algorithm asks for, so the tolerance adds about 2 ``share`` to the charge."""
    lam = params.regularization
    beta = max(1, int(max_records)) * params.smoothness + lam
    target = share * params.sensitivity_unit
    if params.radius <= target:
        return 1
    steps = math.log(target / params.radius) / math.log1p(-lam / beta)
    return int(min(MAX_ITERATIONS, math.ceil(steps)))


def clipped_records(data: Dataset, params: RegularizedERMParams
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Features scaled to norm at most r and labels clipped to [-Y, Y]; a
    non-finite entry makes its record all zeros (never a refusal, which would
    depend on the data)."""
    features = np.asarray(data.features, dtype=np.float64)
    labels = np.asarray(data.labels, dtype=np.float64)
    finite = np.all(np.isfinite(features), axis=1) & np.isfinite(labels)
    features = clip_rows_to_norm(np.where(finite[:, None], features, 0.0), params.clip_norm)
    labels = np.clip(np.where(finite, labels, 0.0), -params.label_bound, params.label_bound)
    return features, labels


@register
class RegularizedERM(Kernel):
    """An approximate minimiser of the regularised empirical risk over the
    ball, one block of shape (d,) (module docstring)."""

    name = "regularized_erm"
    Params = RegularizedERMParams

    def work(self, params: RegularizedERMParams, dim: int, num_records: int) -> float:
        # T full-gradient steps over n records of d features (MAX_WORK caps
        # the same product for every site; a policy may cap it lower).
        return float(params.iterations) * max(1, num_records) * max(dim, 1)

    def output_shapes(self, params: RegularizedERMParams, dim: int) -> tuple[tuple[int, ...]]:
        return ((dim,),)

    def l2_sensitivities(self, params: RegularizedERMParams, adjacency: Adjacency
                         ) -> tuple[float]:
        # The exact minimiser's (module docstring); the solver's tolerance is charged on top.
        unit = params.sensitivity_unit
        return (2.0 * unit if adjacency == Adjacency.REPLACE_ONE else unit,)

    def clip_bounds(self, params: RegularizedERMParams) -> dict[str, float]:
        return {"clip_norm": params.clip_norm, "label_bound": params.label_bound}

    def max_abs_sum(self, params: RegularizedERMParams, num_records: int) -> float:
        # The release is a point of the ball (up to the projection's few ulps).
        return params.radius * (1.0 + 2.0**-30)

    def computation_errors(self, params: RegularizedERMParams, dim: int, max_records: int
                           ) -> tuple[float]:
        return (0.0,)  # all of it is in the certified tolerance (charged_sensitivities)

    def charged_sensitivities(
        self, params: RegularizedERMParams, adjacency: Adjacency, norm: Norm, dim: int,
        fractional_bits: int, max_records: int = 1,
    ) -> tuple[float, ...]:
        """The exact minimiser's sensitivity plus twice the solver's certified
        tolerance b at ``max_records`` records (L2; sqrt(d) times that in L1),
        then the grid's rounding; ``ValueError`` outside the safe ranges."""
        tolerance = 2.0 * solver_error(params, dim, max_records)
        if norm == "l1":
            tolerance *= math.sqrt(dim)
        own = tuple(math.nextafter(s + tolerance, math.inf)
                    for s in self.sensitivities(params, adjacency, norm, dim))
        return rounding_charged(own, self.output_shapes(params, dim), norm, fractional_bits,
                                self.computation_errors(params, dim, max_records))

    def compute(self, data: Dataset, params: RegularizedERMParams,
                state: MutableMapping[str, Any]) -> tuple[np.ndarray]:
        """Exactly T projected gradient steps from 0 at step 1 / beta_n."""
        features, labels = clipped_records(data, params)
        lam, radius = params.regularization, params.radius
        step = 1.0 / (data.num_records * params.smoothness + lam)
        weights = np.zeros(data.dim)
        for _ in range(params.iterations):
            gradient = self._loss_gradient(features, labels, weights, params) + lam * weights
            weights = project_to_ball(weights - step * gradient, radius)
        return (weights,)

    @staticmethod
    def _loss_gradient(features: np.ndarray, labels: np.ndarray, weights: np.ndarray,
                       params: RegularizedERMParams) -> np.ndarray:
        """sum_i l'(w.x_i; y_i) x_i over the clipped records, by blocks (blocked_gram)."""
        def blocks():  # each record's margin from its own row only (record_products)
            for start in range(0, len(labels), BLOCK_RECORDS):
                rows = features[start:start + BLOCK_RECORDS]
                margins = record_products(rows, weights)
                yield rows, margin_derivative(params.loss, margins,
                                              labels[start:start + BLOCK_RECORDS])
        return weighted_rows(blocks(), features.shape[1])
