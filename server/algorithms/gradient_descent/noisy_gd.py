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

Written against the ``Federation`` protocol only: it runs unchanged in-process
and across the network.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

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


@dataclass
class NoisyGDResult:
    """The fitted model, its history and what it cost each site."""

    weights: np.ndarray
    average_weights: np.ndarray
    noise_multiplier: float
    history: list[IterationRecord] = field(default_factory=list)
    privacy: dict[str, SitePrivacy] = field(default_factory=dict)


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
) -> tuple[np.ndarray, np.ndarray, list[IterationRecord]]:
    """T steps w <- Proj(w - eta * released_sum / gradient_scale), one
    ``linear_gradient`` query each: the loop noisy GD (scale n) and noisy
    minibatch SGD (scale q n) share. Returns (last, average, history)."""
    weights = np.zeros(dim) if initial_weights is None else np.asarray(initial_weights, float)
    weights = project_to_ball(weights, radius)
    weight_sum = np.zeros(dim)
    history: list[IterationRecord] = []
    for iteration in range(1, iterations + 1):
        params = LinearGradientParams(weights, loss, clip_norm)
        answer = federation.query(KERNEL.name, params.to_wire(), mechanism)
        gradient = answer.value / gradient_scale
        weights = project_to_ball(weights - learning_rate * gradient, radius)
        weight_sum += weights
        record = IterationRecord(iteration, float(np.linalg.norm(gradient)),
                                 float(np.linalg.norm(weights)))
        history.append(record)
        if checkpoint is not None:
            checkpoint(iteration, weights)
        if progress is not None and (iteration % progress_every == 0 or iteration == iterations):
            progress(record)
    return weights, weight_sum / iterations, history


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
) -> NoisyGDResult:
    """Fit a linear model on the federation's private records by noisy
    projected gradient descent; see the module docstring. ``checkpoint`` is
    called with (iteration, weights) after every iteration. The
    hyperparameters come checked (:class:`~.estimators.NoisyGD` validates
    them at fit); nothing here checks their ranges again."""
    num_records = sum(federation.site_sizes.values())
    mechanism = gradient_mechanism(epsilon, delta, iterations, clip_norm, calibration, dim=dim)
    weights, average_weights, history = projected_gradient_descent(
        federation, mechanism, dim=dim, loss=loss, clip_norm=clip_norm,
        gradient_scale=num_records, iterations=iterations, learning_rate=learning_rate,
        radius=radius, initial_weights=initial_weights, progress=progress,
        progress_every=progress_every, checkpoint=checkpoint)
    # inf reports "no noise" (epsilon = inf), as every result type does.
    noise_multiplier = math.inf if mechanism.is_non_private else mechanism.noise_multiplier
    return NoisyGDResult(
        weights=weights,
        average_weights=average_weights,
        noise_multiplier=noise_multiplier,
        history=history,
        privacy=federation.privacy_spent(None if math.isinf(epsilon) else delta),
    )
