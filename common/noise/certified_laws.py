"""Certified CDFs of the integer laws the exact samplers invert
(:mod:`privadapt.common.noise.table_inversion`): the folded discrete Gaussian
and discrete Laplace, the negative binomial NB(1/n, exp(-1/t)) and the Poisson of a rational rate.

Why: each law's weights follow a recurrence w_(k+1) = w_k rho_k, so bounds
on every weight come from fixed-point integers rounded toward the side each
bound needs (floor for the lower, ceiling for the upper): a product of
integers ``a b >> P`` is a floor, ``-((-a b) >> P)`` a ceiling. Transcendental
factors (exp(-x) for rational x) are bracketed once with :mod:`decimal`
(correctly rounded, widened by its rounding error). The weights run at
P = bits + 64 bits, so the error of the k-th weight -- about k 2^-P relative,
k^2 2^-P for the Gaussian, whose ratio is itself a running product -- stays
far below 2^-bits for every table length allowed (at most 2^18 < 2^(64/2 - 8)):
the 64-bit windows at the largest admitted parameters are at most two units
wide. Each
window ends once a geometric bound on the rest of the weights is below
2^-(bits + 8) of their total, so a word past the table is rarer than 2^-72.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import (
    MAX_EMAX,
    MIN_EMIN,
    ROUND_CEILING,
    ROUND_FLOOR,
    Context,
    Decimal,
    DivisionByZero,
    InvalidOperation,
    Overflow,
    Subnormal,
    Underflow,
)
from fractions import Fraction

from privadapt.common.noise.table_inversion import CdfWindow, normalised_window

_GUARD_BITS = 64
_TAIL_BITS = 8


def decimal_contexts(digits: int) -> tuple[Context, Context, Context]:
    """(nearest, down, up) contexts of ``digits`` digits. The exponent range is
    the widest decimal has (exp(-2^48) is about 10^-1.2e14, still normal) and
    underflow traps, as do overflow and invalid operations, so a bound never
    silently loses its precision."""
    traps = [Underflow, Subnormal, Overflow, InvalidOperation, DivisionByZero]
    return tuple(Context(prec=digits, Emin=MIN_EMIN, Emax=MAX_EMAX, rounding=rounding,
                         traps=traps)
                 for rounding in (None, ROUND_FLOOR, ROUND_CEILING))


def exp_minus_bounds(x: Fraction, precision: int) -> tuple[int, int]:
    """(lo, hi) with lo <= exp(-x) 2^precision <= hi for rational x >= 0.
    ``exp`` is correctly rounded to nearest, so within half an ulp, at most
    10^(1 - digits) relative: the result is widened by that, each way. Past
    x = precision the bracket is [0, 1] (decimal's exp of a huge argument is slow)."""
    if x > precision:  # exp(-x) < e^-precision < 2^-precision, and positive
        return 0, 1
    digits = math.ceil(precision * math.log10(2)) + 20
    near, down, up = decimal_contexts(digits)
    eps = Decimal((0, (1,), 1 - digits))
    x_lo = down.divide(x.numerator, x.denominator)
    x_hi = up.divide(x.numerator, x.denominator)
    value_lo = down.multiply(near.exp(x_hi.copy_negate()), down.subtract(1, eps))
    value_hi = up.multiply(near.exp(x_lo.copy_negate()), up.add(1, eps))
    return (math.floor(Fraction(value_lo) * 2**precision),
            min(1 << precision, math.ceil(Fraction(value_hi) * 2**precision)))


def _floor_product(a: int, b: int, precision: int) -> int:
    return (a * b) >> precision


def _ceil_product(a: int, b: int, precision: int) -> int:
    return -((-a * b) >> precision)


def _geometric_tail(next_weight: int, ratio: int, precision: int) -> int | None:
    """ceil(next_weight / (1 - ratio 2^-precision)): a bound on the weights from
    ``next_weight`` on when each later ratio is at most ``ratio``; None when the
    ratio bound does not fall below 1."""
    one = 1 << precision
    if ratio >= one:
        return None
    return -((-next_weight << precision) // (one - ratio))


@dataclass(frozen=True)
class FoldedDiscreteGaussian:
    """|X| for X ~ N_Z(0, sigma^2): weights 1 at 0 and 2 exp(-k^2 / (2 sigma^2))
    for k >= 1. exp(-(k+1)^2 / (2 s)) = exp(-k^2 / (2 s)) r_k with r_k =
    exp(-(2k + 1) / (2 s)) = r_0 c^k, c = exp(-1 / s); the ratios decrease, so
    the weights after k sum to at most w_(k+1) / (1 - r_(k+1))."""

    sigma_squared: Fraction

    def cdf_window(self, bits: int) -> CdfWindow:
        return gaussian_weight_window(self.sigma_squared, bits, 2)


def gaussian_weight_window(sigma_squared: Fraction, bits: int, multiplier: int) -> CdfWindow:
    """The certified window of the law on {0, 1, ...} with weight 1 at 0 and
    ``multiplier`` exp(-k^2 / (2 sigma^2)) at k >= 1: 2 for |X| of the discrete
    Gaussian, 1 for the bucket law of :mod:`privadapt.common.noise.bucket_rejection`
    (:class:`FoldedDiscreteGaussian`'s recurrence, products rounded outward)."""
    p = bits + _GUARD_BITS
    one = 1 << p
    ratio_lo, ratio_hi = exp_minus_bounds(1 / (2 * sigma_squared), p)
    c_lo, c_hi = exp_minus_bounds(1 / sigma_squared, p)
    e_lo = e_hi = one
    lower, upper = [one], [one]
    threshold = 1 << (p - bits - _TAIL_BITS)
    while True:
        e_lo, e_hi = _floor_product(e_lo, ratio_lo, p), _ceil_product(e_hi, ratio_hi, p)
        ratio_lo, ratio_hi = _floor_product(ratio_lo, c_lo, p), _ceil_product(ratio_hi, c_hi, p)
        tail = _geometric_tail(multiplier * e_hi, ratio_hi, p)
        if tail is not None and tail <= threshold:
            return normalised_window(bits, 0, lower, upper, 0, tail)
        lower.append(multiplier * e_lo)
        upper.append(multiplier * e_hi)


def gaussian_table_entries(sigma_squared: Fraction) -> float:
    """About how long the folded Gaussian's 64-bit table is (efficiency only:
    it picks between two exact samplers): the window ends near
    sigma sqrt(2 ln 2^72)."""
    return 10.7 * math.sqrt(float(sigma_squared)) + 16


@dataclass(frozen=True)
class FoldedDiscreteLaplace:
    """|X| for the discrete Laplace P(x) ∝ q^|x|, q = exp(-1/t): weights 1 at
    0 and 2 q^k for k >= 1, so those after k sum to 2 q^(k+1) / (1 - q)."""

    scale: Fraction

    def cdf_window(self, bits: int) -> CdfWindow:
        return geometric_weight_window(1 / self.scale, bits, 2)


def geometric_weight_window(exponent: Fraction, bits: int, multiplier: int) -> CdfWindow:
    """The certified window of the law on {0, 1, ...} with weight 1 at 0 and
    ``multiplier`` exp(-k x) at k >= 1, x = ``exponent`` > 0: 2 for |X| of the
    discrete Laplace (x = 1/t), 1 for the bucket law of
    :mod:`privadapt.common.noise.bucket_rejection`; products rounded outward."""
    p = bits + _GUARD_BITS
    q_lo, q_hi = exp_minus_bounds(exponent, p)
    e_lo = e_hi = 1 << p
    lower, upper = [1 << p], [1 << p]
    threshold = 1 << (p - bits - _TAIL_BITS)
    while True:
        e_lo, e_hi = _floor_product(e_lo, q_lo, p), _ceil_product(e_hi, q_hi, p)
        tail = _geometric_tail(multiplier * e_hi, q_hi, p)
        if tail is not None and tail <= threshold:
            return normalised_window(bits, 0, lower, upper, 0, tail)
        lower.append(multiplier * e_lo)
        upper.append(multiplier * e_hi)


@dataclass(frozen=True)
class NegativeBinomial:
    """NB(1/n, q), q = exp(-1/t): P(k) ∝ Gamma(k + 1/n) / k! q^k, so
    w_(k+1) = w_k q (n k + 1) / (n (k + 1)); every ratio is below q, so the
    weights after k sum to at most w_(k+1) / (1 - q)."""

    scale: Fraction
    honest: int

    def cdf_window(self, bits: int) -> CdfWindow:
        p = bits + _GUARD_BITS
        one, n = 1 << p, self.honest
        q_lo, q_hi = exp_minus_bounds(1 / self.scale, p)
        w_lo = w_hi = one
        lower, upper = [one], [one]
        threshold = 1 << (p - bits - _TAIL_BITS)
        k = 0
        while True:
            w_lo = _floor_product(w_lo, q_lo, p) * (n * k + 1) // (n * (k + 1))
            w_hi = -(_ceil_product(w_hi, q_hi, p) * -(n * k + 1) // (n * (k + 1)))
            tail = _geometric_tail(w_hi, q_hi, p)
            if tail is not None and tail <= threshold:
                return normalised_window(bits, 0, lower, upper, 0, tail)
            lower.append(w_lo)
            upper.append(w_hi)
            k += 1


def geometric_tail_table_entries(scale: Fraction) -> float:
    """About how long the NB or folded discrete Laplace table is (efficiency
    only: it picks between two exact samplers): q^k t below 2^-72."""
    t = float(scale)
    return t * (52.0 + math.log1p(2.0 * t)) + 16


@dataclass(frozen=True)
class RationalPoisson:
    """Poisson(lambda), lambda = a / b > 0 rational: weights anchored at 1 at
    the mode m = floor(lambda), w_(k+1) = w_k a / (b (k + 1)) upward and
    w_(k-1) = w_k k b / a downward, every step an exact integer division
    rounded each way. Past k >= m the ratios lambda / (j + 1) fall, so the
    weights after k sum to at most w_(k+1) / (1 - lambda / (k + 2)); below
    k0 <= m, the ratios j / lambda fall too, so those before k0 sum to at most
    w_(k0 - 1) / (1 - (k0 - 1) / lambda)."""

    rate: Fraction

    def cdf_window(self, bits: int) -> CdfWindow:
        p = bits + _GUARD_BITS
        a, b = self.rate.numerator, self.rate.denominator
        mode = a // b
        threshold = 1 << (p - bits - _TAIL_BITS)
        above_lo, above_hi = [1 << p], [1 << p]
        k = mode
        while True:  # w_(k+1) from w_k, k >= mode
            w_lo, w_hi = above_lo[-1] * a // (b * (k + 1)), -(-above_hi[-1] * a // (b * (k + 1)))
            tail = -((-w_hi * (k + 2) * b) // ((k + 2) * b - a))
            if tail <= threshold:
                right = tail
                break
            above_lo.append(w_lo)
            above_hi.append(w_hi)
            k += 1
        below_lo, below_hi = [], []
        w_lo = w_hi = 1 << p
        k, left = mode, 0
        while k > 0:  # w_(k-1) from w_k
            w_lo, w_hi = w_lo * k * b // a, -(-w_hi * k * b // a)
            k -= 1
            left = -((-w_hi * a) // (a - k * b))  # the weights at k and below
            if left <= threshold:
                break
            below_lo.append(w_lo)
            below_hi.append(w_hi)
            left = 0
        first = mode - len(below_lo)
        return normalised_window(bits, first, below_lo[::-1] + above_lo,
                                 below_hi[::-1] + above_hi, left, right)


def poisson_table_entries(rate: Fraction) -> float:
    """About how long the Poisson table is (efficiency only): both tails out
    to about sqrt(2 lambda ln 2^72) from the mode."""
    return 22.0 * math.sqrt(float(rate)) + 30
