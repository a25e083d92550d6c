"""Noise samplers and distributed shares, tested statistically.

Distribution tests use a seeded uniform source (the transform from uniforms is
the same code production runs) and a Kolmogorov-Smirnov test at a fixed
false-alarm rate ALPHA; each has a twin showing the test rejects a wrong
distribution, so it could catch a real mistake.
"""

import numpy as np
import pytest
from scipy import special, stats

from privadapt.common.noise.floating import (
    NOISE_REACH,
    SecureRandomBits,
    SeededRandomBits,
    gamma_noise,
    gaussian_noise,
    gaussian_share,
    honest_share_count,
    laplace_noise,
    laplace_share,
    uniforms,
)
from privadapt.common.numerics.fixed_point import FixedPointCodec

ALPHA = 1e-3
SAMPLES = 40_000


def ks_pvalue(samples, cdf) -> float:
    return stats.kstest(samples, cdf).pvalue


def test_secure_source_gives_open_unit_interval_uniforms():
    values = uniforms(SAMPLES)
    assert values.min() > 0 and values.max() < 1
    assert ks_pvalue(values, "uniform") > 1e-6


def test_secure_source_never_repeats_a_draw():
    assert not np.array_equal(uniforms(16), uniforms(16))


def test_secure_words_have_balanced_independent_bits():
    words = SecureRandomBits().words(SAMPLES)
    bits = np.unpackbits(words.view(np.uint8)).reshape(SAMPLES, 64)
    # Every bit position is a fair coin (a stuck or biased bit fails by far).
    per_position = bits.mean(axis=0)
    assert np.all(np.abs(per_position - 0.5) < 5 * 0.5 / np.sqrt(SAMPLES))
    # Consecutive words are uncorrelated.
    high = (words >> np.uint64(32)).astype(np.float64)
    assert abs(np.corrcoef(high[:-1], high[1:])[0, 1]) < 5 / np.sqrt(SAMPLES)


def test_secure_words_take_a_fresh_os_key_every_call(monkeypatch):
    import os

    calls = []
    real = os.urandom

    def counting(size):
        calls.append(size)
        return real(size)

    monkeypatch.setattr(os, "urandom", counting)
    first, second = SecureRandomBits().words(8), SecureRandomBits().words(8)
    assert calls == [32, 32] and not np.array_equal(first, second)


def test_extreme_words_give_finite_noise():
    class Extremes:
        def words(self, size):
            return np.array([0, 2**63 - 1, 2**63, 2**64 - 1] * size, dtype=np.uint64)[:size]

    for sample in (gaussian_noise(1.0, 4, Extremes()), laplace_noise(1.0, 4, Extremes()),
                   gamma_noise(0.5, 1.0, 4, Extremes())):
        assert np.all(np.isfinite(sample))


def test_gaussian_noise_matches_normal_distribution():
    samples = gaussian_noise(2.5, SAMPLES, SeededRandomBits(1))
    assert ks_pvalue(samples, stats.norm(scale=2.5).cdf) > ALPHA


def test_gaussian_noise_variance_matches_sigma_squared():
    sigma = 3.0
    samples = gaussian_noise(sigma, SAMPLES, SeededRandomBits(2))
    # (n-1) s^2 / sigma^2 ~ chi^2(n-1): two-sided interval at ALPHA.
    statistic = (SAMPLES - 1) * samples.var(ddof=1) / sigma**2
    low, high = stats.chi2.ppf([ALPHA / 2, 1 - ALPHA / 2], SAMPLES - 1)
    assert low < statistic < high


def test_ks_rejects_gaussian_with_wrong_scale():
    samples = gaussian_noise(2.5 * 1.05, SAMPLES, SeededRandomBits(3))
    assert ks_pvalue(samples, stats.norm(scale=2.5).cdf) < ALPHA


def test_laplace_noise_matches_laplace_distribution():
    samples = laplace_noise(0.7, SAMPLES, SeededRandomBits(4))
    assert ks_pvalue(samples, stats.laplace(scale=0.7).cdf) > ALPHA


def test_gamma_noise_matches_gamma_distribution():
    samples = gamma_noise(0.25, 2.0, SAMPLES, SeededRandomBits(5))
    assert ks_pvalue(samples, stats.gamma(a=0.25, scale=2.0).cdf) > ALPHA


def test_noise_keeps_requested_shape():
    assert gaussian_noise(1.0, (3, 4), SeededRandomBits(0)).shape == (3, 4)
    assert laplace_share(1.0, 3, 0, (2, 5), SeededRandomBits(0)).shape == (2, 5)


@pytest.mark.parametrize("sites,tolerance", [(3, 0), (5, 2), (10, 0)])
def test_honest_gaussian_shares_sum_to_target_normal(sites, tolerance):
    source = SeededRandomBits(10 + sites)
    sigma = 1.7
    honest = sites - tolerance
    total = sum(gaussian_share(sigma, sites, tolerance, SAMPLES, source) for _ in range(honest))
    assert ks_pvalue(total, stats.norm(scale=sigma).cdf) > ALPHA


def test_gaussian_share_has_variance_sigma_squared_over_honest_count():
    sigma, sites, tolerance = 2.0, 6, 2
    share = gaussian_share(sigma, sites, tolerance, SAMPLES, SeededRandomBits(7))
    assert ks_pvalue(share, stats.norm(scale=sigma / np.sqrt(sites - tolerance)).cdf) > ALPHA


def test_ks_rejects_shares_sized_for_all_sites_when_some_may_collude():
    # Shares sized sigma^2/K (ignoring t=2) leave the honest K-t too little noise.
    sigma, sites, tolerance = 1.0, 6, 2
    source = SeededRandomBits(8)
    total = sum(gaussian_share(sigma, sites, 0, SAMPLES, source) for _ in range(sites - tolerance))
    assert ks_pvalue(total, stats.norm(scale=sigma).cdf) < ALPHA


@pytest.mark.parametrize("sites,tolerance", [(2, 0), (4, 0), (5, 1)])
def test_honest_laplace_shares_sum_to_target_laplace(sites, tolerance):
    source = SeededRandomBits(20 + sites)
    scale = 0.8
    honest = sites - tolerance
    total = sum(laplace_share(scale, sites, tolerance, SAMPLES, source) for _ in range(honest))
    assert ks_pvalue(total, stats.laplace(scale=scale).cdf) > ALPHA


def test_ks_rejects_a_single_laplace_share_as_the_full_noise():
    share = laplace_share(0.8, 4, 0, SAMPLES, SeededRandomBits(9))
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


# --- Floating-point attack (Mironov 2012) on grid releases ------------------
# A site releases round(x 2^f) + round(noise 2^f). The release is safe only if
# every integer reachable under the true sum x is also reachable under a
# neighbouring sum x' = x + sensitivity; otherwise that output proves x.
# Reachability is checked by inverting the sampler around the needed noise
# value and trying the nearest representable uniforms (treating every double in
# (0, 1/2] as attainable, which the two-word construction makes true to 2^-53).

GRID_BITS = 32


def grid_release(x, sigma, count, seed):
    codec = FixedPointCodec(GRID_BITS)
    noise = gaussian_noise(sigma, count, SeededRandomBits(seed))
    return codec.encode(np.full(count, x)).view(np.int64) + codec.encode(noise).view(np.int64)


def reachable_under(neighbour, outputs, sigma, candidates):
    codec = FixedPointCodec(GRID_BITS)
    needed = outputs - codec.encode(np.full(len(outputs), neighbour)).view(np.int64)
    reached = np.zeros(len(outputs), dtype=bool)
    for noise in candidates(needed.astype(np.float64) / codec.scale, sigma):
        reached |= codec.encode(noise).view(np.int64) == needed
    return reached


def new_sampler_candidates(targets, sigma):
    signs = np.where(targets >= 0, 1.0, -1.0)
    half = special.ndtr(-np.abs(targets) / sigma)
    below, above = half.copy(), half.copy()
    for _ in range(48):
        yield -sigma * signs * special.ndtri(below)
        yield -sigma * signs * special.ndtri(above)
        below, above = np.nextafter(below, 0.0), np.nextafter(above, 1.0)


def old_sampler_candidates(targets, sigma):
    # The first sampler: uniforms on the absolute grid (k + 1/2) 2^-53.
    centre = np.floor(special.ndtr(targets / sigma) * 2.0**53)
    for step in range(-40, 41):
        k = np.clip(centre + step, 0, 2.0**53 - 1)
        yield sigma * special.ndtri((k + 0.5) * 2.0**-53)


def old_grid_release(x, sigma, count, seed):
    codec = FixedPointCodec(GRID_BITS)
    raw = np.random.default_rng(seed).integers(0, 2**53, size=count).astype(np.float64)
    noise = sigma * special.ndtri((raw + 0.5) * 2.0**-53)
    return codec.encode(np.full(count, x)).view(np.int64) + codec.encode(noise).view(np.int64)


@pytest.mark.parametrize("sigma", [20.0, 2000.0])
def test_every_grid_release_is_reachable_from_the_neighbouring_sum(sigma):
    outputs = grid_release(0.0, sigma, 50_000, seed=31)
    assert reachable_under(0.0, outputs, sigma, new_sampler_candidates).all()  # sanity
    assert reachable_under(2.0, outputs, sigma, new_sampler_candidates).all()


def test_reachability_check_catches_the_fixed_grid_sampler():
    outputs = old_grid_release(0.0, 2000.0, 50_000, seed=32)
    assert reachable_under(0.0, outputs, 2000.0, old_sampler_candidates).all()  # sanity
    assert not reachable_under(2.0, outputs, 2000.0, old_sampler_candidates).all()


def test_samples_stay_within_the_declared_reach():
    class Extremes:
        def words(self, size):
            return np.array([0, 2**63] * size, dtype=np.uint64)[:size]

    # The most extreme words the sampler can see give its largest magnitudes.
    for sample in (gaussian_noise(1.0, 4, Extremes()), laplace_noise(1.0, 4, Extremes()),
                   gamma_noise(0.1, 1.0, 4, Extremes())):
        assert np.max(np.abs(sample)) < NOISE_REACH
