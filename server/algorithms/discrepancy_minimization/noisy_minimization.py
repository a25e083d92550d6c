"""Noisy Frank-Wolfe (Alg. 2) and noisy mirror descent (Alg. 3) of seed 003 at
the single site that holds the whole private target (DESIGN.md section 5,
route (b); ../shared/seeds/003_17bffd62ba7ccf9f.txt, Sec. 6, App. E).

Both minimise F~^lambda(q) = F~(M(q)) + (lambda/2) ||q||^2 over the simplex.
Each iteration asks the site for the kernel ``smoothed_discrepancy_gradient``
at the coordinator's q_k (public: it is determined by the released indices or
noisy gradients), on the site's own clipped M_0; the kernel's docstring
derives the sensitivities (per score mu r^2 ||x_i||^2 / n under replace-one,
half the paper's 2 mu r^2 r-hat^2 / n).

* Noisy Frank-Wolfe: a selection query per iteration (report-noisy-min with
  Laplace noise over the m vertex scores, line 10); only the index j_k leaves
  the site; q_{k+1} = (1 - eta_k) q_k + eta_k e_{j_k}, eta_k = 3 / (k + 2),
  k = 1..K (line 11, open loop: no line search, which would read M_0).
* Noisy mirror descent: a Gaussian release of the whole gradient vector per
  iteration (line 9; a secure sum with one participant), the p-norm mirror
  step (``pnorm_mirror_descent``), eta of line 6, the averaged iterate.

Calibration. ``"accountant"`` (default): the noise for which K releases compose
to exactly (epsilon, delta) under the site's accountant (PLD), for the
sensitivity the site charges (the kernel's, plus grid rounding and computation
error on the coarsest grid and the policy's default record bound).
``"paper"``: the paper's sigmas, scaled by n as the kernel's scores are:
Laplace scale 4 mu r^2 r-hat^2 sqrt(2 K log(1/delta)) / epsilon (Alg. 2 line 6)
and Gaussian standard deviation 4 mu r^2 r-hat^2 sqrt(2 K m log(1/delta)) /
epsilon (Alg. 3 line 5; the OCR prints its denominator as "pi r^2", rebuilt as
n epsilon from the proof of Thm. 11 and Alg. 2). Either way every iteration is
charged by the site as the event it is (a pure-DP report-noisy-min, or a
Gaussian release), and the ledgers report what the accountant makes of them:
with the paper's sigmas the spend is below epsilon (advanced composition is
looser than the PLD, and our sensitivity is half the paper's).

``epsilon = inf`` (simulation sites only): the exact gradient by a noise-free
release of the same kernel, the argmin at the coordinator.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

from privadapt.common.accounting.calibration import (
    ReleasePlan,
    noise_multiplier,
    noise_scale,
    paper_closed_form,
)
from privadapt.common.federation import Federation, SitePrivacy
from privadapt.common.kernels.base import SIZING_RECORDS
from privadapt.common.kernels.grid_rounding import COARSEST_FRACTIONAL_BITS
from privadapt.common.kernels.smoothed_discrepancy_gradient import (
    SmoothedDiscrepancyGradient,
    SmoothedDiscrepancyGradientParams,
)
from privadapt.common.mechanisms import Adjacency, Mechanism, ReportNoisyMin
from privadapt.server.algorithms.discrepancy_minimization.pnorm_mirror_descent import mirror_descent
from privadapt.server.algorithms.discrepancy_minimization.unlabeled_adaptation import (
    mirror_step_size,
)

KERNEL = SmoothedDiscrepancyGradient()


@dataclass
class NoisyMinimizationResult:
    """q-hat, the per-iteration mechanism, its noise (Laplace scale or Gaussian
    standard deviation, on the gradient itself, i.e. divided by n) and the spend."""

    weights: np.ndarray
    mechanism: Mechanism
    noise_scale: float
    privacy: dict[str, SitePrivacy] = field(default_factory=dict)


def _single_holder(federation: Federation) -> int:
    if federation.num_sites != 1:
        raise ValueError(
            f"noisy Frank-Wolfe / mirror descent need the whole private target at one site "
            f"(F~ is not a sum over sites), but this federation has {federation.num_sites}: "
            "use the federated route (one release of M_0) instead")
    (num_records,) = federation.site_sizes.values()
    return num_records


def gradient_params(points: np.ndarray, weights: np.ndarray, *, feature_norm: float,
                    mu: float, regularization: float) -> SmoothedDiscrepancyGradientParams:
    return SmoothedDiscrepancyGradientParams(feature_norm, points, weights, mu, 1.0,
                                             regularization)


def planned_score_sensitivity(params: SmoothedDiscrepancyGradientParams) -> float:
    """The largest per-score sensitivity a site charges (coarsest grid, default record bound)."""
    dim = params.source_points.shape[1]
    return max(KERNEL.charged_score_sensitivities(params, Adjacency.REPLACE_ONE, dim))


def _paper_numerator(points: np.ndarray, feature_norm: float, mu: float) -> float:
    """4 mu r^2 r-hat^2: the paper's sigmas without their sqrt(...) / (n epsilon)."""
    r_hat_squared = float(np.max(np.einsum("ij,ij->i", points, points)))
    return 4.0 * mu * feature_norm**2 * r_hat_squared


@paper_closed_form("noisy_frank_wolfe")
def frank_wolfe_paper_scale(epsilon: float, delta: float, iterations: int, *,
                            params: SmoothedDiscrepancyGradientParams) -> float:
    """The paper's Laplace scale of Alg. 2's report-noisy-min,
    4 mu r^2 r-hat^2 sqrt(2 T log(1/delta)) / epsilon (times n, on the sums)."""
    return (_paper_numerator(params.source_points, params.feature_norm, params.mu)
            * math.sqrt(2 * iterations * math.log(1 / delta)) / epsilon)


@paper_closed_form("noisy_mirror_descent")
def mirror_descent_paper_multiplier(epsilon: float, delta: float, iterations: int, *,
                                    params: SmoothedDiscrepancyGradientParams) -> float:
    """Alg. 3's Gaussian sigma, 4 mu r^2 r-hat^2 sqrt(2 T m log(1/delta)) /
    epsilon (times n, on the sums), over the sensitivity a site charges."""
    m, dim = params.source_points.shape
    sigma = (_paper_numerator(params.source_points, params.feature_norm, params.mu)
             * math.sqrt(2 * iterations * m * math.log(1 / delta)) / epsilon)
    (charged,) = KERNEL.charged_sensitivities(params, Adjacency.REPLACE_ONE, "l2", dim,
                                              COARSEST_FRACTIONAL_BITS, SIZING_RECORDS)
    return sigma / charged


def frank_wolfe_mechanism(params: SmoothedDiscrepancyGradientParams, *, epsilon: float,
                          delta: float, iterations: int, calibration: str) -> ReportNoisyMin:
    sensitivity = planned_score_sensitivity(params)
    plan = ReleasePlan(iterations, lambda z: ReportNoisyMin(sensitivity, z * sensitivity),
                       paper=functools.partial(frank_wolfe_paper_scale, params=params))
    return ReportNoisyMin(sensitivity, noise_scale(epsilon, delta, plan, sensitivity,
                                                   calibration=calibration))


def mirror_descent_mechanism(params: SmoothedDiscrepancyGradientParams, *, epsilon: float,
                             delta: float, iterations: int, calibration: str) -> Mechanism:
    dim = params.source_points.shape[1]
    plan = ReleasePlan(iterations, paper=functools.partial(mirror_descent_paper_multiplier,
                                                           params=params))
    multiplier = noise_multiplier(epsilon, delta, plan, calibration=calibration)
    return KERNEL.mechanism(params, multiplier, Adjacency.REPLACE_ONE, dim=dim)


def noisy_frank_wolfe(
    federation: Federation, points: np.ndarray, *, epsilon: float, delta: float | None,
    feature_norm: float, mu: float, regularization: float, iterations: int,
    calibration: str,
) -> NoisyMinimizationResult:
    """Alg. 2 at the single holder (module docstring), with the values
    :class:`~.estimators.PrivateDiscrepancyMinimization` checked at fit."""
    num_records = _single_holder(federation)
    m = len(points)
    weights = np.full(m, 1.0 / m)
    template = gradient_params(points, weights, feature_norm=feature_norm, mu=mu,
                               regularization=regularization)
    if math.isinf(epsilon):
        mechanism: Mechanism = KERNEL.mechanism(template, math.inf, Adjacency.REPLACE_ONE,
                                                dim=points.shape[1])
        scale = 0.0
    else:
        mechanism = frank_wolfe_mechanism(template, epsilon=epsilon, delta=delta,
                                          iterations=iterations, calibration=calibration)
        scale = mechanism.scale / num_records
    for k in range(1, iterations + 1):
        params = gradient_params(points, weights, feature_norm=feature_norm, mu=mu,
                                 regularization=regularization).to_wire()
        if math.isinf(epsilon):
            vertex = int(np.argmin(federation.query(KERNEL.name, params, mechanism).value))
        else:
            vertex = federation.select(KERNEL.name, params, mechanism).index
        step = 3.0 / (k + 2.0)
        weights = (1.0 - step) * weights
        weights[vertex] += step
        weights /= weights.sum()  # keep the simplex check exact over many steps
    return NoisyMinimizationResult(weights, mechanism, scale,
                                   federation.privacy_spent(None if math.isinf(epsilon)
                                                            else delta))


def noisy_mirror_descent(
    federation: Federation, points: np.ndarray, *, epsilon: float, delta: float | None,
    feature_norm: float, mu: float, regularization: float, iterations: int,
    calibration: str,
) -> NoisyMinimizationResult:
    """Alg. 3 at the single holder (module docstring), with the values
    :class:`~.estimators.PrivateDiscrepancyMinimization` checked at fit."""
    num_records = _single_holder(federation)
    m = len(points)
    template = gradient_params(points, np.full(m, 1.0 / m), feature_norm=feature_norm, mu=mu,
                               regularization=regularization)
    mechanism = mirror_descent_mechanism(template, epsilon=epsilon, delta=delta,
                                         iterations=iterations, calibration=calibration)

    def noisy_gradient(_: int, weights: np.ndarray) -> np.ndarray:
        weights = weights / weights.sum()
        params = gradient_params(points, weights, feature_norm=feature_norm, mu=mu,
                                 regularization=regularization).to_wire()
        return np.asarray(federation.query(KERNEL.name, params, mechanism).value) / num_records

    step = mirror_step_size(points, regularization, iterations)
    weights = mirror_descent(noisy_gradient, m, iterations=iterations, step=step)
    (sigma,) = mechanism.noise_scales
    return NoisyMinimizationResult(weights, mechanism, sigma / num_records,
                                   federation.privacy_spent(None if math.isinf(epsilon)
                                                            else delta))
