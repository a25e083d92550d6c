"""The discrete Gaussian at large sigma, exactly, by rejection from a bucketed
envelope: about two words and a dozen array passes per sample.

Why: below about 2.4e4 grid steps the discrete Gaussian is drawn by inversion
of its certified CDF table (:mod:`privadapt.common.exact_table_inversion`),
but real releases sit on grids 2^-f with f in [16, 48], so sigma in steps is
often 2^16..2^28 and the table would be far too long; CKS Algorithm 3 serves
those at about ten times the float sampler. Here the table is over *buckets*
of w = 2^j integers, w about sigma / 2^8, so it stays a few thousand entries
long whatever sigma is, and one cheap exact Bernoulli fills in the rest.

The sampler (sigma^2 = s / r rational, g(y) = exp(-y^2 / (2 sigma^2))):

1. B >= 0 from the one-sided bucket law H(b) ∝ g(b w) = exp(-b^2 / (2 sigma_b^2)),
   sigma_b^2 = sigma^2 / w^2 (:class:`OneSidedDiscreteGaussian`, by exact
   inversion of its certified CDF: one word);
2. U uniform on {0, ..., w - 1} (a half-word), Y = B w + U;
3. accept Y with probability g(Y) / g(B w) = exp(-gamma),
   gamma = U (2 B w + U) r / (2 s), a rational decided by CKS Algorithm 1
   (Canonne, Kamath and Steinke 2020) in integers (:func:`bucket_acceptance`);
4. a fair sign S; X = S Y, rejecting (S = -, Y = 0) so zero is not counted twice.

Why this is exact (the envelope, or rejection, lemma). One attempt outputs
y >= 0 and accepts with probability
H(floor(y / w)) (1 / w) g(y) / g(floor(y / w) w) = g(y) / (w Z_H),
Z_H = sum_b g(b w): proportional to g(y), because the envelope g(B w) is the
*exact* weight the bucket law used, and g(y) <= g(B w) on the bucket (its
point nearest 0 is B w), so every acceptance probability is at most 1. The
sign step gives x != 0 probability g(|x|) / (2 w Z_H) and x = 0 probability
g(0) / (2 w Z_H): proportional to g(x) on the integers. Attempts are
independent and repeated until one is accepted, so the output is exactly
N_Z(0, sigma^2) (a rejection sampler returns its target law conditioned on
acceptance; :func:`~privadapt.common.discrete_noise._rejection_fill` keeps
the accepted ones in order, as the one-at-a-time loop does). No float
decides anything: H's table brackets are certified integers, U and the sign
are bits of the stream, and the Bernoulli compares uniform integers with
integers.

Cost: gamma is at most about w |Y| / sigma^2, below 0.04 up to 10 sigma, so
an attempt is accepted with probability about 1 - 0.8 w / sigma (above 0.99)
and Algorithm 1 almost always stops after one comparison of a word.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from privadapt.common.discrete_noise import (
    _bernoulli_exp,
    _bernoulli_exp_scalar,
    _rejection_fill,
    _sign_bits,
    _uniform_below,
)
from privadapt.common.exact_laws import exp_minus_bounds
from privadapt.common.exact_table_inversion import CdfWindow, normalised_window, sample_by_inversion
from privadapt.common.noise import RandomBits

_GUARD_BITS = 64
_TAIL_BITS = 8
#: sigma_b^2 = sigma^2 / w^2 is taken in [2^16, 2^18): the bucket table has
#: about 10 sigma_b, at most 5.5e3, entries and an attempt is rejected with
#: probability about 0.8 / sigma_b, at most 0.3%.
BUCKET_SIGMA_BITS = 8
_FAST_LIMIT = 2**63


@dataclass(frozen=True)
class OneSidedDiscreteGaussian:
    """The law on {0, 1, ...} with weights exp(-k^2 / (2 sigma^2)), all k
    alike (unlike :class:`~privadapt.common.exact_laws.FoldedDiscreteGaussian`,
    which doubles k >= 1): the bucket law H. The same recurrence certifies it:
    exp(-(k+1)^2 / (2 s)) = exp(-k^2 / (2 s)) r_k with r_k = exp(-(2k + 1) / (2 s))
    = r_0 c^k, c = exp(-1 / s), every product rounded down for the lower bound
    and up for the upper at bits + 64 bits; the ratios decrease, so the weights
    after k sum to at most w_(k+1) / (1 - r_(k+1))."""

    sigma_squared: Fraction

    def cdf_window(self, bits: int) -> CdfWindow:
        p = bits + _GUARD_BITS
        one = 1 << p
        ratio_lo, ratio_hi = exp_minus_bounds(1 / (2 * self.sigma_squared), p)
        c_lo, c_hi = exp_minus_bounds(1 / self.sigma_squared, p)
        e_lo = e_hi = one
        lower, upper = [one], [one]
        threshold = 1 << (p - bits - _TAIL_BITS)
        while True:
            e_lo, e_hi = (e_lo * ratio_lo) >> p, -((-e_hi * ratio_hi) >> p)
            ratio_lo, ratio_hi = (ratio_lo * c_lo) >> p, -((-ratio_hi * c_hi) >> p)
            if ratio_hi < one:
                tail = -((-e_hi << p) // (one - ratio_hi))
                if tail <= threshold:
                    return normalised_window(bits, 0, lower, upper, 0, tail)
            lower.append(e_lo)
            upper.append(e_hi)


def bucket_width_exponent(sigma_squared: Fraction) -> int:
    """j with sigma^2 / 4^j in [2^16, 2^18) (0 when sigma < 2^8): buckets of
    2^j integers, sigma_b = sigma / 2^j in [2^8, 2^9). Any j >= 0 is exact;
    this one keeps the table short and the acceptance above 0.99."""
    j = 0
    while sigma_squared >= 4 ** (j + 1 + BUCKET_SIGMA_BITS):
        j += 1
    return j


def bucket_acceptance(bucket: np.ndarray, offset: np.ndarray, j: int,
                      sigma_squared: Fraction, stream: RandomBits) -> np.ndarray:
    """Bernoulli(g(B w + U) / g(B w)) per element, w = 2^j: exp(-gamma) with
    gamma = U (2 B w + U) r / (2 s) for sigma^2 = s / r, split as whole + c / d
    (d = 2 s) for :func:`~privadapt.common.discrete_noise._bernoulli_exp`.
    Elements whose numerator could pass 2^63 (B beyond about 2^63 / (2 w^2 r),
    hundreds of sigma out) finish in exact Python integers."""
    s, r = sigma_squared.numerator, sigma_squared.denominator
    w, d = 1 << j, 2 * s
    # U (2 B w + U) r < w^2 (2 B + 1) r <= 2^63 - 1 whenever B <= largest.
    largest = ((_FAST_LIMIT - 1) // (w * w * r) - 1) // 2
    bucket = bucket.astype(np.uint64)
    fast = bucket <= np.uint64(largest) if largest >= 0 else np.zeros(bucket.size, bool)
    b, u = np.where(fast, bucket, np.uint64(0)), np.where(fast, offset, np.uint64(0))
    numerator = u * (np.uint64(2 * w) * b + u) * np.uint64(r)
    keep = np.zeros(bucket.size, dtype=bool)
    idx = np.flatnonzero(fast)
    if idx.size:
        n = numerator[idx]
        whole = n // np.uint64(d)
        keep[idx] = _bernoulli_exp(whole, n - whole * np.uint64(d), np.zeros(idx.size, np.uint64),
                                   d, 0, stream)
    for i in np.flatnonzero(~fast):
        big_b, big_u = int(bucket[i]), int(offset[i])
        keep[i] = _bernoulli_exp_scalar(Fraction(big_u * (2 * big_b * w + big_u) * r, d), stream)
    return keep


def discrete_gaussian_by_buckets(sigma_squared: Fraction, count: int,
                                 stream: RandomBits) -> np.ndarray:
    """``count`` int64 draws of N_Z(0, sigma^2) by the bucketed rejection of
    the module docstring; ``sigma_squared`` as
    :func:`~privadapt.common.discrete_noise.discrete_gaussian` admits it."""
    j = bucket_width_exponent(sigma_squared)
    buckets = OneSidedDiscreteGaussian(sigma_squared / 4**j)
    limit = np.int64(2**62 >> j)

    def propose(size: int) -> tuple[np.ndarray, np.ndarray]:
        bucket = sample_by_inversion(buckets, size, stream)
        if bucket.size and int(bucket.max()) >= limit:
            # B w would pass 2^62: about 2^(62 - j) / sigma_b sigmas out of the bucket law.
            raise OverflowError("a bucket index overflowed 62 bits")
        offset = _uniform_below(1 << j, size, stream) if j else np.zeros(size, np.uint64)
        magnitude = (bucket << np.int64(j)) + offset.astype(np.int64)
        negative = _sign_bits(size, stream)
        keep = bucket_acceptance(bucket, offset, j, sigma_squared, stream)
        return np.where(negative, -magnitude, magnitude), keep & ~(negative & (magnitude == 0))

    return _rejection_fill(count, propose, 0.99)
