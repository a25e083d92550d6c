"""The paper's exact empirical discrepancy, computed at the one site that holds
the whole private sample (seed 000, Section 4, "Discrepancy estimates", eq. (2)).

For the squared loss l(w; x, y) = (w.x - y)^2 = v^T z z^T v with z = [x, y] and
v = [w, -1], a mean loss is a quadratic form in the second moments
M = (1/N) sum z z^T, so the discrepancy estimate (2)

    d-hat = sup_{||w|| <= Lambda} | (1/m) sum_pub l(w; x_i, y_i) - (1/n) sum_priv l(w; x_i, y_i) |
          = sup_{||w|| <= Lambda} | v^T (M_pub - M_priv) v |

is the larger of two trust-region subproblems (both signs), solved exactly by
:func:`privadapt.common.numerics.trust_region.maximize_quadratic_on_ball`
(:func:`privadapt.common.losses.squared_loss_discrepancy`).

The kernel releases the *sum-scaled* statistic n d-hat = sup_w |v^T (n M_pub -
sum_priv z z^T) v|, so that, like every kernel, its sensitivity is a function of
the public parameters alone (the coordinator divides by the public n).

Sensitivity (derivation). The site clips every record to ||x|| <= r and
|y| <= Y, so for every w in the ball each record's loss lies in [0, B],
B = (Lambda r + Y)^2, since |w.x - y| <= Lambda r + Y. Write
f(w) = n p(w) - sum_priv l_i(w), with p(w) = v^T M_pub v the public mean loss,
so the release is sup_w |f(w)|, and sup_w |f| moves by at most sup_w |f' - f|.
* Replace one record (n fixed): f' - f = l_old(w) - l_new(w) in [-B, B], so
  the release moves by at most B, whatever the public moments and the data.
* Add or remove one record (n -> n +- 1): f' - f = +-(p(w) - l(w)), and with
  p(w) in [p_lo, p_hi] over the ball (computed exactly from the public moments)
  and l(w) in [0, B], |p - l| <= max(|p_lo|, |p_hi|, |p_lo - B|, |p_hi - B|);
  for honest public moments (clipped the same way) p is in [0, B] and this is B.
The release is one number, so its L1 and L2 sensitivities are equal.

Public moments and floating point. A coordinator could send
moments of size 2^28/n, so that n M_pub dwarfs the data and one ulp of it
(3e-8) is 89 times B: the solver's rounding then told neighbours apart. The
kernel therefore accepts only moments that clipped records can have (their
symmetric part positive semi-definite, the feature block's trace at most r^2,
the label entry at most Y^2, each to within 2^-30 s, s = r^2 + Y^2), so every
entry of n M_pub - sum z z^T is at most about 2 n s; the private sum is exact
(the second-moment kernel's); and the solver's error, a public bound
proportional to (Lambda^2 + Lambda + 1) N s at a site of at most N records
(:meth:`ExactDiscrepancy.computation_errors`), is charged on top of B.

The solver's error is a checked fact, not a margin: after the trust-region
solve the site computes a proved bracket [L, U] of the exact supremum for the
float matrix D it formed (:mod:`privadapt.common.numerics.certified_quadratic`:
feasible points' values, rounding-bounded, below; a Lagrangian dual bound
with a Cholesky-verified multiplier above), releases the solver's value
clamped into it (so its error is at most U - L whatever the solver did), and
checks U - L <= the solver part of the charge, computed with its own n (at
most the public N the charge uses, so the check is stricter than the charge).
The rest of the charge covers forming D and the records' float z z^T, both
bounded a priori below.

[L, U] is the intersection of the brackets of every attempt the certificate
makes (it runs them all, below), so which attempt gives which side depends on
the data. That does not touch the argument: every attempt's bracket holds the
exact supremum v* (each is proved), so the intersection does; the release
lies in it, so |release - v*| <= U - L <= the checked allowance <= the
charged solver share, whichever brackets made it. On neighbours the releases
then differ by at most |v*(D) - v*(D')| + the two errors, within the
sensitivity plus twice the charged computation error, as before.

The solver part is (Lambda^2 + Lambda + 1) (2 + 2^-30) N s times
min(2^-36, 256 (d + 9) u): the former margin, or less for d < 503. Why the
certificate fits it with room: D is a difference of two PSD matrices of
traces at most n s (1 + 2^-30), so || |D| ||_2 <= about 2 n s (|D_ij| <=
n (p_i p_j + q_i q_j), p_i^2 = M_pub,ii, q_i^2 = S_ii / n), and every term of
the bracket's width is a small multiple of m u times that on the ball (the
evaluation's gamma_m |v|^T |D| |v|, the shift's 16 u (mu + max|a|) Lambda^2,
the residual's terms; module docstring of certified_quadratic). Measured on
the adversarial inputs of the tests (hard and near-hard cases, tied and
clustered top eigenvalues, Lambda from 1e-3 to 1e3, d = 3 to 500), the width
released (the whole schedule's intersection) is at most 0.017 of this charge;
fuzzing found a corner at about 0.25 of it (A near 0
with a tiny r and Lambda, where the width-sized shift takes a quarter of the
allowance by design), still inside it (formerly the first shift that fitted
was kept: up to 0.42 of it, a near-hard case where the eigen-solver's mu is
off by ~1e-11 relative). A smaller charged error is a direct utility gain: for
d = 3 it is 330 times smaller than 2^-36, which matters where the charge is
not negligible against B (a small r against Y with a large Lambda: reach / B ~
2 N Lambda^2 s / Y^2).

When the bracket does not fit. The certificate is proved under the
floating-point model alone (IEEE double, round to nearest, the classical BLAS
error bound of blocked_gram.py); the certificate tries a fixed schedule of
shifts, then a second solve without the eigen-solver (Newton on the secular
equation with Cholesky factors), so it fits unless LAPACK's Cholesky (or the
BLAS) broke its own accuracy or the model itself. Releasing would then
under-charge, and refusing is itself a release that depends on the data;
the least bad course is to refuse in words that depend on
nothing private, raising
:class:`privadapt.common.errors.UncertifiedComputationError`, on which the
site disables this kernel until its operator restarts it (client/site.py):
a coordinator learns at most one bit, once per site restart, and only on an
input where a numerical library broke its documented accuracy. Nothing is
charged for the refused query (charging would not make the bit private), and
the site's log records the width and the charge for its operator. The
residual assumption is thus "the floating-point model holds", in place of
"eigh meets 2^-36".

Timing. The coordinator sees how long a site takes to
answer, and the charge covers only the released value, so the certificate's
work must not depend on the records. It once stopped at the first shift that
fitted and re-solved only when none did: on replace-one neighbours under
coordinator-chosen moments the re-solve ran on one and not the other (1.80
ms against 0.63 ms of ``compute``). Now every attempt runs on every query:
all shifts, the sized shift and the re-solve, with fixed counts of
factorisations and a failed factorisation running the same work on a
stand-in (certified_quadratic's docstring, "Fixed work", which also names
what remains: LAPACK's and the BLAS's value-dependent time, potrf stopping
at a failing pivot, the trust-region solver's own case analysis and Brent
iterations). The records' exact moment sum takes time linear in n, as every
kernel's work does. tests/client/test_certificate_fixed_work.py checks the
sequence of operations on neighbours.

The paper adds Laplace(B/n) to d-hat (the coordinator's ``single_holder``
estimate asks for Laplace(B / epsilon) on n d-hat); the site draws it through
its own Laplace mechanism path.
"""

from __future__ import annotations

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
from privadapt.common.kernels.second_moments import (
    SecondMoments,
    SecondMomentsParams,
    exact_moment_sum,
)
from privadapt.common.losses import loss_bounds, squared_loss_range
from privadapt.common.mechanisms import Adjacency
from privadapt.common.numerics.certified_quadratic import certified_discrepancy
from privadapt.common.validation import check_finite_array, frozen_value

_SECOND_MOMENTS = SecondMoments()
# Public moments may exceed what clipped records give by this fraction of s
# (float rounding of honest moments).
MOMENT_SLACK = 2.0**-30
# The trust-region solve's charged error, relative to the problem's reach on
# the ball: the former margin 2^-36, or CERTIFIED_ULPS (d + 9) u where that is
# smaller (d < 503), which the certificate fits with room (module docstring).
SOLVER_ERROR = 2.0**-36
CERTIFIED_ULPS = 256


@frozen_value(eq=False)
class ExactDiscrepancyParams(KernelParams):
    """``feature_norm`` r, ``label_bound`` Y, ``radius`` Lambda and
    ``public_moments`` (d+1) x (d+1), the public M_pub normalised by m."""

    feature_norm: float
    label_bound: float
    radius: float
    public_moments: np.ndarray

    def __post_init__(self) -> None:
        for key in ("feature_norm", "label_bound", "radius"):
            setattr(self, key, check_bound(f"parameter {key!r}", getattr(self, key)))
        moments = check_finite_array("parameter 'public_moments'", self.public_moments,
                                     (None, None))
        if moments.shape[0] != moments.shape[1] or moments.shape[0] < 2:
            raise ValueError(f"parameter 'public_moments' must be a square matrix of size "
                             f"d + 1 >= 2, got shape {moments.shape}")
        with np.errstate(over="ignore", invalid="ignore"):
            symmetric = 0.5 * moments + 0.5 * moments.T  # what the kernel reads
        if not self._clipped_moments(symmetric):
            raise ValueError(
                "parameter 'public_moments' must be second moments of records clipped to "
                "||x|| <= feature_norm, |y| <= label_bound: a symmetric part that is positive "
                "semi-definite, with the feature block's trace at most feature_norm^2 and the "
                "label entry at most label_bound^2")
        self.public_moments = readonly(symmetric)

    def _clipped_moments(self, symmetric: np.ndarray) -> bool:
        """Whether ``symmetric`` could be the mean z z^T of clipped records,
        to within 2^-30 s (the float rounding of honest moments)."""
        if not np.all(np.isfinite(symmetric)):
            return False
        slack = MOMENT_SLACK * self.record_bound
        with np.errstate(over="ignore", invalid="ignore"):
            trace = float(np.trace(symmetric[:-1, :-1]))
        return (trace <= self.feature_norm**2 + slack
                and float(symmetric[-1, -1]) <= self.label_bound**2 + slack
                and float(np.linalg.eigvalsh(symmetric)[0]) >= -slack)

    @classmethod
    def from_wire(cls, params: Mapping[str, Any], dim: int) -> ExactDiscrepancyParams:
        values = wire_values(params, ("feature_norm", "label_bound", "radius", "public_moments"))
        moments = values["public_moments"]
        if not isinstance(moments, np.ndarray) or moments.shape != (dim + 1, dim + 1):
            raise ValueError(
                f"parameter 'public_moments' must be an array of shape ({dim + 1}, {dim + 1}), "
                f"got {getattr(moments, 'shape', type(moments).__name__)}"
            )
        return cls(**values)

    def to_wire(self) -> dict[str, Any]:
        return {"feature_norm": self.feature_norm, "label_bound": self.label_bound,
                "radius": self.radius, "public_moments": self.public_moments}

    @property
    def clipping(self) -> SecondMomentsParams:
        """The clip region, as the second-moment kernel takes it."""
        return SecondMomentsParams(self.feature_norm, self.label_bound)

    @property
    def record_bound(self) -> float:
        """s = r^2 + Y^2 >= ||z||^2 of a clipped record."""
        return self.feature_norm**2 + self.label_bound**2

    @property
    def loss_bound(self) -> float:
        """B = (Lambda r + Y)^2, the largest squared loss of a clipped record."""
        return loss_bounds("squared", self.feature_norm, self.label_bound, self.radius)[0]

    @property
    def public_range(self) -> tuple[float, float]:
        """(p_lo, p_hi): the public mean loss's range over the ball."""
        return squared_loss_range(self.public_moments, self.radius)


@register
class ExactDiscrepancy(Kernel):
    """n d-hat: the sum-scaled exact discrepancy between the public moments and
    this site's clipped records."""

    name = "exact_discrepancy"
    Params = ExactDiscrepancyParams
    certifies_own_error = True

    def work(self, params: ExactDiscrepancyParams, dim: int, num_records: int) -> float:
        # The records' second moments, then one eigen-decomposition of size
        # d + 1. The moment sum here ran at about an eighth of a multiply-add's
        # rate (0.32 s of CPU at n = 43,000, d = 16, against 2.7e8 a second for
        # regularized_erm), so each of its n (d + 1)^2 terms counts 8.
        size = params.public_moments.shape[0]
        return 8.0 * num_records * size * size + 10.0 * size**3

    def output_shapes(self, params: ExactDiscrepancyParams, dim: int) -> tuple[tuple[int, ...]]:
        return ((1,),)

    def l2_sensitivities(
        self, params: ExactDiscrepancyParams, adjacency: Adjacency
    ) -> tuple[float]:
        bound = params.loss_bound
        if adjacency == Adjacency.REPLACE_ONE:
            return (bound,)
        low, high = params.public_range
        return (max(abs(low), abs(high), abs(low - bound), abs(high - bound)),)

    def clip_bounds(self, params: ExactDiscrepancyParams) -> dict[str, float]:
        return _SECOND_MOMENTS.clip_bounds(params.clipping)

    def computation_errors(
        self, params: ExactDiscrepancyParams, dim: int, max_records: int
    ) -> tuple[float]:
        # D = n M_pub - S has entries at most (1 + 2^-30) N s + N s: forming it
        # moves each entry by a few ulps of that (|v^T E v| <= max|E| (d + 1)
        # ||v||^2, within the 16 (d + 2) u term), the trust-region solve by at
        # most its certified share (``solver_allowance``, checked at compute),
        # and a record's own float z z^T moves its loss by ulps of
        # (Lambda^2 + 1) s. Public: N is the site's public bound on n.
        ulp = 2.0**-53
        reach = self._reach(params, max_records)
        own_terms = (params.radius**2 + 1.0) * params.record_bound * 2.0**-40
        error = self.solver_allowance(params, dim, max_records) \
            + reach * 16 * (dim + 2) * ulp + own_terms
        return (error,)

    @staticmethod
    def _reach(params: ExactDiscrepancyParams, num_records: int) -> float:
        """(Lambda^2 + Lambda + 1) times the entry bound (2 + 2^-30) n s of D."""
        entry = (2.0 + MOMENT_SLACK) * num_records * params.record_bound
        radius = params.radius
        return (radius * radius + radius + 1.0) * entry

    def solver_allowance(
        self, params: ExactDiscrepancyParams, dim: int, num_records: int
    ) -> float:
        """The trust-region solve's share of the charged error at a site of
        ``num_records`` records: the width its certificate must fit in."""
        relative = min(SOLVER_ERROR, CERTIFIED_ULPS * (dim + 9) * 2.0**-53)
        return self._reach(params, num_records) * relative

    def max_abs_sum(self, params: ExactDiscrepancyParams, num_records: int) -> float:
        # |n p(w) - sum l_i(w)| <= n max|p| + n B
        low, high = params.public_range
        return num_records * (max(abs(low), abs(high)) + params.loss_bound)

    def compute(
        self, data: Dataset, params: ExactDiscrepancyParams, state: MutableMapping[str, Any]
    ) -> tuple[np.ndarray]:
        # The same clipping as the Gaussian route's kernel, summed exactly: a
        # float error here would be amplified by the coordinator's radius.
        private_sum = exact_moment_sum(data, params.clipping)
        difference = data.num_records * params.public_moments - private_sum
        # Symmetric by construction; made so explicitly (a no-op then), since
        # the certificate refuses anything else and that must never happen here.
        difference = 0.5 * (difference + difference.T)
        # At least one record's allowance: with none, D = 0 and the value is
        # exactly 0, but an allowance of 0 fits no bracket
        # (an empty site refused where its one-record neighbour answered). The
        # charge uses the public bound N >= max(n, 1), so this stays within it.
        allowance = self.solver_allowance(params, data.dim, max(data.num_records, 1))
        value, error = certified_discrepancy(difference, params.radius, allowance)
        if not error <= allowance:
            # Never released: the site refuses in public words (module docstring).
            raise UncertifiedComputationError(
                f"exact_discrepancy: the certified error {error:.3g} exceeds the charged "
                f"solver error {allowance:.3g}")
        return (np.array([value]),)
