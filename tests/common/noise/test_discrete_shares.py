"""Exact Polya shares (common/noise/count_noise.py), tested against exact
probability mass functions: the logarithmic jumps, the Poisson jump count, one
share, and the sum of the honest shares (also at non-dyadic scales, many
shares, the logarithmic jumps' level boundaries and near 2^45); the bounded
work per sample; and the lazy uniform that decides a word landing between a
CDF's rigorous bounds.

Each distribution test has a twin showing it rejects a slightly wrong
parameter, so it could fail."""

import itertools
import math
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from privadapt.common.noise import count_noise as exact_count_noise
from privadapt.common.noise.bernoulli import bernoulli_below_constant
from privadapt.common.noise.count_noise import _logarithmic, negative_binomial_difference
from privadapt.common.noise.discrete import KeystreamBits
from privadapt.common.noise.discrete_shares import polya_share
from privadapt.common.noise.floating import SeededRandomBits
from tests.common.noise.test_discrete_noise import STRICT, chi_square_pvalue, discrete_laplace_pmf

SAMPLES = 200_000


def stream(seed: int) -> KeystreamBits:
    return KeystreamBits(SeededRandomBits(seed))


def poisson_rate(scale: float, honest: int) -> float:
    """mu = (2 / n) ln(1 / (1 - q)), q = exp(-1 / t)."""
    return -2.0 / honest * math.log(-math.expm1(-1.0 / scale))


def binned_pvalue(samples: np.ndarray, q: float, reach: int) -> float:
    """Chi-square of positive integer ``samples`` against scipy's logser(q)
    on cells [e_i, e_(i+1)) of a geometric grid of integer edges up to
    ``reach`` (plus the open last cell), merged until each expects 20."""
    edges = np.unique(np.round(np.geomspace(1, reach, 400)).astype(np.int64))
    law = stats.logser(q)
    cells = [law.pmf(np.arange(lo, hi)).sum() for lo, hi in itertools.pairwise(edges)]
    cells.append(1.0 - sum(cells))
    counts = np.bincount(np.searchsorted(edges, samples, side="right") - 1,
                         minlength=len(cells))
    expected, observed, acc, seen = [], [], 0.0, 0
    for cell, count in zip(cells, counts, strict=True):
        acc, seen = acc + cell, seen + count
        if acc * samples.size >= 20:
            expected.append(acc)
            observed.append(seen)
            acc, seen = 0.0, 0
    expected[-1] += acc
    observed[-1] += seen
    expected = np.array(expected) / sum(expected) * samples.size
    return float(stats.chisquare(np.array(observed), expected).pvalue)


@pytest.mark.parametrize("scale", [Fraction(1, 3), 1, Fraction(15, 2), 1000, 2**20])
def test_logarithmic_jumps_follow_scipy_logser(scale):
    samples = exact_count_noise._logarithmic(Fraction(scale), SAMPLES, stream(1))
    q = math.exp(-1.0 / float(scale))
    reach = int(25 * float(scale)) + 40  # q^reach < e^-25: the open last cell
    assert samples.min() >= 1
    assert binned_pvalue(samples, q, reach) > STRICT
    wrong = math.exp(-1.0 / (1.5 * float(scale)))
    assert binned_pvalue(samples, wrong, reach) < STRICT


@pytest.mark.parametrize("scale", [Fraction(15, 2), 1000])
def test_logarithmic_with_unpacked_words_keeps_the_law(scale, monkeypatch):
    """Levels above 31 take k and the first V of Bernoulli(2^j / k) from two
    words, not one: forced here for every level, same law."""
    monkeypatch.setattr(exact_count_noise, "_PACKED_LEVELS", -1)
    samples = exact_count_noise._logarithmic(Fraction(scale), 50_000, stream(10))
    q = math.exp(-1.0 / float(scale))
    assert binned_pvalue(samples, q, int(25 * float(scale)) + 40) > STRICT


@pytest.mark.parametrize("scale", [1, Fraction(15, 2)])
def test_logarithmic_tail_in_python_integers_keeps_the_law(scale, monkeypatch):
    """Every tail proposal through the big-integer path (as levels above
    J + 12 are): same law."""
    monkeypatch.setattr(exact_count_noise, "_FAST_TAIL_LEVELS", 0)
    samples = exact_count_noise._logarithmic(Fraction(scale), 30_000, stream(2))
    q = math.exp(-1.0 / float(scale))
    assert binned_pvalue(samples, q, int(40 * float(scale)) + 40) > STRICT


@pytest.mark.parametrize("scale,honest", [(Fraction(1, 3), 2), (1, 2), (1000, 3),
                                          (2**45, 2), (2**20, 5)])
def test_jump_count_is_poisson(scale, honest):
    counts = exact_count_noise._poisson_counts(Fraction(scale), honest, SAMPLES, stream(3))
    mu = poisson_rate(float(scale), honest)
    assert chi_square_pvalue(counts, stats.poisson(mu).pmf) > STRICT
    assert chi_square_pvalue(counts, stats.poisson(1.1 * mu).pmf) < STRICT


def nb_difference_pmf(scale: float, honest: int, reach: int):
    """The exact pmf of NB(1/n, q) - NB(1/n, q), by convolution."""
    half = stats.nbinom(1 / honest, -math.expm1(-1 / scale)).pmf(np.arange(reach + 1))
    difference = np.convolve(half, half[::-1])  # index j is the value j - reach
    return lambda x: np.where(np.abs(x) <= reach, difference[np.clip(x, -reach, reach)
                                                             + reach], 0.0)


@pytest.mark.parametrize("honest", [2, 3, 5])
def test_one_share_is_a_difference_of_negative_binomials(honest):
    share = polya_share(Fraction(15, 2), honest, 0, SAMPLES, SeededRandomBits(4))
    assert share.dtype == np.int64
    assert chi_square_pvalue(share, nb_difference_pmf(7.5, honest, 600)) > STRICT
    assert chi_square_pvalue(share, nb_difference_pmf(8.0, honest, 600)) < STRICT


@pytest.mark.parametrize("scale,honest", [(Fraction(7, 2), 1), (Fraction(1, 2), 2),
                                          (Fraction(15, 2), 3), (300, 2)])
def test_honest_shares_sum_to_the_discrete_laplace(scale, honest):
    total = sum(polya_share(scale, honest + 1, 1, SAMPLES, SeededRandomBits(30 + i))
                for i in range(honest))
    assert chi_square_pvalue(total, discrete_laplace_pmf(float(scale))) > STRICT
    assert chi_square_pvalue(total, discrete_laplace_pmf(1.1 * float(scale))) < STRICT


class CountingStream:
    """A keystream that counts the 64-bit words drawn from it."""

    def __init__(self, seed: int) -> None:
        self.inner, self.count = stream(seed), 0

    def words(self, size):
        self.count += size
        return self.inner.words(size)


#: Words per share: below 2 (J + 2) / n <= 50 proposals at n = 2, t <= 2^48
#: (module docstring), about three words each, plus one for N (148 measured
#: at 2^45, 159 at 2^48).
WORDS_PER_SAMPLE = 200


@pytest.mark.parametrize("scale", [Fraction(1, 2**40), Fraction(1, 3), 1, 2**5, 2**15,
                                   2**30, 2**45])
def test_expected_words_per_sample_are_bounded_for_every_scale(scale):
    source = CountingStream(5)
    negative_binomial_difference(Fraction(scale), 2, 20_000, source)
    assert source.count / 20_000 < WORDS_PER_SAMPLE


class QueuedWords:
    """A stream that returns the given words, one call at a time."""

    def __init__(self, *words: int) -> None:
        self.queue = list(words)

    def words(self, size):
        return np.array([self.queue.pop(0) for _ in range(size)], dtype=np.uint64)


def reference_cdf(scale: Fraction, honest: int, k: int) -> Decimal:
    """F_k of Poisson(mu) at 200 digits, independently of the sampler."""
    with localcontext() as context:
        context.prec = 200
        q = (Decimal(scale.denominator) / Decimal(scale.numerator)).copy_negate().exp()
        mu = 2 * (1 - q).ln().copy_negate() / honest
        term = total = Decimal(1)
        for j in range(1, k + 1):
            term = term * mu / j
            total += term
        return (mu.copy_negate().exp() * total)


@pytest.mark.parametrize("scale,honest,k", [(Fraction(15, 2), 2, 1), (1000, 3, 4),
                                            (2**45, 2, 30)])
@pytest.mark.parametrize("prefix_words", [1, 2])
@pytest.mark.parametrize("last_word", [0, 2**64 - 1])
def test_a_word_between_the_bounds_is_decided_by_more_bits(scale, honest, k, prefix_words,
                                                           last_word):
    """Words holding the first 64 (or 128) bits of F_k: the table cannot decide
    (nor, with 128, the first refinement); one more word does: 0 puts the
    uniform below F_k (N = k), all ones above it (N = k + 1)."""
    scale = Fraction(scale)
    below, above_minus_one = exact_count_noise._poisson_table(scale, honest)
    target = reference_cdf(scale, honest, k)
    bits = 64 * prefix_words
    prefix = math.floor(Fraction(target) * 2**bits)  # F_k in [prefix, prefix + 1) / 2^bits
    words = [(prefix >> (64 * i)) & (2**64 - 1) for i in reversed(range(prefix_words))]
    assert below[k] <= words[0] <= above_minus_one[k]  # inside the undecided interval
    source = QueuedWords(*words, last_word)
    count = exact_count_noise._poisson_counts(scale, honest, 1, source)
    uniform = Fraction(prefix * 2**64 + last_word, 2**(bits + 64))
    expected = k if uniform < Fraction(target) else k + 1
    assert count.tolist() == [expected] and not source.queue
    assert expected == (k if last_word == 0 else k + 1)


@pytest.mark.parametrize("scale,honest", [(Fraction(1, 3), 2), (Fraction(15, 2), 4),
                                          (2**48, 2)])
def test_cdf_bounds_bracket_the_cdf_and_tighten_with_digits(scale, honest):
    scale = Fraction(scale)
    widths = []
    for digits in (30, 60, 120):
        bounds = exact_count_noise._poisson_cdf_bounds(scale, honest, digits)
        for k, (lo, hi) in zip(range(8), bounds, strict=False):
            exact = Fraction(reference_cdf(scale, honest, k))
            assert lo <= exact <= hi
        widths.append(hi - lo)
    assert widths[1] < widths[0] * Fraction(1, 10**20)
    assert widths[2] < widths[1] * Fraction(1, 10**50)


@pytest.mark.parametrize("sizes,signs,expected", [
    ([2**62, 2**62 - 1, 5], [False, True, True], [1, -5]),  # 2^62 - (2^62 - 1); -5
    ([2**62, 2**62], [False, False], None),  # 2^63: refused
])
def test_shares_with_huge_jumps_are_summed_exactly(sizes, signs, expected, monkeypatch):
    """Jumps too large for the int64 shortcut are summed in Python integers;
    only a share beyond 63 bits is refused."""
    counts = [2, len(sizes) - 2]
    monkeypatch.setattr(exact_count_noise, "_poisson_counts",
                        lambda *args: np.array(counts, dtype=np.int64))
    monkeypatch.setattr(exact_count_noise, "_logarithmic",
                        lambda *args: np.array(sizes, dtype=np.int64))
    monkeypatch.setattr(exact_count_noise, "_sign_bits", lambda *args: np.array(signs))
    if expected is None:
        with pytest.raises(OverflowError, match="63 bits"):
            negative_binomial_difference(Fraction(3), 2, 2, stream(8))
        return
    values = [-size if sign else size for size, sign in zip(sizes, signs, strict=True)]
    share = negative_binomial_difference(Fraction(3), 2, 2, stream(8))
    assert share.dtype == np.int64
    assert share.tolist() == [sum(values[:2]), sum(values[2:])] == expected


def test_chunks_keep_the_law(monkeypatch):
    """Shares drawn in many small chunks follow the same law."""
    monkeypatch.setattr(exact_count_noise, "_CHUNK_JUMPS", 2048)
    share = polya_share(Fraction(15, 2), 3, 0, 60_000, SeededRandomBits(9))
    assert chi_square_pvalue(share, nb_difference_pmf(7.5, 3, 600)) > STRICT


def test_tiny_scales_give_almost_only_zeros():
    assert not polya_share(Fraction(1, 2**48), 3, 0, 10_000, SeededRandomBits(0)).any()


@pytest.mark.parametrize("scale,honest", [(Fraction(1, 3), 2), (1000, 3), (2**45, 2)])
def test_table_words_bracket_every_cdf_value(scale, honest):
    """The vector path's integer thresholds: floor(lo_k 2^64) <= F_k 2^64 <=
    ceil(hi_k 2^64), for every entry, against an independent 200-digit F_k."""
    scale = Fraction(scale)
    below, above_minus_one = exact_count_noise._poisson_table(scale, honest)
    assert below[-1] == 0 and len(below) == len(above_minus_one) + 1
    for k in range(len(above_minus_one)):
        exact = Fraction(reference_cdf(scale, honest, k)) * 2**64
        assert int(below[k]) <= exact <= int(above_minus_one[k]) + 1
        assert int(above_minus_one[k]) + 1 - int(below[k]) <= 2  # about two words wide
    assert 1 - Fraction(int(below[-2]), 2**64) < Fraction(1, 2**60)


def test_two_over_e_and_fair_geometric_draws_have_their_laws():
    source = stream(7)
    draws = bernoulli_below_constant(exact_count_noise._two_over_e_bits, 40_000, source)
    assert stats.binomtest(int(draws.sum()), draws.size, 2 / math.e).pvalue > STRICT
    assert stats.binomtest(int(draws.sum()), draws.size, 0.72).pvalue < STRICT
    ranks = exact_count_noise._fair_geometric(SAMPLES, source).astype(np.int64)
    assert chi_square_pvalue(ranks, lambda m: np.where(m >= 1, 0.5 ** np.abs(m), 0.0)) > STRICT


def test_huge_scale_keeps_its_variance():
    """Var(NB(r) - NB(r)) = 2 r q / (1 - q)^2."""
    scale, honest = 2**45, 2
    share = polya_share(scale, honest, 0, 20_000, SeededRandomBits(6)).astype(float)
    q = math.exp(-1 / scale)
    assert share.var() == pytest.approx(2 / honest * q / (-math.expm1(-1 / scale)) ** 2,
                                        rel=0.1)


# -- non-dyadic scales, many shares, level boundaries -------------------------------------


def nb_difference_pmf_array(scale: Fraction, honest: int, reach: int) -> np.ndarray:
    q = math.exp(-1 / float(scale))
    k = np.arange(reach + 1)
    one = stats.nbinom.pmf(k, 1.0 / honest, 1 - q)
    return np.convolve(one, one[::-1])  # index i is the value i - reach


def pooled_chi_square_pvalue(samples: np.ndarray, pmf: np.ndarray, reach: int) -> float:
    """Chi-square of ``samples`` (values -reach..) against ``pmf``, the cells
    expecting fewer than 5 pooled into one."""
    observed = np.bincount(samples + reach, minlength=pmf.size).astype(float)
    expected = pmf / pmf.sum() * samples.size
    big = expected >= 5
    obs = np.append(observed[big], observed[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    return float(stats.chi2.sf(((obs - exp) ** 2 / exp).sum(), obs.size - 1))


@pytest.mark.parametrize("scale,honest", [(Fraction(7, 3), 16), (Fraction(3, 10), 5),
                                          (Fraction(5, 7), 2), (Fraction(11, 4), 13)])
def test_one_share_at_non_dyadic_scales_and_many_shares(scale, honest):
    samples = polya_share(scale, honest, 0, 400_000, SeededRandomBits(90 + honest))
    reach = max(int(abs(samples).max()) + 5, 80)
    assert pooled_chi_square_pvalue(samples, nb_difference_pmf_array(scale, honest, reach),
                                    reach) > 1e-4


@pytest.mark.parametrize("scale,honest", [(Fraction(3, 10), 5), (Fraction(5, 7), 2)])
def test_honest_shares_at_non_dyadic_scales_sum_to_the_discrete_laplace(scale, honest):
    total = sum(polya_share(scale, honest, 0, 100_000, SeededRandomBits(7 * i + honest))
                for i in range(honest))
    q = math.exp(-1 / float(scale))
    reach = int(abs(total).max()) + 5
    x = np.arange(-reach, reach + 1)
    pmf = (1 - q) / (1 + q) * q ** np.abs(x)
    assert pooled_chi_square_pvalue(total, pmf, reach) > 1e-4


@pytest.mark.parametrize("scale", [Fraction(2), Fraction(4 * 2**20 + 1, 2**20),
                                   Fraction(2**30 - 1, 2**28), 1 + Fraction(1, 2**47),
                                   Fraction(3, 4), Fraction(64), Fraction(65)])
def test_logarithmic_jumps_at_dyadic_level_boundaries_follow_logser(scale):
    n = 500_000
    x = _logarithmic(Fraction(scale), n, KeystreamBits(SeededRandomBits(77)))
    q = math.exp(-1 / float(scale))
    k = np.arange(1, int(x.max()) + 1)
    expected = stats.logser.pmf(k, q) * n
    observed = np.bincount(x, minlength=k.size + 1)[1:].astype(float)
    big = expected >= 5
    obs = np.append(observed[big], observed[~big].sum())
    exp = np.append(expected[big], n - expected[big].sum())
    assert stats.chi2.sf(((obs - exp) ** 2 / exp).sum(), obs.size - 1) > 1e-4


def test_a_share_near_two_to_the_45_matches_the_gamma_difference_limit():
    # At t = 2^45 + 1 a share / t is Gamma(1/2) - Gamma(1/2) up to O(1/t).
    scale, honest = Fraction(2**45 + 1), 2
    x = polya_share(scale, honest, 0, 300_000, SeededRandomBits(4545)).astype(float)
    x /= float(scale)
    rng = np.random.default_rng(45)
    ref = rng.gamma(0.5, 1, 1_000_000) - rng.gamma(0.5, 1, 1_000_000)
    assert stats.ks_2samp(x, ref).pvalue > 1e-4
    assert abs(x.var() / 1.0 - 1) < 0.03
