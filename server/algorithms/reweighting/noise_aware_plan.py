"""Public rules for PCnvxAdap / PNCnvxAdap's iteration plan: how many steps, how
long a w step, which clip radius and where to start.

Every rule here reads public quantities only: n (public under replace-one
adjacency, as the kernel already assumes), epsilon, delta, d, the clip region
and the coordinator's public source sample. None reads a private record, so
each is free in privacy: the releases, their sensitivities and the ledger's
charge are those of the ``reweighted_gradient`` kernel for whatever plan is
chosen, and the noise is calibrated by the accountant for the plan's T.

Why they exist (measured in experiments/adapter_study.py): with the seed's
defaults (cold start at 0, T = 100-200, curvature steps, the u-noise of Alg. 1
line 10, Alg. 2's random iterate, the gradient bound G of the whole ball) the
per-step noise is many times the gradient, and the iterate random-walks
across the ball: at small n the private adapters lose to source-only and get
no better with epsilon.

* ``auto_iterations``: Theorem 4's order T ~ epsilon n / sqrt(d log(1/delta)),
  clamped to [``MIN_ITERATIONS``, ``MAX_ITERATIONS``]: the accountant's noise
  per step grows about as sqrt(T), so at small epsilon n fewer, less noisy
  steps do better.
* ``noise_aware_step_sizes``: Alg. 1 line 4's eta_w = D / sqrt(T (G^2 + d
  sigma_w^2)) with D the distance the model is allowed to travel, capping the
  curvature step (which ignores the noise); without noise the curvature step.
  With ``smooth=True`` (``step_sizes="noise_aware_smooth"``) the cap is
  D / sqrt(T d sigma_w^2): noisy descent's step on a smooth objective, which
  tends to the curvature step as the noise vanishes (see the function).
* ``auto_step_rule`` (the adapters' default, ``step_sizes="auto"``): the
  smooth cap where epsilon n / sqrt(d log(1/delta)) reaches MAX_ITERATIONS
  (small noise), the default cap elsewhere.
* ``auto_clip_radius``: for the squared loss the sites' gradient bound is
  G = 2 r (Lambda' r + Y); the least Lambda' whose G covers every public
  record's gradient at the warm start (the noise is set by G, not by the
  gradients seen).
"""

from __future__ import annotations

import math

import numpy as np

from privadapt.common.losses import Loss, loss_derivative
from privadapt.common.numerics.geometry import clip_rows_to_norm
from privadapt.server.algorithms.reweighting.descent import DataBounds, StepSizes
from privadapt.server.algorithms.reweighting.objectives import ReweightingHyperparameters

MIN_ITERATIONS = 10
MAX_ITERATIONS = 200
# D as a fraction of the model radius when the run starts at the public model:
# the paper's D = Lambda covers a cold start anywhere in the ball.
WARM_DISTANCE_FRACTION = 0.25


def iteration_demand(epsilon: float, delta: float, num_private: int, model_size: int) -> float:
    """epsilon n / sqrt(d log(1/delta)), Theorem 4's order of T before any
    clamp: how many steps the budget pays for (inf without noise)."""
    if math.isinf(epsilon):
        return math.inf
    return epsilon * num_private / math.sqrt(model_size * math.log(1.0 / delta))


def auto_iterations(epsilon: float, delta: float, num_private: int, model_size: int) -> int:
    """T = ceil(epsilon n / sqrt(d log(1/delta))) in [MIN_ITERATIONS, MAX_ITERATIONS]
    (Theorem 4's order); MAX_ITERATIONS without noise."""
    if math.isinf(epsilon):
        return MAX_ITERATIONS
    steps = math.ceil(iteration_demand(epsilon, delta, num_private, model_size))
    return int(min(MAX_ITERATIONS, max(MIN_ITERATIONS, steps)))


def auto_step_rule(epsilon: float, delta: float, num_private: int, model_size: int) -> str:
    """``step_sizes="auto"``: ``"noise_aware_smooth"`` where the noise is
    small, ``"noise_aware"`` elsewhere. "Small" is the iteration rule's own
    yardstick: epsilon n / sqrt(d log(1/delta)) >= MAX_ITERATIONS, where the
    budget pays for more steps than the plan takes.

    Why (experiments/step_rule_study.py, the adapter study's rows, 3 paired
    splits): the G^2 term of the default cap keeps eta_w at D / (G sqrt(T))
    however small the noise, so at large epsilon n the adapter stops short
    (synthetic n = 2000: 0.0098 at every epsilon against the non-private
    0.0081; the smooth step reaches 0.0081); at small epsilon n, where the
    warm start is nearer the optimum than D, the smooth step is worse
    (diabetes n = 100, epsilon 1: 0.087 against 0.078), and there the
    two caps nearly agree in what the noise allows anyway. Every objective
    here is smooth in w (noise_aware_step_sizes), which the smooth cap
    needs. Public values only (n is public under replace-one, as
    auto_iterations already uses it): free in privacy, the releases and
    their charge are the same for either step."""
    demand = iteration_demand(epsilon, delta, num_private, model_size)
    return "noise_aware_smooth" if demand >= MAX_ITERATIONS else "noise_aware"


def default_step_distance(bounds: DataBounds, warm_start: bool) -> float:
    """D of the noise-aware step: Lambda / 4 from the public model, Lambda from 0."""
    return bounds.radius * (WARM_DISTANCE_FRACTION if warm_start else 1.0)


def noise_aware_step_sizes(
    curvature: StepSizes,
    loss: Loss,
    hyper: ReweightingHyperparameters,
    bounds: DataBounds,
    num_private: int,
    dim: int,
    iterations: int,
    noise_multiplier: float,
    distance: float,
    smooth: bool = False,
) -> StepSizes:
    """The curvature steps with eta_w capped at D / sqrt(T (G^2 + d sigma_w^2)),
    sigma_w = z 2 (1-alpha) G / n the noise on the w-gradient (G at the clip
    radius, D = ``distance``); the curvature steps unchanged without noise.

    ``smooth``: the cap D / sqrt(T d sigma_w^2), without G^2. G^2 is the price
    of a non-smooth objective, whose (sub)gradient does not shrink near the
    optimum; in w both F and J are beta_w-smooth (every loss here is), and
    projected descent with steps eta <= 1/beta and gradient noise of variance
    V = d sigma_w^2 per step leaves the average iterate within
    D^2 / (2 eta T) + eta V / 2 of the optimum, best at eta = D / sqrt(T V).
    With G^2 the cap stays at D / (G sqrt(T)) however small the noise, so it
    neither improves with epsilon nor tends to the non-private step; but when
    the start is much nearer the optimum than D it is the safer step (the
    adapter study's small regressions at epsilon 1-3). Which is better
    depends on the unknown ||w_0 - w*||: the default rule (``auto_step_rule``)
    takes the smooth cap only where epsilon n is large, and both are
    candidates for a private choice. Both read public
    quantities only, so both are free in privacy."""
    if math.isinf(noise_multiplier):
        return curvature
    _, gradient_bound = bounds.loss_and_gradient_bounds(loss)
    sigma = noise_multiplier * 2.0 * (1.0 - hyper.alpha) * gradient_bound / num_private
    size = bounds.model_size(loss, dim)
    lipschitz = 0.0 if smooth else gradient_bound**2
    if lipschitz + size * sigma**2 == 0.0:
        return curvature
    capped = distance / math.sqrt(iterations * (lipschitz + size * sigma**2))
    return StepSizes(min(curvature.weights, capped), curvature.public_weights,
                     curvature.private_weights)


def auto_clip_radius(
    loss: Loss,
    bounds: DataBounds,
    public_features: np.ndarray,
    public_labels: np.ndarray,
    weights: np.ndarray,
) -> float:
    """The squared loss's least clip radius Lambda' <= Lambda with G(Lambda') >=
    every public gradient norm at ``weights`` (floored at Lambda / 1000, since
    G(0) = 2 r Y already bounds a gradient at w = 0); the model radius for the
    logistic and softmax losses, whose G = r Y, sqrt(2) r does not depend on it."""
    if loss != "squared":
        return bounds.radius
    r, y = bounds.feature_norm, bounds.label_bound
    features = clip_rows_to_norm(public_features, r)  # as the sites clip theirs
    labels = np.clip(public_labels, -y, y)
    largest = float(np.max(np.abs(loss_derivative(loss, features @ weights, labels))
                           * np.linalg.norm(features, axis=1), initial=0.0))
    needed = (largest / (2.0 * r) - y) / r
    return float(min(bounds.radius, max(bounds.radius / 1000.0, needed)))
