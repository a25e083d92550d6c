"""Per-release Renyi DP curves: how each accountant case computes one (the
dispatch on a mechanism's case is :mod:`privadapt.common.accounting.cases`).

Every case has an RDP curve (zCDP events and sums of discrete Gaussians have
nothing else), so RDP is the accountant's fallback when some release has no
privacy loss distribution, and the cheap running total an incremental ledger
adds up (client/ledger/totals.py): RDP composes by addition.
"""

from __future__ import annotations

import numpy as np

from privadapt.common.mechanisms import Mechanism

DEFAULT_RDP_ORDERS: tuple[float, ...] = tuple(
    [1.0 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)) + [128.0, 256.0, 512.0, 1024.0]
)


def gaussian_rdp(mechanism: Mechanism, orders: np.ndarray) -> np.ndarray:
    """alpha / (2 z^2): one Gaussian of noise multiplier z."""
    return orders / (2 * mechanism.noise_multiplier**2)


def sampled_gaussian_rdp(mechanism: Mechanism, orders: np.ndarray) -> np.ndarray:
    """RDP of one Poisson-sampled Gaussian at ``orders`` (Mironov, Talwar and
    Zhang 2019), through dp-accounting's public ``RdpAccountant``."""
    from dp_accounting import GaussianDpEvent, NeighboringRelation, PoissonSampledDpEvent
    from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib

    accountant = rdp_lib.RdpAccountant(list(orders), NeighboringRelation.ADD_OR_REMOVE_ONE)
    accountant.compose(PoissonSampledDpEvent(mechanism.sampling_rate,
                                             GaussianDpEvent(mechanism.noise_multiplier)))
    return accountant.rdp


def laplace_rdp(mechanism: Mechanism, orders: np.ndarray) -> np.ndarray:
    """One Laplace release of noise multiplier scale / sensitivity."""
    return _laplace_rdp(mechanism.scale / mechanism.sensitivity, orders)


def _laplace_rdp(scale_over_sensitivity: float, orders: np.ndarray) -> np.ndarray:
    """Renyi divergence of Laplace(0, lam) and Laplace(1, lam) (Mironov 2017, Prop. 6)."""
    inv = 1.0 / scale_over_sensitivity
    a = orders
    log_terms = np.logaddexp(
        np.log(a / (2 * a - 1)) + (a - 1) * inv,
        np.log((a - 1) / (2 * a - 1)) - a * inv,
    )
    return log_terms / (a - 1)


def pure_dp_rdp(mechanism: Mechanism, orders: np.ndarray) -> np.ndarray:
    # epsilon-DP implies (epsilon^2/2)-zCDP (Bun and Steinke 2016, Prop. 1.4)
    # and trivially (alpha, epsilon)-RDP.
    eps = mechanism.pure_epsilon
    return np.minimum(eps, orders * eps**2 / 2)


def bounded_range_rdp(mechanism: Mechanism, orders: np.ndarray) -> np.ndarray:
    # epsilon-bounded-range implies (epsilon^2/8)-zCDP (Cesar and Rogers 2021)
    # and, being epsilon-DP, (alpha, epsilon)-RDP.
    eps = mechanism.pure_epsilon
    return np.minimum(eps, orders * eps**2 / 8)


def distributed_discrete_gaussian_rdp(mechanism: Mechanism, orders: np.ndarray) -> np.ndarray:
    # A sum of n discrete Gaussians is no discrete Gaussian and has no PLD
    # here: Kairouz, Liu and Steinke 2021's Renyi bound (Proposition 14) for
    # any integer shift of squared L2 norm at most Q, in grid steps. No PLD
    # in its case, so a ledger holding it answers by RDP, as for zCDP events.
    from privadapt.common.accounting.discrete import discrete_gaussian_sum_grid_rdp

    return discrete_gaussian_sum_grid_rdp(mechanism.exact_share_sigma_squared,
                                          mechanism.honest_shares, mechanism.grid_l2_squared,
                                          orders)


def zcdp_rdp(mechanism: Mechanism, orders: np.ndarray) -> np.ndarray:
    """alpha rho: rho-zCDP (Bun and Steinke 2016)."""
    return orders * mechanism.rho
