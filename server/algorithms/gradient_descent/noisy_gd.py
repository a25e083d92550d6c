"""Differentially private projected full-batch gradient descent on the private target.

The "target-only, noisy gradient" baseline of seed 000 (private supervised
adaptation, Section 6 baselines; the full-batch form of Bassily et al. 2014,
Alg. 1): for t = 1..T,

    g_t = (1/n) (sum_i clip_C(grad l(w_t; x_i, y_i)) + N(0, sigma^2 I))
    w_{t+1} = Proj_{||w|| <= Lambda}(w_t - eta g_t)

The clipped sum is one ``linear_gradient`` query per iteration (L2 sensitivity
2C under replace-one adjacency); sigma = z * 2C (plus the fixed-point rounding
the sites charge, ``LinearGradient.mechanism``), with the noise multiplier z
calibrated by the accountant so that T releases meet (epsilon, delta) exactly
(``calibration="accountant"``), or by the closed form of Bassily et al. 2014,
sigma^2 = 8 T log(1/delta) (2C)^2 / epsilon^2 per unit-sensitivity release
(``calibration="paper"``, looser). ``epsilon = inf`` runs the non-private
version; only simulation sites (policy ``allow_non_private``) answer it.

Around a public centre (``center``: seed 002's offset theta = w_src + delta,
||delta|| <= rho, for any loss; GAIN_STUDY.md 4.2). The same loop started at
a public model w_0 (the source-only model, fitted on the public source) and
projected after every step onto the ball ||w - w_0|| <= rho instead of
||w|| <= Lambda. Its privacy is the plain loop's, release for release: the
``linear_gradient`` kernel clips every record's gradient at C whatever w the
coordinator sends (sensitivity 2C, replace-one, a function of C alone), so
the mechanism, its noise multiplier and each site's charge do not depend on
w; w_0 and rho are computed from the public source only (and public
settings), so choosing them reads no private record; the start, the
projection and any average of the iterates are post-processing of the
releases. Starting near a model that is already good on a shifted target
is what makes the noisy steps pay at small epsilon: from zero, T noisy steps
must first travel the distance ||w_0|| that the public data gives for free.

The tail average (the mean of the second half of the iterates, the last
ceil(T/2)) is what the ball candidates deliver: the early iterates still
carry the start, the late ones average out the noise.

Written against the ``Federation`` protocol only: it runs unchanged in-process
and across the network.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

import numpy as np

from privadapt.common.accounting.calibration import (
    ReleasePlan,
    noise_multiplier,
    paper_closed_form,
)
from privadapt.common.federation import Federation, SitePrivacy
from privadapt.common.kernels.linear_gradient import LinearGradient, LinearGradientParams
from privadapt.common.losses import BinaryLoss
from privadapt.common.mechanisms import Adjacency, Mechanism
from privadapt.common.numerics.geometry import project_to_ball

Calibration = Literal["accountant", "paper"]
KERNEL = LinearGradient()


@dataclass(frozen=True)
class IterationRecord:
    iteration: int
    gradient_norm: float
    weights_norm: float


class DescentPath(NamedTuple):
    """What one run of :func:`projected_gradient_descent` delivers: the last
    iterate, the average of all T iterates, the average of the last ceil(T/2)
    (``tail_average``) and the history."""

    last: np.ndarray
    average: np.ndarray
    tail_average: np.ndarray
    history: list[IterationRecord]


@dataclass
class NoisyGDResult:
    """The fitted model, its history and what it cost each site."""

    weights: np.ndarray
    average_weights: np.ndarray
    noise_multiplier: float
    history: list[IterationRecord] = field(default_factory=list)
    privacy: dict[str, SitePrivacy] = field(default_factory=dict)
    tail_average_weights: np.ndarray | None = None


@paper_closed_form("noisy_gd")
def paper_noise_multiplier(epsilon: float, delta: float, iterations: int) -> float:
    """sigma / sensitivity = sqrt(8 T log(1/delta)) / epsilon (Bassily et al. 2014,
    by advanced composition); valid for epsilon <= 2 log(1/delta)."""
    return math.sqrt(8.0 * iterations * math.log(1.0 / delta)) / epsilon


def gradient_mechanism(
    epsilon: float,
    delta: float,
    iterations: int,
    clip_norm: float,
    calibration: Calibration,
    *,
    dim: int,
) -> Mechanism:
    """The per-iteration release on d = ``dim`` features: Gaussian on the
    kernel's sum (sensitivity 2C under replace-one, plus rounding), or no noise
    at all when ``epsilon`` is infinite."""
    multiplier = noise_multiplier(epsilon, delta,
                                  ReleasePlan(iterations, paper=paper_noise_multiplier),
                                  calibration=calibration)
    # The sensitivity depends on the clip norm alone, not on the weights or the loss.
    params = LinearGradientParams(np.zeros(dim), "squared", clip_norm)
    return KERNEL.mechanism(params, multiplier, Adjacency.REPLACE_ONE, dim=dim)


def projected_gradient_descent(
    federation: Federation,
    mechanism: Mechanism,
    *,
    dim: int,
    loss: BinaryLoss,
    clip_norm: float,
    gradient_scale: float,
    iterations: int,
    learning_rate: float,
    radius: float,
    initial_weights: np.ndarray | None,
    progress: Callable[[IterationRecord], None] | None,
    progress_every: int,
    checkpoint: Callable[[int, np.ndarray], None] | None,
    center: np.ndarray | None = None,
) -> DescentPath:
    """T steps w <- Proj(w - eta * released_sum / gradient_scale), one
    ``linear_gradient`` query each: the loop noisy GD (scale n) and noisy
    minibatch SGD (scale q n) share. Proj is onto ||w - center|| <= radius
    (``center`` None: the origin); the start is ``initial_weights`` projected
    there, else the centre itself. ``center`` must be public (a function of
    public data and settings): the module docstring says why the privacy is
    then the plain loop's, whatever it is."""
    if initial_weights is not None:
        start = np.asarray(initial_weights, float)
    else:
        start = np.zeros(dim) if center is None else np.asarray(center, float).copy()
    weights = project_to_ball(start, radius, center)
    weight_sum, tail_sum = np.zeros(dim), np.zeros(dim)
    tail_from = iterations // 2 + 1  # the last ceil(T / 2) iterates
    history: list[IterationRecord] = []
    for iteration in range(1, iterations + 1):
        params = LinearGradientParams(weights, loss, clip_norm)
        answer = federation.query(KERNEL.name, params.to_wire(), mechanism)
        gradient = answer.value / gradient_scale
        weights = project_to_ball(weights - learning_rate * gradient, radius, center)
        weight_sum += weights
        if iteration >= tail_from:
            tail_sum += weights
        record = IterationRecord(iteration, float(np.linalg.norm(gradient)),
                                 float(np.linalg.norm(weights)))
        history.append(record)
        if checkpoint is not None:
            checkpoint(iteration, weights)
        if progress is not None and (iteration % progress_every == 0 or iteration == iterations):
            progress(record)
    return DescentPath(weights, weight_sum / iterations,
                       tail_sum / (iterations - tail_from + 1), history)


def noisy_gd(
    federation: Federation,
    *,
    dim: int,
    loss: BinaryLoss,
    epsilon: float,
    delta: float,
    iterations: int,
    learning_rate: float,
    radius: float,
    clip_norm: float,
    calibration: Calibration,
    initial_weights: np.ndarray | None = None,
    progress: Callable[[IterationRecord], None] | None = None,
    progress_every: int = 10,
    checkpoint: Callable[[int, np.ndarray], None] | None = None,
    center: np.ndarray | None = None,
) -> NoisyGDResult:
    """Fit a linear model on the federation's private records by noisy
    projected gradient descent; see the module docstring. ``center``: a
    public model the ball ||w - center|| <= ``radius`` is around, and the
    start (None: the origin). ``checkpoint`` is called with (iteration,
    weights) after every iteration. The hyperparameters come checked
    (:class:`~.estimators.NoisyGD` validates them at fit); nothing here
    checks their ranges again."""
    num_records = sum(federation.site_sizes.values())
    mechanism = gradient_mechanism(epsilon, delta, iterations, clip_norm, calibration, dim=dim)
    path = projected_gradient_descent(
        federation, mechanism, dim=dim, loss=loss, clip_norm=clip_norm,
        gradient_scale=num_records, iterations=iterations, learning_rate=learning_rate,
        radius=radius, initial_weights=initial_weights, progress=progress,
        progress_every=progress_every, checkpoint=checkpoint, center=center)
    # inf reports "no noise" (epsilon = inf), as every result type does.
    noise_multiplier = math.inf if mechanism.is_non_private else mechanism.noise_multiplier
    return NoisyGDResult(
        weights=path.last,
        average_weights=path.average,
        noise_multiplier=noise_multiplier,
        history=path.history,
        privacy=federation.privacy_spent(None if math.isinf(epsilon) else delta),
        tail_average_weights=path.tail_average,
    )
