"""What the sanitisers of seed 001 share: the noise they ask for, zCDP
conversions, and the released sanitised source with its accounting."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np

from privadapt.common.federation import SitePrivacy
from privadapt.common.mechanisms import Adjacency, GaussianMechanism, KernelMechanism

NoiseKind = Literal["laplace", "gaussian"]
Calibration = Literal["accountant", "paper"]


def zcdp_rho(mechanism: KernelMechanism) -> float:
    """rho of a Gaussian release: sum over blocks of Delta_b^2 / (2 sigma_b^2)
    (Bun and Steinke 2016, Prop. 1.6); 0 for a free one."""
    if not isinstance(mechanism, GaussianMechanism):
        raise ValueError(f"rho is defined here for Gaussian releases, not {mechanism.summary}")
    return sum(b.sensitivity**2 / (2 * b.sigma**2)
               for b in (*mechanism.blocks, *mechanism.local_blocks))


def zcdp_epsilon(rho: float, delta: float) -> float:
    """(epsilon, delta)-DP of rho-zCDP: rho + 2 sqrt(rho log(1/delta))
    (Bun and Steinke 2016, Prop. 1.3)."""
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


def rho_for(epsilon: float, delta: float) -> float:
    """The largest rho whose :func:`zcdp_epsilon` at ``delta`` is ``epsilon``
    (the positive root of rho + 2 sqrt(rho L) = epsilon, L = log(1/delta))."""
    if math.isinf(epsilon):
        return math.inf
    log_term = math.log(1.0 / delta)
    return (math.sqrt(log_term + epsilon) - math.sqrt(log_term)) ** 2


@dataclass(frozen=True)
class SanitizedSource:
    """A sanitised source S' and how it was released.

    ``points``: S' (rows, d); ``targets``: the target points the sites
    answered for (the coreset, or all of T); ``mechanism``: the noise asked
    for (every site's ledger holds its own charge of it); ``adjacency``;
    ``pure_epsilon`` (inf for a Gaussian release) and ``rho`` (inf for a
    Laplace one): the planned cost of the whole release; ``privacy``: each
    site's ledger after it. ``noisy_counts`` and ``threshold`` are NNA's
    (NaN / None for NAS)."""

    points: np.ndarray
    targets: np.ndarray
    mechanism: KernelMechanism
    adjacency: Adjacency
    pure_epsilon: float
    rho: float
    privacy: Mapping[str, SitePrivacy]
    noisy_counts: np.ndarray | None = None
    threshold: float | None = None


def planned_cost(mechanism: KernelMechanism, num_releases: int = 1) -> tuple[float, float]:
    """(pure epsilon, rho) of ``num_releases`` independent releases with
    ``mechanism`` by basic composition (inf where it does not apply)."""
    if mechanism.is_free:
        return 0.0, 0.0
    if isinstance(mechanism, GaussianMechanism):
        return math.inf, num_releases * zcdp_rho(mechanism)
    return num_releases * mechanism.pure_epsilon, math.inf
