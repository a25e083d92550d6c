"""Review 9a (adversarial, issue 17): independent checks of the distributed
discrete Gaussian's Renyi bound, the exact Polya shares and _uniform_below's
libdivide remainder, at parameters the builder's tests did not cover.

All of these held when written (no finding); they are kept as regression
checks. Measured numbers are in the session note of review 9a."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp

from privadapt.common.accounting.discrete import (
    discrete_gaussian_sum_grid_rdp,
    discrete_gaussian_sum_rdp,
)
from privadapt.common.mechanisms.distributed_discrete_gaussian import grid_l2_squared
from privadapt.common.noise.bernoulli import _remainder
from privadapt.common.noise.discrete_shares import polya_share
from privadapt.common.noise.floating import SeededRandomBits

# -- _remainder == % --------------------------------------------------------------------

def test_libdivide_remainder_equals_python_modulo_on_edge_words_and_bounds():
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


# -- Kairouz-Liu-Steinke Prop. 14 against exact divergences ----------------------------

def _log_pmf_sum_of_discrete_gaussians(s2: float, n: int, reach: int) -> np.ndarray:
    """log P(Y = y), y in [-reach, reach], Y a sum of n N_Z(0, s2), by exact
    convolution in the log domain (components kept to 2 reach: the dominant
    paths to |y| <= reach have every component near y / n)."""
    wide = 2 * reach
    x = np.arange(-wide, wide + 1)
    one = -x * x / (2 * s2)
    one -= logsumexp(one)
    acc, acc_reach = one, wide
    for step in range(n - 1):
        out_reach = wide if step < n - 2 else reach
        out = np.empty(2 * out_reach + 1)
        xs = np.arange(-acc_reach, acc_reach + 1)
        for i, y in enumerate(range(-out_reach, out_reach + 1)):
            j = y - xs + wide
            ok = (j >= 0) & (j <= 2 * wide)
            out[i] = logsumexp(acc[ok] + one[j[ok]])
        acc, acc_reach = out, out_reach
    return acc - logsumexp(acc)


def _renyi_shift(log_p: np.ndarray, shift: int, alpha: float) -> float:
    """max over directions of D_alpha(Y + shift || Y) on the computed support."""
    moved, base = log_p[:-shift], log_p[shift:]
    return max(logsumexp(alpha * moved + (1 - alpha) * base),
               logsumexp(alpha * base + (1 - alpha) * moved)) / (alpha - 1)


@pytest.mark.parametrize("s2,n", [(0.25, 4), (17 / 64, 8), (0.5625, 6), (1.0, 5)])
def test_prop14_bound_is_never_below_the_exact_divergence(s2, n):
    alphas = np.array([1.5, 2.0, 16.0, 128.0])
    reach = int(alphas.max() * 2 + 40 * math.sqrt(n * s2) + 20)
    log_p = _log_pmf_sum_of_discrete_gaussians(s2, n, reach)
    for shift in (1, 2):
        bound = discrete_gaussian_sum_rdp(s2, n, shift * shift, shift, 1, alphas)
        for alpha, b in zip(alphas, bound, strict=True):
            assert _renyi_shift(log_p, shift, alpha) <= b


def test_grid_charge_covers_a_multi_coordinate_shift():
    # Delta = (1, 1, 2, -1) in grid steps: ||Delta||^2 = 7 = Q. Coordinates are
    # independent, so the exact divergence is the sum of one-dimensional ones.
    s2, n, delta = 0.25, 6, (1, 1, 2, -1)
    alphas = np.array([2.0, 8.0, 64.0])
    reach = int(alphas.max() * 2 + 40 * math.sqrt(n * s2) + 20)
    log_p = _log_pmf_sum_of_discrete_gaussians(s2, n, reach)
    q = sum(m * m for m in delta)
    charged = discrete_gaussian_sum_grid_rdp(Fraction(1, 4), n, q, alphas)
    for alpha, c in zip(alphas, charged, strict=True):
        exact = sum(_renyi_shift(log_p, abs(m), alpha) for m in delta)
        assert exact <= c


def test_grid_l2_squared_covers_rounding_of_every_coordinate():
    # The worst case the derivation names: every coordinate's rounding moves a
    # full step in the same direction as the data difference.
    f, size = 16, 9
    s2 = 3.0 / 2**f  # the kernel's own L2 sensitivity, in data units
    sens = s2 + math.sqrt(size) * 2.0**-f  # rounding_charged, e = 0
    q = grid_l2_squared(sens, f)
    per_coordinate = s2 * 2**f / math.sqrt(size)  # 1 step each
    delta = [math.floor(per_coordinate) + 1] * size
    assert sum(d * d for d in delta) <= q


# -- exact Polya shares at untested parameters -----------------------------------------

def _nb_difference_pmf(scale: Fraction, honest: int, reach: int) -> np.ndarray:
    q = math.exp(-1 / float(scale))
    k = np.arange(reach + 1)
    one = stats.nbinom.pmf(k, 1.0 / honest, 1 - q)
    return np.convolve(one, one[::-1])  # index i is the value i - reach


def _chi_square(samples: np.ndarray, pmf: np.ndarray, reach: int) -> float:
    observed = np.bincount(samples + reach, minlength=pmf.size).astype(float)
    expected = pmf / pmf.sum() * samples.size
    big = expected >= 5
    obs = np.append(observed[big], observed[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    return float(stats.chi2.sf(((obs - exp) ** 2 / exp).sum(), obs.size - 1))


@pytest.mark.parametrize("scale,honest", [(Fraction(7, 3), 16), (Fraction(3, 10), 5),
                                          (Fraction(5, 7), 2), (Fraction(11, 4), 13)])
def test_polya_share_law_at_non_dyadic_scales_and_many_shares(scale, honest):
    samples = polya_share(scale, honest, 0, 400_000, SeededRandomBits(90 + honest))
    reach = max(int(abs(samples).max()) + 5, 80)
    assert _chi_square(samples, _nb_difference_pmf(scale, honest, reach), reach) > 1e-4


@pytest.mark.parametrize("scale,honest", [(Fraction(3, 10), 5), (Fraction(5, 7), 2)])
def test_honest_polya_shares_sum_to_the_discrete_laplace(scale, honest):
    total = sum(polya_share(scale, honest, 0, 100_000, SeededRandomBits(7 * i + honest))
                for i in range(honest))
    q = math.exp(-1 / float(scale))
    reach = int(abs(total).max()) + 5
    x = np.arange(-reach, reach + 1)
    pmf = (1 - q) / (1 + q) * q ** np.abs(x)
    assert _chi_square(total, pmf, reach) > 1e-4


# -- logarithmic jumps at level boundaries the builder did not test ---------------------

@pytest.mark.parametrize("scale", [Fraction(2), Fraction(4 * 2**20 + 1, 2**20),
                                   Fraction(2**30 - 1, 2**28), 1 + Fraction(1, 2**47),
                                   Fraction(3, 4), Fraction(64), Fraction(65)])
def test_logarithmic_jumps_at_dyadic_boundaries_follow_logser(scale):
    from privadapt.common.noise.count_noise import _logarithmic
    from privadapt.common.noise.discrete import KeystreamBits

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


def test_polya_share_near_two_to_the_45_matches_the_gamma_difference_limit():
    # At t = 2^45 + 1 a share / t is Gamma(1/2) - Gamma(1/2) up to O(1/t).
    scale, honest = Fraction(2**45 + 1), 2
    x = polya_share(scale, honest, 0, 300_000, SeededRandomBits(4545)).astype(float)
    x /= float(scale)
    rng = np.random.default_rng(45)
    ref = rng.gamma(0.5, 1, 1_000_000) - rng.gamma(0.5, 1, 1_000_000)
    assert stats.ks_2samp(x, ref).pvalue > 1e-4
    assert abs(x.var() / 1.0 - 1) < 0.03
