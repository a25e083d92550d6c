"""Output perturbation: regularised ERM solved at the site, released once with
Gaussian noise (seed 004, ../shared/seeds/004_2b354816f00c2aef.txt, Section 1's
output-perturbation learner; Chaudhuri, Monteleoni and Sarwate 2011, in a
federated sum form).

Each site solves min over ||w|| <= R of sum_i l(w; x_i, y_i) + (lambda / 2) ||w||^2
on its clipped records in exactly T projected gradient steps (the
``regularized_erm`` kernel, :mod:`privadapt.common.kernels.regularized_erm`,
where the sensitivity 2G / lambda (replace-one), the certified solver
tolerance b and the float allowance are derived) and releases

    w~ = w_T + N(0, sigma^2 I_d),   sigma = z (2G / lambda + 2b + grid),

with z calibrated by the accountant so that this one release is exactly
(epsilon, delta)-DP (:func:`privadapt.common.accounting.calibration.calibrate_noise_multiplier`,
one composition). Everything after it is post-processing.

A single data holder (the federation has one site, or is a one-site view):
the release is the site's model. Several sites: each site solves on its own
records and releases its own model (a per-site release, ``query_per_site``:
each site adds the full noise; its policy must allow per-site releases), one
release per site, charged at that site only by the parallel composition of
per-site ledgers; the delivered model is their average weighted by the
public sizes (post-processing), and each site's model is kept.

The regularisation lambda (``regularization="auto"``), a public rule.
Write w_l for the regularised minimiser, w_0 for the unregularised one in the
ball and b ~ N(0, sigma^2 I_d) for the noise, sigma = z 2G / lambda. For the
sum-form loss F_0 (no regulariser), F_0(w_l) - F_0(w_0) <= (lambda / 2)
(||w_0||^2 - ||w_l||^2) <= lambda R^2 / 2 (w_l minimises F_0 + lambda/2 ||.||^2),
and by n beta_l-smoothness E F_0(w_l + b) - F_0(w_l) <= n beta_l d sigma^2 / 2
(the first-order term has mean 0). The sum lambda R^2 / 2 + 2 n beta_l d z^2
G^2 / lambda^2 is least at

    lambda^3 = 8 n beta_l d z^2 G^2 / R^2,

with n the public size (the mean over sites), z the noise multiplier; at
least G / R (so the noise never needs to exceed the ball's scale), which is
also what epsilon = inf takes. Every input is public, so the rule costs
nothing.

Sizing. The noise and the iteration count are sized for N, a public upper
bound on the records a site holds: its public size, or, on a record part
(``federation.records``), the largest n whose part has the public size seen
((size + 1) / share). T is the least count whose convergence term is at most
``tolerance_share`` G / lambda at N (:func:`iterations_for`), so the solver
adds about 2 ``tolerance_share`` to the sensitivity; the site charges its own
N (n under replace-one), never more than the plan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from privadapt.common.accounting.calibration import ReleasePlan, noise_multiplier
from privadapt.common.data.record_parts import VALIDATION, RecordPart
from privadapt.common.federation import Federation, SitePrivacy
from privadapt.common.kernels.regularized_erm import (
    RegularizedERM,
    RegularizedERMParams,
    iterations_for,
    solver_error,
)
from privadapt.common.losses import BinaryLoss
from privadapt.common.mechanisms import Adjacency

KERNEL = RegularizedERM()


@dataclass
class OutputPerturbationResult:
    """The delivered model, each site's own noisy model, and what it cost."""

    weights: np.ndarray
    site_weights: dict[str, np.ndarray]
    noise_multiplier: float
    noise_std: float
    regularization: float
    iterations: int
    tolerance: float
    privacy: dict[str, SitePrivacy] = field(default_factory=dict)


def record_bound(federation: Federation, size: int) -> int:
    """N: a public upper bound on a site's records from its public ``size``
    (module docstring: a record part's size is an estimate of a share of n)."""
    part = getattr(federation, "records", RecordPart.ALL)
    if part.is_all:
        return max(1, int(size))
    share = (part.validation_fraction if part.part == VALIDATION
             else 1.0 - part.validation_fraction)
    return max(1, math.ceil((size + 1) / share))


def auto_regularization(num_records: float, dim: int, noise_multiplier: float,
                        lipschitz: float, smoothness: float, radius: float) -> float:
    """lambda = max(G / R, (8 n beta_l d z^2 G^2 / R^2)^(1/3)) (module docstring)."""
    floor = lipschitz / radius
    if not math.isfinite(noise_multiplier):
        return floor
    cube = 8 * num_records * smoothness * dim * (noise_multiplier * lipschitz / radius) ** 2
    return max(floor, cube ** (1 / 3))


def output_perturbation(
    federation: Federation,
    *,
    dim: int,
    loss: BinaryLoss,
    regularization: float | str,
    radius: float,
    clip_norm: float,
    label_bound: float,
    epsilon: float,
    delta: float,
    iterations: int | None,
    tolerance_share: float,
) -> OutputPerturbationResult:
    """One noisy regularised-ERM release per site (module docstring), with
    the values :class:`~.estimators.OutputPerturbation` checked at fit."""
    sizes = federation.site_sizes
    bound = max(record_bound(federation, n) for n in sizes.values())
    multiplier = noise_multiplier(epsilon, delta, ReleasePlan(1))
    if regularization == "auto":
        shape = RegularizedERMParams(loss, 1.0, radius, clip_norm, label_bound, 1)
        regularization = auto_regularization(float(np.mean(list(sizes.values()))), dim,
                                             multiplier, shape.lipschitz, shape.smoothness,
                                             radius)
    probe = RegularizedERMParams(loss, regularization, radius, clip_norm, label_bound, 1)
    steps = iterations_for(probe, dim, bound, tolerance_share) if iterations is None \
        else iterations
    params = RegularizedERMParams(loss, regularization, radius, clip_norm, label_bound, steps)
    tolerance = solver_error(params, dim, bound)  # ValueError here, before any query
    mechanism = KERNEL.mechanism(params, multiplier, Adjacency.REPLACE_ONE, dim=dim,
                                 max_records=bound)
    if federation.num_sites == 1:
        answer = federation.query(KERNEL.name, params.to_wire(), mechanism)
        site_weights = {answer.participants[0]: np.asarray(answer.value, dtype=float)}
    else:
        answers = federation.query_per_site(KERNEL.name, params.to_wire(), mechanism)
        site_weights = {name: np.asarray(blocks[0], dtype=float)
                        for name, blocks in answers.answers.items()}
    shares = np.array([max(sizes[name], 1) for name in site_weights], dtype=float)
    weights = np.tensordot(shares / shares.sum(), np.stack(list(site_weights.values())), 1)
    return OutputPerturbationResult(
        weights=np.asarray(weights, dtype=float),
        site_weights=site_weights,
        noise_multiplier=multiplier,
        noise_std=0.0 if mechanism.is_non_private else float(mechanism.noise_scales[0]),
        regularization=regularization,
        iterations=steps,
        tolerance=tolerance,
        privacy=federation.privacy_spent(None if math.isinf(epsilon) else delta),
    )
