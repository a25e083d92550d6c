"""Distributed integer noise: each of K sites adds a share, and the shares of
any K - t honest sites sum to exactly the discrete noise of the release
(DESIGN.md section 2; t is the collusion tolerance).

* :func:`polya_share`: Polya (negative-binomial) differences summing to the
  discrete Laplace of :func:`privadapt.common.noise.discrete.discrete_laplace`;
* :func:`skellam_share`: Poisson differences summing to the Skellam
  (Agarwal, Kairouz and Liu 2021), the integer stand-in for Gaussian noise that,
  unlike the discrete Gaussian, is closed under sums.

Each derivation is in its function's docstring; the accounting is in
:mod:`privadapt.common.accounting.discrete`. The Polya shares are exact: their
negative binomials are compound Poisson sums of logarithmic jumps decided by
integer comparisons of CSPRNG words
(:func:`privadapt.common.noise.count_noise.negative_binomial_difference`), or
for moderate scales by inversion of their certified CDF
(:mod:`privadapt.common.noise.table_inversion`), as are the Skellam shares'
Poissons. LIMITATION (see :func:`_float_generator`): a Skellam share of a
Poisson rate above about 1.4e8 still draws from numpy; its sum is an exact integer.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from privadapt.common.noise.certified_laws import (
    NegativeBinomial,
    RationalPoisson,
    geometric_tail_table_entries,
    poisson_table_entries,
)
from privadapt.common.noise.count_noise import negative_binomial_difference
from privadapt.common.noise.discrete import KeystreamBits, as_rational, sample_shape
from privadapt.common.noise.floating import RandomBits, SecureRandomBits, honest_share_count
from privadapt.common.noise.table_inversion import MAX_TABLE_ENTRIES, sample_by_inversion


def _float_generator(source: RandomBits) -> np.random.Generator:
    """A numpy Generator (PCG64) seeded with 256 fresh bits of ``source``.

    LIMITATION: numpy's Poisson sampler (for :func:`skellam_share`) decides in
    double precision (products of uniforms, transformed rejection), so its
    integer output follows the target law only up to
    rounding: relative errors of order 1e-15 in the probabilities of the bulk,
    and an unquantified distortion in tails far below 1e-300. Nothing leaks
    *through the bits* of a float -- the share is an integer and only the masked
    sum is ever seen -- but the pmf the accountant assumes is not met exactly,
    and PCG64 is not a cryptographic generator (its 128-bit state is fresh from
    the source every call and its outputs are never published individually).
    An exact integer Poisson sampler for large rational rates is the follow-up
    (the Polya shares' Poisson count has a small rate and is exact already)."""
    seed = int.from_bytes(np.asarray(source.words(4), dtype=np.uint64).tobytes(), "little")
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed)))


def polya_share(scale: int | Fraction | float, num_participants: int,
                collusion_tolerance: int, shape: int | tuple[int, ...],
                source: RandomBits | None = None) -> np.ndarray:
    """One site's int64 share of discrete Laplace noise of scale t (P(x) ∝
    exp(-|x| / t)), among K sites of which up to ``collusion_tolerance`` collude.

    Derivation. With q = exp(-1/t), the two-sided geometric is G1 - G2 for two
    independent geometrics P(G = g) = (1 - q) q^g: the difference has
    P(x) ∝ sum_g q^g q^(g + |x|) ∝ q^|x|. A geometric is the negative binomial
    NB(1, q), and NB(r, q) has generating function ((1 - q) / (1 - q z))^r, so
    NB shapes add: n independent NB(1/n, q) sum to NB(1, q). Each site draws
    NB(1/n, q) - NB(1/n, q) (a Polya difference) with n = K - t, so any n of
    the K shares sum to exactly the discrete Laplace of scale t (and all K, when
    nobody colludes, to more noise: NB(K/n) differences). What t colluders imply:
    they (with the coordinator) can subtract their own shares from the sum; what
    is left is the sum of at least K - t honest shares, which is the discrete
    Laplace plus independent noise -- at least as private as the discrete
    Laplace alone. More than t colluders leave less than the full noise.

    Exact: both negative binomials are drawn by inversion of their certified
    CDF (:class:`privadapt.common.noise.certified_laws.NegativeBinomial`, one word each
    almost always) while its table has at most
    :data:`~privadapt.common.noise.table_inversion.MAX_TABLE_ENTRIES` entries
    (about t <= 4.2e3 grid steps); for a larger scale the difference is a
    compound Poisson sum of logarithmic jumps, with bounded expected work for
    every scale up to 2^48 (:mod:`privadapt.common.noise.count_noise`). Both
    decide by integer comparisons of words of a ChaCha20 keystream keyed by
    256 bits of ``source``, so the pmf the accountant assumes is met exactly."""
    honest = honest_share_count(num_participants, collusion_tolerance)
    exact = as_rational(scale, "the discrete Laplace scale")
    count, shape = sample_shape(shape)
    stream = KeystreamBits(source or SecureRandomBits())
    if geometric_tail_table_entries(exact) <= MAX_TABLE_ENTRIES:
        both = sample_by_inversion(NegativeBinomial(exact, honest), 2 * count, stream)
        return (both[:count] - both[count:]).reshape(shape)
    return negative_binomial_difference(exact, honest, count, stream).reshape(shape)


def skellam_share(variance: int | Fraction | float, num_participants: int,
                  collusion_tolerance: int, shape: int | tuple[int, ...],
                  source: RandomBits | None = None) -> np.ndarray:
    """One site's int64 share of Skellam noise of the given ``variance``
    (Agarwal, Kairouz and Liu 2021): Poisson(v / (2n)) - Poisson(v / (2n)) with
    n = K - t. Poisson rates add, so n shares sum to Poisson(v/2) - Poisson(v/2),
    the symmetric Skellam of variance v; t colluders leave at least that (as for
    :func:`polya_share`). Accounted by its RDP
    (:func:`privadapt.common.accounting.discrete.skellam_epsilon`).

    Exact while the Poisson table has at most
    :data:`~privadapt.common.noise.table_inversion.MAX_TABLE_ENTRIES` entries
    (a rate v / (2n) up to about 1.4e8): both Poissons by inversion of their
    certified CDF (:class:`privadapt.common.noise.certified_laws.RationalPoisson`).
    LIMITATION: above that rate they come from numpy (see :func:`_float_generator`)."""
    honest = honest_share_count(num_participants, collusion_tolerance)
    exact = as_rational(variance, "the Skellam variance")
    count, shape = sample_shape(shape)
    rate = exact / (2 * honest)
    if poisson_table_entries(rate) <= MAX_TABLE_ENTRIES:
        stream = KeystreamBits(source or SecureRandomBits())
        both = sample_by_inversion(RationalPoisson(rate), 2 * count, stream)
        return (both[:count] - both[count:]).reshape(shape)
    generator = _float_generator(source or SecureRandomBits())
    first = generator.poisson(float(rate), count)
    return (first - generator.poisson(float(rate), count)).astype(np.int64).reshape(shape)
