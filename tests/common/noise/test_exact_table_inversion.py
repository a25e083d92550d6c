"""Exact inversion of certified CDF tables (common/noise/table_inversion.py,
common/noise/certified_laws.py): the integer brackets hold the exact CDF, the fast path
and the forced fallback (a coarse table, so most words and the far tail go
through the lazy path) both follow the exact pmf, a word between the bounds
is decided by the next word, and the samplers that remain for large scales
(CKS, compound Poisson, numpy's Poisson) are still reached and exact.

Every entry of a table is checked against 60-digit mpmath CDFs up to the
routing threshold, words at each bracket's edges decide as exact inversion
does, the lazy path draws from the exact conditional law past the table or
below its start, the full samplers hold at 10^6 draws, cached tables are
read-only and keyed by value, and threads sharing the caches draw what a
serial run draws.

Each distribution test has a twin that rejects a slightly wrong parameter,
so it could fail."""

import math
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from scipy import stats

from privadapt.common.noise import count_noise as exact_count_noise
from privadapt.common.noise import discrete as discrete_noise
from privadapt.common.noise import discrete_shares
from privadapt.common.noise import table_inversion as exact_table_inversion
from privadapt.common.noise.certified_laws import (
    FoldedDiscreteGaussian,
    FoldedDiscreteLaplace,
    NegativeBinomial,
    RationalPoisson,
    gaussian_table_entries,
    geometric_tail_table_entries,
    poisson_table_entries,
)
from privadapt.common.noise.count_noise import _JumpCountLaw, _poisson_table
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


@pytest.fixture(autouse=True, scope="module")
def _eighty_digits():
    """mpmath at 80 digits for this module's tests (the 60-digit references
    set their own), whatever another module set before."""
    with mpmath.workdps(80):
        yield


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


DIGITS = 60


def _mp(value: Fraction) -> mpmath.mpf:
    return mpmath.mpf(value.numerator) / value.denominator


def exact_cdfs(law, last: int) -> list:
    """[F_0, ..., F_last] of ``law`` at DIGITS digits, from closed forms or
    direct sums (independent of the fixed-point recurrences)."""
    with mpmath.workdps(DIGITS):
        if isinstance(law, RationalPoisson):
            rate = _mp(law.rate)
            return [mpmath.gammainc(k + 1, rate, mpmath.inf, regularized=True)
                    for k in range(last + 1)]
        if isinstance(law, FoldedDiscreteLaplace):
            q = mpmath.exp(-1 / _mp(law.scale))
            return [1 - 2 * q ** (k + 1) / (1 + q) for k in range(last + 1)]
        if isinstance(law, NegativeBinomial):
            q = mpmath.exp(-1 / _mp(law.scale))
            r = mpmath.mpf(1) / law.honest
            weight, cdf, out = mpmath.mpf(1), mpmath.mpf(0), []
            total = (1 - q) ** -r
            for k in range(last + 1):
                cdf += weight
                out.append(cdf / total)
                weight *= q * (k + r) / (k + 1)
            return out
        if isinstance(law, _JumpCountLaw):
            q = mpmath.exp(-1 / _mp(law.scale))
            mu = 2 / mpmath.mpf(law.honest) * mpmath.log(1 / (1 - q))
            term, cdf, out = mpmath.exp(-mu), mpmath.mpf(0), []
            for k in range(last + 1):
                cdf += term
                out.append(cdf)
                term *= mu / (k + 1)
            return out
        s = _mp(law.sigma_squared)
        reach = max(last, int(40 * mpmath.sqrt(s))) + 60
        weights = [mpmath.exp(-mpmath.mpf(j) ** 2 / (2 * s)) * (1 if j == 0 else 2)
                   for j in range(reach)]
        total = mpmath.fsum(weights)
        cdf, out = mpmath.mpf(0), []
        for j in range(last + 1):
            cdf += weights[j]
            out.append(cdf / total)
        return out


def exact_survival(law, k: int) -> mpmath.mpf:
    """1 - F_k without cancellation (for the far tails)."""
    with mpmath.workdps(DIGITS):
        if isinstance(law, RationalPoisson):
            return mpmath.gammainc(k + 1, 0, _mp(law.rate), regularized=True)
        if isinstance(law, FoldedDiscreteLaplace):
            q = mpmath.exp(-1 / _mp(law.scale))
            return 2 * q ** (k + 1) / (1 + q)
        if isinstance(law, NegativeBinomial):
            q = mpmath.exp(-1 / _mp(law.scale))
            return mpmath.betainc(k + 1, mpmath.mpf(1) / law.honest, 0, q, regularized=True)
        s = _mp(law.sigma_squared)
        weight = lambda j: 2 * mpmath.exp(-mpmath.mpf(j) ** 2 / (2 * s))  # noqa: E731
        total = 1 + mpmath.nsum(weight, [1, mpmath.inf])
        return mpmath.nsum(weight, [k + 1, mpmath.inf]) / total


# -- cached tables ---------------------------------------------------------------------


def test_cached_tables_are_read_only():
    """inversion_table is lru-cached: the same arrays serve every later call
    at that parameter, so one stray in-place write would change the law of
    every later sample there; they refuse writes."""
    table = inversion_table(RationalPoisson(Fraction(7, 3)))
    below, above_minus_one = _poisson_table(Fraction(7, 2), 2)
    for array in (table.lower, table.upper_minus_one, table.guide, below, above_minus_one):
        assert not array.flags.writeable


# -- brackets entry by entry, at 60 digits ---------------------------------------------

BRACKET_LAWS = [
    FoldedDiscreteGaussian(Fraction(1, 4)), FoldedDiscreteGaussian(Fraction(1, 7)),
    FoldedDiscreteGaussian(Fraction(22, 7)), FoldedDiscreteGaussian(Fraction(2**40, 3**20)),
    FoldedDiscreteGaussian(Fraction(1234567, 1000)),
    FoldedDiscreteLaplace(Fraction(1, 48)), FoldedDiscreteLaplace(Fraction(10, 3)),
    FoldedDiscreteLaplace(Fraction(1000, 7)),
    NegativeBinomial(Fraction(1, 3), 7), NegativeBinomial(Fraction(15, 2), 100),
    NegativeBinomial(Fraction(40), 2),
    RationalPoisson(Fraction(1, 10**6)), RationalPoisson(Fraction(101, 2)),
    # (Poisson rates 10^5/7 and 2^40/3^17 held too, checked once outside the
    # suite: 200 s and 23 s each.)
    _JumpCountLaw(Fraction(7, 2), 2), _JumpCountLaw(Fraction(2**30, 3), 5),
]


def assert_window_brackets(law, bits: int) -> int:
    window = law.cdf_window(bits)
    last = window.first + len(window.lower) - 1
    cdfs = exact_cdfs(law, last)
    one = mpmath.mpf(2) ** bits
    widest = 0
    for i, (lower, upper) in enumerate(zip(window.lower, window.upper, strict=True)):
        exact = cdfs[window.first + i] * one
        assert lower <= exact <= upper, (law, bits, i)
        widest = max(widest, upper - lower)
    if window.first:
        assert cdfs[window.first - 1] * one <= window.start
    assert list(window.lower) == sorted(window.lower)
    assert list(window.upper) == sorted(window.upper)
    assert window.lower[-1] < 2**bits  # the mass past the window is positive, undecided
    assert (1 - cdfs[-1]) * one < mpmath.mpf(2) ** -6  # and below 2^-(bits + 6)
    return widest


@pytest.mark.parametrize("bits", [64, 128])
@pytest.mark.parametrize("law", BRACKET_LAWS, ids=lambda law: repr(law)[:48])
def test_every_bracket_holds_the_exact_cdf(law, bits):
    """Every entry, not a sample of them (widths measured at most 2)."""
    assert assert_window_brackets(law, bits) <= 2


@pytest.mark.slow
@pytest.mark.parametrize("law", [
    FoldedDiscreteGaussian(Fraction(511927315849, 853)),  # the largest routed sigma
    FoldedDiscreteLaplace(Fraction(3026633, 705)),  # the largest routed t
    NegativeBinomial(Fraction(3026633, 705), 1000),
    # The largest routed Poisson rate (~1.4e8) was checked entry by entry once
    # outside the suite (all 254,252 hold); one mpmath gammainc per entry at
    # k ~ 1.4e8 takes far too long for it.
], ids=lambda law: repr(law)[:48])
def test_brackets_hold_at_the_routing_threshold(law):
    """The longest tables (about 2^18 entries), every entry."""
    assert assert_window_brackets(law, 64) <= 2


# -- words at the edges of the brackets -----------------------------------------------


class ForcedFirstWords:
    """A stream whose first ``words`` call returns ``first`` and later calls a
    seeded keystream (the continuation words the lazy path reads)."""

    def __init__(self, first, seed: int) -> None:
        self.first = np.asarray(first, dtype=np.uint64)
        self.rest = KeystreamBits(SeededRandomBits(seed))
        self.used_first = False
        self.continuation_words = 0

    def words(self, size):
        if not self.used_first:
            self.used_first = True
            assert size == self.first.size
            return self.first
        self.continuation_words += size
        return self.rest.words(size)


@pytest.mark.parametrize("law", [RationalPoisson(Fraction(7, 3)), RationalPoisson(Fraction(400)),
                                 FoldedDiscreteGaussian(Fraction(10, 3)),
                                 NegativeBinomial(Fraction(15, 2), 3),
                                 FoldedDiscreteLaplace(Fraction(1, 3))],
                         ids=lambda law: repr(law)[:48])
def test_words_at_bracket_edges_decide_as_exact_inversion(law):
    """For every entry, the words lower - 1, lower, upper - 1, upper,
    upper + 1 (and start - 1, start): the sample must lie between
    min{k : w < F_k 2^64} and min{k : w + 1 <= F_k 2^64}, which coincide
    unless some F_k 2^64 lies inside (w, w + 1) (then the next words decide;
    near 2^64 several can, e.g. NB(1/3, e^(-2/15)) at w = 2^64 - 4)."""
    window = law.cdf_window(64)
    edges = {window.start - 1, window.start}
    for lower, upper in zip(window.lower, window.upper, strict=True):
        edges |= {lower - 1, lower, upper - 1, upper, upper + 1}
    words = sorted(w for w in edges if 0 <= w < 2**64)
    scaled = [c * mpmath.mpf(2) ** 64 for c in exact_cdfs(law, window.first
                                                          + len(window.lower) + 40)]
    samples = sample_by_inversion(law, len(words), ForcedFirstWords(words, 1))
    for word, sample in zip(words, samples.tolist(), strict=True):
        earliest = next(k for k, value in enumerate(scaled) if word < value)
        decided = next((k for k, value in enumerate(scaled) if word + 1 <= value), None)
        if decided is None:  # the top word: the far tail, left to the next words
            assert sample >= earliest, (word, sample, earliest)
        else:  # one answer unless some F_k 2^64 lies inside (w, w + 1)
            assert earliest <= sample <= decided, (word, sample, earliest, decided)


# -- the lazy path's conditional law ---------------------------------------------------


def exact_cdf_at(law, k: int) -> mpmath.mpf:
    with mpmath.workdps(DIGITS):
        if isinstance(law, RationalPoisson):
            return mpmath.gammainc(k + 1, _mp(law.rate), mpmath.inf, regularized=True)
        return exact_cdfs(law, k)[-1]


def first_index(predicate, low: int, high: int) -> int:
    """The least k in [low, high] with predicate(k), for a monotone predicate."""
    while low < high:
        middle = (low + high) // 2
        if predicate(middle):
            high = middle
        else:
            low = middle + 1
    return low


def conditional_pmf(law, kind: str) -> dict:
    """P(N = k | U in the forced word's interval) for every k carrying more
    than 1e-13 of it: for the word 2^64 - 1 (``past``) the mass of [F_(k-1),
    F_k) above 1 - 2^-64, from survival functions S_k (no cancellation); for
    the word 0 (``below``) the mass below 2^-64."""
    window = law.cdf_window(64)
    reach = 2 * (window.first + len(window.lower)) + 100  # past every quantile used
    with mpmath.workdps(DIGITS):
        cell = mpmath.mpf(2) ** -64
        if kind == "past":
            mass = lambda k: cell - min(exact_survival(law, k), cell)  # noqa: E731
            low = first_index(lambda k: exact_survival(law, k) < cell, 0, reach)
            high = first_index(lambda k: exact_survival(law, k) < cell * 1e-13, low, reach)
        else:
            mass = lambda k: min(exact_cdf_at(law, k), cell)  # noqa: E731
            low = first_index(lambda k: exact_cdf_at(law, k) > cell * 1e-13, 0, reach)
            high = first_index(lambda k: exact_cdf_at(law, k) >= cell, low, reach)
        masses = [mass(k) if k >= 0 else mpmath.mpf(0) for k in range(low - 1, high + 1)]
        return {k: float((masses[i + 1] - masses[i]) / cell)
                for i, k in enumerate(range(low, high + 1))}


def lookup_pmf(probabilities: dict):
    return lambda support: np.array([probabilities.get(int(k), 0.0) for k in support])


LAZY_CASES = [
    # (law, wrong twin, the forced word)
    (FoldedDiscreteGaussian(Fraction(10, 3)), FoldedDiscreteGaussian(Fraction(11, 3)), "past"),
    (NegativeBinomial(Fraction(15, 2), 3), NegativeBinomial(Fraction(8), 3), "past"),
    (FoldedDiscreteLaplace(Fraction(7, 2)), FoldedDiscreteLaplace(Fraction(15, 4)), "past"),
    (RationalPoisson(Fraction(7, 3)), RationalPoisson(Fraction(5, 2)), "past"),
    (RationalPoisson(Fraction(400)), RationalPoisson(Fraction(410)), "below"),
]


def forced_word(law, kind: str) -> int:
    window = law.cdf_window(64)
    if kind == "past":
        word = 2**64 - 1
        assert word >= window.lower[-1]  # past every decided interval
    else:
        word = 0
        assert window.start > 0 and word < window.start  # below the window
    return word


@pytest.mark.parametrize("law,wrong,kind", LAZY_CASES, ids=lambda c: repr(c)[:40])
def test_lazy_path_follows_the_exact_conditional_law_off_the_table(law, wrong, kind):
    """Every first word forced past the table (all ones: U in the
    top 2^-64 of [0, 1)) or below its start (zero, for a window that starts
    past 0): the continuation must draw N from the exact conditional law
    there, the far tail; a twin with a parameter 5-10% off is rejected."""
    word = forced_word(law, kind)
    count = 6000
    source = ForcedFirstWords([word] * count, 2)
    samples = sample_by_inversion(law, count, source)
    assert source.continuation_words >= count
    expected = conditional_pmf(law, kind)
    assert abs(sum(expected.values()) - 1) < 1e-9  # the range holds the mass
    assert min(expected) <= samples.min() and samples.max() <= max(expected)
    assert chi_square_pvalue(samples, lookup_pmf(expected)) > STRICT
    assert chi_square_pvalue(samples, lookup_pmf(conditional_pmf(wrong, kind))) < STRICT


@pytest.mark.parametrize("law,k", [(FoldedDiscreteGaussian(Fraction(22, 7)), 2),
                                   (NegativeBinomial(Fraction(40), 2), 30)],
                         ids=repr)
def test_lazy_path_splits_an_ambiguous_word_in_the_exact_proportion(law, k):
    """The word w = floor(F_k 2^64) straddles F_k: N = k exactly when
    U < F_k, probability f = F_k 2^64 - w given w. Binomial test on 20,000
    continuations; it rejects f +- 0.03."""
    with mpmath.workdps(DIGITS):
        scaled = exact_cdfs(law, k)[-1] * mpmath.mpf(2) ** 64
        word = int(mpmath.floor(scaled))
        fraction = float(scaled - word)
    assert 0.035 < fraction < 0.965
    count = 20_000
    samples = sample_by_inversion(law, count, ForcedFirstWords([word] * count, 3))
    assert set(samples.tolist()) <= {k, k + 1}
    hits = int((samples == k).sum())
    assert stats.binomtest(hits, count, fraction).pvalue > STRICT
    for wrong in (fraction - 0.03, fraction + 0.03):
        assert stats.binomtest(hits, count, wrong).pvalue < STRICT


# -- the full samplers at 10^6 draws ----------------------------------------------------

MILLION = 1_000_000


@pytest.mark.slow
@pytest.mark.parametrize("sigma_squared,wrong", [(Fraction(1, 4), 0.26), (Fraction(10, 3), 3.45),
                                                 (Fraction(2500, 7), 365.0)])
def test_discrete_gaussian_by_table_at_a_million(sigma_squared, wrong):
    samples = discrete_gaussian(sigma_squared, MILLION, SeededRandomBits(11))
    assert chi_square_pvalue(samples, discrete_gaussian_pmf(float(sigma_squared))) > STRICT
    assert chi_square_pvalue(samples, discrete_gaussian_pmf(wrong)) < STRICT
    # P(0) and the sign: zero counted once, +k and -k equally likely.
    p_zero = discrete_gaussian_pmf(float(sigma_squared))(np.array([0]))[0]
    assert stats.binomtest(int((samples == 0).sum()), MILLION, p_zero).pvalue > STRICT
    nonzero = samples[samples != 0]
    assert stats.binomtest(int((nonzero > 0).sum()), nonzero.size, 0.5).pvalue > STRICT


@pytest.mark.slow
@pytest.mark.parametrize("scale,wrong", [(Fraction(1, 3), 0.34), (Fraction(50, 7), 7.35)])
def test_discrete_laplace_by_table_at_a_million(scale, wrong):
    samples = discrete_laplace(scale, MILLION, SeededRandomBits(12))
    assert chi_square_pvalue(samples, discrete_laplace_pmf(float(scale))) > STRICT
    assert chi_square_pvalue(samples, discrete_laplace_pmf(wrong)) < STRICT


@pytest.mark.slow
def test_polya_shares_sum_to_the_discrete_laplace_at_a_million():
    """K = 4 sites, t = 1: any 3 shares sum to the discrete Laplace; all 4 to more."""
    shares = [polya_share(Fraction(15, 2), 4, 1, MILLION, SeededRandomBits(20 + i))
              for i in range(4)]
    honest_sum = shares[0] + shares[1] + shares[2]
    assert chi_square_pvalue(honest_sum, discrete_laplace_pmf(7.5)) > STRICT
    assert chi_square_pvalue(honest_sum, discrete_laplace_pmf(7.7)) < STRICT
    assert chi_square_pvalue(honest_sum + shares[3], discrete_laplace_pmf(7.5)) < STRICT


@pytest.mark.slow
def test_skellam_shares_sum_to_the_skellam_at_a_million():
    total = sum(skellam_share(Fraction(101, 3), 3, 1, MILLION, SeededRandomBits(30 + i))
                for i in range(2))
    assert chi_square_pvalue(total, skellam_pmf(101 / 3)) > STRICT
    assert chi_square_pvalue(total, skellam_pmf(101 / 3 * 1.02)) < STRICT


# -- caching, types, threads, reproducibility -------------------------------------------


@pytest.mark.parametrize("same", [(0.5, Fraction(1, 2), np.float64(0.5)),
                                  (2, 2.0, Fraction(2), np.int64(2)),
                                  (0.75, Fraction(3, 4), np.float32(0.75))])
def test_equal_parameters_of_different_types_draw_the_same(same):
    """The caches key laws by value (Fraction(1, 2) == 0.5 hashes
    alike); every public entry point turns its parameter into the exact
    Fraction first, so equal keys are equal laws and share a correct table."""
    gaussian = [discrete_gaussian(value, 2000, SeededRandomBits(5)) for value in same]
    laplace = [discrete_laplace(value, 2000, SeededRandomBits(5)) for value in same]
    for draws in (gaussian, laplace):
        for other in draws[1:]:
            np.testing.assert_array_equal(draws[0], other)


def test_float_and_its_rounded_fraction_are_different_laws():
    """0.1 is taken at its binary value, not 1/10: a different key."""
    assert FoldedDiscreteGaussian(Fraction(0.1)) != FoldedDiscreteGaussian(Fraction(1, 10))
    assert (inversion_table(FoldedDiscreteGaussian(Fraction(0.1)))
            is not inversion_table(FoldedDiscreteGaussian(Fraction(1, 10))))


def test_threads_building_and_evicting_tables_draw_what_a_serial_run_draws(monkeypatch):
    """12 parameters (more than the cache's bytes hold) drawn from 6
    threads at once, the lazy path forced for some (a 3-bit table): the same
    samples as one thread at a time."""
    laws = [RationalPoisson(Fraction(1000 + i, 7)) for i in range(6)] + [
        NegativeBinomial(Fraction(30 + i, 4), 3) for i in range(6)]
    jobs = [(law, seed, bits) for seed, law in enumerate(laws) for bits in (64, 3)]

    def run(job):
        law, seed, bits = job
        return sample_by_inversion(law, 3000, KeystreamBits(SeededRandomBits(seed)), bits)

    small = exact_table_inversion.TableCache(max_bytes=3 * inversion_table(laws[0]).nbytes)
    monkeypatch.setattr(exact_table_inversion, "TABLES", small)
    exact_table_inversion._window.cache_clear()
    with ThreadPoolExecutor(max_workers=6) as pool:
        together = list(pool.map(run, jobs * 2))
    serial = [run(job) for job in jobs]
    for i, samples in enumerate(together):
        np.testing.assert_array_equal(samples, serial[i % len(jobs)])


def test_a_seeded_source_reproduces_a_call_lazy_path_included():
    """The same seed gives the same draws through every route, also
    when most words take the lazy path (3-bit table)."""
    for call in (lambda s: discrete_gaussian(Fraction(10, 3), 5000, s),
                 lambda s: discrete_laplace(Fraction(7, 2), 5000, s),
                 lambda s: polya_share(Fraction(15, 2), 3, 1, 5000, s),
                 lambda s: skellam_share(50, 3, 1, 5000, s),
                 lambda s: sample_by_inversion(RationalPoisson(Fraction(7, 3)), 5000,
                                               KeystreamBits(s), table_bits=3)):
        np.testing.assert_array_equal(call(SeededRandomBits(9)), call(SeededRandomBits(9)))
        assert not np.array_equal(call(SeededRandomBits(9)), call(SeededRandomBits(10)))


def test_no_float_reaches_a_law_or_the_inversion():
    """The decision path's modules use floats only to choose between
    exact samplers (table length estimates) and to size decimal contexts;
    a law built from a float parameter is refused rather than rounded."""
    for law in (FoldedDiscreteGaussian(2), FoldedDiscreteGaussian(0.5),
                FoldedDiscreteLaplace(3), RationalPoisson(2.5)):
        with pytest.raises((AttributeError, TypeError)):
            law.cdf_window(64)
    assert math.isfinite(gaussian_table_entries(Fraction(1, 2**56)))
