"""Exact integer noise: the discrete Laplace and the discrete Gaussian, and the
distributed shares that sum to discrete noise.

Why: the float samplers of :mod:`privadapt.common.noise.floating` give releases that are
(epsilon, ~1e-300)-DP rather than pure, and leave a gap of about 2^-100 in the
Gaussian tails. These samplers draw noise on the integers themselves, so a site
adds it to its fixed-point encoded sum and every probability the privacy proof
uses is the exact one.

Exactness (Canonne, Kamath and Steinke 2020, "The Discrete Gaussian for
Differential Privacy", Algorithms 1-3): every accept/reject decision compares a
uniform *integer* with an integer, so no floating-point number enters:

* Algorithm 1, Bernoulli(exp(-gamma)) for rational gamma, and uniform
  integers from words: :mod:`privadapt.common.noise.bernoulli`.
* Algorithm 2, the discrete Laplace P(x) ∝ exp(-|x| / t), t = n / d rational:
  U uniform on {0..n-1} kept with probability exp(-U / n), V the number of
  Bernoulli(exp(-1)) successes before a failure; X = U + n V is geometric with
  ratio exp(-1/n), Y = floor(X / d) geometric with ratio exp(-1/t); a fair sign
  bit, rejecting (-, 0) so zero is not counted twice.
* Algorithm 3, the discrete Gaussian P(x) ∝ exp(-x^2 / (2 sigma^2)),
  sigma^2 = s / r rational: Y ~ discrete Laplace(t), kept with probability
  exp(-(|Y| - sigma^2/t)^2 / (2 sigma^2)). We take t = 2^k, the power of two
  nearest sigma (the paper takes floor(sigma) + 1; any t is exact, ours costs
  at most 1.17 times the attempts) so the acceptance exponent is (c 2^m + e) / (d 2^m) with
  d = s r and m = 2k + 1: its numerator splits at a bit boundary, and the
  comparison of a uniform integer on [0, d 2^m K) with it is one comparison
  on [0, d K) and, on a tie only, one on [0, 2^m) -- all in 64-bit words.

By table: a discrete Laplace or Gaussian whose certified CDF table has at
most :data:`~privadapt.common.noise.table_inversion.MAX_TABLE_ENTRIES`
entries (t up to about 4.2e3, sigma up to about 2.4e4 grid steps) is drawn
instead as |X| by exact inversion
(:mod:`privadapt.common.noise.table_inversion`, about one word a sample) and a
fair sign. A larger sigma or t (from 2^9 and 2^7 steps, so in practice every
one past the table) is drawn by rejection from a bucketed envelope
(:mod:`privadapt.common.noise.bucket_rejection`: a table over buckets of
about sigma / 2^8 or t / 2^6 integers, a uniform offset, one Algorithm 1
Bernoulli; about two words a sample); Algorithms 2 and 3 remain for a
smaller scale when no table is allowed.

Vectorised: every round of every loop runs on the numpy array of samples still
undecided, so 1e5 samples take a few dozen array passes, not 1e5 Python loops.
A sample whose integers would not fit 64 bits finishes in exact Python
integers (``fractions.Fraction``): exact either way, only slower. That is
vanishingly rare (below 2^-180) except for a discrete Gaussian with sigma^2 of
denominator above 2^32 (sigma below about 2^-16 steps), where every nonzero
proposal -- about half -- takes that path; such noise is almost always 0.

Random bits: all randomness comes from the given :class:`RandomBits` source.
Each call draws 256 bits from it as the key of a ChaCha20 keystream (the
construction the operating system's own CSPRNG uses) and takes its words from
that stream, so one call costs the source four words, a seeded source
reproduces a call exactly, and the cost per word is that of the cipher.

Distributed shares that sum to discrete noise: :mod:`privadapt.common.noise.discrete_shares`.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from privadapt.common.noise.bernoulli import (
    FAST_LIMIT,
    _bernoulli_exp,
    _bernoulli_exp_fraction,
    _bernoulli_exp_scalar,
    _exp_minus_one_run,
    _rejection_fill,
    _sign_bits,
    _uniform_below,
    _uniform_below_int,
)
from privadapt.common.noise.bucket_rejection import (
    bucket_width_exponent,
    discrete_gaussian_by_buckets,
    discrete_laplace_by_buckets,
    laplace_bucket_exponent,
)
from privadapt.common.noise.certified_laws import (
    FoldedDiscreteGaussian,
    FoldedDiscreteLaplace,
    gaussian_table_entries,
    geometric_tail_table_entries,
)
from privadapt.common.noise.floating import RandomBits, SecureRandomBits
from privadapt.common.noise.table_inversion import MAX_TABLE_ENTRIES, sample_by_inversion

#: Numerators and denominators of the parameters (t of the discrete Laplace,
#: sigma^2 of the discrete Gaussian) are at most this, so every product the
#: samplers form fits a 64-bit word (t from 2^-48 to 2^48 grid steps).
MAX_PARAMETER_PART = 2**48
#: The discrete Gaussian needs s * r <= 2^56 for sigma^2 = s / r: sigma from
#: 2^-28 to 2^28 grid steps. A coarser noise grid serves a larger sigma.
MAX_GAUSSIAN_PRODUCT = 2**56
# Products |Y| t r of the Gaussian acceptance stay below this on the fast path.
_GAUSSIAN_FAST_LIMIT = FAST_LIMIT


class KeystreamBits:
    """64-bit words of a ChaCha20 keystream keyed by 256 bits of ``source``:
    a fresh key per sampler call, so the stream is never reused."""

    def __init__(self, source: RandomBits) -> None:
        key = np.asarray(source.words(4), dtype=np.uint64).tobytes()
        self._encryptor = Cipher(algorithms.ChaCha20(key, bytes(16)), mode=None).encryptor()

    def words(self, size: int) -> np.ndarray:
        return np.frombuffer(self._encryptor.update(bytes(8 * size)), dtype=np.uint64)


def as_rational(value: int | Fraction | float, name: str,
                max_part: int = MAX_PARAMETER_PART) -> Fraction:
    """``value`` as an exact positive fraction whose numerator and denominator
    are at most ``max_part``; a float is taken at its exact binary value."""
    if isinstance(value, bool) or not isinstance(value, int | Fraction | float | np.integer
                                                 | np.floating):
        raise ValueError(f"{name} must be an int, a Fraction or a float, got {value!r}")
    if isinstance(value, float | np.floating) and not np.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if isinstance(value, np.integer | np.floating):
        value = value.item()
    exact = Fraction(value)
    if exact <= 0:
        raise ValueError(f"{name} must be positive, got {value!r}")
    if exact.numerator > max_part or exact.denominator > max_part:
        raise ValueError(
            f"{name} = {exact} needs a numerator and a denominator at most {max_part}: "
            "pass a Fraction with a smaller denominator (Fraction(x).limit_denominator()), "
            "or sample on a coarser noise grid"
        )
    return exact


def sample_shape(shape: int | tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
    """(number of samples, shape tuple)."""
    shape = (shape,) if isinstance(shape, int | np.integer) else tuple(shape)
    if any(int(side) < 0 for side in shape):
        raise ValueError(f"shape must not be negative, got {shape}")
    return int(np.prod(shape, dtype=np.int64)), shape


# -- uniform integers and Bernoulli(exp(-gamma)) -------------------------------------


def _geometric(numerator: int, denominator: int, count: int, stream: RandomBits) -> np.ndarray:
    """Y >= 0 with P(Y = y) ∝ exp(-y denominator / numerator) (Algorithm 2, the
    loop before the sign), as uint64."""
    def propose(size: int) -> tuple[np.ndarray, np.ndarray]:
        draw = _uniform_below(numerator, size, stream)
        return draw, _bernoulli_exp_fraction(draw, np.zeros(size, np.uint64), numerator, 0,
                                             stream)

    # Efficiency only: the acceptance rate of U, (1 - 1/e) / (n (1 - e^(-1/n))).
    rate = math.expm1(-1.0) / (numerator * math.expm1(-1.0 / numerator))
    u = _rejection_fill(count, propose, rate).astype(np.uint64)
    v = _exp_minus_one_run(None, count, stream)
    if v.size and int(v.max()) >= (FAST_LIMIT - numerator) // numerator:
        # Needs V of thousands of e-folds: probability below exp(-2^15).
        raise OverflowError("a geometric draw overflowed 63 bits")
    return (u + np.uint64(numerator) * v) // np.uint64(denominator)


def _discrete_laplace(scale: Fraction, count: int, stream: RandomBits) -> np.ndarray:
    def propose(size: int) -> tuple[np.ndarray, np.ndarray]:
        magnitude = _geometric(scale.numerator, scale.denominator, size, stream)
        negative = _sign_bits(size, stream)
        signed = magnitude.astype(np.int64)
        signed[negative] *= -1
        return signed, ~(negative & (magnitude == 0))

    # Efficiency only: all but the negative zeros, (1 + e^(-1/t)) / 2.
    return _rejection_fill(count, propose, (1.0 + math.exp(-1.0 / float(scale))) / 2.0)


def discrete_laplace(scale: int | Fraction | float, shape: int | tuple[int, ...],
                     source: RandomBits | None = None) -> np.ndarray:
    """int64 samples with P(x) ∝ exp(-|x| / scale) on the integers (the
    two-sided geometric). ``scale`` is exact: an int, a Fraction, or a float
    taken at its binary value, with numerator and denominator at most 2^48.
    Up to about 4.2e3 grid steps (a table of at most
    :data:`~privadapt.common.noise.table_inversion.MAX_TABLE_ENTRIES`) |X| is
    drawn by exact inversion of its certified CDF, then a fair sign;
    beyond, by bucketed rejection
    (:func:`~privadapt.common.noise.bucket_rejection.discrete_laplace_by_buckets`)."""
    exact = as_rational(scale, "the discrete Laplace scale")
    count, shape = sample_shape(shape)
    stream = KeystreamBits(source or SecureRandomBits())
    if geometric_tail_table_entries(exact) <= MAX_TABLE_ENTRIES:
        return _signed(sample_by_inversion(FoldedDiscreteLaplace(exact), count, stream),
                       stream).reshape(shape)
    if laplace_bucket_exponent(exact) >= 1:  # t >= 2^7: buckets of 2 or more
        return discrete_laplace_by_buckets(exact, count, stream).reshape(shape)
    return _discrete_laplace(exact, count, stream).reshape(shape)


def _signed(magnitude: np.ndarray, stream: RandomBits) -> np.ndarray:
    """X from |X| of a symmetric law and a fair sign bit each: X = 0 with
    probability P(|X| = 0) and +-k with P(|X| = k) / 2 each, exactly the
    law's P(X = k) and P(X = -k)."""
    return np.where(_sign_bits(magnitude.size, stream), -magnitude, magnitude)


# -- a uniform index ------------------------------------------------------------------


def uniform_index(count: int, source: RandomBits | None = None) -> int:
    """A uniform index on [0, count), exactly."""
    return _uniform_below_int(count, KeystreamBits(source or SecureRandomBits()))


# -- discrete Gaussian -----------------------------------------------------------------


def _square_128(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(high, low) 64-bit words of a^2 for uint64 a < 2^63."""
    low32, high32 = a & np.uint64(0xFFFFFFFF), a >> np.uint64(32)
    low_low, cross, high_high = low32 * low32, (low32 * high32) << np.uint64(1), high32 * high32
    low = low_low + (cross << np.uint64(32))
    carry = (low < low_low).astype(np.uint64)
    return high_high + (cross >> np.uint64(32)) + carry, low


def _gaussian_keep(magnitude: np.ndarray, sigma_squared: Fraction, k: int,
                   stream: RandomBits) -> np.ndarray:
    """Bernoulli(exp(-(|Y| - sigma^2 / t)^2 / (2 sigma^2))) with t = 2^k, per |Y|.

    With sigma^2 = s / r: the exponent is a^2 / (2^m d), a = ||Y| t r - s|,
    d = s r, m = 2k + 1; a^2 = h 2^m + e splits it into whole = h // d and the
    fraction ((h mod d) 2^m + e) / (d 2^m)."""
    s, r = sigma_squared.numerator, sigma_squared.denominator
    d, m, t_r = s * r, 2 * k + 1, (1 << k) * r
    fast = magnitude < np.uint64((_GAUSSIAN_FAST_LIMIT - 1) // t_r)
    scaled = np.where(fast, magnitude, np.uint64(0)) * np.uint64(t_r)
    a = np.where(scaled >= np.uint64(s), scaled - np.uint64(s), np.uint64(s) - scaled)
    high, low = _square_128(a)
    fast &= (high >> np.uint64(m)) == 0
    h = (high << np.uint64(64 - m)) | (low >> np.uint64(m))
    e = low & np.uint64((1 << m) - 1)
    keep = np.zeros(magnitude.size, dtype=bool)
    idx = np.flatnonzero(fast)
    keep[idx] = _bernoulli_exp(h[idx] // np.uint64(d), h[idx] % np.uint64(d), e[idx], d, m,
                               stream)
    for i in np.flatnonzero(~fast):
        gamma = Fraction((int(magnitude[i]) * t_r - s) ** 2, 2 * (1 << 2 * k) * d)
        keep[i] = _bernoulli_exp_scalar(gamma, stream)
    return keep


def gaussian_laplace_exponent(sigma_squared: Fraction) -> int:
    """k >= 0 with 2^k in [sigma / sqrt 2, sigma sqrt 2) (or 0 for sigma < 1/sqrt 2):
    the discrete Laplace scale t = 2^k of the proposal. Algorithm 3 is exact for
    any t; it accepts with probability about sqrt(2 pi) sigma / (2t)
    exp(-sigma^2 / (2 t^2)), at least 0.65 on this range (0.76 at t = sigma)."""
    k = 0
    while 2 * Fraction(4**k) < sigma_squared:
        k += 1
    return k


def discrete_gaussian(sigma_squared: int | Fraction | float, shape: int | tuple[int, ...],
                      source: RandomBits | None = None) -> np.ndarray:
    """int64 samples of N_Z(0, sigma^2): P(x) ∝ exp(-x^2 / (2 sigma^2)) on the
    integers. ``sigma_squared`` is exact (int, Fraction, or float at its binary
    value) with numerator times denominator at most 2^56, so sigma lies between
    2^-28 and 2^28: sample on a coarser grid for more. The variance is slightly
    below sigma^2 (equal within 1e-13 relative for sigma >= 1)."""
    exact = as_rational(sigma_squared, "the discrete Gaussian sigma^2", MAX_GAUSSIAN_PRODUCT)
    if exact.numerator * exact.denominator > MAX_GAUSSIAN_PRODUCT:
        raise ValueError(
            f"sigma^2 = {exact} needs numerator x denominator at most 2^56 (sigma between "
            "2^-28 and 2^28 grid steps): sample on a coarser noise grid"
        )
    count, shape = sample_shape(shape)
    stream = KeystreamBits(source or SecureRandomBits())
    if gaussian_table_entries(exact) <= MAX_TABLE_ENTRIES:
        return _discrete_gaussian_by_table(exact, count, stream).reshape(shape)
    if bucket_width_exponent(exact) >= 1:  # sigma >= 2^9: buckets of 2 or more
        return discrete_gaussian_by_buckets(exact, count, stream).reshape(shape)
    return _discrete_gaussian_by_rejection(exact, count, stream).reshape(shape)


def _discrete_gaussian_by_table(sigma_squared: Fraction, count: int,
                                stream: RandomBits) -> np.ndarray:
    """|X| by exact inversion of its certified CDF (one word, almost always:
    :mod:`privadapt.common.noise.table_inversion`), then a fair sign."""
    return _signed(sample_by_inversion(FoldedDiscreteGaussian(sigma_squared), count, stream),
                   stream)


def _discrete_gaussian_by_rejection(exact: Fraction, count: int,
                                    stream: RandomBits) -> np.ndarray:
    """Algorithm 3 (module docstring): for a sigma whose table would be too long."""
    k = gaussian_laplace_exponent(exact)

    def propose(size: int) -> tuple[np.ndarray, np.ndarray]:
        proposal = _discrete_laplace(Fraction(1 << k), size, stream)
        return proposal, _gaussian_keep(np.abs(proposal).astype(np.uint64), exact, k, stream)

    ratio = 2.0**k / math.sqrt(float(exact))  # t / sigma; efficiency only, as above
    return _rejection_fill(count, propose, min(0.9, max(0.3, 1.2533 / ratio
                                                        * math.exp(-0.5 / ratio**2))))
