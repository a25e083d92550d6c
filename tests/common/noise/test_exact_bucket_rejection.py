"""The discrete Gaussian and Laplace at large scales by bucketed rejection
(common/noise/bucket_rejection.py): the bucket laws' certified windows hold
their exact CDFs, the acceptance step is Bernoulli(exp(-gamma)) on its own (fast
and big-integer paths), the samples follow N_Z(0, sigma^2) from sigma = 2^15
to 2^28 and at non-dyadic sigma^2 and the discrete Laplace from t = 5000 to
2^48 / 3, and the routing takes this path only past the table.

Cell probabilities are exact to far below the sampling noise: the sum of
f(x) = exp(-x^2 / (2 sigma^2)) over the integers of a cell is its integral
plus the Euler-Maclaurin end corrections (f(a) + f(b)) / 2 + (f'(b) - f'(a)) / 12,
whose remainder is of order f''' ~ sigma^-3 relative, and the normaliser is
sqrt(2 pi) sigma within exp(-2 pi^2 sigma^2) (Poisson summation), all in 40-digit
mpmath. Each distribution test has a twin that rejects a slightly wrong
sigma (or a broken acceptance), so it could fail.

Beyond the laws: the lane decision of Algorithm 1's first step is checked
exactly around its threshold (a lane it accepts satisfies L d >= N 2^32, one
it resumes (L + 1) d <= N 2^32) and word by word at gamma's own bits; the
sign and offset bits of one word are jointly uniform at the largest scales;
the smallest buckets and the first scales past the table follow the pmf on
fine cells; and every admissible extreme parameter samples."""

import itertools
import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from scipy import stats

from privadapt.common.noise import bucket_rejection as exact_bucket_rejection
from privadapt.common.noise import discrete as discrete_noise
from privadapt.common.noise.bucket_rejection import (
    OneSidedDiscreteGaussian,
    OneSidedGeometric,
    bernoulli_exp_by_lane,
    bucket_acceptance,
    bucket_width_exponent,
    discrete_gaussian_by_buckets,
    discrete_laplace_by_buckets,
    laplace_bucket_exponent,
)
from privadapt.common.noise.certified_laws import (
    gaussian_table_entries,
    geometric_tail_table_entries,
)
from privadapt.common.noise.discrete import (
    KeystreamBits,
    _bernoulli_exp_fraction,
    discrete_gaussian,
    discrete_laplace,
)
from privadapt.common.noise.floating import SeededRandomBits
from privadapt.common.noise.table_inversion import MAX_TABLE_ENTRIES
from tests.common.noise.test_discrete_noise import STRICT


@pytest.fixture(autouse=True, scope="module")
def _forty_digits():
    """mpmath at 40 digits for this module's tests, whatever another module
    set before."""
    with mpmath.workdps(40):
        yield


SAMPLES = 1_000_000
CELLS = 24


def stream(seed: int) -> KeystreamBits:
    return KeystreamBits(SeededRandomBits(seed))


def integer_mass(sigma: mpmath.mpf, low: int, high: int) -> mpmath.mpf:
    """sum_{x = low}^{high} exp(-x^2 / (2 sigma^2)) / (sqrt(2 pi) sigma), by
    Euler-Maclaurin (module docstring); sigma >= 2^10 here."""
    f = lambda x: mpmath.exp(-mpmath.mpf(x) ** 2 / (2 * sigma**2))  # noqa: E731
    df = lambda x: -mpmath.mpf(x) / sigma**2 * f(x)  # noqa: E731
    root = mpmath.sqrt(2) * sigma
    integral = mpmath.sqrt(mpmath.pi / 2) * sigma * (mpmath.erf(high / root)
                                                     - mpmath.erf(low / root))
    return (integral + (f(low) + f(high)) / 2 + (df(high) - df(low)) / 12) / (
        mpmath.sqrt(2 * mpmath.pi) * sigma)


def gaussian_cells_pvalue(samples: np.ndarray, sigma_squared: float) -> float:
    """Chi-square of ``samples`` against N_Z(0, sigma_squared) on CELLS cells
    of about equal probability (integer edges near the normal quantiles),
    the two outer cells running to infinity."""
    sigma = mpmath.sqrt(mpmath.mpf(sigma_squared))
    edges = [int(mpmath.floor(sigma * mpmath.sqrt(2) * mpmath.erfinv(2 * mpmath.mpf(i) / CELLS
                                                                      - 1)))
             for i in range(1, CELLS)]
    probabilities = [integer_mass(sigma, edges[i], edges[i + 1] - 1)
                     for i in range(len(edges) - 1)]
    # P(x < e) for e = edges[0] < 0 is P(x > -e), half of 1 - P(e <= x <= -e).
    first = (1 - integer_mass(sigma, edges[0], -edges[0])) / 2
    last = 1 - first - mpmath.fsum(probabilities)
    expected = np.array([float(p) for p in [first, *probabilities, last]]) * samples.size
    observed = np.bincount(np.searchsorted(np.array(edges), samples, side="right"),
                           minlength=CELLS)
    return float(stats.chisquare(observed, expected).pvalue)


SIGMAS_SQUARED = [Fraction(2**30), Fraction(2**36), Fraction(2**44), Fraction(2**56),
                  Fraction(10**10, 3), Fraction(2**50 + 1, 5), Fraction(3.7e13)]


@pytest.mark.parametrize("seed,sigma_squared", list(enumerate(SIGMAS_SQUARED, start=20)),
                         ids=str)
def test_bucketed_gaussian_matches_its_pmf_and_rejects_a_wrong_sigma(seed, sigma_squared):
    samples = discrete_gaussian(sigma_squared, SAMPLES, SeededRandomBits(seed))
    assert samples.dtype == np.int64
    assert gaussian_cells_pvalue(samples, float(sigma_squared)) > STRICT
    assert gaussian_cells_pvalue(samples, float(sigma_squared) * 1.01**2) < STRICT


def test_coarse_buckets_lean_on_the_acceptance_and_stay_exact(monkeypatch):
    """With sigma_b in [2, 4) each bucket spans a quarter to a half sigma, so
    the acceptance reshapes the law a lot: the samples still follow it, and
    with the acceptance disabled (a step-shaped law) the test rejects them."""
    monkeypatch.setattr(exact_bucket_rejection, "BUCKET_SIGMA_BITS", 1)
    sigma_squared = Fraction(2**30)
    assert 2**30 / 4 ** bucket_width_exponent(sigma_squared) < 16
    samples = discrete_gaussian_by_buckets(sigma_squared, 200_000, stream(12))
    assert gaussian_cells_pvalue(samples, 2.0**30) > STRICT
    monkeypatch.setattr(exact_bucket_rejection, "bucket_acceptance",
                        lambda bucket, *_: np.ones(bucket.size, bool))
    broken = discrete_gaussian_by_buckets(sigma_squared, 200_000, stream(12))
    assert gaussian_cells_pvalue(broken, 2.0**30) < STRICT


@pytest.mark.parametrize("fast_limit", [2**63, 1], ids=["uint64", "python-int"])
@pytest.mark.parametrize("bucket,offset,j,sigma_squared", [
    (3, 700, 10, Fraction(2**36)),  # gamma = 700 (6144 + 700) / 2^37, small
    (0, 1023, 10, Fraction(2**36, 7)),  # non-dyadic sigma^2: r = 7
    (40, 1000, 10, Fraction(2**28)),  # gamma = 1000 * 82920 / 2^29 ~ 0.154
    (200, 1000, 10, Fraction(2**28)),  # gamma ~ 0.77
    (900, 1023, 10, Fraction(2**28)),  # gamma > 3: whole Bernoulli(exp(-1)) runs
])
def test_acceptance_is_bernoulli_exp_minus_gamma(fast_limit, bucket, offset, j, sigma_squared,
                                                 monkeypatch):
    monkeypatch.setattr(exact_bucket_rejection, "_FAST_LIMIT", fast_limit)
    count = 200_000 if fast_limit > 1 else 4000
    gamma = Fraction(offset * (2 * bucket * 2**j + offset), 2) / sigma_squared
    source = stream(13)
    lane = source.words(count) >> np.uint64(32)
    draws = bucket_acceptance(np.full(count, bucket, np.int64), np.full(count, offset, np.uint64),
                              lane, j, sigma_squared, source)
    exact = math.exp(-float(gamma))
    assert stats.binomtest(int(draws.sum()), count, exact).pvalue > STRICT
    wrong = exact * 0.9 if exact > 0.5 else exact * 1.2
    if fast_limit > 1:  # the twin: the test tells exp(-gamma) from a 10-20% error
        assert stats.binomtest(int(draws.sum()), count, wrong).pvalue < STRICT


def test_acceptance_reads_more_words_for_a_lane_at_the_threshold():
    """All lanes at T = floor(gamma 2^32) (gamma = 1000 * 82920 / (2 sigma^2) = 0.206): the
    vectorised acceptance hands each to the word-by-word decision, whose
    acceptance is 1 - phi + phi (exp(-gamma) - 1 + gamma) / gamma (below)."""
    sigma_squared = Fraction(3 * 2**26 + 1)
    gamma = Fraction(1000 * (2 * 40 * 2**10 + 1000), 2) / sigma_squared
    lane = math.floor(gamma * 2**32)
    phi, g = float(gamma * 2**32 - lane), float(gamma)
    expected = 1 - phi + phi * (math.exp(-g) - 1 + g) / g
    draws = bucket_acceptance(np.full(4000, 40, np.int64), np.full(4000, 1000, np.uint64),
                              np.full(4000, lane, np.uint64), 10, sigma_squared, stream(16))
    assert stats.binomtest(int(draws.sum()), draws.size, expected).pvalue > STRICT
    assert stats.binomtest(int(draws.sum()), draws.size, math.exp(-g)).pvalue < STRICT


def test_zero_offset_is_always_accepted():
    source = stream(14)
    draws = bucket_acceptance(np.arange(1000, dtype=np.int64), np.zeros(1000, np.uint64),
                              source.words(1000) >> np.uint64(32), 10, Fraction(2**36), source)
    assert draws.all()


@pytest.mark.parametrize("numerator,d", [(2**56 + 12345 * 2**20 + 3, 2**57 - 1),  # phi 0.78
                                         (5 * 2**53 + 2**25 + 777, 3 * 2**55 + 2**23 + 1),
                                         (7, 30), (11, 20)])
def test_a_lane_at_the_threshold_reads_more_words(numerator, d):
    """The lane T = floor(gamma 2^32) cannot decide A_1 = [V < gamma] (unless
    gamma 2^32 is whole): the further words make P(A_1 = 1) exactly
    phi = gamma 2^32 - T, and then Algorithm 1 from k = 2 returns 1 with
    probability (exp(-gamma) - 1 + gamma) / gamma; so the acceptance is
    1 - phi + phi (exp(-gamma) - 1 + gamma) / gamma."""
    gamma = Fraction(numerator, d)
    lane = math.floor(gamma * 2**32)
    phi = float(gamma * 2**32 - lane)
    g = float(gamma)
    expected = 1 - phi + phi * (math.exp(-g) - 1 + g) / g
    source = stream(15)
    draws = [exact_bucket_rejection._first_step_by_words(lane, numerator, d, source)
             for _ in range(4000)]
    assert stats.binomtest(sum(draws), len(draws), expected).pvalue > STRICT
    assert stats.binomtest(sum(draws), len(draws), math.exp(-g)).pvalue < STRICT


@pytest.mark.parametrize("sigma_squared", [Fraction(10, 3), Fraction(300), Fraction(2**17, 3)],
                         ids=str)
@pytest.mark.parametrize("bits", [64, 128])
def test_bucket_law_window_brackets_its_exact_cdf(sigma_squared, bits):
    law = OneSidedDiscreteGaussian(sigma_squared)
    s = mpmath.mpf(sigma_squared.numerator) / sigma_squared.denominator
    weights = [mpmath.exp(-mpmath.mpf(k) ** 2 / (2 * s)) for k in range(int(20 * mpmath.sqrt(s))
                                                                          + 40)]
    total = mpmath.fsum(weights)
    window = law.cdf_window(bits)
    entries = len(window.lower)
    for i in sorted({0, 1, entries // 3, entries // 2, entries - 1}):
        exact = mpmath.fsum(weights[:i + 1]) / total * 2**bits
        assert window.lower[i] <= exact <= window.upper[i]
        assert window.upper[i] - window.lower[i] <= 3
    assert 2**bits - window.lower[-1] <= 2


def test_bucket_width_keeps_sigma_b_between_2_8_and_2_9():
    for sigma_squared in [Fraction(2**18), Fraction(10**10, 3), Fraction(2**56)]:
        j = bucket_width_exponent(sigma_squared)
        assert 2**16 <= sigma_squared / 4**j < 2**18
    assert bucket_width_exponent(Fraction(2**18) - 1) == 0


@pytest.mark.parametrize("sampler,parameter", [(discrete_gaussian, Fraction(2**44)),
                                               (discrete_laplace, Fraction(10**9, 7))])
def test_seeded_source_reproduces_a_call(sampler, parameter):
    first = sampler(parameter, (50, 20), SeededRandomBits(7))
    assert first.shape == (50, 20)
    assert np.array_equal(first, sampler(parameter, (50, 20), SeededRandomBits(7)))
    assert not np.array_equal(first, sampler(parameter, (50, 20), SeededRandomBits(8)))


def test_routing_takes_buckets_only_past_the_table(monkeypatch):
    """The table below its threshold, the buckets above it (a function of
    sigma alone), and CKS Algorithm 3 for a sigma too small to bucket when no
    table is allowed."""
    taken = []
    monkeypatch.setattr(discrete_noise, "discrete_gaussian_by_buckets",
                        lambda exact, count, stream: taken.append(exact) or np.zeros(count,
                                                                                     np.int64))
    below, above = Fraction(23_000**2), Fraction(25_000**2)
    assert gaussian_table_entries(below) <= MAX_TABLE_ENTRIES < gaussian_table_entries(above)
    discrete_gaussian(below, 10, SeededRandomBits(0))
    assert taken == []
    discrete_gaussian(above, 10, SeededRandomBits(0))
    assert taken == [above]
    monkeypatch.setattr(discrete_noise, "MAX_TABLE_ENTRIES", 0)
    discrete_gaussian(Fraction(2**18) - 1, 10, SeededRandomBits(0))  # sigma < 2^9: CKS
    assert taken == [above]
    discrete_gaussian(Fraction(2**18), 10, SeededRandomBits(0))
    assert taken == [above, Fraction(2**18)]


# -- the discrete Laplace ------------------------------------------------------------


def laplace_cells_pvalue(samples: np.ndarray, scale: float) -> float:
    """Chi-square of ``samples`` against P(x) ∝ q^|x|, q = exp(-1/scale), on
    CELLS cells with integer edges near the quantiles of the continuous
    Laplace; P(X < e) is q^(1 - e) / (1 + q) for e <= 0 and 1 - q^e / (1 + q)
    for e > 0, exactly (geometric series), at 40 digits."""
    q = mpmath.exp(-1 / mpmath.mpf(scale))
    below = lambda e: q ** (1 - e) / (1 + q) if e <= 0 else 1 - q**e / (1 + q)  # noqa: E731
    quantile = lambda p: (scale * mpmath.log(2 * p) if p < 0.5  # noqa: E731
                          else -scale * mpmath.log(2 * (1 - p)))
    edges = sorted({int(mpmath.floor(quantile(mpmath.mpf(i) / CELLS))) for i in range(1, CELLS)})
    cdf = [mpmath.mpf(0), *(below(e) for e in edges), mpmath.mpf(1)]
    expected = np.array([float(cdf[i + 1] - cdf[i]) for i in range(len(cdf) - 1)]) * samples.size
    observed = np.bincount(np.searchsorted(np.array(edges), samples, side="right"),
                           minlength=len(edges) + 1)
    return float(stats.chisquare(observed, expected).pvalue)


SCALES = [Fraction(5000), Fraction(2**16), Fraction(10**9, 7), Fraction(2**40),
          Fraction(2**48 - 1, 3)]


@pytest.mark.parametrize("seed,scale", list(enumerate(SCALES, start=40)), ids=str)
def test_bucketed_laplace_matches_its_pmf_and_rejects_a_wrong_scale(seed, scale):
    assert geometric_tail_table_entries(scale) > MAX_TABLE_ENTRIES  # the bucketed path
    samples = discrete_laplace(scale, SAMPLES, SeededRandomBits(seed))
    assert samples.dtype == np.int64
    assert laplace_cells_pvalue(samples, float(scale)) > STRICT
    assert laplace_cells_pvalue(samples, float(scale) * 1.01) < STRICT


def test_coarse_laplace_buckets_lean_on_the_acceptance_and_stay_exact(monkeypatch):
    """t / w in [2, 4): the acceptance exp(-U / t) carries much of the law;
    with it disabled the test rejects the samples."""
    monkeypatch.setattr(exact_bucket_rejection, "LAPLACE_BUCKET_BITS", 1)
    scale = Fraction(10**6, 3)
    assert scale / 2 ** laplace_bucket_exponent(scale) < 4
    samples = discrete_laplace_by_buckets(scale, 200_000, stream(50))
    assert laplace_cells_pvalue(samples, float(scale)) > STRICT
    monkeypatch.setattr(exact_bucket_rejection, "bernoulli_exp_by_lane",
                        lambda numerator, *_: np.ones(numerator.size, bool))
    broken = discrete_laplace_by_buckets(scale, 200_000, stream(50))
    assert laplace_cells_pvalue(broken, float(scale)) < STRICT


@pytest.mark.parametrize("exponent", [Fraction(1, 3), Fraction(1, 100), Fraction(5, 2)], ids=str)
@pytest.mark.parametrize("bits", [64, 128])
def test_geometric_bucket_law_window_brackets_its_exact_cdf(exponent, bits):
    """F_k = 1 - exp(-(k + 1) x)."""
    window = OneSidedGeometric(exponent).cdf_window(bits)
    x = mpmath.mpf(exponent.numerator) / exponent.denominator
    entries = len(window.lower)
    for i in sorted({0, 1, entries // 3, entries // 2, entries - 1}):
        exact = (1 - mpmath.exp(-(i + 1) * x)) * 2**bits
        assert window.lower[i] <= exact <= window.upper[i]
        assert window.upper[i] - window.lower[i] <= 3
    assert 2**bits - window.lower[-1] <= 2


def test_laplace_bucket_width_keeps_t_over_w_between_2_6_and_2_7():
    for scale in [Fraction(128), Fraction(10**9, 7), Fraction(2**48 - 1, 3)]:
        assert 2**6 <= scale / 2 ** laplace_bucket_exponent(scale) < 2**7
    assert laplace_bucket_exponent(Fraction(127)) == 0


def test_laplace_wide_buckets_take_their_offset_from_a_word_of_their_own():
    """Past t = 2^37, w > 2^31: U no longer fits below the lane."""
    scale = Fraction(2**47 + 1)
    assert laplace_bucket_exponent(scale) > 31
    samples = discrete_laplace_by_buckets(scale, 200_000, stream(51))
    assert laplace_cells_pvalue(samples, float(scale)) > STRICT
    assert laplace_cells_pvalue(samples, float(scale) * 1.03) < STRICT


def test_laplace_routing_takes_buckets_only_past_the_table(monkeypatch):
    taken = []
    monkeypatch.setattr(discrete_noise, "discrete_laplace_by_buckets",
                        lambda exact, count, stream: taken.append(exact) or np.zeros(count,
                                                                                     np.int64))
    below, above = Fraction(4000), Fraction(4500)
    assert (geometric_tail_table_entries(below) <= MAX_TABLE_ENTRIES
            < geometric_tail_table_entries(above))
    discrete_laplace(below, 10, SeededRandomBits(0))
    assert taken == []
    discrete_laplace(above, 10, SeededRandomBits(0))
    assert taken == [above]
    monkeypatch.setattr(discrete_noise, "MAX_TABLE_ENTRIES", 0)
    discrete_laplace(127, 10, SeededRandomBits(0))  # t < 2^7: Algorithm 2
    assert taken == [above]
    discrete_laplace(128, 10, SeededRandomBits(0))
    assert taken == [above, Fraction(128)]


MASK64 = 2**64 - 1


class InjectedWords:
    """A RandomBits that hands out the given words, then fails."""

    def __init__(self, words: list[int]) -> None:
        self.pending = list(words)
        self.read = 0

    def words(self, size: int) -> np.ndarray:
        assert size <= len(self.pending), "read more words than the test injected"
        out, self.pending = self.pending[:size], self.pending[size:]
        self.read += size
        return np.array(out, dtype=np.uint64)


# -- the lane decision of Algorithm 1's first step, exactly ---------------------------

DENOMINATORS = [3, 30, 4300, 2**31 - 1, 2**31, 2**31 + 1, 2**32 + 3, 2**48, 2**48 - 1,
                3 * 2**55 + 2**23 + 1, 2**57 - 1, 2**57]


def classify_lanes(numerators: list[int], d: int, lanes: list[int], monkeypatch):
    """For each (N, L): 'keep' (decided A_1 = 0 by the lane), 'resume'
    (decided A_1 = 1: Algorithm 1 from k = 2) or 'words' (left to more words),
    read from spies on the two continuations. Numerators must be distinct
    within a call (they identify the resumed elements)."""
    assert len(set(numerators)) == len(numerators)
    resumed, worded = set(), set()

    def resume_spy(c, e, d_, m, stream_, first_k=1):
        assert first_k == 2 and d_ == d and m == 0 and not e.any()
        resumed.update(int(v) for v in c)
        return np.zeros(c.size, bool)

    def words_spy(lane, numerator, d_, stream_):
        assert d_ == d
        worded.add(numerator)
        return False

    monkeypatch.setattr(exact_bucket_rejection, "_bernoulli_exp_fraction", resume_spy)
    monkeypatch.setattr(exact_bucket_rejection, "_first_step_by_words", words_spy)
    keep = bernoulli_exp_by_lane(np.array(numerators, np.uint64), d,
                                 np.array(lanes, np.uint64), InjectedWords([]))
    out = []
    for n, k in zip(numerators, keep, strict=True):
        kinds = [kind for kind, hit in (("keep", k), ("resume", n in resumed),
                                         ("words", n in worded)) if hit]
        assert len(kinds) == 1, (n, kinds)
        out.append(kinds[0])
    return out


@pytest.mark.parametrize("d", DENOMINATORS)
def test_every_lane_decision_is_sound_around_the_threshold(d, monkeypatch):
    """A_1 = [V < N / d], V = (L + V') / 2^32: 'keep' needs
    L d >= N 2^32, 'resume' needs (L + 1) d <= N 2^32, for lanes T - 12 .. T + 12
    (T = floor(N 2^32 / d)) and for lane 0 and 2^32 - 1, at N = 0, 1, d - 1,
    d / 2 and random N; lanes 8 or more from T are never left to more words
    when d >= 2^30 (below, about gamma 2^32 / d lanes: see the next test)."""
    rng = np.random.default_rng(d % 1000)
    numerators = sorted({0, 1, d - 1, d // 2, d // 3, *(int(rng.integers(0, d))
                                                          for _ in range(200))})
    numerators = [n for n in numerators if 0 <= n < d]
    seen = set()
    for delta in [*range(-12, 13), "zero", "top"]:
        lanes, kept_numerators = [], []
        for n in numerators:
            t = n * 2**32 // d
            lane = 0 if delta == "zero" else 2**32 - 1 if delta == "top" else t + delta
            if 0 <= lane < 2**32:
                lanes.append(lane)
                kept_numerators.append(n)
        kinds = classify_lanes(kept_numerators, d, lanes, monkeypatch)
        seen.update(kinds)
        for n, lane, kind in zip(kept_numerators, lanes, kinds, strict=True):
            if kind == "keep":
                assert lane * d >= n * 2**32, (n, lane)
            elif kind == "resume":
                assert (lane + 1) * d <= n * 2**32, (n, lane)
            else:
                # d_hi + 1 in the resume bound leaves about N 2^32 / (d_hi (d_hi + 1))
                # + 1 lanes open: a few for d >= 2^30, gamma 2^32 / d below.
                d_hi = d >> max(0, d.bit_length() - 31)
                band = n * 2**32 // (d_hi * (d_hi + 1)) + 8
                assert abs(lane - n * 2**32 // d) < band, (n, lane)
    assert seen == {"keep", "resume", "words"}  # every branch was exercised


def test_words_decide_the_first_step_at_gammas_own_bits(monkeypatch):
    """For gamma = N / d not a multiple of 2^-96: the word just
    above gamma's 96-bit prefix accepts after one word, the word just below
    resumes at k = 2 (at gamma itself), and the exact prefix reads a further
    word, and then decides by that word the same way."""
    resumed = []
    monkeypatch.setattr(exact_bucket_rejection, "_bernoulli_exp_scalar",
                        lambda gamma, stream_, first_k=1: resumed.append((gamma, first_k))
                        or False)
    for n, d in [(2**56 + 12345 * 2**20 + 3, 2**57 - 1), (7, 30), (1, 3 * 2**55 + 1),
                 (2**47 - 5, 2**48 - 1), (4299, 4301)]:
        prefix = n * 2**96 // d
        assert prefix * d < n * 2**96  # gamma 2^96 is not whole
        lane, low = prefix >> 64, prefix & MASK64
        assert 0 < low < MASK64
        above = InjectedWords([low + 1])
        assert exact_bucket_rejection._first_step_by_words(lane, n, d, above) is True
        assert above.read == 1
        below = InjectedWords([low - 1])
        assert exact_bucket_rejection._first_step_by_words(lane, n, d, below) is False
        assert below.read == 1 and resumed[-1] == (Fraction(n, d), 2)
        next_bits = (n * 2**160 // d) & MASK64
        tie_then_above = InjectedWords([low, next_bits + 1])
        assert exact_bucket_rejection._first_step_by_words(lane, n, d, tie_then_above) is True
        assert tie_then_above.read == 2
        tie_then_below = InjectedWords([low, next_bits - 1])
        assert exact_bucket_rejection._first_step_by_words(lane, n, d, tie_then_below) is False
        assert tie_then_below.read == 2


def resumed_law(gamma: mpmath.mpf, first_k: int) -> float:
    """P(Algorithm 1 returns 1 | it starts at k = first_k): the loop reaches k
    with probability prod_{i = first_k}^{k - 1} gamma / i and stops there with
    1 - gamma / k, returning 1 when k is odd."""
    total, reach, k = mpmath.mpf(0), mpmath.mpf(1), first_k
    while reach > mpmath.mpf(10) ** -30:
        if k % 2:
            total += reach * (1 - gamma / k)
        reach *= gamma / k
        k += 1
    return float(total)


@pytest.mark.parametrize("n,d", [(1, 1000), (3, 10), (1, 2), (2**57 - 2, 2**57 - 1),
                                 (2**40 + 12345, 3 * 2**45 + 7), (4299, 4301)], ids=str)
def test_algorithm_1_resumed_at_k_2_returns_its_exact_law(n, d):
    """1e6 draws of
    ``_bernoulli_exp_fraction(first_k=2)`` match (exp(-g) - 1 + g) / g; the
    twins reject resuming at k = 3, and at k = 1 (gamma < 0.9)."""
    gamma = mpmath.mpf(n) / d
    expected = resumed_law(gamma, 2)
    assert abs(expected - float((mpmath.exp(-gamma) - 1 + gamma) / gamma)) < 1e-12
    count = 1_000_000
    draws = _bernoulli_exp_fraction(np.full(count, n, np.uint64), np.zeros(count, np.uint64),
                                    d, 0, stream(100 + n % 97), first_k=2)
    hits = int(draws.sum())
    assert stats.binomtest(hits, count, expected).pvalue > STRICT
    # At gamma = 1 resuming at k = 1 or 2 agree ((e^-1 - 1 + 1) / 1 = e^-1).
    for wrong_k in (1, 3) if float(gamma) < 0.9 else (3,):
        assert stats.binomtest(hits, count, resumed_law(gamma, wrong_k)).pvalue < STRICT


@pytest.mark.parametrize("n,d", [(1, 2**57 - 1), (2**57 - 2, 2**57 - 1), (1, 3),
                                 (2**47 + 1, 2**48 - 1), (123456789, 3 * 2**55 + 2**23 + 1)],
                         ids=str)
def test_lane_acceptance_is_exp_minus_gamma(n, d):
    """With uniform lanes the whole step is Bernoulli(exp(-gamma))
    at 2e6 draws, from gamma ~ 2^-57 to gamma = 1 - 2^-57; the twin rejects
    exp(-gamma) +- 4e-3 (about 6 standard errors)."""
    count = 2_000_000
    source = stream(200 + n % 89)
    lane = source.words(count) >> np.uint64(32)
    draws = bernoulli_exp_by_lane(np.full(count, n, np.uint64), d, lane, source)
    exact = float(mpmath.exp(-mpmath.mpf(n) / d))
    hits = int(draws.sum())
    if exact < 1 - 1e-9:
        assert stats.binomtest(hits, count, exact).pvalue > STRICT
        assert stats.binomtest(hits, count, exact - 4e-3).pvalue < STRICT
        if exact + 4e-3 < 1:
            assert stats.binomtest(hits, count, exact + 4e-3).pvalue < STRICT
    else:  # gamma ~ 2^-57: a rejection would be a 1-in-2^57 event per draw
        assert hits == count


# -- the bits of one word at the largest scales ---------------------------------------


def joint_bits_pvalue(samples: np.ndarray, top_bit: int) -> float:
    """Chi-square of (sign, |x| mod 8, bit ``top_bit`` of |x|) on 32 cells,
    uniform up to O(w / scale) under the target (zero dropped)."""
    x = samples[samples != 0]
    magnitude = np.abs(x)
    cell = ((x < 0).astype(np.int64) * 16 + (magnitude & 7) * 2
            + ((magnitude >> top_bit) & 1))
    observed = np.bincount(cell, minlength=32)
    return float(stats.chisquare(observed).pvalue)


def test_gaussian_sign_and_offset_bits_are_independent_at_sigma_2_28():
    """sigma^2 = 2^56: j = 20, the offset in bits 0..19 of the
    word, the sign in bit 20; (sign, low bits, bit 19) jointly uniform at 1e6.
    Also the twin: the same cells with the sign replaced by bit 19 of |x| (a
    sign overlapping the offset) fail, so the test could see such a bug."""
    sigma_squared = Fraction(2**56)
    assert bucket_width_exponent(sigma_squared) == 20
    samples = discrete_gaussian(sigma_squared, 1_000_000, SeededRandomBits(300))
    assert joint_bits_pvalue(samples, 19) > STRICT
    overlapped = np.where((np.abs(samples) >> 19) & 1 == 1, -np.abs(samples), np.abs(samples))
    assert joint_bits_pvalue(overlapped, 19) < STRICT


@pytest.mark.parametrize("scale,j", [(Fraction(2**38 - 1), 31), (Fraction(2**38), 32),
                                     (Fraction(2**45 + 7, 3), 37), (Fraction(2**48), 42)],
                         ids=str)
def test_laplace_sign_and_offset_bits_are_independent_at_large_t(scale, j):
    """Offset in bits 1..j of the lane word for j <= 31 (the
    boundary j = 31 fills bits 1..31 exactly), a word of its own past that;
    sign, low bits and the offset's top bit jointly uniform at 1e6."""
    assert laplace_bucket_exponent(scale) == j
    samples = discrete_laplace(scale, 1_000_000, SeededRandomBits(310 + j))
    assert joint_bits_pvalue(samples, j - 1) > STRICT


# -- the full law at the threshold scales ---------------------------------------------


def gaussian_pmf(sigma_squared: Fraction, reach: int) -> tuple[np.ndarray, np.ndarray]:
    """x = -reach..reach and exp(-x^2 / (2 sigma^2)) / Z in 40-digit mpmath
    (reach >= 40 sigma: the rest is below 1e-300)."""
    s = mpmath.mpf(sigma_squared.numerator) / sigma_squared.denominator
    xs = np.arange(-reach, reach + 1)
    weights = [mpmath.exp(-mpmath.mpf(int(x)) ** 2 / (2 * s)) for x in xs]
    total = mpmath.fsum(weights)
    return xs, np.array([float(w / total) for w in weights])


def fine_cells_pvalue(samples: np.ndarray, xs: np.ndarray, pmf: np.ndarray, sigma: float,
                      w: int) -> float:
    """Chi-square on: x = 0, x = +-1, +-(w - 1), +-w singly, then 20 bands of
    |x| in units of sigma / 4 split by sign and by the half of the bucket
    (|x| mod w below or above w / 2; parity at w = 2), the last band open."""
    def cell_of(values: np.ndarray) -> np.ndarray:
        magnitude = np.abs(values)
        single = {0: 0, 1: 1, -1: 2, w - 1: 3, -(w - 1): 4, w: 5, -w: 6}
        band = np.minimum((magnitude / (sigma / 4)).astype(np.int64), 19)
        half = (magnitude % w) >= w // 2
        cell = 7 + band * 4 + half * 2 + (values < 0)
        for value, index in single.items():
            cell = np.where(values == value, index, cell)
        return cell

    cells = 7 + 20 * 4
    expected = np.bincount(cell_of(xs), weights=pmf, minlength=cells) * samples.size
    observed = np.bincount(cell_of(samples), minlength=cells)
    keep = expected > 0
    expected = expected[keep] * observed[keep].sum() / expected[keep].sum()
    return float(stats.chisquare(observed[keep], expected).pvalue)


@pytest.mark.slow
@pytest.mark.parametrize("sigma_squared,w,seed", [
    (Fraction(2**18), 2, 400),  # the smallest bucket width, sigma = 512
    (Fraction(3 * 2**18 + 1, 3), 2, 401),  # non-dyadic, r = 3
    (Fraction(4**10 - 1), 2, 402),  # the largest sigma with w = 2
    (Fraction(24_600**2 * 7 + 1, 7), 64, 403),  # first scales past the table
    (Fraction(2**30 - 1), 64, 404),
])
def test_gaussian_fine_cells_follow_the_pmf_at_threshold_scales(sigma_squared, w, seed):
    """2e6 draws at w = 2 (called directly: the table serves
    these sigmas in production) and just past the table; fine cells around 0
    and the bucket halves; the twin (sigma 1% too large) is rejected."""
    assert 2 ** bucket_width_exponent(sigma_squared) == w
    sigma = math.sqrt(float(sigma_squared))
    if w > 2:
        assert gaussian_table_entries(sigma_squared) > MAX_TABLE_ENTRIES
    reach = int(40 * sigma)
    xs, pmf = (gaussian_pmf(sigma_squared, reach) if sigma < 1000 else
               (np.arange(-reach, reach + 1),
                np.exp(-np.arange(-reach, reach + 1, dtype=np.float64) ** 2
                       / (2 * float(sigma_squared)))))
    pmf = pmf / pmf.sum()
    samples = discrete_gaussian_by_buckets(sigma_squared, 2_000_000, stream(seed))
    assert fine_cells_pvalue(samples, xs, pmf, sigma, w) > STRICT
    wrong = np.exp(-xs.astype(np.float64) ** 2 / (2 * float(sigma_squared) * 1.01**2))
    assert fine_cells_pvalue(samples, xs, wrong / wrong.sum(), sigma, w) < STRICT


@pytest.mark.slow
def test_laplace_fine_cells_follow_the_pmf_at_the_smallest_buckets():
    """t = 128 + 1/3 (w = 2, the smallest bucket width, called
    directly) and 2e6 draws on the same fine cells, with a 1%-wrong-t twin."""
    scale = Fraction(385, 3)
    assert laplace_bucket_exponent(scale) == 1
    xs = np.arange(-200 * 129, 200 * 129 + 1)
    pmf = np.exp(-np.abs(xs) * 3 / 385.0)
    samples = discrete_laplace_by_buckets(scale, 2_000_000, stream(410))
    assert fine_cells_pvalue(samples, xs, pmf / pmf.sum(), 128.0, 2) > STRICT
    wrong = np.exp(-np.abs(xs) * 3 / (385.0 * 1.01))
    assert fine_cells_pvalue(samples, xs, wrong / wrong.sum(), 128.0, 2) < STRICT


# -- routing and extremes -------------------------------------------------------------


@pytest.mark.parametrize("sigma_squared", [
    Fraction(2**56), 2.0**56, Fraction(2**55 - 1, 2), Fraction(2**43 - 1, 2**13 - 1),
    Fraction(2**56 - 1), Fraction(2**38 - 1, 2**18 - 1), Fraction(1, 2**56), Fraction(1, 2**28),
    Fraction(2**28 - 1, 2**28),
    Fraction(2**18), Fraction(2**18) - Fraction(1, 2**19),
], ids=str)
def test_every_extreme_sigma_samples(sigma_squared):
    """no exception, int64, variance within 5% of sigma^2 for
    sigma >= 1 (2e4 draws: 1% standard error); an empty shape is empty."""
    assert discrete_gaussian(sigma_squared, (0, 3), SeededRandomBits(500)).shape == (0, 3)
    samples = discrete_gaussian(sigma_squared, 20_000, SeededRandomBits(500))
    assert samples.dtype == np.int64
    exact = Fraction(sigma_squared)
    if exact >= 1:
        assert abs(samples.astype(np.float64).var() / float(exact) - 1) < 0.05
    elif exact < Fraction(1, 16):
        assert np.abs(samples).max() <= 1


@pytest.mark.parametrize("scale", [Fraction(2**48), 2.0**48, Fraction(2**48 - 1, 3),
                                   Fraction(2**38 - 1), Fraction(2**38), Fraction(1, 2**48),
                                   Fraction(2**48 - 1, 2**48), Fraction(127), Fraction(128)],
                         ids=str)
def test_every_extreme_scale_samples(scale):
    """no exception; E|X| within 5% of its value (about t for a
    large t); an empty shape is empty."""
    assert discrete_laplace(scale, (0,), SeededRandomBits(510)).shape == (0,)
    samples = discrete_laplace(scale, 20_000, SeededRandomBits(510))
    assert samples.dtype == np.int64
    q = math.exp(-1 / float(Fraction(scale)))
    mean_abs = 2 * q / ((1 - q) * (1 + q))
    if mean_abs > 0.1:
        assert abs(np.abs(samples).mean() / mean_abs - 1) < 0.05
    else:
        assert (samples == 0).mean() > 0.99


def test_routing_is_monotone_in_the_parameter(monkeypatch):
    """across 400 sigmas and scales around both thresholds the
    path taken (table or buckets) switches once, the same for a Fraction and
    its float, and never falls to CKS (buckets need sigma >= 2^9, t >= 2^7,
    far below the table thresholds)."""
    taken = []
    for name in ("discrete_gaussian_by_buckets", "discrete_laplace_by_buckets"):
        monkeypatch.setattr(discrete_noise, name,
                            lambda exact, count, stream_, name=name: taken.append(name)
                            or np.zeros(count, np.int64))
    monkeypatch.setattr(discrete_noise, "_discrete_gaussian_by_rejection",
                        lambda *_: pytest.fail("CKS Algorithm 3 reached"))
    monkeypatch.setattr(discrete_noise, "_discrete_laplace",
                        lambda *_: pytest.fail("CKS Algorithm 2 reached"))
    monkeypatch.setattr(discrete_noise, "_discrete_gaussian_by_table",
                        lambda exact, count, stream_: np.zeros(count, np.int64))
    monkeypatch.setattr(discrete_noise, "sample_by_inversion",
                        lambda law, count, stream_: np.zeros(count, np.int64))
    for sampler, values in [(discrete_gaussian, np.linspace(24_000.0**2, 25_000.0**2, 200)),
                            (discrete_laplace, np.linspace(4_000.0, 4_500.0, 200))]:
        path = []
        for value in values:
            before = len(taken)
            value = float(round(value))
            sampler(value, 1, SeededRandomBits(0))
            sampler(Fraction(value), 1, SeededRandomBits(0))
            path.append(len(taken) - before)
        assert set(path) == {0, 2}  # the float and the Fraction agree
        switches = sum(a != b for a, b in itertools.pairwise(path))
        assert switches == 1


def test_seeded_bucketed_calls_reproduce_on_every_path():
    """The same seed gives the same draws on the wide-bucket
    Laplace (offset word of its own) and the non-dyadic Gaussian."""
    for sampler, parameter in [(discrete_laplace, Fraction(2**47 + 1)),
                               (discrete_gaussian, Fraction(2**50 + 1, 5))]:
        first = sampler(parameter, 5000, SeededRandomBits(9))
        assert np.array_equal(first, sampler(parameter, 5000, SeededRandomBits(9)))
        assert not np.array_equal(first, sampler(parameter, 5000, SeededRandomBits(10)))


# -- the envelope, per integer, with buckets of several sigma_b ------------------------


def per_integer_pvalue(samples: np.ndarray, pmf_at) -> float:
    """Chi-square of ``samples`` on every integer with expected count >= 20,
    the rest pooled per side; ``pmf_at(x)`` the target's exact mass."""
    reach = 0
    while pmf_at(reach + 1) * samples.size >= 20:
        reach += 1
    xs = np.arange(-reach, reach + 1)
    probabilities = np.array([pmf_at(int(x)) for x in xs])
    tail = (1 - probabilities.sum()) / 2
    expected = np.array([tail, *probabilities, tail]) * samples.size
    observed = np.bincount(np.clip(samples, -reach - 1, reach + 1) + reach + 1,
                           minlength=2 * reach + 3)
    return float(stats.chisquare(observed, expected).pvalue)


def exact_gaussian_pmf(sigma_squared: Fraction):
    s = mpmath.mpf(sigma_squared.numerator) / sigma_squared.denominator
    reach = int(60 * mpmath.sqrt(s)) + 10
    total = mpmath.fsum(mpmath.exp(-mpmath.mpf(x) ** 2 / (2 * s)) for x in range(-reach, reach + 1))
    return lambda x: float(mpmath.exp(-mpmath.mpf(x) ** 2 / (2 * s)) / total)


@pytest.mark.parametrize("sigma_squared,seed", [(Fraction(50), 600), (Fraction(151, 3), 601),
                                                (Fraction(9), 602)], ids=str)
def test_coarse_gaussian_buckets_follow_the_pmf_per_integer(
        sigma_squared, seed, monkeypatch):
    """BUCKET_SIGMA_BITS = 0 gives buckets of 4 (sigma ~ 7) or 2
    (sigma = 3) integers, sigma_b below 2: the envelope and the acceptance
    (including gamma >= 1, the whole-part path) carry the law. 2e6 draws on
    every integer: p > 1e-6; the twins -- zero counted twice (the sign step
    not rejecting (-, 0)) and sigma 1% large -- are rejected."""
    monkeypatch.setattr(exact_bucket_rejection, "BUCKET_SIGMA_BITS", 0)
    assert bucket_width_exponent(sigma_squared) >= 1
    pmf = exact_gaussian_pmf(sigma_squared)
    samples = discrete_gaussian_by_buckets(sigma_squared, 2_000_000, stream(seed))
    assert per_integer_pvalue(samples, pmf) > STRICT
    zero = pmf(0)
    assert per_integer_pvalue(samples, lambda x: (2 * zero if x == 0 else pmf(x))
                              / (1 + zero)) < STRICT
    wider = exact_gaussian_pmf(sigma_squared * Fraction(10201, 10000))
    assert per_integer_pvalue(samples, wider) < STRICT


@pytest.mark.parametrize("scale,seed", [(Fraction(11, 2), 610), (Fraction(7), 611),
                                        (Fraction(100, 3), 612)], ids=str)
def test_coarse_laplace_buckets_follow_the_pmf_per_integer(
        scale, seed, monkeypatch):
    """LAPLACE_BUCKET_BITS = 0: t / w in [1, 2), buckets of 4,
    4 and 32 integers; 2e6 draws on every integer, with the zero-twice and
    3%-wrong-t twins rejected (per-integer cells dilute a 1% error at t = 33)."""
    monkeypatch.setattr(exact_bucket_rejection, "LAPLACE_BUCKET_BITS", 0)
    assert laplace_bucket_exponent(scale) >= 2
    t = mpmath.mpf(scale.numerator) / scale.denominator

    def pmf_for(t_):
        q = mpmath.exp(-1 / t_)
        return lambda x: float((1 - q) / (1 + q) * q ** abs(x))

    pmf = pmf_for(t)
    samples = discrete_laplace_by_buckets(scale, 2_000_000, stream(seed))
    assert per_integer_pvalue(samples, pmf) > STRICT
    zero = pmf(0)
    assert per_integer_pvalue(samples, lambda x: (2 * zero if x == 0 else pmf(x))
                              / (1 + zero)) < STRICT
    assert per_integer_pvalue(samples, pmf_for(t * 1.03)) < STRICT


def test_big_integer_buckets_mix_with_fast_ones_and_keep_the_law(monkeypatch):
    """A small _FAST_LIMIT sends buckets B > 4 (|x| >= 20 at
    w = 4, sigma ~ 7) to the exact Fraction path inside the full sampler while
    the rest stay in uint64: the law per integer holds (1e6 draws) and the
    zero-twice twin is rejected."""
    monkeypatch.setattr(exact_bucket_rejection, "BUCKET_SIGMA_BITS", 0)
    monkeypatch.setattr(exact_bucket_rejection, "_FAST_LIMIT", 16 * 9 + 1)
    sigma_squared = Fraction(50)
    pmf = exact_gaussian_pmf(sigma_squared)
    samples = discrete_gaussian_by_buckets(sigma_squared, 1_000_000, stream(620))
    assert (np.abs(samples) >= 20).mean() > 0.002  # the slow path was taken
    assert per_integer_pvalue(samples, pmf) > STRICT
    zero = pmf(0)
    assert per_integer_pvalue(samples, lambda x: (2 * zero if x == 0 else pmf(x))
                              / (1 + zero)) < STRICT
