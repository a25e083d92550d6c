"""Per-release Renyi DP curves: the one RDP dispatch on mechanism kind.

Every kind has an RDP curve (zCDP events and sums of discrete Gaussians have
nothing else), so this is the accountant's fallback when some release has no
privacy loss distribution, and the cheap running total an incremental ledger
adds up (client/ledger/totals.py): RDP composes by addition. A new mechanism
kind adds one entry to ``_RDP_BY_KIND`` (and one to the PLD dispatch in
:mod:`privadapt.common.accounting.pld`).
"""

from __future__ import annotations

import numpy as np

from privadapt.common.mechanisms import Mechanism

DEFAULT_RDP_ORDERS: tuple[float, ...] = tuple(
    [1.0 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)) + [128.0, 256.0, 512.0, 1024.0]
)

#: Kinds that are epsilon-bounded-range (Durfee and Rogers 2019) with epsilon
#: their pure epsilon: the exponential mechanisms. Their PLD is the pure
#: epsilon-DP pair, which ignores that property; their RDP uses it
#: ((epsilon^2/8)-zCDP, Cesar and Rogers 2021), and over many releases that is
#: the smaller figure. Both are valid upper bounds, so a PLD accountant holding
#: one of these reports the smaller (:meth:`PrivacyAccountant.report
#: <privadapt.common.accounting.accountant.PrivacyAccountant.report>`).
BOUNDED_RANGE_KINDS = frozenset({"exponential", "discrete_exponential",
                                 "generalized_exponential"})


def _sampled_gaussian_rdp(
    noise_multiplier: float, sampling_rate: float, orders: np.ndarray
) -> np.ndarray:
    """RDP of one Poisson-sampled Gaussian at ``orders`` (Mironov, Talwar and
    Zhang 2019), through dp-accounting's public ``RdpAccountant``."""
    from dp_accounting import GaussianDpEvent, NeighboringRelation, PoissonSampledDpEvent
    from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib

    accountant = rdp_lib.RdpAccountant(list(orders), NeighboringRelation.ADD_OR_REMOVE_ONE)
    accountant.compose(PoissonSampledDpEvent(sampling_rate, GaussianDpEvent(noise_multiplier)))
    return accountant.rdp


def _laplace_rdp(scale_over_sensitivity: float, orders: np.ndarray) -> np.ndarray:
    """Renyi divergence of Laplace(0, lam) and Laplace(1, lam) (Mironov 2017, Prop. 6)."""
    inv = 1.0 / scale_over_sensitivity
    a = orders
    log_terms = np.logaddexp(
        np.log(a / (2 * a - 1)) + (a - 1) * inv,
        np.log((a - 1) / (2 * a - 1)) - a * inv,
    )
    return log_terms / (a - 1)


def _pure_dp_rdp(mechanism: Mechanism, orders: np.ndarray) -> np.ndarray:
    # epsilon-DP implies (epsilon^2/2)-zCDP (Bun and Steinke 2016, Prop. 1.4)
    # and trivially (alpha, epsilon)-RDP.
    eps = mechanism.pure_epsilon
    return np.minimum(eps, orders * eps**2 / 2)


def _bounded_range_rdp(mechanism: Mechanism, orders: np.ndarray) -> np.ndarray:
    # epsilon-bounded-range implies (epsilon^2/8)-zCDP (Cesar and Rogers 2021)
    # and, being epsilon-DP, (alpha, epsilon)-RDP.
    eps = mechanism.pure_epsilon
    return np.minimum(eps, orders * eps**2 / 8)


def _distributed_discrete_gaussian_rdp(mechanism: Mechanism, orders: np.ndarray) -> np.ndarray:
    # A sum of n discrete Gaussians is no discrete Gaussian and has no PLD
    # here: Kairouz, Liu and Steinke 2021's Renyi bound (Proposition 14) for
    # any integer shift of squared L2 norm at most Q, in grid steps. No PLD
    # entry, so a ledger holding it answers by RDP, as for zCDP events.
    from privadapt.common.accounting.discrete import discrete_gaussian_sum_grid_rdp

    return discrete_gaussian_sum_grid_rdp(mechanism.exact_share_sigma_squared,
                                          mechanism.honest_shares, mechanism.grid_l2_squared,
                                          orders)


#: The one RDP dispatch: mechanism kind -> its RDP at ``orders`` for one release.
_RDP_BY_KIND = {
    "gaussian": lambda m, orders: orders / (2 * m.noise_multiplier**2),
    "poisson_sampled_gaussian": lambda m, orders: _sampled_gaussian_rdp(
        m.noise_multiplier, m.sampling_rate, orders
    ),
    "laplace": lambda m, orders: _laplace_rdp(m.scale / m.sensitivity, orders),
    # Pure epsilon-DP's RDP bound: sound for the discrete Laplace (exactly pure).
    "discrete_laplace": _pure_dp_rdp,
    "distributed_discrete_gaussian": _distributed_discrete_gaussian_rdp,
    "pure_dp": _pure_dp_rdp,
    "zcdp": lambda m, orders: orders * m.rho,
    "report_noisy_laplace": _pure_dp_rdp,
    "discrete_report_noisy_laplace": _pure_dp_rdp,
    **dict.fromkeys(BOUNDED_RANGE_KINDS, _bounded_range_rdp),
}


def release_rdp(mechanism: Mechanism, orders: np.ndarray) -> np.ndarray:
    """RDP at ``orders`` of one release of ``mechanism`` (already in the
    accountant's adjacency): the term :meth:`PrivacyAccountant.report
    <privadapt.common.accounting.accountant.PrivacyAccountant.report>` adds up for it
    under the RDP method, and the one an incremental ledger sums."""
    rdp = _RDP_BY_KIND.get(mechanism.kind)
    if rdp is None:
        raise TypeError(f"unknown mechanism {mechanism!r}")
    return np.asarray(rdp(mechanism, np.asarray(orders, dtype=float)), dtype=float)
