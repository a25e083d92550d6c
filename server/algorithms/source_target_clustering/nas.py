"""Noisy Average Set (NAS), seed 001 Alg. 1, federated as per-site releases.

Every site sanitises its own points: for each public target point x it
releases c_x + noise, c_x the average of its t nearest clipped points
(:mod:`privadapt.common.kernels.nearest_source_averages`, where the
sensitivity is derived: L1 m sqrt(d)/t and L2 sqrt(m)/t over the m target
points, under add/remove and replace-one alike). The coordinator takes the
union of all sites' noisy averages as S'.

Deviation from the paper (documented, not hidden): seed 001 has one curator
holding all of S. Here each site runs Alg. 1 on its own points (a
``per_site`` release, :class:`~privadapt.common.federation.ReleaseForm`), so
S' has K m points and each site's average is over its own t nearest. Privacy
is by parallel composition: a record lives at one site and moves only that
site's release, which that site's ledger charges; each site is
(epsilon, delta)-DP for its records, which is the paper's guarantee for the
union. Sites whose policy says ``allow_per_site_releases = false`` refuse.

The three variants (``variant``):

* ``"laplace"`` (Theorem 5.9, pure epsilon-DP): one Laplace release of the
  whole (m, d) block, b = L1 / epsilon. The paper's b = m sqrt(d)/(t epsilon)
  under ``calibration="paper"``; the default adds the charged grid rounding
  and float error to the sensitivity, so the paper's b spends slightly more
  than epsilon on a site's ledger (which records what it really spends).
* ``"laplace_approximate"`` (Theorem 5.3, (epsilon, delta)-DP): m releases,
  one per target point, each Laplace of scale b = sqrt(d)/(t epsilon_0)
  (plus the charge), where epsilon_0 is the largest per-release epsilon whose
  m-fold advanced composition (Dwork, Rothblum and Vadhan 2010, the
  paper's form: eps_0 sqrt(2 m ln(1/delta)) + m eps_0 (e^eps_0 - 1)/(e^eps_0 + 1)
  with delta' = delta) is epsilon. This fixes the theta the theorem leaves
  open: theta = b t epsilon / sqrt(m d ln(1/delta)), about sqrt(2) for small
  epsilon_0 (reported as ``theta``). The sites' ledgers compose the m
  Laplace charges with their own accountant, which is tighter than advanced
  composition, so a ledger reports at most epsilon at delta.
* ``"gaussian"`` (Theorem 5.11, rho-zCDP): one Gaussian release,
  sigma = L2 / sqrt(2 rho); the paper's sigma = (1/t) sqrt(m/(2 rho)) under
  ``calibration="paper"`` (same remark on the rounding charge).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import optimize

from privadapt.common.federation import Federation
from privadapt.common.kernels import get_kernel
from privadapt.common.kernels.base import SIZING_RECORDS
from privadapt.common.kernels.grid_rounding import COARSEST_FRACTIONAL_BITS
from privadapt.common.kernels.nearest_source_averages import (
    NearestSourceAverages,
    NearestSourceParams,
)
from privadapt.common.mechanisms import (
    Adjacency,
    GaussianBlock,
    GaussianMechanism,
    KernelMechanism,
    LaplaceMechanism,
)
from privadapt.server.algorithms.source_target_clustering.privacy import (
    Calibration,
    SanitizedSource,
    planned_cost,
)

KERNEL = get_kernel(NearestSourceAverages.name)
Variant = Literal["laplace", "laplace_approximate", "gaussian"]
VARIANTS: tuple[str, ...] = ("laplace", "laplace_approximate", "gaussian")


def advanced_composition_epsilon(total: float, count: int, delta: float) -> float:
    """The per-release epsilon_0 whose ``count``-fold advanced composition
    (delta' = ``delta``, pure releases) is ``total`` (module docstring)."""
    def composed(eps0: float) -> float:
        return (eps0 * math.sqrt(2 * count * math.log(1 / delta))
                + count * eps0 * math.tanh(eps0 / 2))  # (e^x - 1)/(e^x + 1) = tanh(x/2)
    return float(optimize.brentq(lambda e: composed(e) - total, 0.0, total, xtol=1e-15))


@dataclass(frozen=True)
class NasPlan:
    """The release NAS asks every site for: ``mechanism`` applied
    ``releases`` times (one per target point for the approximate variant),
    and theta of Theorem 5.3 (NaN for the other variants)."""

    mechanism: KernelMechanism
    releases: int
    theta: float


def _charged(params: NearestSourceParams, adjacency: Adjacency, norm: str, dim: int) -> float:
    (charged,) = KERNEL.charged_sensitivities(params, adjacency, norm, dim,
                                              COARSEST_FRACTIONAL_BITS, SIZING_RECORDS)
    return charged


def nas_plan(
    targets: np.ndarray, t: int, *, variant: Variant, epsilon: float, delta: float | None,
    rho: float | None, calibration: Calibration, adjacency: Adjacency,
) -> NasPlan:
    """The mechanism and number of releases of one NAS run (module docstring)."""
    m, dim = targets.shape
    if variant == "gaussian":
        if rho is None or not rho > 0:
            raise ValueError(f"NAS's Gaussian variant needs rho > 0, got {rho!r}")
        params = NearestSourceParams(targets, t)
        if math.isinf(rho):
            return NasPlan(KERNEL.mechanism(params, math.inf, adjacency, dim=dim), 1, math.nan)
        if calibration == "paper":
            block = GaussianBlock(_charged(params, adjacency, "l2", dim),
                                  math.sqrt(m / (2 * rho)) / t)
            return NasPlan(GaussianMechanism((block,), adjacency), 1, math.nan)
        return NasPlan(KERNEL.mechanism(params, 1 / math.sqrt(2 * rho), adjacency, dim=dim),
                       1, math.nan)
    if variant == "laplace":
        params = NearestSourceParams(targets, t)
        if math.isinf(epsilon):
            return NasPlan(KERNEL.mechanism(params, math.inf, adjacency, dim=dim), 1, math.nan)
        if calibration == "paper":
            return NasPlan(LaplaceMechanism(_charged(params, adjacency, "l1", dim),
                                            m * math.sqrt(dim) / (t * epsilon), adjacency),
                           1, math.nan)
        return NasPlan(KERNEL.mechanism(params, 1 / epsilon, adjacency, dim=dim,
                                        noise="laplace"), 1, math.nan)
    # variant == "laplace_approximate", the estimator's remaining choice
    if delta is None or not 0 < delta < 1 or math.isinf(epsilon):
        raise ValueError(f"NAS's approximate variant needs a finite epsilon and delta in "
                         f"(0, 1), got {epsilon!r}, {delta!r}")
    one = NearestSourceParams(targets[:1], t)
    eps0 = advanced_composition_epsilon(epsilon, m, delta)
    sensitivity = (math.sqrt(dim) / t if calibration == "paper"
                   else _charged(one, adjacency, "l1", dim))
    mechanism = LaplaceMechanism(_charged(one, adjacency, "l1", dim), sensitivity / eps0,
                                 adjacency)
    theta = mechanism.scale * t * epsilon / math.sqrt(m * dim * math.log(1 / delta))
    return NasPlan(mechanism, m, theta)


def nas_sanitize(
    federation: Federation,
    targets: np.ndarray,
    *,
    t: int,
    variant: Variant,
    rho: float | None,
    calibration: Calibration,
    adjacency: Adjacency,
    epsilon: float = math.inf,
    delta: float | None = None,
) -> tuple[SanitizedSource, NasPlan]:
    """S' of Alg. 1 for the public ``targets``: the union over sites of each
    site's own noisy t-nearest averages (module docstring), with the values
    :class:`~.estimators.NoisyAverageSet` checked at fit."""
    adjacency = Adjacency(adjacency)
    targets = NearestSourceParams(targets, t).targets  # checked before any query
    plan = nas_plan(targets, t, variant=variant, epsilon=epsilon, delta=delta, rho=rho,
                    calibration=calibration, adjacency=adjacency)
    groups = [targets] if plan.releases == 1 else [targets[i:i + 1] for i in range(len(targets))]
    answers = [federation.query_per_site(KERNEL.name, NearestSourceParams(g, t).to_wire(),
                                         plan.mechanism) for g in groups]
    points = np.vstack([block for answer in answers
                        for (block,) in answer.answers.values()])
    pure_epsilon, rho_planned = planned_cost(plan.mechanism, plan.releases)
    return SanitizedSource(points, targets, plan.mechanism, adjacency, pure_epsilon,
                           rho_planned, federation.privacy_spent()), plan
