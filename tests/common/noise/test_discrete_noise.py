"""Exact integer noise samplers, tested against their exact probability mass
functions.

Each distribution test draws from a fixed seed (so it is deterministic) and
asks a chi-square goodness-of-fit p-value above STRICT; its twin asks the same
test to reject a slightly wrong parameter at p below STRICT, so the test could
catch a real mistake.
"""

import math
import os
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from privadapt.common.noise import bernoulli as exact_bernoulli
from privadapt.common.noise import discrete as discrete_noise
from privadapt.common.noise.bernoulli import _remainder
from privadapt.common.noise.discrete import (
    discrete_gaussian,
    discrete_laplace,
)
from privadapt.common.noise.discrete_shares import polya_share, skellam_share
from privadapt.common.noise.floating import SeededRandomBits

STRICT = 1e-6
SAMPLES = 200_000


def chi_square_pvalue(samples: np.ndarray, pmf) -> float:
    """Goodness of fit of integer ``samples`` to ``pmf`` (a function of an
    integer array), cells merged from the tails inward until each expects at
    least 20 draws."""
    low, high = int(samples.min()), int(samples.max())
    support = np.arange(low - 50, high + 51)
    probabilities = pmf(support)
    edges = np.cumsum(probabilities)
    expected_min = 20 / samples.size
    # Cell boundaries at cumulative-probability steps of at least expected_min.
    cells, observed, start, acc = [], [], 0, 0.0
    counts = np.bincount(samples - (low - 50), minlength=support.size)
    for i in range(support.size):
        acc += probabilities[i]
        if acc >= expected_min and edges[-1] - edges[i] >= expected_min:
            cells.append(acc)
            observed.append(counts[start:i + 1].sum())
            start, acc = i + 1, 0.0
    cells.append(acc + (1.0 - edges[-1]))
    observed.append(counts[start:].sum())
    expected = np.array(cells) / np.sum(cells) * samples.size
    return float(stats.chisquare(np.array(observed), expected).pvalue)


def discrete_laplace_pmf(scale: float):
    q = math.exp(-1.0 / scale)
    return lambda x: (1 - q) / (1 + q) * q ** np.abs(x)


def discrete_gaussian_pmf(sigma_squared: float):
    reach = int(50 * math.sqrt(sigma_squared)) + 50
    grid = np.arange(-reach, reach + 1)
    normaliser = np.exp(-grid.astype(float) ** 2 / (2 * sigma_squared)).sum()
    return lambda x: np.exp(-np.asarray(x, float) ** 2 / (2 * sigma_squared)) / normaliser


def skellam_pmf(variance: float):
    return lambda x: stats.skellam(variance / 2, variance / 2).pmf(x)


@pytest.mark.parametrize("scale", [Fraction(1, 3), 1, 3, Fraction(50, 7), 40])
def test_discrete_laplace_matches_its_pmf(scale):
    samples = discrete_laplace(scale, SAMPLES, SeededRandomBits(1))
    assert samples.dtype == np.int64
    assert chi_square_pvalue(samples, discrete_laplace_pmf(float(scale))) > STRICT


def test_discrete_laplace_test_rejects_a_wrong_scale():
    samples = discrete_laplace(3, SAMPLES, SeededRandomBits(1))
    assert chi_square_pvalue(samples, discrete_laplace_pmf(3.3)) < STRICT


@pytest.mark.parametrize("sigma_squared", [Fraction(1, 4), 1, Fraction(10, 3), 100, 2500])
def test_discrete_gaussian_matches_its_pmf(sigma_squared):
    samples = discrete_gaussian(sigma_squared, SAMPLES, SeededRandomBits(2))
    assert samples.dtype == np.int64
    assert chi_square_pvalue(samples, discrete_gaussian_pmf(float(sigma_squared))) > STRICT


def test_discrete_gaussian_test_rejects_a_wrong_sigma():
    samples = discrete_gaussian(100, SAMPLES, SeededRandomBits(2))
    assert chi_square_pvalue(samples, discrete_gaussian_pmf(110.0)) < STRICT
    assert chi_square_pvalue(samples, discrete_laplace_pmf(10.0)) < STRICT


@pytest.mark.parametrize("num_participants,collusion_tolerance", [(3, 0), (5, 2), (4, 3)])
def test_honest_polya_shares_sum_to_the_discrete_laplace(num_participants, collusion_tolerance):
    honest = num_participants - collusion_tolerance
    total = sum(polya_share(4, num_participants, collusion_tolerance, SAMPLES,
                            SeededRandomBits(10 + i)) for i in range(honest))
    assert chi_square_pvalue(total, discrete_laplace_pmf(4.0)) > STRICT
    assert chi_square_pvalue(total, discrete_laplace_pmf(4.4)) < STRICT


def test_one_polya_share_is_a_difference_of_negative_binomials():
    share = polya_share(4, 4, 1, SAMPLES, SeededRandomBits(3))
    q = math.exp(-1 / 4)
    support = np.arange(-400, 401)
    half = stats.nbinom(1 / 3, 1 - q).pmf(np.arange(401))
    difference = np.convolve(half, half[::-1])  # index j is the value j - 400
    assert chi_square_pvalue(share, lambda x: difference[np.asarray(x) + 400]
                             * (np.abs(np.asarray(x)) <= 400)) > STRICT
    assert support.size == 801


@pytest.mark.parametrize("num_participants,collusion_tolerance", [(3, 0), (5, 2)])
def test_honest_skellam_shares_sum_to_the_skellam(num_participants, collusion_tolerance):
    honest = num_participants - collusion_tolerance
    total = sum(skellam_share(50, num_participants, collusion_tolerance, SAMPLES,
                              SeededRandomBits(20 + i)) for i in range(honest))
    assert chi_square_pvalue(total, skellam_pmf(50.0)) > STRICT
    assert chi_square_pvalue(total, skellam_pmf(55.0)) < STRICT


@pytest.mark.parametrize("sampler", [
    lambda source: discrete_laplace(Fraction(7, 2), (3, 5), source),
    lambda source: discrete_gaussian(Fraction(9, 4), (3, 5), source),
    lambda source: polya_share(3, 4, 1, (3, 5), source),
    lambda source: skellam_share(9, 4, 1, (3, 5), source),
])
def test_seeded_source_reproduces_exactly_and_shape_is_kept(sampler):
    first, again = sampler(SeededRandomBits(7)), sampler(SeededRandomBits(7))
    assert first.shape == (3, 5) and np.array_equal(first, again)
    assert not np.array_equal(sampler(SeededRandomBits(7)), sampler(SeededRandomBits(8)))


class CountingSource:
    def __init__(self, seed: int) -> None:
        self.inner, self.calls = SeededRandomBits(seed), []

    def words(self, size):
        self.calls.append(size)
        return self.inner.words(size)


@pytest.mark.parametrize("sampler", [
    lambda source: discrete_laplace(5, 1000, source),
    lambda source: discrete_gaussian(30, 1000, source),
    lambda source: polya_share(5, 3, 1, 1000, source),
    lambda source: skellam_share(30, 3, 1, 1000, source),
])
def test_samplers_draw_only_a_256_bit_key_from_the_given_source(sampler, monkeypatch):
    def no_os_randomness(size):
        raise AssertionError("the sampler used os.urandom instead of its source")

    monkeypatch.setattr(os, "urandom", no_os_randomness)
    source = CountingSource(1)
    sampler(source)
    assert source.calls == [4]


def test_default_source_is_fresh_on_every_call():
    assert not np.array_equal(discrete_gaussian(100, 64), discrete_gaussian(100, 64))


@pytest.mark.parametrize("sampler", [discrete_laplace, discrete_gaussian])
@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), True, "3", None,
                                 Fraction(1, 2**60), 2**60])
def test_samplers_refuse_parameters_they_cannot_sample_exactly(sampler, bad):
    with pytest.raises(ValueError):
        sampler(bad, 10, SeededRandomBits(0))


def test_discrete_gaussian_refuses_sigma_beyond_its_word_size():
    discrete_gaussian(2**56, 10, SeededRandomBits(0))  # sigma = 2^28: accepted
    with pytest.raises(ValueError, match="coarser"):
        discrete_gaussian(2**57, 10, SeededRandomBits(0))
    with pytest.raises(ValueError, match="coarser"):
        discrete_gaussian(Fraction(3, 2**55), 10, SeededRandomBits(0))


def test_tiny_scales_give_almost_only_zeros():
    assert not discrete_laplace(Fraction(1, 2**48), 10_000, SeededRandomBits(0)).any()
    assert not discrete_gaussian(Fraction(1, 2**56), 10_000, SeededRandomBits(0)).any()


@pytest.mark.parametrize("sampler,scale,variance", [
    (discrete_laplace, 2**48, 2.0 * 2**96),
    (discrete_gaussian, 2**56, 2.0**56),
    (discrete_gaussian, Fraction(2**54, 3), 2.0**54 / 3),
])
def test_huge_scales_keep_their_variance(sampler, scale, variance):
    samples = sampler(scale, 20_000, SeededRandomBits(4)).astype(float)
    # The sample variance of 20,000 draws is within 10% with overwhelming odds.
    assert samples.var() == pytest.approx(variance, rel=0.1)


def test_empty_shape_gives_an_empty_array():
    assert discrete_gaussian(4, 0, SeededRandomBits(0)).shape == (0,)
    assert discrete_laplace(4, (2, 0), SeededRandomBits(0)).shape == (2, 0)


def test_shares_refuse_a_tolerance_that_leaves_no_honest_site():
    with pytest.raises(ValueError, match="honest"):
        polya_share(3, 3, 3, 10, SeededRandomBits(0))
    with pytest.raises(ValueError, match="honest"):
        skellam_share(3, 2, 2, 10, SeededRandomBits(0))


@pytest.mark.parametrize("gamma", [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(7, 3)])
def test_exact_bernoulli_paths_agree_with_exp_minus_gamma(gamma):
    """The vectorised Bernoulli(exp(-gamma)) and the big-integer one used for
    rare overflowing draws both have mean exp(-gamma)."""
    stream = discrete_noise.KeystreamBits(SeededRandomBits(5))
    count = 40_000
    whole = np.full(count, int(gamma), np.uint64)
    fraction = gamma - int(gamma)
    vectorised = exact_bernoulli._bernoulli_exp(
        whole, np.full(count, fraction.numerator, np.uint64), np.zeros(count, np.uint64),
        fraction.denominator, 0, stream)
    scalar = [exact_bernoulli._bernoulli_exp_scalar(gamma, stream) for _ in range(4000)]
    for draws in (vectorised, np.array(scalar)):
        assert stats.binomtest(int(draws.sum()), draws.size, math.exp(-gamma)).pvalue > STRICT


def test_overflowing_gaussian_proposals_take_the_exact_big_integer_path(monkeypatch):
    """With the fast path disabled every acceptance runs in Python integers,
    and the samples still follow the discrete Gaussian."""
    monkeypatch.setattr(discrete_noise, "_GAUSSIAN_FAST_LIMIT", 1)
    samples = discrete_gaussian(Fraction(9, 4), 20_000, SeededRandomBits(6))
    assert chi_square_pvalue(samples, discrete_gaussian_pmf(2.25)) > STRICT


def test_exp_minus_one_expansion_is_consistent_and_correct():
    first = exact_bernoulli.exp_minus_one_bits(64)
    assert first / 2**64 == pytest.approx(math.exp(-1), rel=1e-15)
    assert exact_bernoulli.exp_minus_one_bits(192) >> 128 == first


@pytest.mark.parametrize("next_word,expected", [(0, True), (2**64 - 1, False)])
def test_bernoulli_exp_minus_one_resolves_a_tied_word_with_more_bits(next_word, expected):
    class Tie:
        def __init__(self):
            self.queue = [exact_bernoulli.exp_minus_one_bits(64), next_word]

        def words(self, size):
            return np.array([self.queue.pop(0) for _ in range(size)], dtype=np.uint64)

    assert exact_bernoulli._bernoulli_exp_minus_one(1, Tie()).tolist() == [expected]


def test_the_libdivide_remainder_equals_python_modulo_on_edge_words_and_bounds():
    # _uniform_below reduces words by a precomputed-reciprocal remainder;
    # every edge word and bound (powers of two and their neighbours, 2^63 and
    # 2^64 - 1, odd bounds) against Python's exact %.
    rng = np.random.default_rng(9)
    bounds = [1, 2, 3, 5, 7, 2**32 - 1, 2**32, 2**32 + 1, 2**63 - 1, 2**63, 2**63 + 1,
              2**64 - 1, 2**64 - 2, 3**40, 10**18]
    bounds += [2**k for k in range(64)] + [2**k - 1 for k in range(2, 65)]
    bounds += [2**k + 1 for k in range(1, 64)]
    bounds += [int(x) for x in rng.integers(1, 2**63, 50, dtype=np.uint64)]
    words = np.array([0, 1, 2, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**63 + 1, 2**64 - 1,
                      2**64 - 2, 2**64 - 3], dtype=np.uint64)
    words = np.concatenate([words, rng.integers(0, 2**64, 2000, dtype=np.uint64)])
    for bound in bounds:
        got = _remainder(words.copy(), bound)
        want = np.array([int(w) % bound for w in words], dtype=np.uint64)
        assert np.array_equal(got, want), bound
