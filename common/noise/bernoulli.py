"""Exact Bernoulli draws and uniform integers from CSPRNG words: Canonne,
Kamath and Steinke 2020 ("The Discrete Gaussian for Differential Privacy"),
Algorithm 1, and the integer comparisons every exact sampler is built from.

* Uniform integers below a bound: rejection of 64-bit words above the
  largest multiple of the bound (``_uniform_below``), so every value has
  exactly the same probability.
* Algorithm 1, Bernoulli(exp(-gamma)) for rational gamma in [0, 1]: draw
  A_k ~ Bernoulli(gamma / k) for k = 1, 2, ... until one is 0; return 1 when
  that k is odd. exp(-gamma) for gamma > 1 is floor(gamma) independent
  Bernoulli(exp(-1)) all equal to 1, then Bernoulli(exp(-(gamma - floor gamma))).
  Bernoulli(exp(-1)) itself, the commonest draw, compares uniform words with
  the binary expansion of e^-1 computed exactly in integers: one word each
  (``bernoulli_below_constant``; a tie reads the next word and the next bits).
* ``_rejection_fill``: the vectorised loop every rejection sampler runs,
  proposing for the samples still undecided until all are accepted.

Every decision compares a uniform *integer* with an integer; no float enters.
Vectorised: each round runs on the numpy array of draws still undecided; a
draw whose integers would not fit 64 bits finishes in exact Python integers.
Used by :mod:`privadapt.common.noise.discrete` (Algorithms 2 and 3),
:mod:`privadapt.common.noise.count_noise` and
:mod:`privadapt.common.noise.bucket_rejection`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from privadapt.common.noise.floating import RandomBits

_WORD = 2**64
#: Uniform bounds and sums handled in uint64 stay below this.
FAST_LIMIT = 2**63


def _uniform_below(bound: int, count: int, stream: RandomBits) -> np.ndarray:
    """``count`` uniform integers on [0, bound), bound < 2^63, as uint64: a word
    (a 32-bit half-word when bound <= 2^32) modulo bound, rejecting the words
    at or above the largest multiple of bound, so every residue is equally
    likely."""
    lane_bits = 32 if bound <= 2**32 else 64
    accept_below = (1 << lane_bits) - (1 << lane_bits) % bound
    out = _lanes(count, lane_bits, stream)
    bad = np.flatnonzero(out >= accept_below)
    while bad.size:  # probability below bound / 2^lane_bits per draw
        out[bad] = _lanes(bad.size, lane_bits, stream)
        bad = bad[out[bad] >= accept_below]
    return _remainder(out, bound)


def _remainder(values: np.ndarray, divisor: int) -> np.ndarray:
    """values mod divisor for uint64 values, exactly: as values - (values //
    divisor) divisor, because numpy divides by a scalar with a precomputed
    multiplier (libdivide) but computes % element by element, 20x slower."""
    divisor = np.uint64(divisor)
    return values - (values // divisor) * divisor


def _lanes(count: int, lane_bits: int, stream: RandomBits) -> np.ndarray:
    """``count`` uniform integers of ``lane_bits`` (32 or 64) bits, as uint64."""
    if lane_bits == 64:
        return stream.words(count).copy()
    return stream.words(-(-count // 2)).view(np.uint32)[:count].astype(np.uint64)


def _uniform_below_int(bound: int, stream: RandomBits) -> int:
    """One uniform Python integer on [0, bound) for any bound (the slow path)."""
    num_words = max(1, -(-bound.bit_length() // 64))
    span = 1 << (64 * num_words)
    while True:
        value = int.from_bytes(np.asarray(stream.words(num_words)).tobytes(), "little")
        if value < span - span % bound:
            return value % bound


def _bernoulli_exp_scalar(gamma: Fraction, stream: RandomBits, first_k: int = 1) -> bool:
    """Bernoulli(exp(-gamma)) in exact Python integers (Algorithm 1). With
    ``first_k`` > 1 it resumes the loop of a gamma in [0, 1] at that k."""
    if first_k == 1 and gamma > 1:
        if not all(_bernoulli_exp_scalar(Fraction(1), stream) for _ in range(int(gamma))):
            return False
        gamma -= int(gamma)
    k = first_k
    while _uniform_below_int(gamma.denominator * k, stream) < gamma.numerator:
        k += 1
    return k % 2 == 1


def _bernoulli_exp_fraction(c: np.ndarray, e: np.ndarray, d: int, m: int,
                            stream: RandomBits, first_k: int = 1) -> np.ndarray:
    """Bernoulli(exp(-gamma)) for gamma = (c 2^m + e) / (d 2^m) in [0, 1), per
    element (c < d, e < 2^m; m = 0 means e = 0), by Algorithm 1: at step k the
    draw U = V 2^m + W, uniform on [0, d k 2^m), is below c 2^m + e exactly when
    V < c, or V = c and W < e. With ``first_k`` > 1 it resumes the loop at that
    k (its caller drew the steps before, all 1)."""
    result = np.zeros(c.size, dtype=bool)
    active = np.arange(c.size)
    k = first_k
    while active.size:
        if d * k >= FAST_LIMIT:  # k near 2^7 or more: probability below 1/k!
            for i in active:
                gamma = Fraction(int(c[i]) * 2**m + int(e[i]), d * 2**m)
                result[i] = _bernoulli_exp_scalar(gamma, stream, first_k=k)
            break
        v = _uniform_below(d * k, active.size, stream)
        below = v < c[active]
        if m:
            ties = np.flatnonzero(v == c[active])
            if ties.size:
                w = stream.words(ties.size) >> np.uint64(64 - m)
                below[ties] = w < e[active[ties]]
        result[active[~below]] = k % 2 == 1
        active = active[below]
        k += 1
    return result


@functools.cache
def exp_minus_one_bits(bits: int) -> int:
    """floor(e^-1 2^bits), exactly: the partial sums S_N of sum_j (-1)^j / j!
    bracket e^-1 within 1/(N+1)!, so terms are added until both ends of the
    bracket floor to the same integer (e^-1 is irrational: this ends)."""
    partial, term, j = Fraction(0), Fraction(1), 0
    while True:
        partial += term
        j += 1
        term = -term / j
        low, high = (partial - abs(term)) * 2**bits, (partial + abs(term)) * 2**bits
        if math.floor(low) == math.floor(high):
            return math.floor(low)


def _bernoulli_exp_minus_one(count: int, stream: RandomBits) -> np.ndarray:
    """``count`` Bernoulli(exp(-1)) draws (:func:`bernoulli_below_constant`)."""
    return bernoulli_below_constant(exp_minus_one_bits, count, stream)


def bernoulli_below_constant(expansion: Callable[[int], int], count: int,
                             stream: RandomBits) -> np.ndarray:
    """``count`` Bernoulli(c) draws as [U < c] for a constant c in (0, 1) with
    floor(c 2^bits) = ``expansion(bits)`` and a uniform real U read one 64-bit
    word at a time: the first word decides unless it equals the first 64 bits
    of c (probability 2^-64); then each further word is compared with the next
    64 bits of c, computed exactly in integers (c irrational: this ends)."""
    first = np.uint64(expansion(64))
    words = stream.words(count)
    result = words < first
    for i in np.flatnonzero(words == first):
        bits = 64
        while True:
            word = int(stream.words(1)[0])
            target = expansion(bits + 64) & (_WORD - 1)
            if word != target:
                result[i] = word < target
                break
            bits += 64
    return result


def _exp_minus_one_run(cap: np.ndarray | None, count: int, stream: RandomBits) -> np.ndarray:
    """The number V of Bernoulli(exp(-1)) successes before the first failure
    (P(V >= v) = exp(-v)), counted up to ``cap`` per element when given."""
    run = np.zeros(count, dtype=np.uint64)
    active = np.arange(count) if cap is None else np.flatnonzero(cap > 0)
    while active.size:
        active = active[_bernoulli_exp_minus_one(active.size, stream)]
        run[active] += np.uint64(1)
        if cap is not None:
            active = active[run[active] < cap[active]]
    return run


def _bernoulli_exp(whole: np.ndarray, c: np.ndarray, e: np.ndarray, d: int, m: int,
                   stream: RandomBits) -> np.ndarray:
    """Bernoulli(exp(-gamma)) for gamma = whole + (c 2^m + e) / (d 2^m): ``whole``
    Bernoulli(exp(-1)) that must all be 1 -- a run of at least ``whole``
    successes -- then the fractional part."""
    result = _exp_minus_one_run(whole, whole.size, stream) >= whole
    alive = np.flatnonzero(result)
    result[alive] = _bernoulli_exp_fraction(c[alive], e[alive], d, m, stream)
    return result


def _rejection_fill(count: int, propose: Callable[[int], tuple[np.ndarray, np.ndarray]],
                    rate: float) -> np.ndarray:
    """``count`` accepted values of a rejection sampler. Each round proposes
    enough for the remainder at the expected acceptance ``rate`` (re-estimated
    from what it sees) and keeps the first accepted ones in order: which ones
    are kept depends only on the accept pattern, so they are i.i.d. from the
    target as in the one-at-a-time loop."""
    out = np.empty(count, dtype=np.int64)
    filled = 0
    while filled < count:
        need = count - filled
        values, keep = propose(int(need * 1.05 / rate) + 16)
        rate = max(float(keep.mean()), 0.01)
        accepted = values[keep][:need]
        out[filled:filled + accepted.size] = accepted
        filled += accepted.size
    return out


def _sign_bits(count: int, stream: RandomBits) -> np.ndarray:
    """``count`` fair bits, 64 to a word."""
    words = stream.words(-(-count // 64))
    return np.unpackbits(words.view(np.uint8))[:count].astype(bool)


# -- discrete Laplace ------------------------------------------------------------------
