"""The private discrepancy estimate d_DP of seed 000 (Section 4, "Discrepancy
estimates"), for the squared loss and linear predictors ||w|| <= Lambda.

The empirical discrepancy (eq. (2)) between the public source and the private
target is

    d-hat = sup_{||w|| <= Lambda} | (1/m) sum_pub (w.x - y)^2 - (1/n) sum_priv (w.x - y)^2 |
          = sup_{||w|| <= Lambda} | v^T (M_pub - M_priv) v |,   v = [w, -1],

with M the mean second moments of z = [x, y], every record clipped to ||x|| <= r,
|y| <= Y, so each loss lies in [0, B], B = (Lambda r + Y)^2. The paper removes
the absolute value and solves the two signed problems by DCA; for the squared
loss each is a trust-region subproblem, solved here exactly
(:mod:`privadapt.common.numerics.trust_region`). Two estimates (DESIGN.md section 5):

* ``federated_discrepancy`` (any number of sites): one Gaussian release of the
  private second-moment sum (kernel ``second_moments``: its sqrt(2)-scaled upper
  triangle, Frobenius sensitivity sqrt(2) (r^2 + Y^2) under replace-one), its
  noise multiplier calibrated by the accountant for exactly (epsilon, delta);
  the noisy sum, rebuilt as a symmetric matrix and divided by the public n,
  replaces M_priv, and d-hat follows as post-processing,
  projected onto [0, B]. The paper states no sigma for this route, so there is
  no ``calibration="paper"``.
* ``single_holder_discrepancy`` (one site holds the whole private sample): the
  paper's own mechanism, d_DP = Proj_[0, B](d-hat + Lap(B / (n epsilon))),
  computed at that site (kernel ``exact_discrepancy``, pure epsilon-DP).

OCR / reconstruction. The OCR text reads "d_DP = Proj_[0,B](d-hat + v), v ~ Lap(B/n)"
and calls it "epsilon/2-differentially private". d-hat has sensitivity B/n
(stated just before), so Lap(B/n) is 1-DP; the scale that makes it
epsilon/2-DP is 2B/(n epsilon). We read the formula as Lap(B/(n epsilon')) for
the budget epsilon' given to this step: Algorithm 1 gives d_DP half of its
epsilon, so the caller passes ``epsilon = epsilon_total / 2``, as Section 4 does.

Both routes go through ``federation.query``, so every site's ledger charges the
release. The kernels build the mechanisms (``Kernel.mechanism``): noise sized for
the kernel's sensitivity *plus* the rounding a site charges on the coarsest
fixed-point grid it accepts, so a site's charge never exceeds the planned epsilon.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from privadapt.common.accounting.calibration import ReleasePlan, noise_multiplier
from privadapt.common.data.dataset import Dataset
from privadapt.common.federation import Federation, SitePrivacy
from privadapt.common.kernels.exact_discrepancy import ExactDiscrepancy, ExactDiscrepancyParams
from privadapt.common.kernels.second_moments import (
    SecondMoments,
    SecondMomentsParams,
    symmetric_from_triangle,
)
from privadapt.common.losses import loss_bounds, squared_loss_discrepancy
from privadapt.common.mechanisms import Adjacency, Mechanism

Method = Literal["federated", "single_holder"]
_MOMENTS = SecondMoments()
_EXACT = ExactDiscrepancy()


@dataclass
class DiscrepancyEstimate:
    """d_DP and how it was obtained.

    ``value`` is d_DP in [0, B]; ``unclipped`` the noisy estimate before the
    projection; ``noise_scale`` the noise on what was released, per entry of
    the private mean moments (Gaussian standard deviation) or on d-hat (Laplace
    scale); ``private_moments`` the noisy, symmetrised M_priv (federated only).
    """

    value: float
    unclipped: float
    loss_bound: float
    noise_scale: float
    method: Method
    mechanism: Mechanism
    private_moments: np.ndarray | None = None
    privacy: dict[str, SitePrivacy] = field(default_factory=dict)


def loss_bound(radius: float, feature_norm: float, label_bound: float) -> float:
    """B = (Lambda r + Y)^2: the largest squared loss of a clipped record."""
    return loss_bounds("squared", feature_norm, label_bound, radius)[0]


def public_second_moments(
    features: np.ndarray, labels: np.ndarray, feature_norm: float, label_bound: float
) -> np.ndarray:
    """M_pub = (1/m) sum z z^T over the public source, clipped exactly as the
    sites clip their records (the same kernel code, run on public data)."""
    features, labels = _checked_public(features, labels)
    names = tuple(f"x{i}" for i in range(features.shape[1]))
    params = SecondMomentsParams(feature_norm, label_bound)
    (triangle,) = _MOMENTS.compute(Dataset(features, labels, names), params, {})
    return symmetric_from_triangle(triangle) / features.shape[0]


def moments_mechanism(
    epsilon: float, delta: float, dim: int, feature_norm: float, label_bound: float
) -> Mechanism:
    """The one Gaussian release of the private moment sum (its (d+1)(d+2)/2
    scaled upper-triangular entries) that
    meets (epsilon, delta) under replace-one adjacency; ``NoNoise`` at epsilon = inf."""
    multiplier = noise_multiplier(epsilon, delta, ReleasePlan(1))
    params = SecondMomentsParams(feature_norm, label_bound)
    return _MOMENTS.mechanism(params, multiplier, Adjacency.REPLACE_ONE, dim=dim)


def single_holder_mechanism(epsilon: float, params: ExactDiscrepancyParams) -> Mechanism:
    """Laplace on n d-hat (sensitivity B): scale B / epsilon, i.e. Lap(B/(n epsilon))
    on d-hat; ``NoNoise`` at epsilon = inf."""
    dim = params.public_moments.shape[0] - 1
    return _EXACT.mechanism(params, 1.0 / epsilon if math.isfinite(epsilon) else math.inf,
                            Adjacency.REPLACE_ONE, dim=dim, noise="laplace")


def federated_discrepancy(
    federation: Federation,
    public_features: np.ndarray,
    public_labels: np.ndarray,
    *,
    epsilon: float,
    delta: float | None,
    radius: float,
    feature_norm: float,
    label_bound: float,
) -> DiscrepancyEstimate:
    """d_DP from one Gaussian release of the private second moments; see the
    module docstring. ``epsilon = inf`` releases them without noise (only
    simulation sites with ``allow_non_private`` answer). The values arrive
    checked (:class:`~.estimators.PrivateDiscrepancy` validates them at fit)
    but for delta, which only this route needs."""
    _check_delta_given(epsilon, delta)
    public = public_second_moments(public_features, public_labels, feature_norm, label_bound)
    num_records = sum(federation.site_sizes.values())
    dim = public.shape[0] - 1
    mechanism = moments_mechanism(epsilon, delta, dim, feature_norm, label_bound)
    params = SecondMomentsParams(feature_norm, label_bound)
    noisy_triangle = federation.query(_MOMENTS.name, params.to_wire(), mechanism).value
    private = symmetric_from_triangle(noisy_triangle) / num_records  # post-processing
    _check_dim(private.shape, public.shape)
    estimate = squared_loss_discrepancy(public - private, radius)
    (sigma,) = mechanism.noise_scales  # 0 without noise
    return _result(estimate, radius, feature_norm, label_bound, sigma / num_records,
                   "federated", mechanism, private, federation, epsilon, delta)


def single_holder_discrepancy(
    federation: Federation,
    public_features: np.ndarray,
    public_labels: np.ndarray,
    *,
    epsilon: float,
    radius: float,
    feature_norm: float,
    label_bound: float,
    delta: float | None,
) -> DiscrepancyEstimate:
    """The paper's d_DP = Proj_[0,B](d-hat + Lap(B/(n epsilon))), computed at the
    one site that holds the whole private sample; refuses a federation of more
    than one site. ``delta`` only chooses where the ledgers' spend is reported.
    The values arrive checked: :class:`~.estimators.PrivateDiscrepancy`
    validates them at fit."""
    if federation.num_sites != 1:
        raise ValueError(
            f"the single-holder discrepancy needs the whole private sample at one site, "
            f"but this federation has {federation.num_sites} sites: use the federated "
            "estimate (method='federated') instead"
        )
    public = public_second_moments(public_features, public_labels, feature_norm, label_bound)
    (num_records,) = federation.site_sizes.values()
    params = ExactDiscrepancyParams(feature_norm, label_bound, radius, public)
    mechanism = single_holder_mechanism(epsilon, params)
    answer = federation.query(_EXACT.name, params.to_wire(), mechanism).value
    (scale,) = mechanism.noise_scales  # 0 without noise
    return _result(float(answer[0]) / num_records, radius, feature_norm, label_bound,
                   scale / num_records, "single_holder", mechanism, None, federation,
                   epsilon, delta)


def _result(
    estimate: float, radius: float, feature_norm: float, label_bound: float,
    noise_scale: float, method: Method, mechanism: Mechanism,
    private: np.ndarray | None, federation: Federation, epsilon: float, delta: float | None,
) -> DiscrepancyEstimate:
    bound = loss_bound(radius, feature_norm, label_bound)
    return DiscrepancyEstimate(
        value=float(np.clip(estimate, 0.0, bound)),  # Proj_[0, B], post-processing
        unclipped=float(estimate),
        loss_bound=bound,
        noise_scale=noise_scale,
        method=method,
        mechanism=mechanism,
        private_moments=private,
        privacy=federation.privacy_spent(None if math.isinf(epsilon) else delta),
    )


def _check_delta_given(epsilon: float, delta: float | None) -> None:
    """The Gaussian release needs a delta, which the estimator leaves optional
    because the single holder does not: refused before any query."""
    if delta is None and not math.isinf(epsilon):
        raise ValueError("delta is required for the Gaussian (federated) release, e.g. 1e-6")


def _checked_public(features: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    features = np.asarray(features, dtype=float)
    labels = np.asarray(labels, dtype=float)
    if features.ndim != 2 or features.shape[0] == 0:
        raise ValueError(
            f"public_features must be a non-empty 2-d array (m, d), got shape {features.shape}"
        )
    if labels.shape != (features.shape[0],):
        raise ValueError(
            f"public_labels must have shape ({features.shape[0]},), got {labels.shape}"
        )
    if not (np.all(np.isfinite(features)) and np.all(np.isfinite(labels))):
        raise ValueError("public_features and public_labels must be finite")
    return features, labels


def _check_dim(private_shape: tuple[int, ...], public_shape: tuple[int, ...]) -> None:
    if private_shape != public_shape:
        raise ValueError(
            f"the sites' records have moments of shape {private_shape} but the public data "
            f"{public_shape}: public_features must have the sites' number of features"
        )
