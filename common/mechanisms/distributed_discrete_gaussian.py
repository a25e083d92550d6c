"""The distributed discrete Gaussian: exact integer Gaussian-like noise on the
fixed-point grid, shared among the sites of a secure sum (Kairouz, Liu and
Steinke, "The Distributed Discrete Gaussian Mechanism for Federated Learning
with Secure Aggregation", ICML 2021, arXiv 2102.06387).

Why: the float Gaussian of :class:`~privadapt.common.mechanisms.gaussian.GaussianMechanism`
leaves a gap of about 2^-100 in its tails, and continuous Gaussian shares
sum to a Gaussian only in exact arithmetic. Here every site adds an exact
discrete Gaussian N_Z(0, s^2) of integer grid steps 2^-f
(:func:`privadapt.common.noise.discrete.discrete_gaussian`, CKS 2020), so its
``codec.encode(share)`` is exact and the release is round(value 2^f) plus the
sum of the shares.

Shares. Each of the K sites draws N_Z(0, s^2), s^2 = ``share_sigma_squared``
(grid steps squared), fixed by the query: the coordinator sizes it as
sigma^2 / n for n = K - t (``honest_shares``; t the collusion tolerance,
:func:`privadapt.common.noise.floating.honest_share_count`). Colluders can subtract
their own t shares, so what protects a record is the sum of the n honest
ones. If more sites turn out honest (K - t > n) their extra shares are
independent noise added to that sum, a post-processing: the charge for n
still holds. If fewer (K - t < n, e.g. a smaller roster, or a per-site
answer, which is one share) it would not, and the site refuses
(:meth:`DistributedDiscreteGaussianMechanism.check_sharing`, before any record
is read). Unlike continuous Gaussians, a sum of discrete Gaussians is not a
discrete Gaussian: the charge below is for the sum.

Sensitivity in grid steps. The site charges a float L2 sensitivity S that
already holds the rounding (:mod:`privadapt.common.kernels.grid_rounding`):
S = s2 + sqrt(size) (2^-f + 2e), s2 the kernel's L2 sensitivity and e its
computation error per entry. Two neighbours' computed values a, b differ by at
most s2 + 2e sqrt(size) in L2, and per entry round(a_i 2^f) - round(b_i 2^f)
= (a_i - b_i) 2^f + r_i with |r_i| < 1, so the released integer vectors
differ by a Delta with ||Delta||_2 <= (s2 + 2e sqrt(size)) 2^f + sqrt(size) =
S 2^f. ||Delta||_2^2 is an integer, so it is at most Q = floor((S 2^f)^2),
computed exactly after raising S 2^f by a relative 2^-50 (the float S may sit
ulps below the sum it stands for; :func:`grid_l2_squared`). On integers
||Delta||_1 <= ||Delta||_2^2 <= Q and Delta has at most Q nonzero entries, so
this one charged L2 figure bounds every quantity the paper's bound reads
(no L1 charge of the kernel is needed; a site charges one norm per mechanism).

Accounting: Renyi DP at every order alpha >= 1 by Kairouz, Liu and Steinke's
Proposition 14 / Eq. (17) for sums of discrete Gaussians (s >= 1/2), applied
per coordinate and summed:
:func:`privadapt.common.accounting.discrete.discrete_gaussian_sum_grid_rdp`
(Q times the bound for one step, derived there). For large s its tau term
vanishes and the curve is the Gaussian's alpha / (2 z^2), z = sqrt(n s^2 / Q).
The accountant has no PLD for it and answers by RDP, as for zCDP events
(:mod:`privadapt.common.accounting.accountant`).

The grid is the mechanism's own ``fractional_bits``, which must equal the
query's (a site refuses another; see discrete_laplace.py for why).

Limits (refused by the constructor, so by the wire decoder, with messages that
name only the mechanism's own fields): s^2 must be an exact binary value
whose numerator times denominator is at most 2^56 (what the exact sampler
takes: s at most 2^28 grid steps) and at least 1/4 (the paper's s >= 1/2).
On the grid 2^-f that is a share sigma of at most 2^(28 - f) data units:
2^-4 at f = 32, 1 at f = 28, 2^12 at f = 16. **A larger sigma needs a coarser
query grid** (fewer fractional bits): :meth:`for_noise_multiplier` says so
when asked for more.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from privadapt.common.mechanisms.base import Adjacency, GridNoiseMechanism, NoiseRequest, Shape
from privadapt.common.mechanisms.discrete_laplace import check_grid_bits
from privadapt.common.noise.discrete import MAX_GAUSSIAN_PRODUCT, as_rational, discrete_gaussian
from privadapt.common.noise.floating import RandomBits, honest_share_count
from privadapt.common.validation import check_nonnegative_finite, frozen_value

if TYPE_CHECKING:
    from dp_accounting.dp_event import DpEvent

#: The paper's bound needs a share sigma of at least 1/2 grid step.
MIN_SHARE_SIGMA_SQUARED = Fraction(1, 4)
#: At most this many honest shares (tau sums n - 1 terms; no federation is near it).
MAX_HONEST_SHARES = 2**16
# Float error allowance of a charged sensitivity (a sum of a few floats), as
# discrete_laplace.grid_steps allows it.
_FLOAT_SLACK = Fraction(1, 2**50)
_NAME = "DistributedDiscreteGaussianMechanism"


def grid_l2_squared(sensitivity: float, fractional_bits: int) -> int:
    """Q: an integer bound on ||Delta||_2^2, in grid steps of
    2^-``fractional_bits``, for a release whose charged float L2 sensitivity
    (rounding included) is ``sensitivity``: floor((S 2^f (1 + 2^-50))^2),
    exactly (module docstring)."""
    exact = Fraction(sensitivity) * 2**fractional_bits * (1 + _FLOAT_SLACK)
    return math.floor(exact * exact)


def check_share_sigma_squared(value: Any) -> Fraction:
    """``value`` as the exact s^2 the discrete Gaussian sampler takes, at least
    1/4: ValueError naming the limits otherwise."""
    if isinstance(value, float | np.floating) and not math.isfinite(value):
        raise ValueError(f"{_NAME}.share_sigma_squared must be finite, got {value!r}")
    exact = as_rational(value, f"{_NAME}.share_sigma_squared", MAX_GAUSSIAN_PRODUCT)
    if exact.numerator * exact.denominator > MAX_GAUSSIAN_PRODUCT:
        raise ValueError(
            f"{_NAME}.share_sigma_squared = {exact} needs numerator x denominator at most "
            "2^56, what the exact sampler takes (a share sigma of at most 2^28 grid steps): "
            "ask on a coarser query grid (fewer fractional bits)")
    if exact < MIN_SHARE_SIGMA_SQUARED:
        raise ValueError(f"{_NAME}.share_sigma_squared must be at least 1/4 (a share sigma of "
                         f"half a grid step, which the accounting needs), got {value!r}")
    return exact


def discrete_gaussian_sum_tau(share_sigma_squared: float, shares: int) -> float:
    """tau = 10 sum_{k=1}^{n-1} exp(-2 pi^2 s^2 k / (k + 1)) of Kairouz, Liu and
    Steinke 2021 for a sum of n = ``shares`` i.i.d. N_Z(0, s^2): how far the
    sum is from one discrete Gaussian N_Z(0, n s^2) (0 for n = 1)."""
    check_sum_of_discrete_gaussians(share_sigma_squared, shares)
    k = np.arange(1, shares, dtype=float)
    return float(10.0 * np.sum(np.exp(-2.0 * math.pi**2 * float(share_sigma_squared)
                                      * k / (k + 1.0))))


def check_sum_of_discrete_gaussians(share_sigma_squared: float, shares: int) -> None:
    """ValueError unless ``shares`` n >= 1 and s^2 >= 1/4 (the bound's premise)."""
    if isinstance(shares, bool) or not isinstance(shares, int | np.integer) or shares < 1:
        raise ValueError(f"shares must be a positive integer, got {shares!r}")
    if not (isinstance(share_sigma_squared, int | float | Fraction | np.floating)
            and 0.25 <= share_sigma_squared < math.inf):
        raise ValueError("the bound for sums of discrete Gaussians needs a share sigma of at "
                         f"least 1/2 (sigma^2 >= 1/4), got sigma^2 = {share_sigma_squared!r}")


def sampler_variance_at_least(variance: float) -> float:
    """The least float >= ``variance`` (and >= 1/4) of the form j / 2^k whose
    numerator times denominator is at most 2^56: a share variance the exact
    sampler takes, never less noise than asked for. ValueError above 2^56
    grid steps squared: the query needs a coarser grid."""
    exact = max(Fraction(variance), MIN_SHARE_SIGMA_SQUARED)
    if exact > MAX_GAUSSIAN_PRODUCT:
        raise ValueError(
            f"a share variance of {float(exact):.4g} grid steps squared is more than the exact "
            "discrete Gaussian sampler takes (2^56, a share sigma of 2^28 steps): ask on a "
            "coarser query grid (fewer fractional bits)")
    # j ~ v 2^k and j 2^k <= 2^56: k = (56 - log2 v) / 2, less one for the ceiling.
    bits = max(0, (56 - math.ceil(math.log2(exact))) // 2 - 1)
    while True:
        numerator = math.ceil(exact * 2**bits)
        if numerator * 2**bits <= MAX_GAUSSIAN_PRODUCT:
            return float(Fraction(numerator, 2**bits))
        bits -= 1


@frozen_value
class DistributedDiscreteGaussianMechanism(GridNoiseMechanism):
    """Exact discrete Gaussian shares N_Z(0, ``share_sigma_squared``) (grid
    steps squared) from each site, on a one-block release of charged L2
    ``sensitivity`` S (rounding included) on the grid 2^-``fractional_bits``,
    charged as the sum of ``honest_shares`` of them (module docstring).

    dp-accounting has no event for a sum of discrete Gaussians; its event is
    ``ZCDpEvent(rho, xi)`` with rho = Q / (2 n s^2) and xi = tau Q, the first
    of Kairouz, Liu and Steinke's three Renyi bounds (alpha rho + xi), which
    the ledger's bound (their minimum) never exceeds: its noise multiplier
    1 / sqrt(2 rho) is this mechanism's, sqrt(n s^2 / Q). dp-accounting's RDP
    accountant replays it; its PLD accountant does not (nor does the ledger's:
    the accountant answers by RDP)."""

    sensitivity: float
    share_sigma_squared: float
    honest_shares: int
    fractional_bits: int
    adjacency: Adjacency = Adjacency.REPLACE_ONE

    kind: ClassVar[str] = "distributed_discrete_gaussian"
    noise_norm: ClassVar[str] = "l2"

    def __post_init__(self) -> None:
        check_nonnegative_finite(f"{_NAME}.sensitivity", self.sensitivity)
        self.sensitivity = float(self.sensitivity)
        self.fractional_bits = check_grid_bits(f"{_NAME}.fractional_bits", self.fractional_bits)
        shares = self.honest_shares
        if isinstance(shares, bool) or not isinstance(shares, int | np.integer) \
                or not 1 <= shares <= MAX_HONEST_SHARES:
            raise ValueError(f"{_NAME}.honest_shares must be an integer in "
                             f"[1, {MAX_HONEST_SHARES}], got {shares!r}")
        self.honest_shares = int(shares)
        if isinstance(self.share_sigma_squared, bool):
            raise ValueError(f"{_NAME}.share_sigma_squared must be a number")
        check_share_sigma_squared(self.share_sigma_squared)
        self.share_sigma_squared = float(self.share_sigma_squared)
        self.adjacency = Adjacency(self.adjacency)

    @classmethod
    def for_kernel(cls, request: NoiseRequest) -> DistributedDiscreteGaussianMechanism:
        """:meth:`for_noise_multiplier` of z ratio for ``honest_shares`` shares."""
        (charged,), (ratio,) = request.charged, request.ratios
        return cls.for_noise_multiplier(charged, request.noise_multiplier * ratio,
                                        request.fractional_bits, request.honest_shares,
                                        request.adjacency)

    @classmethod
    def for_noise_multiplier(
        cls, sensitivity: float, noise_multiplier: float, fractional_bits: int,
        honest_shares: int, adjacency: Adjacency = Adjacency.REPLACE_ONE,
    ) -> DistributedDiscreteGaussianMechanism:
        """The mechanism whose n = ``honest_shares`` honest shares sum to a
        variance of at least (z sqrt Q)^2 grid steps squared, z =
        ``noise_multiplier``, Q = :func:`grid_l2_squared` (S, f): s^2 =
        z^2 Q / n rounded up to what the sampler takes (and to at least 1/4).
        ValueError when that is more than the sampler takes on this grid."""
        check_grid_bits(f"{_NAME}.fractional_bits", fractional_bits)
        l2_squared = grid_l2_squared(sensitivity, fractional_bits)
        variance = noise_multiplier * noise_multiplier * max(l2_squared, 1) / honest_shares
        return cls(sensitivity, sampler_variance_at_least(variance), honest_shares,
                   fractional_bits, adjacency)

    @property
    def grid_l2_squared(self) -> int:
        """Q: the bound on ||Delta||_2^2 in grid steps (module docstring)."""
        return 0 if self.sensitivity == 0 else grid_l2_squared(self.sensitivity,
                                                               self.fractional_bits)

    @property
    def exact_share_sigma_squared(self) -> Fraction:
        """s^2, exactly, in grid steps squared."""
        return Fraction(self.share_sigma_squared)

    @property
    def sigma_steps(self) -> float:
        """The standard deviation of the n honest shares' sum, sqrt(n s^2), in steps."""
        return math.sqrt(self.honest_shares * self.share_sigma_squared)

    @property
    def sigma(self) -> float:
        """sqrt(n s^2) in data units (times 2^-f)."""
        return math.ldexp(self.sigma_steps, -self.fractional_bits)

    @property
    def noise_scales(self) -> tuple[float, ...]:
        return (self.sigma,)

    @property
    def noise_multiplier(self) -> float:
        # sqrt(n s^2 / Q): the Gaussian's z, what the policy's noise floor reads
        # (the charge itself is the paper's bound, a little above the Gaussian's).
        l2_squared = self.grid_l2_squared
        if l2_squared == 0:
            return math.inf
        if l2_squared > 2**1000:
            return 0.0
        return math.sqrt(self.honest_shares * self.share_sigma_squared / l2_squared)

    @property
    def summary(self) -> str:
        return (f"distributed discrete gaussian z={self.noise_multiplier:.3g} "
                f"(n={self.honest_shares} shares of sigma^2={self.share_sigma_squared:.4g} "
                f"steps of 2^-{self.fractional_bits})")

    def _dp_event(self) -> DpEvent:
        from dp_accounting import dp_event

        l2_squared = self.grid_l2_squared
        if l2_squared > 2**1000:  # what the ledger's bound reads as infinite
            return dp_event.NonPrivateDpEvent()
        exact = Fraction(l2_squared) / (2 * self.honest_shares * self.exact_share_sigma_squared)
        slack = 1.0 + 1e-12  # the ledger's own rounding up of the bound
        tau = discrete_gaussian_sum_tau(self.share_sigma_squared, self.honest_shares)
        return dp_event.ZCDpEvent(rho=float(exact) * slack, xi=tau * l2_squared * slack)

    def check_sharing(self, num_sites: int, collusion_tolerance: int) -> None:
        """Refuse (ValueError) a split whose honest shares are fewer than the
        n the charge counts on; more are a post-processing (module docstring)."""
        honest = honest_share_count(num_sites, collusion_tolerance)
        if honest < self.honest_shares:
            raise ValueError(
                f"the distributed discrete Gaussian is charged for {self.honest_shares} honest "
                f"shares but this release has {honest} (K={num_sites} shares, t="
                f"{collusion_tolerance}): a smaller sum of shares is less noise than charged")

    def noise_steps(
        self, shape: Shape, num_sites: int, collusion_tolerance: int,
        source: RandomBits | None = None,
    ) -> np.ndarray:
        """One site's int64 share of the noise, in grid steps: N_Z(0, s^2)."""
        self.check_sharing(num_sites, collusion_tolerance)
        return discrete_gaussian(self.exact_share_sigma_squared, shape, source)

    def _fields(self) -> dict[str, Any]:
        return {"sensitivity": self.sensitivity,
                "share_sigma_squared": self.share_sigma_squared,
                "honest_shares": self.honest_shares,
                "fractional_bits": self.fractional_bits}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DistributedDiscreteGaussianMechanism:
        return cls(float(data["sensitivity"]), float(data["share_sigma_squared"]),
                   data["honest_shares"], data["fractional_bits"], Adjacency(data["adjacency"]))
