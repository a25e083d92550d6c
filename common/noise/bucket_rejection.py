"""The discrete Gaussian at large sigma and the discrete Laplace at large t,
exactly, by rejection from a bucketed envelope: about two words and twenty
array passes per sample.

Why: below about 2.4e4 grid steps the discrete Gaussian is drawn by inversion
of its certified CDF table (:mod:`privadapt.common.noise.table_inversion`),
but real releases sit on grids 2^-f with f in [16, 48], so sigma in steps is
often 2^16..2^28 and the table would be far too long; CKS Algorithm 3 serves
those at about ten times the float sampler. Here the table is over *buckets*
of w = 2^j integers, w about sigma / 2^8, so it stays a few thousand entries
long whatever sigma is, and one cheap exact Bernoulli fills in the rest.
The discrete Laplace past its table (t above about 4.2e3, where CKS
Algorithm 2 served) takes the same scheme with a geometric bucket law
(:func:`discrete_laplace_by_buckets`).

The sampler (sigma^2 = s / r rational, g(y) = exp(-y^2 / (2 sigma^2))):

1. B >= 0 from the one-sided bucket law H(b) ∝ g(b w) = exp(-b^2 / (2 sigma_b^2)),
   sigma_b^2 = sigma^2 / w^2 (:class:`OneSidedDiscreteGaussian`, by exact
   inversion of its certified CDF: one word);
2. one word W: U = its low j bits, uniform on {0, ..., w - 1}, Y = B w + U;
   its bit j is a fair sign S; its top 32 bits a lane L;
3. accept Y with probability g(Y) / g(B w) = exp(-gamma),
   gamma = U (2 B w + U) r / (2 s), a rational decided by CKS Algorithm 1
   (Canonne, Kamath and Steinke 2020) in integers (:func:`bucket_acceptance`),
   whose first step, A_1 ~ Bernoulli(gamma), is [V < gamma] for the uniform
   real V = (L + V') / 2^32 -- V' the bits not read yet, read only in the rare
   case L alone cannot decide;
4. X = S Y, rejecting (S = -, Y = 0) so zero is not counted twice.

The bits of W are disjoint (j <= 20 < 32 for sigma <= 2^28), so U, S and L
are independent uniforms, and independent of B; each rejected attempt is
discarded whole.

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
acceptance; :func:`~privadapt.common.noise.bernoulli._rejection_fill` keeps
the accepted ones in order, as the one-at-a-time loop does). No float
decides anything: H's table brackets are certified integers, U and the sign
are bits of the stream, and the Bernoulli compares uniform integers with
integers.

Cost: gamma is at most about w |Y| / sigma^2, below 0.04 up to 10 sigma, so
an attempt is accepted with probability about 1 - 0.8 w / sigma (above 0.99)
and Algorithm 1 almost always stops at A_1 = 0, decided by the lane: two
words an attempt (the table's and W) and about twenty array passes, about
1.2 times the float sampler's time at 1e5 samples (benchmarks/discrete_noise.py),
against about 10-20 times for Algorithm 3.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from privadapt.common.noise.bernoulli import (
    _bernoulli_exp,
    _bernoulli_exp_fraction,
    _bernoulli_exp_scalar,
    _rejection_fill,
)
from privadapt.common.noise.certified_laws import (
    gaussian_weight_window,
    geometric_weight_window,
)
from privadapt.common.noise.floating import RandomBits
from privadapt.common.noise.table_inversion import CdfWindow, sample_by_inversion

#: sigma_b^2 = sigma^2 / w^2 is taken in [2^16, 2^18): the bucket table has
#: about 10 sigma_b, at most 5.5e3, entries and an attempt is rejected with
#: probability about 0.8 / sigma_b, at most 0.3%.
BUCKET_SIGMA_BITS = 8
_FAST_LIMIT = 2**63
#: t / w is taken in [2^6, 2^7): an attempt is rejected with probability
#: about w / (2 t), at most 0.8%, and the bucket table (ratio exp(-w / t))
#: has about 50 t / w entries.
LAPLACE_BUCKET_BITS = 6


@dataclass(frozen=True)
class OneSidedDiscreteGaussian:
    """The law on {0, 1, ...} with weights exp(-k^2 / (2 sigma^2)), all k
    alike (unlike :class:`~privadapt.common.noise.certified_laws.FoldedDiscreteGaussian`,
    which doubles k >= 1): the bucket law H. The same recurrence certifies it:
    exp(-(k+1)^2 / (2 s)) = exp(-k^2 / (2 s)) r_k with r_k = exp(-(2k + 1) / (2 s))
    = r_0 c^k, c = exp(-1 / s), every product rounded down for the lower bound
    and up for the upper at bits + 64 bits; the ratios decrease, so the weights
    after k sum to at most w_(k+1) / (1 - r_(k+1))."""

    sigma_squared: Fraction

    def cdf_window(self, bits: int) -> CdfWindow:
        return gaussian_weight_window(self.sigma_squared, bits, 1)


def bucket_width_exponent(sigma_squared: Fraction) -> int:
    """j with sigma^2 / 4^j in [2^16, 2^18) (0 when sigma < 2^8): buckets of
    2^j integers, sigma_b = sigma / 2^j in [2^8, 2^9). Any j >= 0 is exact;
    this one keeps the table short and the acceptance above 0.99."""
    j = 0
    while sigma_squared >= 4 ** (j + 1 + BUCKET_SIGMA_BITS):
        j += 1
    return j


def bucket_acceptance(bucket: np.ndarray, offset: np.ndarray, lane: np.ndarray, j: int,
                      sigma_squared: Fraction, stream: RandomBits) -> np.ndarray:
    """Bernoulli(g(B w + U) / g(B w)) = Bernoulli(exp(-gamma)) per element,
    w = 2^j, gamma = U (2 B w + U) r / (2 s) = N / d for sigma^2 = s / r, its
    first step decided by ``lane`` (:func:`bernoulli_exp_by_lane`). Elements
    with gamma >= 1, or whose N could pass 2^63 (B beyond about
    2^63 / (2 w^2 r), hundreds of sigma out), take the general samplers
    instead, with fresh words (their lane is discarded)."""
    s, r = sigma_squared.numerator, sigma_squared.denominator
    w, d = 1 << j, 2 * s
    # U (2 B w + U) r < w^2 (2 B + 1) r <= 2^63 - 1 whenever B <= largest.
    largest = ((_FAST_LIMIT - 1) // (w * w * r) - 1) // 2
    size = bucket.size
    b = bucket.view(np.uint64) if bucket.dtype == np.int64 else bucket.astype(np.uint64)
    slow = (np.flatnonzero(b > np.uint64(largest)) if size and largest >= 0
            else np.arange(size) if largest < 0 else np.zeros(0, np.int64))
    given_offset = offset
    if slow.size:
        b, offset = b.copy(), offset.copy()
        b[slow], offset[slow] = 0, 0
    numerator = offset * (np.uint64(2 * w) * b + offset)
    if r != 1:
        numerator *= np.uint64(r)
    whole = np.flatnonzero(numerator >= np.uint64(d))  # gamma >= 1: far out, rare
    if whole.size:
        numerator = numerator.copy()
        numerator[whole] = 0
    keep = bernoulli_exp_by_lane(numerator, d, lane, stream)
    if whole.size:  # exp(-gamma) from scratch (the lane's decision is discarded)
        n = offset[whole] * (np.uint64(2 * w) * b[whole] + offset[whole]) * np.uint64(r)
        whole_part = n // np.uint64(d)
        keep[whole] = _bernoulli_exp(whole_part, n - whole_part * np.uint64(d),
                                     np.zeros(whole.size, np.uint64), d, 0, stream)
    for i in slow:
        big_b, big_u = int(bucket[i]), int(given_offset[i])
        keep[i] = _bernoulli_exp_scalar(Fraction(big_u * (2 * big_b * w + big_u) * r, d), stream)
    return keep


def bernoulli_exp_by_lane(numerator: np.ndarray, d: int, lane: np.ndarray,
                          stream: RandomBits) -> np.ndarray:
    """Bernoulli(exp(-gamma)), gamma = ``numerator`` / d < 1 per element
    (uint64 numerators, d < 2^63), by Algorithm 1 (CKS 2020), whose first step
    A_1 ~ Bernoulli(gamma) is [V < gamma] for the uniform real
    V = (``lane`` + V') / 2^32 (``lane`` uniform 32-bit integers, V' the unread
    bits). With d in [d_hi 2^k, (d_hi + 1) 2^k), d_hi < 2^31, and
    M = N 2^(32 - k) (below 2^63 as N < d): lane d_hi >= M proves V d >= N
    (A_1 = 0: accept, k = 1 is odd) and (lane + 1)(d_hi + 1) <= M proves
    V d < N (A_1 = 1: the loop resumes at k = 2,
    :func:`~privadapt.common.noise.bernoulli._bernoulli_exp_fraction`); the few
    lanes between read more words (:func:`_first_step_by_words`)."""
    k = max(0, d.bit_length() - 31)
    d_hi = d >> k
    scaled = numerator << np.uint64(32 - k)
    lane = lane.astype(np.uint64, copy=False)
    keep = lane * np.uint64(d_hi) >= scaled
    go_on = (lane + np.uint64(1)) * np.uint64(d_hi + 1) <= scaled
    resume = np.flatnonzero(go_on)
    if resume.size:
        keep[resume] = _bernoulli_exp_fraction(numerator[resume], np.zeros(resume.size, np.uint64),
                                               d, 0, stream, first_k=2)
    for i in np.flatnonzero(~keep & ~go_on):  # ~3 lanes in 2^32 at d >= 2^30; ~gamma 2^32 / d below
        keep[i] = _first_step_by_words(int(lane[i]), int(numerator[i]), d, stream)
    return keep


def _first_step_by_words(lane: int, numerator: int, d: int, stream: RandomBits) -> bool:
    """Algorithm 1 for gamma = numerator / d < 1 when the 32-bit ``lane``
    leaves A_1 = [V < gamma] open: V = (lane + V') / 2^32 gains 64 bits a word
    until [u, u + 1) / 2^bits lies on one side of gamma (it ends: gamma is one
    point), then A_1 = 0 accepts and A_1 = 1 resumes the loop at k = 2."""
    u, bits = lane, 32
    while True:
        u, bits = (u << 64) | int(stream.words(1)[0]), bits + 64
        if u * d >= numerator << bits:
            return True
        if (u + 1) * d <= numerator << bits:
            return _bernoulli_exp_scalar(Fraction(numerator, d), stream, first_k=2)


def discrete_gaussian_by_buckets(sigma_squared: Fraction, count: int,
                                 stream: RandomBits) -> np.ndarray:
    """``count`` int64 draws of N_Z(0, sigma^2) by the bucketed rejection of
    the module docstring; ``sigma_squared`` as
    :func:`~privadapt.common.noise.discrete.discrete_gaussian` admits it
    (sigma up to 2^28, so buckets of at most 2^20)."""
    j = bucket_width_exponent(sigma_squared)
    if j >= 32:
        raise ValueError("buckets of 2^32 or more need sigma above 2^40: not admissible")
    buckets = OneSidedDiscreteGaussian(sigma_squared / 4**j)
    limit = np.int64(2**62 >> j)

    def propose(size: int) -> tuple[np.ndarray, np.ndarray]:
        bucket = sample_by_inversion(buckets, size, stream)
        if bucket.size and int(bucket.max()) >= limit:
            # B w would pass 2^62: about 2^(62 - j) / sigma_b sigmas out of the bucket law.
            raise OverflowError("a bucket index overflowed 62 bits")
        # One word a proposal: U in bits 0..j-1, the sign in bit j, the lane in 32..63.
        word = stream.words(size)
        offset = word & np.uint64((1 << j) - 1)
        negative = (word >> np.uint64(j)) & np.uint64(1) == 1
        magnitude = (bucket << np.int64(j)) + offset.view(np.int64)
        keep = bucket_acceptance(bucket, offset, word >> np.uint64(32), j, sigma_squared, stream)
        return np.where(negative, -magnitude, magnitude), keep & ~(negative & (magnitude == 0))

    return _rejection_fill(count, propose, 0.99)


# -- the discrete Laplace ------------------------------------------------------------


@dataclass(frozen=True)
class OneSidedGeometric:
    """The law on {0, 1, ...} with weights exp(-k x), x > 0 rational, all k
    alike: the bucket law of the discrete Laplace. Weights by the recurrence
    w_(k+1) = w_k exp(-x), rounded down for the lower bound and up for the
    upper at bits + 64 bits; those after k sum to w_(k+1) / (1 - exp(-x))."""

    exponent: Fraction

    def cdf_window(self, bits: int) -> CdfWindow:
        return geometric_weight_window(self.exponent, bits, 1)


def laplace_bucket_exponent(scale: Fraction) -> int:
    """j with t / 2^j in [2^LAPLACE_BUCKET_BITS, 2^(LAPLACE_BUCKET_BITS + 1)) (0 for
    a smaller t): buckets of 2^j integers. Any j >= 0 is exact; this one
    keeps the bucket table near 8e3 entries and the acceptance above 0.99."""
    j = 0
    while scale >= 2 ** (j + 1 + LAPLACE_BUCKET_BITS):
        j += 1
    return j



def discrete_laplace_by_buckets(scale: Fraction, count: int, stream: RandomBits) -> np.ndarray:
    """``count`` int64 draws of the discrete Laplace P(x) ∝ exp(-|x| / t),
    t = ``scale`` = n / m, by the same bucketed rejection: B from
    :class:`OneSidedGeometric` with x = w / t (weights exp(-B w / t), the
    target's at the bucket's point nearest 0), U uniform on {0, ..., w - 1},
    Y = B w + U accepted with probability exp(-U / t) = exp(-U m / n) (U m < n:
    gamma < 1), a fair sign, rejecting (-, 0). One attempt gives y
    probability exp(-B w / t) exp(-U / t) / (w Z) = exp(-y / t) / (w Z): exact,
    by the argument of the module docstring."""
    j = laplace_bucket_exponent(scale)
    n, m = scale.numerator, scale.denominator
    buckets = OneSidedGeometric(Fraction(1 << j) / scale)
    limit = np.int64(2**62 >> j)
    mask = np.uint64((1 << j) - 1)

    def propose(size: int) -> tuple[np.ndarray, np.ndarray]:
        bucket = sample_by_inversion(buckets, size, stream)
        if bucket.size and int(bucket.max()) >= limit:
            raise OverflowError("a bucket index overflowed 62 bits")
        # The sign in bit 0 and the lane in bits 32..63 of one word; U in bits
        # 1..j of it when they fit below the lane, else in a word of its own.
        word = stream.words(size)
        offset = ((word >> np.uint64(1)) if j <= 31 else stream.words(size)) & mask
        negative = word & np.uint64(1) == 1
        magnitude = (bucket << np.int64(j)) + offset.view(np.int64)
        keep = bernoulli_exp_by_lane(offset * np.uint64(m), n, word >> np.uint64(32), stream)
        return np.where(negative, -magnitude, magnitude), keep & ~(negative & (magnitude == 0))

    return _rejection_fill(count, propose, 0.99)
