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
sigma (or a broken acceptance), so it could fail."""

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
from privadapt.common.noise.discrete import KeystreamBits, discrete_gaussian, discrete_laplace
from privadapt.common.noise.floating import SeededRandomBits
from privadapt.common.noise.table_inversion import MAX_TABLE_ENTRIES
from tests.common.noise.test_discrete_noise import STRICT

mpmath.mp.dps = 40
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
