"""Neighbor Noisy Averages (NNA), seed 001 Alg. 2, federated as one secure sum.

Every site assigns each of its private points (clipped to ||s|| <= 1/2) to the
nearest target point x and sums, per x, the count n_x and the coordinate sum
r_x (:mod:`privadapt.common.kernels.nearest_target_sums`, where the
sensitivities are derived). The cells h_x partition the records, so the whole
statistic is **one** release (the paper's "we can avoid using composition"):
the sites' blocks are added under secure aggregation with one noise, either

* Laplace (pure epsilon-DP, Theorem 5.10): scale b = Delta_1 / epsilon with
  Delta_1 = 1 + sqrt(d)/2 (add/remove; plus the rounding charge) by default,
  or the paper's b = (sqrt(d) + 1)/epsilon with ``calibration="paper"``; the
  noise is the sum of the sites' Gamma-difference shares
  (:func:`privadapt.common.noise.floating.laplace_share`), Laplace(b) in total; or
* Gaussian (rho-zCDP, Theorem 5.12): sigma = Delta_2 / sqrt(2 rho) with
  Delta_2 = sqrt(5)/2 by default, the paper's sigma = sqrt(2/rho) under
  ``calibration="paper"``.

The coordinator then keeps r^_x / n^_x for every x whose noisy count reaches
the threshold (Alg. 2 line 6) and returns those points as S'.

The threshold (a disagreement with the paper). Alg. 2 keeps x when
n^_x >= 1 + log((sqrt(d) + 1)/gamma)/epsilon and the text says that then "with
probability 1 - gamma, h_x contains at least one point". With its own
b = (sqrt(d) + 1)/epsilon the count's noise exceeds t with probability
exp(-t/b)/2, so an empty cell passes that threshold with probability
exp(-1/b) ((sqrt(d) + 1)/gamma)^(-1/(sqrt(d)+1)) / 2, which falls only like
gamma^(1/(sqrt(d)+1)): 0.074 at gamma = 0.05 and 0.027 at gamma = 0.001
(d = 8, epsilon = 3), not gamma (the printed threshold is Lemma 5.2's
b log(d'/gamma) with b = 1/epsilon and d' = sqrt(d) + 1, i.e. for noise of
scale 1/epsilon; the text's "|n^_x - n_x| >= ..." should also read "<=").
``calibration="paper"`` keeps the printed formula; the default uses the
noise actually added: 1 + b log(1/(2 gamma)) (Laplace) or
1 + sigma Phi^-1(1 - gamma) (Gaussian), so that an empty cell passes with
probability at most gamma; with t of the K sites trusted to collude the sum
carries K/(K - t) times the noise's variance, and the threshold reads that
(:func:`nna_threshold`). The paper gives no threshold for the Gaussian
variant; both calibrations use the Gaussian one. Either way the threshold is
post-processing and costs nothing.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

from privadapt.common.federation import Federation
from privadapt.common.kernels import get_kernel
from privadapt.common.kernels.base import SIZING_RECORDS
from privadapt.common.kernels.grid_rounding import COARSEST_FRACTIONAL_BITS
from privadapt.common.kernels.nearest_target_sums import NearestTargetParams, NearestTargetSums
from privadapt.common.mechanisms import (
    Adjacency,
    GaussianBlock,
    GaussianMechanism,
    KernelMechanism,
    LaplaceMechanism,
)
from privadapt.server.algorithms.source_target_clustering.privacy import (
    Calibration,
    NoiseKind,
    SanitizedSource,
    planned_cost,
)

KERNEL = get_kernel(NearestTargetSums.name)


def _charged(params: NearestTargetParams, adjacency: Adjacency, norm: str, dim: int) -> float:
    """The sensitivity a site at the coarsest grid and SIZING_RECORDS charges."""
    (charged,) = KERNEL.charged_sensitivities(params, adjacency, norm, dim,
                                              COARSEST_FRACTIONAL_BITS, SIZING_RECORDS)
    return charged


def nna_mechanism(
    params: NearestTargetParams,
    dim: int,
    *,
    noise: NoiseKind,
    epsilon: float,
    rho: float | None,
    calibration: Calibration,
    adjacency: Adjacency,
) -> KernelMechanism:
    """The one mechanism of NNA's release (module docstring); ``NoNoise`` for
    epsilon = inf (Laplace) or rho = inf (Gaussian): simulation sites only."""
    budget = epsilon if noise == "laplace" else rho
    if budget is None or not budget > 0:
        raise ValueError(f"NNA with {noise} noise needs a positive "
                         f"{'epsilon' if noise == 'laplace' else 'rho'}, got {budget!r}")
    if math.isinf(budget):
        return KERNEL.mechanism(params, math.inf, adjacency, dim=dim)
    if noise == "laplace":
        if calibration == "paper":  # Theorem 5.10
            return LaplaceMechanism(_charged(params, adjacency, "l1", dim),
                                    (math.sqrt(dim) + 1) / budget, adjacency)
        return KERNEL.mechanism(params, 1.0 / budget, adjacency, dim=dim, noise="laplace")
    if calibration == "paper":  # Theorem 5.12
        block = GaussianBlock(_charged(params, adjacency, "l2", dim), math.sqrt(2.0 / budget))
        return GaussianMechanism((block,), adjacency)
    return KERNEL.mechanism(params, 1.0 / math.sqrt(2.0 * budget), adjacency, dim=dim)


def nna_threshold(
    mechanism: KernelMechanism, dim: int, *, gamma: float, epsilon: float,
    calibration: Calibration, variance_factor: float = 1.0,
) -> float:
    """The noisy count a target must reach to keep its average (module
    docstring). ``variance_factor`` a = K / (K - t): the secure sum's noise
    over the calibrated one's variance (``AggregateAnswer.noise_std_factor``
    squared), with t of the K sites trusted to collude: the threshold reads
    the noise the counts carry, not the calibrated noise."""
    (scale,) = mechanism.noise_scales
    if scale == 0:
        return 1.0  # no noise: every non-empty cell
    if isinstance(mechanism, LaplaceMechanism):
        if calibration == "paper":
            return 1.0 + math.log((math.sqrt(dim) + 1) / gamma) / epsilon
        if variance_factor == 1.0:
            return 1.0 + scale * math.log(1.0 / (2.0 * gamma))
        # K Gamma-difference shares of shape 1 / (K - t) add up to G1 - G2,
        # G_i ~ Gamma(a, b), no longer Laplace(b); P(G1 - G2 >= x) <=
        # P(G1 >= x), G2 being >= 0.
        return 1.0 + scale * float(special.gammainccinv(variance_factor, gamma))
    return 1.0 + scale * math.sqrt(variance_factor) * float(special.ndtri(1.0 - gamma))


def nna_sanitize(
    federation: Federation,
    targets: np.ndarray,
    *,
    noise: NoiseKind,
    rho: float | None,
    gamma: float,
    calibration: Calibration,
    adjacency: Adjacency,
    epsilon: float = math.inf,
) -> SanitizedSource:
    """S' of Alg. 2 for the public ``targets`` (the coreset, or all of T) from
    one secure-sum release of the sites' per-target counts and sums, with the
    values :class:`~.estimators.NeighborNoisyAverages` checked at fit."""
    adjacency = Adjacency(adjacency)
    params = NearestTargetParams(targets)
    dim = params.targets.shape[1]
    mechanism = nna_mechanism(params, dim, noise=noise, epsilon=epsilon, rho=rho,
                              calibration=calibration, adjacency=adjacency)
    answer = federation.query(KERNEL.name, params.to_wire(), mechanism)
    counts, sums = answer.value[:, 0], answer.value[:, 1:]
    threshold = nna_threshold(mechanism, dim, gamma=gamma, epsilon=epsilon,
                              calibration=calibration,
                              variance_factor=answer.noise_std_factor ** 2)
    kept = counts >= threshold
    pure_epsilon, planned_rho = planned_cost(mechanism)
    return SanitizedSource(sums[kept] / counts[kept][:, None], params.targets, mechanism,
                           adjacency, pure_epsilon, planned_rho, federation.privacy_spent(),
                           counts, threshold)
