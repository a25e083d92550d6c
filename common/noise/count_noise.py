"""Exact negative-binomial differences (Polya shares) from random bits.

Why: a site's share of distributed discrete Laplace noise is NB(r, q) - NB(r, q)
with r = 1/n and q = exp(-1/t) (:func:`privadapt.common.noise.discrete_shares.polya_share`);
the accountant assumes that law exactly, so it is sampled here with integer
comparisons of CSPRNG words, never a float decision.

Compound Poisson. NB(r, q) has generating function ((1 - q) / (1 - q z))^r =
exp(lambda (g_L(z) - 1)) with lambda = r ln(1 / (1 - q)) and g_L(z) =
ln(1 - q z) / ln(1 - q) the generating function of the logarithmic law
P(L = k) = q^k / (k ln(1 / (1 - q))), k >= 1 (expand ln(1 - q z) = -sum q^k
z^k / k). So NB(r, q) = L_1 + ... + L_N with N ~ Poisson(lambda), and the
difference of two independent ones is a single compound Poisson of rate
mu = 2 lambda whose jumps are +-L with a fair sign (superposition: the jumps
of each are a Poisson process of rate lambda; their union, rate 2 lambda,
labels each jump by an independent fair coin). A share is therefore
sum_{i <= N} s_i L_i, N ~ Poisson(mu), s_i fair signs, L_i logarithmic.

* N (:func:`_poisson_counts`): mu = (2 / n) ln(1 / (1 - exp(-1/t))) is
  transcendental but the same for every sample, so the CDF bounds lo_k <= F_k
  <= hi_k are computed with :mod:`decimal` in interval arithmetic
  (:func:`_poisson_cdf_bounds`) and a uniform U is inverted, N = min{k : U <
  F_k}, by :mod:`privadapt.common.noise.table_inversion`: one 64-bit word
  decides unless it lies in one of the integer intervals [floor(lo_k 2^64),
  ceil(hi_k 2^64)) (about two words each, so below 2^-55 per sample for the
  ~100 entries of a table); then more words are read and the bounds
  recomputed at higher precision until they decide. The bounds converge as
  the precision grows, so this ends with probability 1 and the law of N is
  exactly Poisson(mu).
* L (:func:`_logarithmic`): rejection from a dyadic-level proposal, below.

Expected work. With J the least j >= 0 with 2^J >= t, one logarithmic draw
takes (J + 2) q / ln(1 / (1 - q)) proposals on average, and a share needs
mu = (2 / n) ln(1 / (1 - q)) of them: 2 q (J + 2) / n proposals per share,
below 2 (J + 2) / n <= 50 for t <= 2^48 and n >= 2 -- bounded for every
admissible scale (with about three words a proposal, plus one word for N;
``tests/common/noise/test_discrete_shares.py`` measures the words per sample).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

import numpy as np

from privadapt.common.noise.bernoulli import (
    _bernoulli_exp,
    _bernoulli_exp_scalar,
    _rejection_fill,
    _sign_bits,
    _uniform_below,
    _uniform_below_int,
    bernoulli_below_constant,
    exp_minus_one_bits,
)
from privadapt.common.noise.certified_laws import decimal_contexts
from privadapt.common.noise.floating import RandomBits
from privadapt.common.noise.table_inversion import CdfWindow, inversion_table, sample_by_inversion

#: Tail levels J + m with m above this finish in exact Python integers (the
#: uint64 product (k - 1) b would pass 2^62); probability 2^-12 per tail proposal.
_FAST_TAIL_LEVELS = 12
#: Levels whose k offset and first V share one word (2 j + 1 <= 64 bits).
_PACKED_LEVELS = 31
#: Expected jumps per chunk of shares (working memory, not the law).
_CHUNK_JUMPS = 2**20


# -- N ~ Poisson(mu), mu = (2/n) ln(1/(1 - exp(-1/t))), by exact inversion -----------


def _poisson_cdf_bounds(scale: Fraction, honest: int,
                        digits: int) -> Iterator[tuple[Fraction, Fraction]]:
    """(lo_k, hi_k) with lo_k <= F_k <= hi_k for k = 0, 1, ..., F the CDF of
    Poisson(mu), mu = (2 / honest) ln(1 / (1 - exp(-1/scale))).

    Interval arithmetic: +, -, x, / are rounded toward the side each bound
    needs (ROUND_FLOOR / ROUND_CEILING contexts). ``exp`` and ``ln`` are
    correctly rounded to nearest whatever the context, so |v - f(x)| <= half an
    ulp of v <= |v| 10^(1 - digits) / 2: each result is widened by the relative
    eps = 10^(1 - digits), twice that. Both functions are monotone, so an
    interval for the argument maps to one for the value. F_k(mu) decreases in
    mu (dF_k / dmu = -P(N = k)), so lo_k = F_k(mu_hi) and hi_k = F_k(mu_lo),
    each a product of exp(-mu) and a partial sum of positive terms
    mu^j / j!, rounded down and up respectively. Every bound is within
    O(10^(15 - digits)) of the truth (1 - q >= 2^-49 loses at most 15 digits),
    so the bounds converge as ``digits`` grows."""
    near, down, up = decimal_contexts(digits)
    one = Decimal(1)
    # Every operation names its context (a bare ``-x`` or ``1 - x`` would round
    # to the default 28 digits); copy_negate is exact.
    eps = Decimal((0, (1,), 1 - digits))  # 10^(1 - digits)
    shrink, widen = down.subtract(one, eps), up.add(one, eps)
    x_lo = down.divide(scale.denominator, scale.numerator)  # 1 / t
    x_hi = up.divide(scale.denominator, scale.numerator)
    q_lo = down.multiply(near.exp(x_hi.copy_negate()), shrink)
    q_hi = up.multiply(near.exp(x_lo.copy_negate()), widen)
    y_lo = down.subtract(one, q_hi)  # 1 - q
    y_hi = min(one, up.subtract(one, q_lo))
    log_lo = down.multiply(near.ln(y_hi).copy_negate(), shrink)  # ln(1/(1 - q)) >= 0
    log_hi = up.multiply(near.ln(y_lo).copy_negate(), widen)
    mu_lo = down.divide(down.multiply(2, log_lo), honest)
    mu_hi = up.divide(up.multiply(2, log_hi), honest)
    e_lo = down.multiply(near.exp(mu_hi.copy_negate()), shrink)
    e_hi = min(one, up.multiply(near.exp(mu_lo.copy_negate()), widen))
    term_lo = term_hi = sum_lo = sum_hi = one
    k = 0
    while True:
        yield (Fraction(down.multiply(e_lo, sum_lo)),
               Fraction(min(one, up.multiply(e_hi, sum_hi))))
        k += 1
        term_lo = down.divide(down.multiply(term_lo, mu_hi), k)
        term_hi = up.divide(up.multiply(term_hi, mu_lo), k)
        sum_lo, sum_hi = down.add(sum_lo, term_lo), up.add(sum_hi, term_hi)


@dataclass(frozen=True)
class _JumpCountLaw:
    """Poisson(mu) of the jump count, as a law for
    :mod:`privadapt.common.noise.table_inversion`: its window at ``bits``
    brackets F_k with :func:`_poisson_cdf_bounds` at 40 + bits log10(2) digits
    (60 at 64 bits: within about 10^-44, far inside a word), floored and
    ceiled at 2^bits, until 1 - lo_k < 2^-(bits + 8)."""

    scale: Fraction
    honest: int

    def cdf_window(self, bits: int) -> CdfWindow:
        digits = 40 + math.ceil(bits * math.log10(2))
        lower, upper = [], []
        for lo, hi in _poisson_cdf_bounds(self.scale, self.honest, digits):
            lower.append(math.floor(lo * 2**bits))
            upper.append(min(math.ceil(hi * 2**bits), 2**bits))
            if 1 - lo < Fraction(1, 2**(bits + 8)):
                return CdfWindow(bits, 0, 0, tuple(lower), tuple(upper))


def _poisson_table(scale: Fraction, honest: int) -> tuple[np.ndarray, np.ndarray]:
    """(below, above_minus_one) as uint64 arrays: below_k = floor(lo_k 2^64),
    with a sentinel 0 appended, and ceil(hi_k 2^64) - 1: the jump count's
    inversion table."""
    table = inversion_table(_JumpCountLaw(scale, honest))
    return table.lower, table.upper_minus_one[:-1]


def _poisson_counts(scale: Fraction, honest: int, count: int, stream: RandomBits) -> np.ndarray:
    """``count`` exact Poisson(mu) draws (module docstring) as int64, by
    :func:`privadapt.common.noise.table_inversion.sample_by_inversion`: a word
    W gives N = #{k : ceil(hi_k 2^64) <= W} when W < floor(lo_N 2^64), and
    otherwise more words decide it against finer bounds."""
    return sample_by_inversion(_JumpCountLaw(scale, honest), count, stream)


# -- L ~ Logarithmic(q): P(L = k) ∝ q^k / k, by rejection from dyadic levels ----------


def _level_count(scale: Fraction) -> int:
    """J: the least j >= 0 with 2^j >= t."""
    level = 0
    while 2**level < scale:
        level += 1
    return level


def _bernoulli_power_over(level: np.ndarray, k: np.ndarray, draw: np.ndarray,
                          stream: RandomBits) -> np.ndarray:
    """Bernoulli(2^j / k) per element, k in [2^j, 2^(j + 1)), j <= 61: a
    uniform V on [0, k) -- ``draw`` (j + 1 uniform bits) or, while that is
    >= k (at most half the time), the top j + 1 bits of a fresh word -- and
    the event V < 2^j (certain when k = 2^j)."""
    power = np.uint64(1) << level
    result = (draw < power) | (k == power)
    redo = np.flatnonzero((draw >= k) & (k != power))
    while redo.size:
        draw = stream.words(redo.size) >> (np.uint64(63) - level[redo])
        inside = draw < k[redo]
        result[redo[inside]] = draw[inside] < power[redo[inside]]
        redo = redo[~inside]
    return result


def _two_over_e_bits(bits: int) -> int:
    """floor(2 e^-1 2^bits): the expansion of 2/e, one bit along from e^-1's."""
    return exp_minus_one_bits(bits + 1)


def _fair_geometric(count: int, stream: RandomBits) -> np.ndarray:
    """m >= 1 with P(m) = 2^-m, as uint64: one plus the trailing zero bits of
    a word (another word per 64 zeros, probability 2^-64)."""
    out = np.ones(count, dtype=np.uint64)
    active = np.arange(count)
    while active.size:
        words = stream.words(active.size)
        lowest = words & (~words + np.uint64(1))  # the lowest set bit, 0 for a zero word
        zero = lowest == 0
        out[active[~zero]] += np.frexp(lowest[~zero].astype(np.float64))[1].astype(
            np.uint64) - np.uint64(1)  # 2^z is exact in float64: frexp gives z + 1
        out[active[zero]] += np.uint64(64)
        active = active[zero]
    return out


def _bernoulli_two_over_e_power(power: np.ndarray, stream: RandomBits) -> np.ndarray:
    """Bernoulli((2/e)^m) per element: m independent Bernoulli(2/e), all 1."""
    result = np.ones(power.size, dtype=bool)
    left = power.copy()
    active = np.flatnonzero(left > 0)
    while active.size:
        success = bernoulli_below_constant(_two_over_e_bits, active.size, stream)
        result[active[~success]] = False
        left[active] -= np.uint64(1)
        active = active[success & (left[active] > 0)]
    return result


def _logarithmic_scalar(scale: Fraction, level: int, tail_rank: int,
                        stream: RandomBits) -> tuple[int, bool]:
    """One tail proposal of a level too high for 64-bit words, in Python
    integers: (k, accepted) with the tail's acceptance (:func:`_logarithmic`)."""
    k = (1 << level) + _uniform_below_int(1 << level, stream)
    accept = (_uniform_below_int(k, stream) < 1 << level
              and _bernoulli_exp_scalar(Fraction(k - 1) / scale - tail_rank, stream)
              and bool(_bernoulli_two_over_e_power(np.array([tail_rank], np.uint64),
                                                   stream)[0]))
    return k, accept


def _logarithmic(scale: Fraction, count: int, stream: RandomBits) -> np.ndarray:
    """``count`` draws of the logarithmic law P(L = k) ∝ q^k / k, k >= 1,
    q = exp(-1/t), t = a / b, as int64.

    Proposal: J + 2 equally likely slots (J the least j >= 0 with 2^j >= t).
    Slot j <= J (the head) is the level [2^j, 2^(j + 1)); the last slot (the
    tail) draws m >= 1 with P(m) = 2^-m (:func:`_fair_geometric`) and takes
    the level j = J + m. Then k is uniform on the level. So g(k) = 2^-j /
    (J + 2) on the head and 2^-m 2^-j / (J + 2) on the tail.

    Acceptance, each factor an independent exact Bernoulli:
    * head: q^(k - 1) 2^j / k = Bernoulli(2^j / k) Bernoulli(exp(-(k - 1) / t));
    * tail: q^(k - 1) 2^m 2^j / k = Bernoulli(2^j / k)
      Bernoulli(exp(-((k - 1) / t - m))) Bernoulli(2/e)^m.
    Each is a probability: 2^j <= k, and on the tail k >= 2^(J + m) >= t 2^m
    gives (k - 1) / t >= 2^m - 1/t, which is >= 2^m - 1 >= m for t >= 1 and,
    for t < 1 (J = 0, k >= 2^m), (k - 1) / t >= k - 1 >= 2^m - 1 >= m as
    well. In both cases g(k) times the acceptance is q^(k - 1) / (k (J + 2)),
    proportional to q^k / k: an accepted k follows the logarithmic law
    exactly. The rate is ln(1 / (1 - q)) / (q (J + 2)): at least 1 / (J + 2)
    (ln(1/(1 - q)) >= q), and near 1/2 for small t, where the target is almost
    all at k = 1 (hence q^(k - 1), not q^k: with q^k the rate would vanish
    with q).

    Integers: the exponent (k - 1) / t = ((k - 1) b) / a splits into a whole
    part and a fraction with denominator a <= 2^48; (k - 1) b < 4 a on the head
    (2^(J - 1) < t, or k = 1 when J = 0) and < 2^(m + 50) on the tail, so levels up to
    J + 12 stay in uint64 and higher ones (probability 2^-12 per tail
    proposal) use :func:`_logarithmic_scalar`."""
    a, b = scale.numerator, scale.denominator
    top = _level_count(scale)

    def propose(size: int) -> tuple[np.ndarray, np.ndarray]:
        level = _uniform_below(top + 2, size, stream)
        tail = np.flatnonzero(level == top + 1)
        rank = np.zeros(size, dtype=np.uint64)  # m on the tail, 0 on the head
        rank[tail] = _fair_geometric(tail.size, stream)
        level[tail] += rank[tail] - np.uint64(1)
        slow = tail[rank[tail] > _FAST_TAIL_LEVELS]
        level[slow] = 0  # the vector pass below ignores them
        # One word gives k's j offset bits (its top ones) and, for 2 j + 1 <= 64,
        # the j + 1 bits of the first V of Bernoulli(2^j / k) (the next ones).
        words = stream.words(size)
        k = (np.uint64(1) << level) + ((words >> np.uint64(1)) >> (np.uint64(63) - level))
        draw = (words << level) >> (np.uint64(63) - level)
        wide = np.flatnonzero(level > _PACKED_LEVELS)
        draw[wide] = stream.words(wide.size) >> (np.uint64(63) - level[wide])
        alive = _bernoulli_power_over(level, k, draw, stream)
        alive[slow] = False
        idx = np.flatnonzero(alive)
        scaled = (k[idx] - np.uint64(1)) * np.uint64(b)  # (k - 1) b, exponent numerator
        whole = scaled // np.uint64(a)
        alive[idx] = _bernoulli_exp(whole - rank[idx], scaled - whole * np.uint64(a),
                                    np.zeros(idx.size, np.uint64), a, 0, stream)
        idx = tail[alive[tail]]
        alive[idx] = _bernoulli_two_over_e_power(rank[idx], stream)
        values = k.astype(np.int64)
        for i in slow:
            value, alive[i] = _logarithmic_scalar(scale, int(top + rank[i]), int(rank[i]),
                                                  stream)
            if alive[i] and value >= 2**62:  # probability below exp(-2^12)
                raise OverflowError("a logarithmic draw overflowed 62 bits")
            values[i] = value if alive[i] else 0
        return values, alive

    q = math.exp(-b / a)
    # Efficiency only: the acceptance rate ln(1/(1 - q)) / (q (J + 2)).
    rate = (-math.log1p(-q) / q if q > 0 else 1.0) / (top + 2)
    return _rejection_fill(count, propose, rate)


# -- the Polya share ------------------------------------------------------------------


def negative_binomial_difference(scale: Fraction, honest: int, count: int,
                                 stream: RandomBits) -> np.ndarray:
    """``count`` int64 draws of NB(1/honest, q) - NB(1/honest, q), q =
    exp(-1/scale), exactly: sum_{i <= N} s_i L_i (module docstring), in
    chunks of about 2^20 expected jumps so the rejection's working arrays stay
    near 100 MB whatever ``count`` is (at t = 2^45 a share has 31 jumps)."""
    q = math.exp(-scale.denominator / scale.numerator)
    mu = -2.0 / honest * math.log1p(-q)  # efficiency only: the chunk size
    chunk = max(1, int(_CHUNK_JUMPS / (mu + 1.0)))
    out = np.empty(count, dtype=np.int64)
    for start in range(0, count, chunk):
        out[start:start + chunk] = _shares(scale, honest, min(chunk, count - start), stream)
    return out


def _shares(scale: Fraction, honest: int, count: int, stream: RandomBits) -> np.ndarray:
    """One chunk of :func:`negative_binomial_difference`.

    The sums run in int64 when the largest jump times the most jumps of one
    sample is below 2^63, and otherwise (a jump of 2^56 or more, or 128 jumps
    in one sample: rare) in Python integers; OverflowError only when a share
    itself needs more than 63 bits, probability below exp(-2^14) for
    t <= 2^48, an event that depends on no data."""
    jumps = _poisson_counts(scale, honest, count, stream)
    total = int(jumps.sum())
    sizes = _logarithmic(scale, total, stream)
    signed = np.where(_sign_bits(total, stream), -sizes, sizes)
    out = np.zeros(count, dtype=np.int64)
    if total:
        some = np.flatnonzero(jumps)
        starts = np.cumsum(jumps)[some] - jumps[some]
        if int(sizes.max()) * int(jumps.max()) < 2**63:
            out[some] = np.add.reduceat(signed, starts)
        else:
            sums = np.add.reduceat(signed.astype(object), starts)
            if max(abs(int(value)) for value in sums) >= 2**63:
                raise OverflowError("a Polya share overflowed 63 bits")
            out[some] = sums.astype(np.int64)
    return out
