"""Noise samplers and distributed shares, tested statistically.

Distribution tests use a seeded uniform source (the transform from uniforms is
the same code production runs) and a Kolmogorov-Smirnov test at a fixed
false-alarm rate ALPHA; each has a twin showing the test rejects a wrong
distribution, so it could catch a real mistake.
"""

import numpy as np
import pytest
from scipy import stats

from privadapt.common.noise import (
    SecureUniformSource,
    SeededUniformSource,
    gamma_noise,
    gaussian_noise,
    gaussian_share,
    honest_share_count,
    laplace_noise,
    laplace_share,
)

ALPHA = 1e-3
SAMPLES = 40_000


def ks_pvalue(samples, cdf) -> float:
    return stats.kstest(samples, cdf).pvalue


def test_secure_source_gives_open_unit_interval_uniforms():
    values = SecureUniformSource().uniform(SAMPLES)
    assert values.min() > 0 and values.max() < 1
    assert ks_pvalue(values, "uniform") > 1e-6


def test_secure_source_never_repeats_a_draw():
    source = SecureUniformSource()
    assert not np.array_equal(source.uniform(16), source.uniform(16))


def test_gaussian_noise_matches_normal_distribution():
    samples = gaussian_noise(2.5, SAMPLES, SeededUniformSource(1))
    assert ks_pvalue(samples, stats.norm(scale=2.5).cdf) > ALPHA


def test_gaussian_noise_variance_matches_sigma_squared():
    sigma = 3.0
    samples = gaussian_noise(sigma, SAMPLES, SeededUniformSource(2))
    # (n-1) s^2 / sigma^2 ~ chi^2(n-1): two-sided interval at ALPHA.
    statistic = (SAMPLES - 1) * samples.var(ddof=1) / sigma**2
    low, high = stats.chi2.ppf([ALPHA / 2, 1 - ALPHA / 2], SAMPLES - 1)
    assert low < statistic < high


def test_ks_rejects_gaussian_with_wrong_scale():
    samples = gaussian_noise(2.5 * 1.05, SAMPLES, SeededUniformSource(3))
    assert ks_pvalue(samples, stats.norm(scale=2.5).cdf) < ALPHA


def test_laplace_noise_matches_laplace_distribution():
    samples = laplace_noise(0.7, SAMPLES, SeededUniformSource(4))
    assert ks_pvalue(samples, stats.laplace(scale=0.7).cdf) > ALPHA


def test_gamma_noise_matches_gamma_distribution():
    samples = gamma_noise(0.25, 2.0, SAMPLES, SeededUniformSource(5))
    assert ks_pvalue(samples, stats.gamma(a=0.25, scale=2.0).cdf) > ALPHA


def test_noise_keeps_requested_shape():
    assert gaussian_noise(1.0, (3, 4), SeededUniformSource(0)).shape == (3, 4)
    assert laplace_share(1.0, 3, 0, (2, 5), SeededUniformSource(0)).shape == (2, 5)


@pytest.mark.parametrize("sites,tolerance", [(3, 0), (5, 2), (10, 0)])
def test_honest_gaussian_shares_sum_to_target_normal(sites, tolerance):
    source = SeededUniformSource(10 + sites)
    sigma = 1.7
    honest = sites - tolerance
    total = sum(gaussian_share(sigma, sites, tolerance, SAMPLES, source) for _ in range(honest))
    assert ks_pvalue(total, stats.norm(scale=sigma).cdf) > ALPHA


def test_gaussian_share_has_variance_sigma_squared_over_honest_count():
    sigma, sites, tolerance = 2.0, 6, 2
    share = gaussian_share(sigma, sites, tolerance, SAMPLES, SeededUniformSource(7))
    assert ks_pvalue(share, stats.norm(scale=sigma / np.sqrt(sites - tolerance)).cdf) > ALPHA


def test_ks_rejects_shares_sized_for_all_sites_when_some_may_collude():
    # Shares sized sigma^2/K (ignoring t=2) leave the honest K-t too little noise.
    sigma, sites, tolerance = 1.0, 6, 2
    source = SeededUniformSource(8)
    total = sum(gaussian_share(sigma, sites, 0, SAMPLES, source) for _ in range(sites - tolerance))
    assert ks_pvalue(total, stats.norm(scale=sigma).cdf) < ALPHA


@pytest.mark.parametrize("sites,tolerance", [(2, 0), (4, 0), (5, 1)])
def test_honest_laplace_shares_sum_to_target_laplace(sites, tolerance):
    source = SeededUniformSource(20 + sites)
    scale = 0.8
    honest = sites - tolerance
    total = sum(laplace_share(scale, sites, tolerance, SAMPLES, source) for _ in range(honest))
    assert ks_pvalue(total, stats.laplace(scale=scale).cdf) > ALPHA


def test_ks_rejects_a_single_laplace_share_as_the_full_noise():
    share = laplace_share(0.8, 4, 0, SAMPLES, SeededUniformSource(9))
    assert ks_pvalue(share, stats.laplace(scale=0.8).cdf) < ALPHA


def test_collusion_tolerance_must_leave_an_honest_site():
    with pytest.raises(ValueError, match="honest"):
        honest_share_count(3, 3)
    with pytest.raises(ValueError):
        honest_share_count(0, 0)
    assert honest_share_count(5, 2) == 3


def test_negative_sigma_is_rejected():
    with pytest.raises(ValueError):
        gaussian_noise(-1.0, 3)
