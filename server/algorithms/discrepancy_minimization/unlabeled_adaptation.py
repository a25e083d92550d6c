"""Private adaptation from a public labeled source to a private unlabeled target,
federated route (seed 003, ../shared/seeds/003_17bffd62ba7ccf9f.txt; DESIGN.md
section 5, route (a)).

The private target enters every formula of seed 003 only through its second
moment M_0 = (1/n) sum_j x~_j x~_j^T (Lemma 1: M(q) = M_0 - sum_i q_i x_i x_i^T).
So the sites make ONE Gaussian release of their clipped moment sums (kernel
``second_moments``, secure sum with distributed noise), and everything else
runs at the coordinator as post-processing, at no further privacy cost:

* ``two_stage_fw`` / ``two_stage_md`` (Sec. 6): stage one minimises
  F~^lambda(q) = F~(M(q)) + (lambda/2) ||q||^2 over the simplex on the released
  M_0, by Frank-Wolfe (exact line search with away steps, up to K steps or a
  gap of 1e-9: no noise here, so the coordinator may stop on the gap) or by the
  p-norm mirror descent of Alg. 3 (without its noise); stage two is eq. (6) in
  its regularised form, the q-weighted ridge regression on the public source,
  w = argmin sum_i q_i (w.x_i - y_i)^2 + ridge ||w||^2.
* ``single_stage_fw`` (Sec. 5, Alg. 1): Frank-Wolfe over the simplex times the
  ball on L_T(q, w) = sum_i q_i (w.x_i - y_i)^2 + 4 Lambda^2 F~(q); its w-step
  reads public data only.

The release. The sites hold unlabeled records; ``second_moments`` releases the
moments of z = [x, y], so we ask it with the label clipped to the negligible
``label_bound`` = r 2^-26 (whatever labels a site stores): the label row then
carries at most (r 2^-26)^2 per record, and the release's replace-one L2
sensitivity is sqrt(2) (r^2 + r^2 2^-52) (the kernel's docstring), i.e. that of
the feature moments alone up to 2^-52. Its noise multiplier is calibrated by the
accountant for exactly (epsilon, delta) for one release. The noisy feature block,
symmetrised and divided by the public n, is the released M_0 (it need not be
positive semi-definite; F~ is defined on any symmetric matrix). The paper has no
such route, so there is no ``calibration="paper"`` for it.

Adjacency: replace-one (the paper's); n is public.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from privadapt.common.accounting.calibration import ReleasePlan, noise_multiplier
from privadapt.common.federation import Federation, SitePrivacy
from privadapt.common.kernels.second_moments import (
    SecondMoments,
    SecondMomentsParams,
    symmetric_from_triangle,
)
from privadapt.common.mechanisms import Adjacency, Mechanism
from privadapt.server.algorithms.discrepancy_minimization.pnorm_mirror_descent import mirror_descent
from privadapt.server.algorithms.discrepancy_minimization.single_stage_frank_wolfe import (
    single_stage_frank_wolfe,
)
from privadapt.server.algorithms.discrepancy_minimization.smoothed_discrepancy import (
    SmoothedDiscrepancy,
    frank_wolfe,
)

Method = Literal["two_stage_fw", "two_stage_md", "single_stage_fw"]
METHODS: tuple[str, ...] = ("two_stage_fw", "two_stage_md", "single_stage_fw")
_MOMENTS = SecondMoments()
#: The label clip of the moment release relative to r (module docstring).
UNLABELED_CLIP = 2.0**-26


@dataclass
class TargetMoment:
    """The released M_0 (d x d, symmetric), the mechanism it cost and its noise
    standard deviation per entry of M_0 (diagonal; sigma/sqrt(2) off it)."""

    matrix: np.ndarray
    mechanism: Mechanism
    noise_std: float


@dataclass
class AdaptationResult:
    """q-hat (``weights``), w-hat (``coef``), the released M_0 and what it cost."""

    weights: np.ndarray
    coef: np.ndarray
    target_moment: TargetMoment
    privacy: dict[str, SitePrivacy] = field(default_factory=dict)


def moment_params(feature_norm: float) -> SecondMomentsParams:
    """The release's clipping: ||x|| <= r, labels clipped to r 2^-26."""
    return SecondMomentsParams(feature_norm, feature_norm * UNLABELED_CLIP)


def moment_mechanism(epsilon: float, delta: float | None, dim: int,
                     feature_norm: float) -> Mechanism:
    """The one Gaussian release at exactly (epsilon, delta), replace-one;
    ``NoNoise`` at epsilon = inf."""
    multiplier = noise_multiplier(epsilon, delta, ReleasePlan(1))
    return _MOMENTS.mechanism(moment_params(feature_norm), multiplier,
                              Adjacency.REPLACE_ONE, dim=dim)


def release_target_moment(federation: Federation, *, epsilon: float, delta: float | None,
                          feature_norm: float) -> TargetMoment:
    """M_0 from one Gaussian release of the sites' clipped moment sums."""
    if math.isfinite(epsilon) and (delta is None or not 0 < delta < 1):
        raise ValueError(f"the Gaussian moment release needs delta in (0, 1), got {delta!r}")
    dim = federation.dim
    mechanism = moment_mechanism(epsilon, delta, dim, feature_norm)
    params = moment_params(feature_norm)
    noisy = federation.query(_MOMENTS.name, params.to_wire(), mechanism).value
    num_records = sum(federation.site_sizes.values())
    matrix = symmetric_from_triangle(noisy)[:dim, :dim] / num_records
    (sigma,) = mechanism.noise_scales
    return TargetMoment(matrix, mechanism, sigma / num_records)


def weighted_ridge(features: np.ndarray, labels: np.ndarray, weights: np.ndarray,
                   ridge: float) -> np.ndarray:
    """Stage two (eq. (6), regularised): argmin_w sum_i q_i (w.x_i - y_i)^2 + ridge ||w||^2."""
    weighted = features * weights[:, None]
    gram = features.T @ weighted + ridge * np.eye(features.shape[1])
    return np.linalg.lstsq(gram, weighted.T @ labels, rcond=None)[0]


def mirror_step_size(points: np.ndarray, regularization: float, iterations: int) -> float:
    """Alg. 3 line 6: eta = 2 / (r-hat^2 + lambda) sqrt(log m / K)."""
    r_hat_squared = float(np.max(np.einsum("ij,ij->i", points, points)))
    return 2.0 / (r_hat_squared + regularization) * math.sqrt(
        math.log(len(points)) / iterations)


def adapt_on_moment(
    features: np.ndarray, labels: np.ndarray, target_moment: np.ndarray, *,
    method: Method, mu: float, regularization: float, radius: float, ridge: float,
    iterations: int,
) -> tuple[np.ndarray, np.ndarray]:
    """(q-hat, w-hat) from a given M_0 (released or exact): pure post-processing."""
    if method == "single_stage_fw":
        objective = SmoothedDiscrepancy(features, target_moment, mu, 0.0)
        result = single_stage_frank_wolfe(objective, labels, radius=radius,
                                          iterations=iterations)
        return result.weights, result.coef
    objective = SmoothedDiscrepancy(features, target_moment, mu, regularization)
    if method == "two_stage_fw":
        weights = frank_wolfe(objective, iterations=iterations, tolerance=1e-9,
                              away_steps=True).weights
    elif method == "two_stage_md":
        step = mirror_step_size(features, regularization, iterations)
        weights = mirror_descent(lambda _, q: objective.value_and_gradient(q)[1],
                                 len(features), iterations=iterations, step=step)
    else:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    return weights, weighted_ridge(features, labels, weights, ridge)


def federated_adaptation(
    federation: Federation, features: np.ndarray, labels: np.ndarray, *,
    epsilon: float, delta: float | None, feature_norm: float, method: Method, mu: float,
    regularization: float, radius: float, ridge: float, iterations: int,
) -> AdaptationResult:
    """Route (a): one release of M_0, then :func:`adapt_on_moment` on it."""
    features = np.asarray(features, dtype=float)
    if features.ndim != 2 or features.shape[1] != federation.dim:
        raise ValueError(f"the public source must be (m, {federation.dim}) like the sites' "
                         f"records, got shape {features.shape}")
    released = release_target_moment(federation, epsilon=epsilon, delta=delta,
                                     feature_norm=feature_norm)
    weights, coef = adapt_on_moment(
        features, labels, released.matrix, method=method, mu=mu,
        regularization=regularization, radius=radius, ridge=ridge, iterations=iterations)
    return AdaptationResult(weights, coef, released,
                            federation.privacy_spent(None if math.isinf(epsilon) else delta))
