"""The Renyi bound the distributed discrete Gaussian is charged by
(common/accounting/discrete.py: Kairouz, Liu and Steinke 2021, Proposition 14)
against the exact Renyi divergence of a sum of n i.i.d. discrete Gaussians
and its shift, computed here from the convolved pmfs: never below it, and
within the paper's tau of it where the paper says it is tight (s >= 1).

The exact side is computed in log space (a log-sum-exp convolution), so its
tails do not underflow; its own check is that for n = 1 it reproduces the
discrete Gaussian's exact Renyi divergence alpha Delta^2 / (2 s^2)
(Canonne, Kamath and Steinke 2020). A second, independent convolution checks
the bound at share variances below one step, many shares and orders up to
128, and the grid charge on a shift of several coordinates."""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.special import logsumexp

from privadapt.common.accounting.accountant import PrivacyAccountant
from privadapt.common.accounting.discrete import (
    discrete_gaussian_sum_grid_rdp,
    discrete_gaussian_sum_rdp,
    discrete_gaussian_sum_tau,
)
from privadapt.common.mechanisms import DistributedDiscreteGaussianMechanism, GaussianMechanism

ORDERS = (1.5, 2.0, 4.0, 8.0, 16.0, 64.0)
SIGMAS = (0.6, 1.0, 2.0)
MAX_DELTA = 3


@functools.cache
def log_pmf_of_sum(sigma: float, shares: int) -> np.ndarray:
    """log P(Z = x) for x = -M..M, Z the sum of ``shares`` i.i.d. N_Z(0, sigma^2),
    each truncated at 40 sigma + 10 beyond the largest alpha Delta (where the
    divergence's sum peaks: at x = alpha Delta), so what is left out weighs
    below e^-800 of it."""
    reach = math.ceil(40 * sigma) + 10 + math.ceil(max(ORDERS)) * MAX_DELTA
    x = np.arange(-reach, reach + 1)
    one = -x.astype(float) ** 2 / (2 * sigma * sigma)
    one -= logsumexp(one)
    total = one
    for _ in range(shares - 1):
        out = np.full(total.size + one.size - 1, -np.inf)
        for i, log_p in enumerate(one):
            out[i:i + total.size] = np.logaddexp(out[i:i + total.size], log_p + total)
        total = out
    return total


def exact_renyi(sigma: float, shares: int, delta: int, alpha: float) -> float:
    """D_alpha(Z + delta || Z) = log sum_x P(x - delta)^alpha P(x)^(1 - alpha) / (alpha - 1)."""
    log_p = log_pmf_of_sum(sigma, shares)
    shifted, base = log_p[:-delta], log_p[delta:]  # P(x - delta), P(x) on the overlap
    return float(logsumexp(alpha * shifted + (1 - alpha) * base) / (alpha - 1))


def one_discrete_gaussian_renyi(sigma: float, delta: int, alpha: float) -> float:
    """The closed form for n = 1 (completing the square): alpha Delta^2 / (2 s^2)
    + log(theta(alpha Delta) / theta(0)) / (alpha - 1), theta(c) = sum_x
    exp(-(x - c)^2 / (2 s^2)); the log term is 0 when alpha Delta is an integer."""
    x = np.arange(-2000, 2001)

    def log_theta(c: float) -> float:
        return float(logsumexp(-(x - c) ** 2 / (2 * sigma * sigma)))

    return alpha * delta**2 / (2 * sigma**2) \
        + (log_theta(alpha * delta) - log_theta(0.0)) / (alpha - 1)


@pytest.mark.parametrize("sigma", [0.5, 1.0, 2.0])
@pytest.mark.parametrize("delta", [1, 2, 3])
def test_the_exact_side_reproduces_one_discrete_gaussians_divergence(sigma, delta):
    for alpha in ORDERS:
        exact = exact_renyi(sigma, 1, delta, alpha)
        assert exact == pytest.approx(one_discrete_gaussian_renyi(sigma, delta, alpha),
                                      rel=1e-9)
        assert exact <= alpha * delta**2 / (2 * sigma**2) * (1 + 1e-12)


@pytest.mark.parametrize("sigma", SIGMAS)
@pytest.mark.parametrize("shares", [1, 2, 3])
@pytest.mark.parametrize("delta", [1, 2, 3])
def test_the_bound_is_never_below_the_exact_divergence(sigma, shares, delta):
    bound = discrete_gaussian_sum_rdp(sigma**2, shares, delta**2, delta, 1, ORDERS)
    # The charge knows only Q = Delta^2 (module discrete_accounting): still above.
    charged = discrete_gaussian_sum_grid_rdp(sigma**2, shares, delta**2, ORDERS)
    for alpha, ours, grid in zip(ORDERS, bound, charged, strict=True):
        exact = exact_renyi(sigma, shares, delta, alpha)
        assert ours >= exact * (1 - 1e-12), (alpha, ours, exact)
        assert grid >= ours * (1 - 1e-12)


@pytest.mark.parametrize("sigma", [1.0, 2.0])
@pytest.mark.parametrize("shares", [2, 3])
@pytest.mark.parametrize("delta", [1, 2, 3])
def test_the_bound_is_tight_for_a_share_sigma_of_one_step_or_more(sigma, shares, delta):
    """Above s = 1 the sum is within tau (5e-4 at s = 1, 1e-16 at s = 2) of
    one discrete Gaussian of variance n s^2, and so is the bound."""
    tau = discrete_gaussian_sum_tau(sigma**2, shares)
    bound = discrete_gaussian_sum_rdp(sigma**2, shares, delta**2, delta, 1, ORDERS)
    for alpha, ours in zip(ORDERS, bound, strict=True):
        exact = exact_renyi(sigma, shares, delta, alpha)
        assert ours - exact <= 1.1 * tau + 1e-9 * exact, (alpha, ours, exact, tau)


def test_at_the_smallest_share_sigma_the_bound_holds_with_its_slack():
    # s = 1/2: tau = 0.85 for n = 2; the sum is far from a discrete Gaussian.
    bound = discrete_gaussian_sum_rdp(0.25, 2, 1, 1, 1, ORDERS)
    for alpha, ours in zip(ORDERS, bound, strict=True):
        exact = exact_renyi(0.5, 2, 1, alpha)
        assert exact <= ours <= exact + 1.0


def test_the_multidimensional_charge_covers_independent_coordinates():
    """Coordinates are independent, so the exact divergence of a shift (2, 1)
    is the sum of its coordinates'; the charge at Q = 5 bounds it."""
    for sigma in SIGMAS:
        charged = discrete_gaussian_sum_grid_rdp(sigma**2, 2, 5, ORDERS)
        for alpha, ours in zip(ORDERS, charged, strict=True):
            exact = exact_renyi(sigma, 2, 2, alpha) + exact_renyi(sigma, 2, 1, alpha)
            assert ours >= exact


def test_for_large_shares_the_charge_is_the_gaussians():
    mechanism = DistributedDiscreteGaussianMechanism.for_noise_multiplier(1.0, 1.5, 16, 4)
    orders = np.asarray(ORDERS)
    ours = PrivacyAccountant(method="rdp").compose(mechanism, 20).report(1e-6)
    gaussian = PrivacyAccountant(method="rdp").compose(
        GaussianMechanism.single(1.0, 1.5), 20).report(1e-6)
    assert ours.epsilon == pytest.approx(gaussian.epsilon, rel=1e-9)
    assert ours.epsilon >= gaussian.epsilon
    assert np.all(discrete_gaussian_sum_grid_rdp(mechanism.exact_share_sigma_squared, 4,
                                                 mechanism.grid_l2_squared, orders)
                  <= orders / (2 * 1.5**2) * (1 + 1e-9))


@pytest.mark.parametrize("args", [
    (0.2, 2, 1, 1, 1),          # s < 1/2: the paper's bound does not hold
    (math.inf, 2, 1, 1, 1),
    (math.nan, 2, 1, 1, 1),
    (1.0, 0, 1, 1, 1),
    (1.0, 2.0, 1, 1, 1),
    (1.0, 2, -1, 1, 1),
])
def test_bad_parameters_are_refused(args):
    with pytest.raises(ValueError):
        discrete_gaussian_sum_rdp(*args, ORDERS)


def test_orders_below_one_are_refused():
    with pytest.raises(ValueError):
        discrete_gaussian_sum_rdp(1.0, 2, 1, 1, 1, (0.5, 2.0))


# -- an independent convolution, small share variances, many shares ---------------------------


def log_pmf_of_sum_within(s2: float, n: int, reach: int) -> np.ndarray:
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


def largest_renyi_of_shift(log_p: np.ndarray, shift: int, alpha: float) -> float:
    """max over directions of D_alpha(Y + shift || Y) on the computed support."""
    moved, base = log_p[:-shift], log_p[shift:]
    return max(logsumexp(alpha * moved + (1 - alpha) * base),
               logsumexp(alpha * base + (1 - alpha) * moved)) / (alpha - 1)


@pytest.mark.parametrize("s2,n", [(0.25, 4), (17 / 64, 8), (0.5625, 6), (1.0, 5)])
def test_the_bound_holds_at_small_share_variances_and_high_orders(s2, n):
    alphas = np.array([1.5, 2.0, 16.0, 128.0])
    reach = int(alphas.max() * 2 + 40 * math.sqrt(n * s2) + 20)
    log_p = log_pmf_of_sum_within(s2, n, reach)
    for shift in (1, 2):
        bound = discrete_gaussian_sum_rdp(s2, n, shift * shift, shift, 1, alphas)
        for alpha, b in zip(alphas, bound, strict=True):
            assert largest_renyi_of_shift(log_p, shift, alpha) <= b


def test_the_grid_charge_covers_a_shift_of_four_coordinates():
    # Delta = (1, 1, 2, -1) in grid steps: ||Delta||^2 = 7 = Q. Coordinates are
    # independent, so the exact divergence is the sum of one-dimensional ones.
    s2, n, delta = 0.25, 6, (1, 1, 2, -1)
    alphas = np.array([2.0, 8.0, 64.0])
    reach = int(alphas.max() * 2 + 40 * math.sqrt(n * s2) + 20)
    log_p = log_pmf_of_sum_within(s2, n, reach)
    q = sum(m * m for m in delta)
    charged = discrete_gaussian_sum_grid_rdp(Fraction(1, 4), n, q, alphas)
    for alpha, c in zip(alphas, charged, strict=True):
        exact = sum(largest_renyi_of_shift(log_p, abs(m), alpha) for m in delta)
        assert exact <= c
