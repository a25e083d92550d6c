"""Exact privacy accounting of the integer-noise mechanisms of
:mod:`privadapt.common.noise.discrete`, through dp-accounting.

An integer-valued query f of integer sensitivity Delta (in grid steps) released
as f + Z:

* discrete Laplace, P(z) ∝ exp(-|z| / t): exactly pure (Delta / t)-DP, since
  the ratio of the two shifted pmfs is exp((|z - Delta| - |z|) / t) <=
  exp(Delta / t) for every z; T releases are (T Delta / t)-DP, and their tight
  (epsilon, delta) curve is the PLD of dp-accounting's
  ``from_discrete_laplace_mechanism`` (parameter 1/t), the same PLD its
  ``PLDAccountant`` builds for ``DiscreteLaplaceDpEvent``.
* discrete Gaussian N_Z(0, sigma^2): dp-accounting's
  ``from_discrete_gaussian_mechanism`` (Canonne, Kamath and Steinke 2020; its
  support truncated where the mass left out is below 1e-30, which the PLD
  charges as infinite loss, so the epsilon is an upper bound).
* Skellam of variance v (Poisson(v/2) - Poisson(v/2) per coordinate):
  dp-accounting 0.6 has no Skellam event, so we use its Renyi DP (Agarwal,
  Kairouz and Liu 2021, Theorem 3.5 / Corollary 3.6), for integer orders
  alpha > 1 and L1, L2 sensitivities Delta_1, Delta_2 of the release:
      eps(alpha) <= alpha Delta_2^2 / (2v)
                    + min(((2 alpha - 1) Delta_2^2 + 6 Delta_1) / (4 v^2),
                          3 Delta_1 / (2 v)),
  composed by adding over releases and converted to (epsilon, delta) by
  dp-accounting's ``rdp_privacy_accountant.compute_epsilon``. Its first term is
  the Gaussian RDP of variance v; the second is what integrality costs.
* a sum of n i.i.d. discrete Gaussians N_Z(0, s^2), s >= 1/2 (the
  distributed discrete Gaussian, one share per honest site): not itself a
  discrete Gaussian, so no PLD here; its Renyi DP by Kairouz, Liu and Steinke
  2021, Proposition 14 (:func:`discrete_gaussian_sum_rdp`), the Gaussian's
  alpha ||Delta||^2 / (2 n s^2) plus a term in their tau, which vanishes
  quickly with s; :func:`discrete_gaussian_sum_grid_rdp` is the form a site
  charges, from its one L2 sensitivity in grid steps.

Sensitivity on the grid: the functions here take the sensitivity in whole grid
steps; the one conversion from a site's charged float sensitivity (which already
holds the rounding onto the grid) is
:func:`privadapt.common.mechanisms.discrete_laplace.grid_steps`.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from dp_accounting.pld import privacy_loss_distribution as pld
from dp_accounting.rdp import rdp_privacy_accountant as rdp

from privadapt.common.mechanisms.distributed_discrete_gaussian import (
    check_sum_of_discrete_gaussians,
    discrete_gaussian_sum_tau,
)
from privadapt.common.noise.discrete import as_rational

DEFAULT_VALUE_DISCRETIZATION = 1e-4
#: Integer Renyi orders for the Skellam bound (it holds for integer alpha > 1).
SKELLAM_ORDERS: tuple[int, ...] = tuple(range(2, 64)) + tuple(range(64, 1025, 8))


def _check_release(sensitivity: int, count: int) -> None:
    for name, value in (("sensitivity", sensitivity), ("count", count)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


def discrete_laplace_pure_epsilon(scale: int | Fraction | float, sensitivity: int,
                                  count: int = 1) -> Fraction:
    """The exact pure epsilon, count Delta / t, of ``count`` discrete Laplace
    releases of scale t and integer sensitivity Delta."""
    _check_release(sensitivity, count)
    return count * sensitivity / as_rational(scale, "the discrete Laplace scale")


def discrete_laplace_pld(scale: int | Fraction | float, sensitivity: int, count: int = 1,
                         value_discretization_interval: float = DEFAULT_VALUE_DISCRETIZATION):
    """The (pessimistic) PLD of ``count`` discrete Laplace releases: the
    privacy-buckets PLD dp-accounting's ``from_discrete_laplace_mechanism``
    builds, computed in closed form (:func:`discrete_laplace_rounded_pmf`)."""
    _check_release(sensitivity, count)
    exact = as_rational(scale, "the discrete Laplace scale")
    single = pld.PrivacyLossDistribution.create_from_rounded_probability(
        discrete_laplace_rounded_pmf(exact, sensitivity, value_discretization_interval),
        0.0, value_discretization_interval, pessimistic_estimate=True, symmetric=True)
    return single.self_compose(count)


def discrete_laplace_rounded_pmf(scale: Fraction, sensitivity: int,
                                 interval: float) -> dict[int, float]:
    """The privacy loss distribution of one discrete Laplace release of scale
    t and integer sensitivity Delta, its losses rounded *up* to multiples of
    ``interval`` h (the pessimistic privacy buckets): bucket j -> mass.

    Why not dp-accounting's ``from_discrete_laplace_mechanism``: it visits
    every integer output between the two centres, Delta of them, and on the
    fixed-point grid Delta is the sensitivity times 2^f (2^32 for a sum of
    sensitivity 1 at f = 32: hours). Its loss takes at most 2 epsilon / h + 2
    rounded values, so this sums the geometric masses of each bucket in closed
    form instead, in exact integer arithmetic for which x falls in which
    bucket.

    With q = exp(-1/t) and X ~ DL(t) (P(x) = (1 - q)/(1 + q) q^|x|), the loss
    of output x against the shift by Delta is L(x) = (|x - Delta| - |x|) / t:
    epsilon = Delta/t for x <= 0 (mass 1/(1 + q)), -epsilon for x >= Delta
    (mass q^Delta/(1 + q)), and (Delta - 2x)/t in between, where bucket j
    (ceil(L/h) = j) holds x from B(j) = ceil((Delta - j h t)/2) to
    B(j - 1) - 1, of mass (q^lo - q^(hi + 1))/(1 + q). The loss law is the
    same for the shift by -Delta (symmetry), so one pmf serves add and
    remove."""
    delta = int(sensitivity)
    step = Fraction(interval)
    a_over_h = 1 / (scale * step)  # loss per unit x, in buckets: L(x)/h = (Delta - 2x) a/h
    epsilon_buckets = delta * a_over_h
    a = 1.0 / float(scale)
    log_q = -a
    one_plus_q = 1.0 + math.exp(log_q)
    pmf: dict[int, float] = {}

    def add(bucket: int, mass: float) -> None:
        if mass > 0:
            pmf[bucket] = pmf.get(bucket, 0.0) + mass

    add(math.ceil(epsilon_buckets), 1.0 / one_plus_q)
    add(math.ceil(-epsilon_buckets), math.exp(log_q * delta) / one_plus_q)
    if delta >= 2:
        # Interior x in [1, Delta - 1]: buckets from ceil(L(Delta-1)/h) to ceil(L(1)/h).
        top = math.ceil((delta - 2) * a_over_h)
        bottom = math.ceil((2 - delta) * a_over_h)
        t_h = scale * step  # h t: B(j) = ceil((Delta - j h t) / 2)
        num, den = t_h.numerator, t_h.denominator
        buckets = range(bottom, top + 1)
        # B(j) = ceil((Delta den - j num) / (2 den)), exactly, for j - 1 and j.
        edges = np.array([max(1, min(delta, -((j * num - delta * den) // (2 * den))))
                          for j in range(bottom - 1, top + 1)], dtype=np.float64)
        lo, after_hi = edges[1:], edges[:-1]  # bucket j: x in [B(j), B(j - 1) - 1]
        widths = after_hi - lo
        masses = np.where(widths > 0, np.exp(log_q * lo) * -np.expm1(log_q * widths), 0.0) \
            / one_plus_q
        for bucket, mass in zip(buckets, masses.tolist(), strict=True):
            add(bucket, mass)
    return pmf


def discrete_laplace_epsilon(scale: int | Fraction | float, sensitivity: int, delta: float,
                             count: int = 1) -> float:
    """Epsilon at ``delta`` of ``count`` discrete Laplace releases: the tight
    PLD value, never above the pure bound count Delta / t."""
    pure = float(discrete_laplace_pure_epsilon(scale, sensitivity, count))
    return min(pure, discrete_laplace_pld(scale, sensitivity, count)
               .get_epsilon_for_delta(delta))


def discrete_gaussian_pld(sigma: float, sensitivity: int, count: int = 1,
                          value_discretization_interval: float = DEFAULT_VALUE_DISCRETIZATION):
    """The (pessimistic) PLD of ``count`` discrete Gaussian releases N_Z(0, sigma^2)."""
    _check_release(sensitivity, count)
    if not (isinstance(sigma, int | float | Fraction) and 0 < sigma < math.inf):
        raise ValueError(f"sigma must be positive and finite, got {sigma!r}")
    single = pld.from_discrete_gaussian_mechanism(
        float(sigma), sensitivity=sensitivity,
        value_discretization_interval=value_discretization_interval)
    return single.self_compose(count)


def discrete_gaussian_epsilon(sigma: float, sensitivity: int, delta: float,
                              count: int = 1) -> float:
    """Epsilon at ``delta`` of ``count`` discrete Gaussian releases."""
    return discrete_gaussian_pld(sigma, sensitivity, count).get_epsilon_for_delta(delta)


def skellam_rdp(variance: float, l1_sensitivity: float, l2_sensitivity: float,
                orders: tuple[int, ...] = SKELLAM_ORDERS) -> list[float]:
    """Renyi DP of one Skellam release of per-coordinate ``variance`` at each
    integer order (Agarwal, Kairouz and Liu 2021)."""
    if not (variance > 0 and l1_sensitivity >= 0 and l2_sensitivity >= 0):
        raise ValueError("need variance > 0 and non-negative sensitivities, got "
                         f"{variance!r}, {l1_sensitivity!r}, {l2_sensitivity!r}")
    if any(isinstance(a, bool) or not isinstance(a, int) or a < 2 for a in orders):
        raise ValueError(f"the Skellam bound holds for integer orders >= 2, got {orders!r}")
    l2_squared = l2_sensitivity**2
    return [alpha * l2_squared / (2 * variance)
            + min(((2 * alpha - 1) * l2_squared + 6 * l1_sensitivity) / (4 * variance**2),
                  3 * l1_sensitivity / (2 * variance))
            for alpha in orders]


def skellam_epsilon(variance: float, l1_sensitivity: float, l2_sensitivity: float,
                    delta: float, count: int = 1) -> float:
    """Epsilon at ``delta`` of ``count`` Skellam releases, by RDP."""
    _check_release(1, count)
    composed = [count * value for value in skellam_rdp(variance, l1_sensitivity,
                                                       l2_sensitivity)]
    epsilon, _ = rdp.compute_epsilon(SKELLAM_ORDERS, composed, delta)
    return float(epsilon)


# -- sums of discrete Gaussians (the distributed discrete Gaussian) ------------------


def discrete_gaussian_sum_rdp(share_sigma_squared: float, shares: int, l2_squared: float,
                              l1: float, support: float,
                              orders: np.ndarray | tuple[float, ...]) -> np.ndarray:
    """The Renyi divergence bound, at each order alpha >= 1, of Z + Delta
    against Z, Z the sum of n = ``shares`` i.i.d. N_Z(0, s^2) per coordinate
    and Delta an integer vector with ||Delta||_2^2 <= ``l2_squared``,
    ||Delta||_1 <= ``l1`` and at most ``support`` nonzero coordinates.

    Kairouz, Liu and Steinke, "The Distributed Discrete Gaussian Mechanism for
    Federated Learning with Secure Aggregation" (ICML 2021, arXiv 2102.06387),
    Proposition 14 / Eq. (17), for s >= 1/2 and every alpha >= 1, with
    tau = :func:`discrete_gaussian_sum_tau`, D2 = ||Delta||_2 / (sqrt(n) s),
    D1 = ||Delta||_1 / (sqrt(n) s):

        D_alpha <= min{ alpha/2 D2^2 + tau d,
                        alpha/2 (D2^2 + 2 tau D1 + tau^2 d),
                        alpha/2 (D2 + tau sqrt d)^2 },

    stated with d the dimension. The coordinates are independent, so the
    divergence is the sum of the coordinates' own, and a coordinate where
    Delta is 0 adds nothing: the one-dimensional case (d = 1) summed over the
    nonzero coordinates gives the same bound with d replaced by their count,
    ``support``, never more. (The third term is the second with D1 <= sqrt(d)
    D2; it is kept for a caller that knows no L1 bound and passes
    sqrt(support l2_squared).) The sum of discrete Gaussians is *not* a
    discrete Gaussian; tau is what that costs, and it vanishes quickly with s
    (5e-4 at s = 1, n = 2). Rounded up by a relative 1e-12 for the float
    error of tau and of these few operations, so it never understates."""
    check_sum_of_discrete_gaussians(share_sigma_squared, shares)
    for name, value in (("l2_squared", l2_squared), ("l1", l1), ("support", support)):
        if not value >= 0:
            raise ValueError(f"{name} must be non-negative, got {value!r}")
    alphas = np.asarray(orders, dtype=float)
    if np.any(~(alphas >= 1.0)):
        raise ValueError(f"the bound holds for orders alpha >= 1, got {orders!r}")
    tau = discrete_gaussian_sum_tau(share_sigma_squared, shares)
    total_variance = shares * float(share_sigma_squared)
    with np.errstate(over="ignore", invalid="ignore"):
        d2_squared = l2_squared / total_variance
        d1 = l1 / math.sqrt(total_variance)
        first = alphas / 2.0 * d2_squared + tau * support
        second = alphas / 2.0 * (d2_squared + 2.0 * tau * d1 + tau * tau * support)
        third = alphas / 2.0 * (math.sqrt(d2_squared) + tau * math.sqrt(support)) ** 2
        bound = np.minimum(np.minimum(first, second), third)
    bound = np.where(np.isnan(bound), np.inf, bound)
    return bound * (1.0 + 1e-12)


def discrete_gaussian_sum_grid_rdp(share_sigma_squared: float, shares: int,
                                   l2_squared_bound: int,
                                   orders: np.ndarray | tuple[float, ...]) -> np.ndarray:
    """:func:`discrete_gaussian_sum_rdp` for any integer Delta with
    ||Delta||_2^2 <= Q = ``l2_squared_bound``, knowing nothing else: Q times
    the bound for one coordinate moved by one step.

    Why that holds: per coordinate moved by m >= 1 steps the bound is f(m) =
    min(alpha m^2 / (2 n s^2) + tau, alpha/2 (m / (sqrt(n) s) + tau)^2), and
    f(m) / m^2 is at most f(1) (each term's tau part shrinks with m), so the
    sum over coordinates is at most f(1) sum m_j^2 <= Q f(1). In particular
    ||Delta||_1 <= Q and the support is at most Q on integers, which is how a
    site's one charged L2 sensitivity bounds everything the paper's
    bound reads."""
    if isinstance(l2_squared_bound, bool) or not isinstance(l2_squared_bound, int) \
            or l2_squared_bound < 0:
        raise ValueError(f"l2_squared_bound must be a non-negative integer, got "
                         f"{l2_squared_bound!r}")
    if l2_squared_bound == 0:
        return np.zeros(np.asarray(orders, dtype=float).shape)
    unit = discrete_gaussian_sum_rdp(share_sigma_squared, shares, 1.0, 1.0, 1.0, orders)
    scale = math.inf if l2_squared_bound > 2**1000 else float(l2_squared_bound)
    return unit * scale
