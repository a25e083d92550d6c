"""The exponential mechanism on integer utilities, drawn with a fixed amount of
work whatever the utilities are.

Why: the exact sampler this replaces proposed uniform candidates until one was
kept with probability exp(-c g_k); the number of proposals is geometric with
success probability Z / K (Z = sum_k exp(-c g_k)), so a coordinator timing a
site's answer learned about the private scores beyond what epsilon charges
(K = 20,000: 5 ms with every score tied, 626 ms with one clear winner). No
sampler can draw an irrational law exactly with bounded work, so this one
draws a law that is provably within a factor exp(xi) of the exponential
mechanism's, candidate by candidate, with a work count fixed by public
values only, and the site charges epsilon + xi (:data:`EPSILON_SURCHARGE`).

**The law it draws.** Utilities u_k are integers (grid steps), c > 0 a
rational, g_k = max_j u_j - u_k >= 0 the gaps. Ideal weights
w_k = exp(-min(c g_k, Gamma)) with Gamma = :data:`CLAMP` = 128 nats: the
exponential mechanism on the clamped scaled utilities
v_k = max(c u_k, c max_j u_j - Gamma). Clamping keeps the guarantee: v_k is
the max of two quantities that each move by at most c Delta between
neighbours, so v moves by at most c Delta too, and under monotone scores (all
u_k move one way) the max moves the same way. A candidate more than 128 nats
behind is drawn with probability e^-128 / Z <= 2.6e-56 instead of less; no
other candidate's law changes.

**Fixed-work weights.** exp(-c g) = prod over the set bits j of g of
E_j = exp(-c 2^j), for g <= G = floor(Gamma / c) (beyond G the weight is the
clamp E_Gamma = e^-Gamma). Each E_j (and E_Gamma) is computed once per c, a
public value, as a lower bound m 2^e, m a 64-bit integer in [2^63, 2^64),
within a relative 2^-62 (:func:`lower_mantissa`: a Taylor series on an
integer interval, then repeated squaring, every step rounded outwards, and
the interval's width checked). A candidate's weight is then J = bit length
of G products (J <= 64), each over all K candidates at once: the factor is
E_j where bit j of g_k is set and exactly 1 (2^63 2^-63) where it is not, so
every candidate takes the same J products. A product of two such numbers
keeps the top 64 bits of the 128-bit product of mantissas (truncated: a
relative loss below 2^-63). So each computed weight w~_k satisfies
w_k e^-rho <= w~_k <= w_k with rho = -J log((1 - 2^-62)(1 - 2^-63))
< 2^-55.

**The draw.** The weights become integers W_k = w~_k 2^P exactly (P =
:data:`_WEIGHT_BITS` covers the smallest weight, e^-Gamma), S = sum W_k, and
the index is the k with C_(k-1) <= R < C_k for the cumulative sums C and
R = U mod S, U uniform on [0, 2^(64 n)) from n = ceil((P + bitlen K + 64)/64)
fixed random words. Each residue r has probability floor(2^64n / S) or
ceil(2^64n / S) over 2^64n, so P(k) = (W_k / S)(1 + theta_k) with
|theta_k| <= s = S / 2^64n <= 2^-64 (S <= K 2^P).

**Privacy (derivation).** P(k | D) is proportional to
exp(v_k(D) + r_k(D)) (1 + theta_k(D)) with r_k in [-rho, 0]. For neighbours
D, D': the ratio P(k | D) / P(k | D') is
exp(v_k(D) - v_k(D')) e^(r_k(D) - r_k(D')) (1 + theta) / (1 + theta') times
the ratio of normalisers, so it is at most exp(epsilon + 2 rho + L),
L = log((1 + s) / (1 - s)) <= 2^-62.9, by the exponential mechanism's own
argument (c Delta twice, or once with the normaliser moving the other way for
monotone scores, c = epsilon / (2 Delta) or epsilon / Delta). It is also
bounded range: over k, the log ratios span at most epsilon (the exponential
mechanism's range) + 2 rho + 2 L. So xi = 2 rho + 2 L < 2^-53.9, and the
site charges epsilon + 2^-50 (rounded up to a double), for both the pure and
the bounded-range accounting, which read :attr:`pure_epsilon`.

**What depends on the data, and what does not.** The work count does not:
the number of random words (n, from K and P), the number of vector products
(J, from c) and their lengths (K), the number of big-integer weights, sums
and the one modulo and one binary search (from K), all fixed by public
values; :class:`SamplerWork` records them and a test compares them, and the
Python-level call trace, on extreme score vectors. The per-candidate selects
are multiplications, not np.where (whose per-element branch made tied scores
1.3-1.6x faster than spread ones); after that change
``benchmarks/exponential_timing.py`` measures tied against spread scores at
ratios of 1.002-1.011 (K = 4,096 and 20,000, c = 2^-10 to 2^-38). Not
addressed: memory
access patterns and branches inside the binary search and the library calls,
the duration of single big-integer operations on operands of different sizes
(weights from 64 to P + 1 bits), and cache effects of the index chosen.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from privadapt.common.mechanisms.discrete_laplace import float_at_least
from privadapt.common.noise.floating import RandomBits, SecureRandomBits

#: Gamma: scaled gaps are clamped here (module docstring), in nats.
CLAMP = 128
#: xi: what the site adds to epsilon for the sampler's distance from the
#: exponential mechanism's law; the derivation bounds it by 2^-53.9.
EPSILON_SURCHARGE = 2.0**-50
#: The mantissas' relative accuracy (each factor within a relative 2^-62).
_FACTOR_ERROR_BITS = 62
_MANTISSA_ONE = 1 << 63  # 1 = 2^63 2^-63, exactly
_ONE_EXPONENT = -63
#: P: every weight m 2^e >= e^-Gamma / 2 has e + P >= 0, so W = m 2^(e + P) is
#: an integer (e^-128 > 2^-185, m < 2^64).
_WEIGHT_BITS = math.ceil(CLAMP * math.log2(math.e)) + 66
#: The working precision of the constants' interval arithmetic.
_CONSTANT_BITS = 512
_LOW_32 = np.uint64(0xFFFFFFFF)
_THIRTY_TWO = np.uint64(32)


@dataclass
class SamplerWork:
    """What one draw did, counted: every count is fixed by public values
    (K and c), never by the utilities (module docstring)."""

    words: int = 0
    products: int = 0
    product_lengths: int = 0
    weights: int = 0

    def as_tuple(self) -> tuple[int, int, int, int]:
        return (self.words, self.products, self.product_lengths, self.weights)


# -- the public constants E_j = exp(-c 2^j) ------------------------------------------


def exp_neg_bounds(x: Fraction, bits: int = _CONSTANT_BITS) -> tuple[int, int, int]:
    """Integers lo <= exp(-x) 2^F <= hi and F, for a rational x >= 0, every
    step rounded outwards: x bracketed on the grid 2^-bits, halved s times to
    y <= 1/2 (exactly, as an integer at precision F = bits + s), the
    alternating Taylor series of exp(-y) bracketed (its partial sums and the
    first omitted term), then squared s times."""
    if x < 0:
        raise ValueError(f"x must be non-negative, got {x}")
    x_high = -((-x.numerator << bits) // x.denominator)  # ceil(x 2^bits)
    x_low = (x.numerator << bits) // x.denominator
    halvings = 0
    while x_high > 1 << (bits + halvings - 1):  # y = x / 2^s <= 1/2
        halvings += 1
    precision = bits + halvings
    # exp(-y) is decreasing: its lower bound is at x_high, its upper at x_low.
    low = _exp_neg_series(x_high, precision, lower=True)
    high = _exp_neg_series(x_low, precision, lower=False)
    for _ in range(halvings):
        low = (low * low) >> precision
        high = -((-high * high) >> precision)
    return low, high, precision


def _exp_neg_series(y: int, precision: int, *, lower: bool) -> int:
    """A bound on exp(-y / 2^F) 2^F (F = ``precision``, y / 2^F <= 1/2): the
    terms t_k = y^k / k! are bracketed in integers (floors of lower bounds,
    ceilings of upper ones) until t_k 2^F <= 1; the terms decrease, so the
    alternating tail after them lies within one unit either way."""
    one = 1 << precision
    term_low = term_high = one
    total_low = total_high = one
    k = 1
    while term_high > 1:
        term_low = (term_low * y) // (one * k)
        term_high = -((-term_high * y) // (one * k))
        if k % 2:  # subtracted
            total_low -= term_high
            total_high -= term_low
        else:
            total_low += term_low
            total_high += term_high
        k += 1
    return total_low - 1 if lower else total_high + 1


def lower_mantissa(x: Fraction) -> tuple[int, int]:
    """(m, e) with m in [2^63, 2^64) and exp(-x) (1 - 2^-62) <= m 2^e <= exp(-x),
    for a rational x in [0, Gamma]: the interval's relative width is checked
    to be below 2^-100, and the truncation to 64 bits loses below 2^-63."""
    if not 0 <= x <= CLAMP:
        raise ValueError(f"x must lie in [0, {CLAMP}], got {x}")
    low, high, precision = exp_neg_bounds(x)
    if low <= 0 or (high - low) << 100 > low:  # relative width above 2^-100
        raise ArithmeticError(f"exp(-{x}) was not bracketed tightly enough")
    shift = low.bit_length() - 64
    return low >> shift, shift - precision


@functools.lru_cache(maxsize=64)
def factor_table(coefficient: Fraction) -> tuple[np.ndarray, np.ndarray, int, int, int]:
    """(mantissas, exponents) of E_j = exp(-c 2^j) for j < J, the clamp's
    (m, e) for e^-Gamma, and G = min(floor(Gamma / c), 2^64 - 1): public,
    from c alone."""
    if not isinstance(coefficient, Fraction) or coefficient <= 0:
        raise ValueError(f"the coefficient must be a positive Fraction, got {coefficient!r}")
    largest_gap = min(math.floor(CLAMP / coefficient), 2**64 - 1)
    factors = [lower_mantissa(coefficient * (1 << j)) for j in range(largest_gap.bit_length())]
    mantissas = np.array([m for m, _ in factors], dtype=np.uint64)
    exponents = np.array([e for _, e in factors], dtype=np.int64)
    clamp_mantissa, clamp_exponent = lower_mantissa(Fraction(CLAMP))
    return mantissas, exponents, clamp_mantissa, clamp_exponent, largest_gap


# -- fixed-work weights ------------------------------------------------------------------


def _product(m1: np.ndarray, e1: np.ndarray, m2: np.ndarray, e2: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """(m1 2^e1)(m2 2^e2) truncated to a 64-bit mantissa in [2^63, 2^64):
    the 128-bit product of the mantissas from four 32-bit partial products,
    then its top 64 bits (or 65 minus the leading zero), for every element."""
    a0, a1 = m1 & _LOW_32, m1 >> _THIRTY_TWO
    b0, b1 = m2 & _LOW_32, m2 >> _THIRTY_TWO
    p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    middle = (p00 >> _THIRTY_TWO) + (p01 & _LOW_32) + (p10 & _LOW_32)
    low = (p00 & _LOW_32) | ((middle & _LOW_32) << _THIRTY_TWO)
    high = p11 + (p01 >> _THIRTY_TWO) + (p10 >> _THIRTY_TWO) + (middle >> _THIRTY_TWO)
    top = high >> np.uint64(63)  # 1 when the product is in [2^127, 2^128)
    shifted = (high << np.uint64(1)) | (low >> np.uint64(63))
    mantissa = _select(top, high, shifted)
    exponent = e1 + e2 + np.int64(63) + top.astype(np.int64)
    return mantissa, exponent


def _select(bit: np.ndarray, when_one: np.ndarray | np.uint64,
            when_zero: np.ndarray | np.uint64) -> np.ndarray:
    """when_zero + bit (when_one - when_zero), modulo 2^64, for 0/1 uint64
    ``bit``: a select by multiplication, with no branch whose prediction
    depends on the bits (np.where's per-element branch made the sampler's
    time depend on the scores' gap bits)."""
    return when_zero + bit * (when_one - when_zero)


def integer_weights(utilities: np.ndarray, coefficient: Fraction,
                    work: SamplerWork | None = None) -> list[int]:
    """The integer weights W_k = w~_k 2^P the sampler draws from (module
    docstring), computed with J vector products whatever the utilities."""
    utilities = np.asarray(utilities, dtype=np.int64)
    mantissas, exponents, clamp_mantissa, clamp_exponent, largest_gap = \
        factor_table(coefficient)
    unsigned = utilities.view(np.uint64)
    best = np.uint64(int(utilities.max()) % 2**64)
    gaps = best - unsigned  # best - u_k in [0, 2^64), exact modulo 2^64
    mantissa = np.full(utilities.size, _MANTISSA_ONE, dtype=np.uint64)
    exponent = np.full(utilities.size, _ONE_EXPONENT, dtype=np.int64)
    one_mantissa, one_exponent = np.uint64(_MANTISSA_ONE), np.int64(_ONE_EXPONENT)
    for j in range(mantissas.size):
        bit = (gaps >> np.uint64(j)) & np.uint64(1)
        mantissa, exponent = _product(
            mantissa, exponent, _select(bit, mantissas[j], one_mantissa),
            one_exponent + bit.astype(np.int64) * (exponents[j] - one_exponent))
        if work is not None:
            work.products += 1
            work.product_lengths += utilities.size
    clamped = (gaps > np.uint64(largest_gap)).astype(np.uint64)
    mantissa = _select(clamped, np.uint64(clamp_mantissa), mantissa)
    exponent = exponent + clamped.astype(np.int64) * (np.int64(clamp_exponent) - exponent) \
        + _WEIGHT_BITS
    if exponent.size and int(exponent.min()) < 0:  # excluded by the bounds above
        raise ArithmeticError("a weight fell below the clamp's")
    if work is not None:
        work.weights += utilities.size
    return [m << e for m, e in zip(mantissa.tolist(), exponent.tolist(), strict=True)]


def charged_epsilon(epsilon: float) -> float:
    """The smallest double at or above epsilon + xi: what a site charges for
    a draw at ``epsilon`` (module docstring)."""
    return float_at_least(Fraction(epsilon) + Fraction(EPSILON_SURCHARGE))


def random_words(count: int) -> int:
    """n: the fixed number of 64-bit words one draw among ``count`` candidates
    uses, so that S / 2^64n <= 2^-64."""
    return -(-(_WEIGHT_BITS + count.bit_length() + 64) // 64)


def fixed_work_exponential_index(utilities: np.ndarray, coefficient: Fraction,
                                 source: RandomBits | None = None,
                                 work: SamplerWork | None = None) -> int:
    """An index drawn with probability within exp(+-xi) of
    exp(-min(c g_k, Gamma)) / sum_j exp(-min(c g_j, Gamma)), g the gaps of the
    integer ``utilities`` below their maximum and c = ``coefficient``, with a
    work count fixed by K and c (module docstring)."""
    utilities = np.asarray(utilities)
    if utilities.ndim != 1 or utilities.size == 0 or utilities.dtype != np.int64:
        raise ValueError("utilities must be a non-empty vector of int64 grid steps")
    weights = integer_weights(utilities, coefficient, work)
    cumulative = list(itertools.accumulate(weights))
    count = random_words(utilities.size)
    words = np.asarray((source or SecureRandomBits()).words(count), dtype=np.uint64)
    if work is not None:
        work.words += count
    draw = int.from_bytes(words.tobytes(), "little") % cumulative[-1]
    return bisect.bisect_right(cumulative, draw)
