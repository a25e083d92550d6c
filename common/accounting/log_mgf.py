"""Log moment generating functions of privacy loss distributions, and the
epsilon they certify: the upper bounds an incremental ledger adds up
(client/ledger/totals.py).

A ledger that must not recompose its history at every charge keeps additive
curves instead: RDP composes by addition, and so does the log moment
generating function of a discretised privacy loss distribution (composition
convolves PLDs, which multiplies their moment generating functions). Both
give, by the RDP-to-DP conversion (Balle et al. 2020, Thm. 21, which holds
for any sub-probability measure of losses), an upper bound on epsilon that
costs one vector operation per charge.
"""

from __future__ import annotations

import math

import numpy as np

from privadapt.common.accounting.pld import DEFAULT_VALUE_DISCRETIZATION


def pld_log_mgfs(pld, lambdas: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, float]:
    """``log E[exp(lambda L)]`` over the *finite* losses of ``pld``, for its
    remove and its add direction, and the mass each puts at infinite loss.

    For a composition, the finite parts' log-MGFs add and the infinity masses
    at most add, so these are what a ledger accumulates per release. Reads
    dp-accounting 0.6's pmf fields (``_pmf_remove``, ``_pmf_add``, dense
    ``_lower_loss`` and ``_probs``); tests/common check them against its own
    epsilons."""
    from scipy.special import logsumexp

    lambdas = np.asarray(lambdas, dtype=float)
    curves, masses = [], []
    for pmf in (pld._pmf_remove, pld._pmf_add):
        dense = pmf.to_dense_pmf()
        probs = np.asarray(dense._probs, dtype=float)
        keep = probs > 0
        losses = (dense._lower_loss + np.flatnonzero(keep)) * dense._discretization
        if not keep.any():
            curves.append(np.full(lambdas.shape, -np.inf))
        else:
            # One order at a time: an outer product would take orders x points
            # floats (a gigabyte for a PLD of a million points).
            weights = probs[keep]
            curves.append(np.array([logsumexp(lam * losses, b=weights) for lam in lambdas]))
        masses.append(float(dense._infinity_mass))
    return curves[0], curves[1], masses[0], masses[1]


#: The mass dp-accounting's Gaussian PLD puts at infinite loss (its
#: log_mass_truncation_bound of -50 leaves about 2e-22 per tail), rounded up.
GAUSSIAN_PLD_INFINITY_MASS = 1e-20


def gaussian_pld_log_mgf_bound(
    inverse_square: float, lambdas: np.ndarray, interval: float = DEFAULT_VALUE_DISCRETIZATION
) -> np.ndarray:
    """An upper bound on the log-MGF of dp-accounting's discretised PLD of one
    Gaussian of multiplier ``inverse_square ** -0.5`` (the accountant's fold
    of every unsampled Gaussian): the exact Gaussian privacy loss is
    N(mu, 2 mu) with mu = 1/(2 z^2), whose log-MGF is lambda (lambda + 1) mu;
    connect-the-dots discretisation moves each loss to a neighbouring grid
    point, at most ``interval`` up, so it multiplies the MGF by at most
    exp(lambda interval)."""
    lambdas = np.asarray(lambdas, dtype=float)
    return lambdas * (lambdas + 1.0) * (0.5 * inverse_square) + lambdas * interval


def epsilon_from_log_mgf(log_mgf: np.ndarray, lambdas: np.ndarray, delta: float) -> float:
    """The smallest epsilon the RDP-to-DP conversion certifies at ``delta``
    for losses with this log-MGF (``log_mgf / lambda`` is the RDP at order
    alpha = ``lambda + 1``): min over alpha of
    r + log(1 - 1/alpha) - log(delta alpha) / (alpha - 1) (Balle et al. 2020;
    dp-accounting's ``compute_epsilon`` without its KL shortcut, which needs a
    true divergence, not the finite part of a PLD). A negative curve (a
    sub-probability's) is raised to 0, which only loosens it."""
    if not delta > 0:
        return math.inf
    lambdas = np.asarray(lambdas, dtype=float)
    alphas = lambdas + 1.0
    rdp = np.maximum(np.asarray(log_mgf, dtype=float), 0.0) / lambdas
    with np.errstate(invalid="ignore", over="ignore"):
        eps = rdp + np.log1p(-1.0 / alphas) - np.log(delta * alphas) / lambdas
    eps = np.where(alphas > 1.01, eps, np.inf)
    eps = np.where(np.isnan(eps), np.inf, eps)
    return max(0.0, float(np.min(eps)))
