"""Exact inversion of certified CDF tables (common/noise/table_inversion.py,
common/noise/certified_laws.py): the integer brackets hold the exact CDF, the fast path
and the forced fallback (a coarse table, so most words and the far tail go
through the lazy path) both follow the exact pmf, a word between the bounds
is decided by the next word, and the samplers that remain for large scales
(CKS, compound Poisson, numpy's Poisson) are still reached and exact.

Each distribution test has a twin that rejects a slightly wrong parameter,
so it could fail."""

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from scipy import stats

from privadapt.common.noise import count_noise as exact_count_noise
from privadapt.common.noise import discrete as discrete_noise
from privadapt.common.noise import discrete_shares
from privadapt.common.noise.certified_laws import (
    FoldedDiscreteGaussian,
    FoldedDiscreteLaplace,
    NegativeBinomial,
    RationalPoisson,
    gaussian_table_entries,
    geometric_tail_table_entries,
    poisson_table_entries,
)
from privadapt.common.noise.discrete import KeystreamBits, discrete_gaussian, discrete_laplace
from privadapt.common.noise.discrete_shares import polya_share, skellam_share
from privadapt.common.noise.floating import SeededRandomBits
from privadapt.common.noise.table_inversion import (
    _decide_lazily,
    inversion_table,
    sample_by_inversion,
)
from tests.common.noise.test_discrete_noise import (
    STRICT,
    chi_square_pvalue,
    discrete_gaussian_pmf,
    discrete_laplace_pmf,
    skellam_pmf,
)
from tests.common.noise.test_discrete_shares import CountingStream

mpmath.mp.dps = 80


def stream(seed: int) -> KeystreamBits:
    return KeystreamBits(SeededRandomBits(seed))


def folded_laplace_pmf(scale: float):
    signed = discrete_laplace_pmf(scale)
    return lambda k: np.where(np.asarray(k) == 0, signed(0), 2 * signed(k)) * (np.asarray(k) >= 0)


def folded_gaussian_pmf(sigma_squared: float):
    signed = discrete_gaussian_pmf(sigma_squared)
    return lambda k: np.where(np.asarray(k) == 0, signed(0), 2 * signed(k)) * (np.asarray(k) >= 0)


def negative_binomial_pmf(scale: float, honest: int):
    return stats.nbinom(1 / honest, -math.expm1(-1 / scale)).pmf


def reference_cdf(law, k: int) -> mpmath.mpf:
    """F_k at 80 digits, from the law's closed-form pmf (independent of the
    fixed-point recurrences)."""
    if isinstance(law, FoldedDiscreteGaussian):
        s = mpmath.mpf(law.sigma_squared.numerator) / law.sigma_squared.denominator
        weight = lambda j: mpmath.exp(-mpmath.mpf(j) ** 2 / (2 * s)) * (1 if j == 0 else 2)  # noqa: E731
        reach = int(40 * mpmath.sqrt(s)) + 40
        return mpmath.fsum(weight(j) for j in range(k + 1)) / mpmath.fsum(
            weight(j) for j in range(reach))
    if isinstance(law, FoldedDiscreteLaplace):  # P(|X| <= k) = 1 - 2 q^(k+1) / (1 + q)
        q = mpmath.exp(-mpmath.mpf(law.scale.denominator) / law.scale.numerator)
        return 1 - 2 * q ** (k + 1) / (1 + q)
    if isinstance(law, NegativeBinomial):
        r = mpmath.mpf(1) / law.honest
        q = mpmath.exp(-mpmath.mpf(law.scale.denominator) / law.scale.numerator)
        return mpmath.betainc(r, k + 1, 0, 1 - q, regularized=True)
    rate = mpmath.mpf(law.rate.numerator) / law.rate.denominator
    return mpmath.gammainc(k + 1, rate, mpmath.inf, regularized=True)


LAWS = [FoldedDiscreteGaussian(Fraction(1, 4)), FoldedDiscreteGaussian(Fraction(10, 3)),
        FoldedDiscreteGaussian(Fraction(2500)), FoldedDiscreteLaplace(Fraction(1, 3)),
        FoldedDiscreteLaplace(Fraction(1000)), NegativeBinomial(Fraction(15, 2), 3),
        NegativeBinomial(Fraction(1, 3), 2), NegativeBinomial(Fraction(40), 1),
        RationalPoisson(Fraction(7, 3)), RationalPoisson(Fraction(1, 1000)),
        RationalPoisson(Fraction(250_000))]


@pytest.mark.parametrize("law", LAWS, ids=repr)
@pytest.mark.parametrize("bits", [64, 128])
def test_windows_bracket_the_exact_cdf(law, bits):
    window = law.cdf_window(bits)
    entries = len(window.lower)
    checked = sorted({0, 1, entries // 3, entries // 2, entries - 2, entries - 1} - {-1, -2})
    for i in checked:
        exact = reference_cdf(law, window.first + i) * 2**bits
        assert window.lower[i] <= exact <= window.upper[i]
        assert window.upper[i] - window.lower[i] <= 3  # a few units wide
    if window.first:
        assert reference_cdf(law, window.first - 1) * 2**bits <= window.start
    assert 2**bits - window.lower[-1] <= 2  # the mass past it is below 2^-(bits + 8)
    assert list(window.lower) == sorted(window.lower)
    assert list(window.upper) == sorted(window.upper)


@pytest.mark.parametrize("law,estimate", [
    (FoldedDiscreteGaussian(Fraction(10**6)), gaussian_table_entries(Fraction(10**6))),
    (FoldedDiscreteGaussian(Fraction(9)), gaussian_table_entries(Fraction(9))),
    (NegativeBinomial(Fraction(1000), 4), geometric_tail_table_entries(Fraction(1000))),
    (FoldedDiscreteLaplace(Fraction(1000)), geometric_tail_table_entries(Fraction(1000))),
    (RationalPoisson(Fraction(250_000)), poisson_table_entries(Fraction(250_000))),
], ids=repr)
def test_table_length_estimates_are_upper_bounds(law, estimate):
    """The estimates choose the table path only below MAX_TABLE_ENTRIES, so
    they must not undercount."""
    assert len(law.cdf_window(64).lower) <= estimate


FALLBACK_CASES = [
    (FoldedDiscreteGaussian(Fraction(10, 3)), folded_gaussian_pmf(10 / 3),
     folded_gaussian_pmf(11 / 3)),
    (NegativeBinomial(Fraction(15, 2), 3), negative_binomial_pmf(7.5, 3),
     negative_binomial_pmf(8.5, 3)),
    (RationalPoisson(Fraction(7, 3)), stats.poisson(7 / 3).pmf, stats.poisson(2.5).pmf),
    # The window starts past 0: words below its start take the lazy path too.
    (RationalPoisson(Fraction(400)), stats.poisson(400).pmf, stats.poisson(404).pmf),
    (FoldedDiscreteLaplace(Fraction(7, 2)), folded_laplace_pmf(3.5), folded_laplace_pmf(3.9)),
]


@pytest.mark.parametrize("law,pmf,wrong", FALLBACK_CASES, ids=lambda case: repr(case)[:40])
def test_fast_path_follows_the_exact_pmf(law, pmf, wrong):
    samples = sample_by_inversion(law, 200_000, stream(1))
    assert samples.dtype == np.int64
    assert chi_square_pvalue(samples, pmf) > STRICT
    assert chi_square_pvalue(samples, wrong) < STRICT


@pytest.mark.parametrize("law,pmf,wrong", FALLBACK_CASES, ids=lambda case: repr(case)[:40])
def test_forced_fallback_follows_the_exact_pmf(law, pmf, wrong):
    """A 3-bit table: every bracket is 2^-3 wide and the table stops at
    1 - 2^-11, so most words, and every far-tail one, are decided by the
    lazy path at 128 bits and more: the law must not change."""
    source = CountingStream(2)
    samples = sample_by_inversion(law, 30_000, source, table_bits=3)
    assert source.count > 1.3 * 30_000  # the lazy path drew words for many
    coarse = law.cdf_window(3)
    resolved = coarse.first + coarse.lower.index(max(coarse.lower))  # past it: lazy only
    assert (samples > resolved).any()
    assert chi_square_pvalue(samples, pmf) > STRICT
    assert chi_square_pvalue(samples, wrong) < STRICT


class QueuedWords:
    def __init__(self, *words: int) -> None:
        self.queue = list(words)

    def words(self, size):
        return np.array([self.queue.pop(0) for _ in range(size)], dtype=np.uint64)


@pytest.mark.parametrize("law,k", [(FoldedDiscreteGaussian(Fraction(2500)), 40),
                                   (NegativeBinomial(Fraction(1000), 4), 300),
                                   (RationalPoisson(Fraction(250_000)), 250_100)], ids=repr)
@pytest.mark.parametrize("last_word", [0, 2**64 - 1])
def test_a_word_between_the_bounds_is_decided_by_the_next_word(law, k, last_word):
    """The first 64 bits of F_k: the table cannot decide; one more word does:
    0 puts U below F_k (N = k), all ones above it (N = k + 1)."""
    exact = reference_cdf(law, k)
    prefix = int(mpmath.floor(exact * 2**64))
    table = inversion_table(law)
    i = k - table.first
    assert int(table.lower[i]) <= prefix <= int(table.upper_minus_one[i])  # undecided
    source = QueuedWords(prefix, last_word)
    assert sample_by_inversion(law, 1, source).tolist() == [k if last_word == 0 else k + 1]
    assert not source.queue


def test_a_word_below_the_window_is_decided_lazily():
    """Poisson(400)'s 64-bit window starts at 216: the word 0 lies below its
    start, and the next two put U in [1.5, 1.5 + 2^-64) 2^-128, whose exact
    quantile is far in the left tail, outside the table."""
    law = RationalPoisson(Fraction(400))
    assert inversion_table(law).first > 0 and inversion_table(law).start > 0
    uniform = mpmath.mpf(3) * mpmath.mpf(2) ** -129
    expected = next(k for k in range(400) if uniform < reference_cdf(law, k))
    assert expected < inversion_table(law).first
    source = QueuedWords(0, 1, 2**63)
    assert sample_by_inversion(law, 1, source).tolist() == [expected] and not source.queue


def test_lazy_decision_reads_words_until_the_window_decides():
    law = RationalPoisson(Fraction(7, 3))
    exact = reference_cdf(law, 2)
    prefix = int(mpmath.floor(exact * 2**128))
    source = QueuedWords(prefix & (2**64 - 1), 0)
    assert _decide_lazily(law, prefix >> 64, source) == 2 and not source.queue


def test_discrete_gaussian_by_table_matches_its_pmf_and_sign():
    samples = discrete_gaussian(Fraction(10, 3), 200_000, SeededRandomBits(3))
    assert chi_square_pvalue(samples, discrete_gaussian_pmf(10 / 3)) > STRICT
    assert chi_square_pvalue(samples, discrete_gaussian_pmf(11 / 3)) < STRICT
    assert chi_square_pvalue(samples, lambda x: folded_gaussian_pmf(10 / 3)(x)) < STRICT


@pytest.mark.parametrize("fast_limit", [None, 1])
def test_discrete_gaussian_keeps_its_rejection_sampler_for_large_sigma(fast_limit, monkeypatch):
    """With no table allowed, every sigma takes CKS Algorithm 3 (and, with the
    fast limit at 1, its big-integer acceptance): the same law."""
    monkeypatch.setattr(discrete_noise, "MAX_TABLE_ENTRIES", 0)
    if fast_limit is not None:
        monkeypatch.setattr(discrete_noise, "_GAUSSIAN_FAST_LIMIT", fast_limit)
    samples = discrete_gaussian(Fraction(9, 4), 40_000, SeededRandomBits(6))
    assert chi_square_pvalue(samples, discrete_gaussian_pmf(2.25)) > STRICT
    assert chi_square_pvalue(samples, discrete_gaussian_pmf(2.75)) < STRICT


def test_discrete_laplace_by_table_matches_its_pmf():
    samples = discrete_laplace(Fraction(50, 7), 200_000, SeededRandomBits(7))
    assert chi_square_pvalue(samples, discrete_laplace_pmf(50 / 7)) > STRICT
    assert chi_square_pvalue(samples, discrete_laplace_pmf(55 / 7)) < STRICT


def test_discrete_laplace_keeps_its_rejection_sampler_for_large_scales(monkeypatch):
    monkeypatch.setattr(discrete_noise, "MAX_TABLE_ENTRIES", 0)
    samples = discrete_laplace(3, 100_000, SeededRandomBits(8))
    assert chi_square_pvalue(samples, discrete_laplace_pmf(3.0)) > STRICT
    assert chi_square_pvalue(samples, discrete_laplace_pmf(3.3)) < STRICT


def test_polya_share_keeps_its_compound_poisson_for_large_scales(monkeypatch):
    monkeypatch.setattr(discrete_shares, "MAX_TABLE_ENTRIES", 0)
    monkeypatch.setattr(exact_count_noise, "_CHUNK_JUMPS", 2048)  # and many chunks
    total = sum(polya_share(Fraction(7, 2), 3, 1, 100_000, SeededRandomBits(40 + i))
                for i in range(2))
    assert chi_square_pvalue(total, discrete_laplace_pmf(3.5)) > STRICT
    assert chi_square_pvalue(total, discrete_laplace_pmf(3.9)) < STRICT


@pytest.mark.parametrize("variance,wrong_factor", [(Fraction(1, 50), 2.0), (50, 1.1),
                                                   (2 * 10**6, 1.3)])
def test_skellam_shares_are_exact_poisson_differences(variance, wrong_factor):
    honest = 2
    total = sum(skellam_share(variance, 3, 1, 100_000, SeededRandomBits(50 + i))
                for i in range(honest))
    assert chi_square_pvalue(total, skellam_pmf(float(variance))) > STRICT
    assert chi_square_pvalue(total, skellam_pmf(wrong_factor * float(variance))) < STRICT


def test_skellam_share_beyond_the_table_still_sums_to_the_skellam(monkeypatch):
    monkeypatch.setattr(discrete_shares, "MAX_TABLE_ENTRIES", 0)
    total = sum(skellam_share(50, 3, 1, 100_000, SeededRandomBits(60 + i)) for i in range(2))
    assert chi_square_pvalue(total, skellam_pmf(50.0)) > STRICT
