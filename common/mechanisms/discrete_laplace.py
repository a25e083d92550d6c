"""The discrete Laplace mechanism: exact pure epsilon-DP integer noise on the
fixed-point grid itself.

Why: the float Laplace of :class:`~privadapt.common.mechanisms.laplace.LaplaceMechanism`
is (epsilon, ~1e-300)-DP, not pure, because a float sampler reaches only a
sparse set of values. Here the noise is an integer number of grid steps 2^-f
(the two-sided geometric, :func:`privadapt.common.noise.discrete.discrete_laplace`),
so the site's ``codec.encode(share)`` is exact and the release is
round(value 2^f) + Z, an integer-valued query plus discrete Laplace noise.

Sensitivity in grid steps. The site charges a float L1 sensitivity S that
already holds the rounding (:mod:`privadapt.common.kernels.grid_rounding`):
S = s + size (2^-f + 2e), s the kernel's L1 sensitivity and e its
computation error per entry. Two neighbours' computed values a, b differ by at
most s + 2e size in L1, and per entry |round(a_i 2^f) - round(b_i 2^f)| <=
|a_i - b_i| 2^f + 1, so the released integers differ by at most
(s + 2e size) 2^f + size = S 2^f steps in L1; being an integer, by at most
Delta = ceil(S 2^f). The float S may sit a few ulps below the real sum it
stands for, so S 2^f is first raised by a relative 2^-50 (:func:`grid_steps`).
A discrete Laplace of scale t steps on an integer query of L1 sensitivity
Delta is exactly pure (Delta / t)-DP (the ratio of the two shifted pmfs is
exp((|z - Delta| - |z|) / t) <= exp(Delta / t) at every z, in every
coordinate summed), and its tight PLD is
:func:`privadapt.common.accounting.discrete.discrete_laplace_pld`.

The grid is the mechanism's own field ``fractional_bits``: integer noise is
private only on the grid the value is rounded to (noise in steps of 2^-16 on a
value rounded to 2^-32 leaves the value's low bits in the clear), so a site
refuses the mechanism unless it equals the query's (``noise_grid_bits``).

Scale. ``scale_steps`` t is a float whose exact binary value has numerator and
denominator at most 2^48 (what the exact samplers take) and t <= 2^45 steps,
so every sample is below 2^53 (and exactly a float) except with probability
exp(-256), when the site refuses with an error that depends on no data. On the
grid 2^-f that is a scale of at most 2^(45 - f) data units, the bound the
float samplers have too: more noise needs a coarser grid. The expected work
per sample is bounded by a constant for *every* admissible t: Algorithm 2 of
Canonne, Kamath and Steinke keeps its uniform with probability at least 1 -
1/e, each Bernoulli(exp(-gamma)) takes at most e expected words, the geometric
run e/(e - 1), and the sign rejection keeps at least half
(:func:`expected_words_per_sample`); nothing a coordinator sends can make a
site sample for long.

Distributed shares (DESIGN.md section 2): with K - t = 1 honest share the
site adds the whole exact discrete Laplace; with more, each site adds a Polya
difference and any K - t of them sum to exactly the discrete Laplace
(:func:`privadapt.common.noise.discrete_shares.polya_share`, whose negative binomials
are exact too: compound Poisson sums of logarithmic jumps decided by integer
comparisons of CSPRNG words, with bounded expected work for every admissible t).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from privadapt.common.mechanisms.base import Adjacency, GridNoiseMechanism, NoiseRequest, Shape
from privadapt.common.noise.discrete import MAX_PARAMETER_PART, as_rational, discrete_laplace
from privadapt.common.noise.discrete_shares import polya_share
from privadapt.common.noise.floating import RandomBits, honest_share_count
from privadapt.common.validation import check_nonnegative_finite, frozen_value

if TYPE_CHECKING:
    from dp_accounting.dp_event import DpEvent

#: The largest noise scale, in grid steps: samples stay below 2^53 (exact
#: floats) but with probability exp(-256). In data units 2^(45 - f), the same
#: bound as the float samplers' (``noise.max_grid_safe_noise``).
MAX_SCALE_STEPS = 2.0**45
#: Grids a discrete mechanism can live on (the codec's range of fractional bits).
_GRID_BITS = (0, 52)
# Float error allowance of a charged sensitivity (a sum of a few floats).
_FLOAT_SLACK = Fraction(1, 2**50)


def check_grid_bits(name: str, bits: Any) -> int:
    """``bits`` as the integer f of a grid 2^-f a codec can have, or ValueError."""
    if isinstance(bits, bool) or not isinstance(bits, int | np.integer) or not (
            _GRID_BITS[0] <= bits <= _GRID_BITS[1]):
        raise ValueError(f"{name} must be an integer in {list(_GRID_BITS)}, got {bits!r}")
    return int(bits)


def grid_steps(sensitivity: float, fractional_bits: int) -> int:
    """The integer L1 sensitivity, in steps of 2^-``fractional_bits``, of a
    release whose charged float sensitivity (rounding included) is
    ``sensitivity``: ceil(S 2^f (1 + 2^-50)), exactly (module docstring)."""
    exact = Fraction(sensitivity) * 2**fractional_bits * (1 + _FLOAT_SLACK)
    return math.ceil(exact)


def check_scale_steps(name: str, value: Any) -> float:
    """``value`` as a discrete Laplace scale t in grid steps the exact samplers
    take (in (0, 2^45], numerator and denominator at most 2^48), or ValueError."""
    scale = float(value)
    if not 0 < scale <= MAX_SCALE_STEPS:
        raise ValueError(f"{name} must be in (0, 2^45], got {value!r}")
    as_rational(scale, name, MAX_PARAMETER_PART)
    return scale


def float_at_least(exact: Fraction) -> float:
    """The least double at or above the rational ``exact`` (inf beyond 2^1000):
    an epsilon written as a float that never understates the exact one."""
    if exact > 2**1000:
        return math.inf
    value = float(exact)
    return value if Fraction(value) >= exact else math.nextafter(value, math.inf)


def dyadic_scale_at_least(scale_steps: float) -> float:
    """The least float >= ``scale_steps`` whose binary value has numerator and
    denominator at most 2^48 (40 significant bits, rounded up): a scale the
    exact samplers take, never less noise than asked for."""
    exact = Fraction(scale_steps)
    if not 0 < exact <= MAX_SCALE_STEPS:
        raise ValueError(f"a discrete Laplace scale must be in (0, 2^45] grid steps, got "
                         f"{scale_steps!r}")
    unit = Fraction(2) ** min(48, 40 - math.floor(math.log2(exact)))
    return float(math.ceil(exact * unit) / unit)


def expected_words_per_sample() -> float:
    """A bound on the expected 64-bit words one discrete Laplace sample costs,
    whatever its admissible scale: (1 + e) per proposal of U over an
    acceptance of at least 1 - 1/e, plus e/(e - 1) for the geometric run and
    one for the sign, all over the sign rejection's acceptance of at least 1/2."""
    e = math.e
    return 2.0 * ((1.0 + e) / (1.0 - 1.0 / e) + e / (e - 1.0) + 1.0)


@frozen_value
class DiscreteLaplaceMechanism(GridNoiseMechanism):
    """Discrete Laplace noise of ``scale_steps`` t grid steps on a one-block
    release of charged L1 ``sensitivity`` S (rounding included), on the grid
    2^-``fractional_bits``: exactly pure (Delta / t)-DP, Delta =
    :func:`grid_steps` (S, f). Its dp-accounting event is
    ``DiscreteLaplaceDpEvent(1 / t, Delta)`` in grid steps (1 / t rounded up:
    a hair less noise, never more), whose noise multiplier t / Delta is this
    mechanism's in steps; dp-accounting's PLD of it enumerates about Delta
    points, so it replays only on coarse grids (the ledger's own PLD is in
    closed form)."""

    sensitivity: float
    scale_steps: float
    fractional_bits: int
    adjacency: Adjacency = Adjacency.REPLACE_ONE

    kind: ClassVar[str] = "discrete_laplace"
    noise_norm: ClassVar[str] = "l1"

    def __post_init__(self) -> None:
        check_nonnegative_finite("DiscreteLaplaceMechanism.sensitivity", self.sensitivity)
        self.fractional_bits = check_grid_bits("DiscreteLaplaceMechanism.fractional_bits",
                                               self.fractional_bits)
        self.sensitivity = float(self.sensitivity)
        self.scale_steps = check_scale_steps("DiscreteLaplaceMechanism.scale_steps",
                                             self.scale_steps)
        self.adjacency = Adjacency(self.adjacency)

    @classmethod
    def for_kernel(cls, request: NoiseRequest) -> DiscreteLaplaceMechanism:
        """:meth:`for_noise_multiplier` of z ratio on the grid 2^-``fractional_bits``."""
        (charged,), (ratio,) = request.charged, request.ratios
        return cls.for_noise_multiplier(charged, request.noise_multiplier * ratio,
                                        request.fractional_bits, request.adjacency)

    @classmethod
    def for_noise_multiplier(
        cls, sensitivity: float, noise_multiplier: float, fractional_bits: int,
        adjacency: Adjacency = Adjacency.REPLACE_ONE,
    ) -> DiscreteLaplaceMechanism:
        """The mechanism of epsilon at most 1 / ``noise_multiplier`` for a
        charged ``sensitivity`` on the grid 2^-``fractional_bits``: t =
        z Delta, rounded up to a scale the samplers take."""
        steps = grid_steps(sensitivity, fractional_bits)
        scale = dyadic_scale_at_least(noise_multiplier * max(steps, 1))
        return cls(sensitivity, scale, fractional_bits, adjacency)

    @property
    def grid_sensitivity(self) -> int:
        """Delta: the L1 sensitivity in grid steps (module docstring)."""
        return grid_steps(self.sensitivity, self.fractional_bits)

    @property
    def exact_scale(self) -> Fraction:
        """t, exactly, in grid steps."""
        return Fraction(self.scale_steps)

    @property
    def exact_epsilon(self) -> Fraction:
        """Delta / t, exactly."""
        return Fraction(self.grid_sensitivity) / self.exact_scale

    @property
    def epsilon(self) -> float:
        return self.pure_epsilon

    @property
    def pure_epsilon(self) -> float:
        # A sensitivity of 1e300 (a policy without a clip limit) is inf, refused.
        return float_at_least(self.exact_epsilon)

    @property
    def scale(self) -> float:
        """t in data units, t 2^-f."""
        return math.ldexp(self.scale_steps, -self.fractional_bits)

    @property
    def noise_scales(self) -> tuple[float, ...]:
        return (self.scale,)

    @property
    def noise_multiplier(self) -> float:
        # 1 / epsilon, the Laplace convention: what the policy's noise floor reads.
        return math.inf if self.sensitivity == 0 else 1.0 / self.pure_epsilon

    @property
    def summary(self) -> str:
        return (f"discrete laplace eps={self.epsilon:.3g} (Delta={self.grid_sensitivity} "
                f"steps of 2^-{self.fractional_bits})")

    def _dp_event(self) -> DpEvent:
        from dp_accounting import dp_event

        return dp_event.DiscreteLaplaceDpEvent(
            noise_parameter=float_at_least(1 / self.exact_scale),
            sensitivity=self.grid_sensitivity)

    def noise_steps(
        self, shape: Shape, num_sites: int, collusion_tolerance: int,
        source: RandomBits | None = None,
    ) -> np.ndarray:
        """One site's int64 share of the noise, in grid steps: the exact
        discrete Laplace when it is the only honest share, else a Polya share."""
        honest = honest_share_count(num_sites, collusion_tolerance)
        if honest == 1:
            return discrete_laplace(self.exact_scale, shape, source)
        return polya_share(self.exact_scale, num_sites, collusion_tolerance, shape, source)

    def _fields(self) -> dict[str, Any]:
        return {"sensitivity": self.sensitivity, "scale_steps": self.scale_steps,
                "fractional_bits": self.fractional_bits}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DiscreteLaplaceMechanism:
        return cls(float(data["sensitivity"]), float(data["scale_steps"]),
                   data["fractional_bits"], Adjacency(data["adjacency"]))
