"""Review 10b: an adversarial look at the exact table-inversion samplers
(common/noise/table_inversion.py, common/noise/certified_laws.py and their routing in
discrete_noise.py / discrete_shares.py / exact_count_noise.py).

Findings (a failing test each):

* LOW  test_gaussian_table_length_estimate_bounds_the_table_at_the_threshold:
  gaussian_table_entries undercounts for large sigma (its 10.7 sigma ignores
  the log(sigma) of the geometric tail bound), so the largest sigma routed to
  the table (sigma^2 ~ 6.0e8) builds 264,593 entries, above MAX_TABLE_ENTRIES
  (262,144). Efficiency and memory only: the law is still exact.
* LOW  test_cached_tables_are_read_only: the cached uint64 arrays a table
  shares between every later call with the same parameter are writable (and
  exact_count_noise._poisson_table hands them out): one stray in-place write
  anywhere would silently change the law of every later sample at that
  parameter. Hardening, no current caller writes.

Checks that hold (passing, marked CHECK), each with the power to fail:

* every 64- and 128-bit bracket, the start and the mass past the window,
  entry by entry against 60-digit mpmath CDFs, on dyadic and non-dyadic
  parameters from sigma^2 = 1/4 to the routing threshold;
* every word at a bracket's edge (ties with lower, upper, start) decides as
  exact inversion of [w, w + 1) 2^-64 does;
* the lazy path's conditional law given the first word, for a word between
  the bounds, a word past the table and a word below the window's start,
  chi-squared against the exact conditional pmf (twins reject a wrong one);
* the full samplers and sums of K shares at 10^6 draws against their pmfs
  (twins reject parameters a few percent off);
* equal parameters of different types (0.5, Fraction(1, 2), 2, 2.0) give the
  same draws at a seed, and threads building and evicting tables at once get
  the draws a serial run gets; a seeded source reproduces a call, lazy path
  included.
"""

import math
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from scipy import stats

from privadapt.common.noise import table_inversion as exact_table_inversion
from privadapt.common.noise.certified_laws import (
    FoldedDiscreteGaussian,
    FoldedDiscreteLaplace,
    NegativeBinomial,
    RationalPoisson,
    gaussian_table_entries,
)
from privadapt.common.noise.count_noise import _JumpCountLaw, _poisson_table
from privadapt.common.noise.discrete import KeystreamBits, discrete_gaussian, discrete_laplace
from privadapt.common.noise.discrete_shares import polya_share, skellam_share
from privadapt.common.noise.floating import SeededRandomBits
from privadapt.common.noise.table_inversion import (
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

DIGITS = 60


@pytest.fixture(autouse=True)
def _sixty_digits():
    """Every mpmath value and comparison of these tests at DIGITS digits."""
    with mpmath.workdps(DIGITS):
        yield


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


# The length-estimate finding (low, efficiency only: the largest sigma routed
# to the table builds 264,593 entries, above 2^18) is not fixed this session;
# its test is left out of main (the merger).


# -- LOW: cached tables are writable ---------------------------------------------------


def test_cached_tables_are_read_only():
    """FINDING (low, hardening). inversion_table is lru-cached: the same
    arrays serve every later call at that parameter, so they should refuse
    in-place writes (np.ndarray.setflags(write=False)); today a write goes
    through and changes the law of every later sample."""
    table = inversion_table(RationalPoisson(Fraction(7, 3)))
    below, above_minus_one = _poisson_table(Fraction(7, 2), 2)
    for array in (table.lower, table.upper_minus_one, table.guide, below, above_minus_one):
        assert not array.flags.writeable


# -- CHECK: brackets entry by entry ----------------------------------------------------

BRACKET_LAWS = [
    FoldedDiscreteGaussian(Fraction(1, 4)), FoldedDiscreteGaussian(Fraction(1, 7)),
    FoldedDiscreteGaussian(Fraction(22, 7)), FoldedDiscreteGaussian(Fraction(2**40, 3**20)),
    FoldedDiscreteGaussian(Fraction(1234567, 1000)),
    FoldedDiscreteLaplace(Fraction(1, 48)), FoldedDiscreteLaplace(Fraction(10, 3)),
    FoldedDiscreteLaplace(Fraction(1000, 7)),
    NegativeBinomial(Fraction(1, 3), 7), NegativeBinomial(Fraction(15, 2), 100),
    NegativeBinomial(Fraction(40), 2),
    RationalPoisson(Fraction(1, 10**6)), RationalPoisson(Fraction(101, 2)),
    # (Poisson rates 10^5/7 and 2^40/3^17 held too; at 200 s and 23 s each
    # they are left to the reviewer's script, out of the suite.)
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
    """CHECK: every entry, not a sample of them (widths measured at most 2)."""
    assert assert_window_brackets(law, bits) <= 2


@pytest.mark.slow
@pytest.mark.parametrize("law", [
    FoldedDiscreteGaussian(Fraction(511927315849, 853)),  # the largest routed sigma
    FoldedDiscreteLaplace(Fraction(3026633, 705)),  # the largest routed t
    NegativeBinomial(Fraction(3026633, 705), 1000),
    # The largest routed Poisson rate (~1.4e8) was checked entry by entry by
    # the reviewer's script (all 254,252 hold); one mpmath gammainc per entry
    # at k ~ 1.4e8 takes far too long for the suite (left out by the merger).
], ids=lambda law: repr(law)[:48])
def test_brackets_hold_at_the_routing_threshold(law):
    """CHECK: the longest tables (about 2^18 entries), every entry."""
    assert assert_window_brackets(law, 64) <= 2


# -- CHECK: words at the edges of the brackets -----------------------------------------


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
    """CHECK: for every entry, the words lower - 1, lower, upper - 1, upper,
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


# -- CHECK: the lazy path's conditional law ---------------------------------------------


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
    """CHECK: every first word forced past the table (all ones: U in the
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
    """CHECK: the word w = floor(F_k 2^64) straddles F_k: N = k exactly when
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


# -- CHECK: the full samplers at 10^6 draws ----------------------------------------------

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


# -- CHECK: caching, types, threads, reproducibility -------------------------------------


@pytest.mark.parametrize("same", [(0.5, Fraction(1, 2), np.float64(0.5)),
                                  (2, 2.0, Fraction(2), np.int64(2)),
                                  (0.75, Fraction(3, 4), np.float32(0.75))])
def test_equal_parameters_of_different_types_draw_the_same(same):
    """CHECK: the caches key laws by value (Fraction(1, 2) == 0.5 hashes
    alike); every public entry point turns its parameter into the exact
    Fraction first, so equal keys are equal laws and share a correct table."""
    gaussian = [discrete_gaussian(value, 2000, SeededRandomBits(5)) for value in same]
    laplace = [discrete_laplace(value, 2000, SeededRandomBits(5)) for value in same]
    for draws in (gaussian, laplace):
        for other in draws[1:]:
            np.testing.assert_array_equal(draws[0], other)


def test_float_and_its_rounded_fraction_are_different_laws():
    """CHECK: 0.1 is taken at its binary value, not 1/10: a different key."""
    assert FoldedDiscreteGaussian(Fraction(0.1)) != FoldedDiscreteGaussian(Fraction(1, 10))
    assert (inversion_table(FoldedDiscreteGaussian(Fraction(0.1)))
            is not inversion_table(FoldedDiscreteGaussian(Fraction(1, 10))))


def test_threads_building_and_evicting_tables_draw_what_a_serial_run_draws():
    """CHECK: 12 parameters (more than the 8 cached tables) drawn from 6
    threads at once, the lazy path forced for some (a 3-bit table): the same
    samples as one thread at a time."""
    laws = [RationalPoisson(Fraction(1000 + i, 7)) for i in range(6)] + [
        NegativeBinomial(Fraction(30 + i, 4), 3) for i in range(6)]
    jobs = [(law, seed, bits) for seed, law in enumerate(laws) for bits in (64, 3)]

    def run(job):
        law, seed, bits = job
        return sample_by_inversion(law, 3000, KeystreamBits(SeededRandomBits(seed)), bits)

    exact_table_inversion.inversion_table.cache_clear()
    exact_table_inversion._window.cache_clear()
    with ThreadPoolExecutor(max_workers=6) as pool:
        together = list(pool.map(run, jobs * 2))
    serial = [run(job) for job in jobs]
    for i, samples in enumerate(together):
        np.testing.assert_array_equal(samples, serial[i % len(jobs)])


def test_a_seeded_source_reproduces_a_call_lazy_path_included():
    """CHECK: the same seed gives the same draws through every route, also
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
    """CHECK: the decision path's modules use floats only to choose between
    exact samplers (table length estimates) and to size decimal contexts;
    a law built from a float parameter is refused rather than rounded."""
    for law in (FoldedDiscreteGaussian(2), FoldedDiscreteGaussian(0.5),
                FoldedDiscreteLaplace(3), RationalPoisson(2.5)):
        with pytest.raises((AttributeError, TypeError)):
            law.cdf_window(64)
    assert math.isfinite(gaussian_table_entries(Fraction(1, 2**56)))
