"""Exact privacy accounting of the integer-noise mechanisms of
:mod:`privadapt.common.discrete_noise`, through dp-accounting.

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

from privadapt.common.discrete_noise import as_rational

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
