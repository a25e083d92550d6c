"""PNCnvxAdap (seed 000, Algorithm 2, Appendix D.2) and its noise-free version NCnvxAdap.

Paper: ../shared/seeds/000_c994082081daf396.txt, Section 5 and Appendix D.
The same federated loop as PCnvxAdap (``reweighted_descent``; noise of Alg. 1
lines 2-3, which Alg. 2 keeps) on the smooth objective J of problem (7)
(``adaptation_objectives``): any G-Lipschitz, beta-smooth loss (here the
logistic loss of a linear model, labels in {-1, +1}, the squared loss, or the
softmax cross-entropy of a multi-class linear model), the l1 term
1 - sum_i 1/u_i exactly, and the max term through the mu-softmax.
It returns (w_t*, u_t*) with t* drawn uniformly from 1..T (line 13), drawn by
the coordinator from ``seed`` (not privacy noise: any generator will do), or,
with ``return_average``, the average iterate.

Step sizes: ``"paper"`` is line 4, eta = 1/beta for every block, with beta
the smoothness bound of Lemma 3 computed as ||grad^2_w J|| + ||K|| +
||grad^2_u J|| from the bounds (19)-(21) in its proof (we evaluate the bounds
at the constraints rather than keep the paper's O(.), which the OCR garbles;
``smoothness_bound``). Because u lives on the scale n and w on the scale 1,
one step 1/beta leaves u nearly frozen at its start (the reference weights
p^0). The default ``"curvature"`` uses block steps (``curvature_step_sizes``),
our tuning.

Softmax cross-entropy (``loss="softmax_cross_entropy"``; Section 1 names it,
no constants are given, and Section 5's B = G Lambda fails for it): W in
R^{d x C} with C = ``bounds.num_classes``, ||W||_F <= Lambda = ``bounds.radius``,
labels the class indices 0..C-1 (public ones checked here, private ones by
each site, which refuses the query otherwise); ``bounds.label_bound`` is
unused. Its constants, derived in ``privadapt.common.losses``:
G = sqrt(2) r, beta_w = r^2/2, B = log(1 + (C-1) exp(sqrt(2) Lambda r)) <=
log C + sqrt(2) Lambda r; they set the w-block sensitivity 2G, the local
u-block sensitivity B and the steps, as the logistic loss's do.
``result.weights`` is then W of shape (d, C); predict argmax_c (x W)_c. A warm
start: ``public_erm.fit_linear(..., loss="softmax_cross_entropy",
num_classes=C)`` as ``initial_weights``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import numpy as np

from privadapt.common.federation import Federation
from privadapt.common.losses import Loss
from privadapt.server.algorithms.reweighting.descent import (
    AdaptationResult,
    Calibration,
    DataBounds,
    IterationRecord,
    StepSizes,
    choose_step_sizes,
    curvature_step_sizes,
    loss_smoothness,
    plan_noise,
    run_reweighted_descent,
)
from privadapt.server.algorithms.reweighting.noise_aware_plan import (
    default_step_distance,
    noise_aware_step_sizes,
)
from privadapt.server.algorithms.reweighting.objectives import ReweightingHyperparameters

StepSizeChoice = Literal["noise_aware", "noise_aware_smooth", "curvature", "paper"] \
    | StepSizes


def smoothness_bound(
    loss: Loss,
    hyper: ReweightingHyperparameters,
    bounds: DataBounds,
    num_public: int,
    num_private: int,
) -> float:
    """beta >= ||grad^2 J|| over the constraint set (Lemma 3, Appendix D.1):
    beta_w (sum_i 1/u_i <= 1), ||K|| <= G (alpha^2/m^(3/2) + (1-alpha)^2/n^(3/2))
    (eq. (21)) and ||grad^2_u J|| <= (2(B + d + l1) + 4 l2 + 2 linf)/lb^3 +
    linf mu/lb^4 with lb = min(m/alpha, n/(1-alpha)) (the entries of (20),
    each bounded at the constraints)."""
    loss_bound, gradient_bound = bounds.loss_and_gradient_bounds(loss)
    alpha = hyper.alpha
    lowest = min(num_public / alpha, num_private / (1.0 - alpha))
    cross = gradient_bound * (alpha**2 / num_public**1.5
                              + (1.0 - alpha) ** 2 / num_private**1.5)
    weights_part = (2.0 * (loss_bound + hyper.discrepancy + hyper.k1) + 4.0 * hyper.k2
                    + 2.0 * hyper.kinf) / lowest**3 + hyper.kinf * hyper.mu / lowest**4
    return loss_smoothness(loss, bounds) + cross + weights_part


def pncnvx_adap(
    federation: Federation,
    public_features: np.ndarray,
    public_labels: np.ndarray,
    *,
    hyper: ReweightingHyperparameters,
    bounds: DataBounds,
    epsilon: float,
    delta: float,
    iterations: int,
    loss: Loss,
    seed: int | None,
    step_scale: float,
    step_distance: float | None,
    calibration: Calibration,
    aggregate_noise_ratio: float,
    chain: str,
    return_average: bool = False,
    step_sizes: StepSizeChoice = "curvature",
    weight_noise: bool = True,
    initial_weights: np.ndarray | None = None,
    progress: Callable[[IterationRecord], None] | None = None,
    progress_every: int = 10,
) -> AdaptationResult:
    """PNCnvxAdap on J; ``epsilon = inf`` is NCnvxAdap. ``result.weights`` is the
    iterate t* = ``result.output_iteration`` (or the average with
    ``return_average``, the estimator's default); the same ``seed`` gives the same t*.
    ``chain`` names the sites' weights of this descent within the job. The
    values arrive checked: :class:`~.estimators.PNCnvxAdap` validates them at
    fit (its ``mu`` is finite, as J needs)."""
    public_features = np.asarray(public_features, dtype=float)
    public_labels = np.asarray(public_labels, dtype=float)
    m, n = len(public_labels), sum(federation.site_sizes.values())
    noise = plan_noise(epsilon, delta, iterations, bounds, loss, calibration,
                       aggregate_noise_ratio, weight_noise, dim=public_features.shape[1])
    distance = default_step_distance(bounds, initial_weights is not None) \
        if step_distance is None else step_distance
    steps = choose_step_sizes(
        step_sizes,
        paper=lambda: StepSizes(*[1.0 / smoothness_bound(loss, hyper, bounds, m, n)] * 3),
        curvature=lambda: curvature_step_sizes("smooth", loss, hyper, bounds, m, n, step_scale),
        noise_aware=lambda smooth: noise_aware_step_sizes(
            curvature_step_sizes("smooth", loss, hyper, bounds, m, n, step_scale), loss, hyper,
            bounds, n, public_features.shape[1], iterations, noise.noise_multiplier,
            distance, smooth),
    )
    output_iteration = None if return_average else \
        int(np.random.default_rng(seed).integers(1, iterations + 1))
    return run_reweighted_descent(
        federation, public_features, public_labels, objective="smooth", loss=loss,
        hyper=hyper, bounds=bounds, iterations=iterations, noise=noise, step_sizes=steps,
        output_iteration=output_iteration, report_delta=None if math.isinf(epsilon) else delta,
        weight_noise=weight_noise, initial_weights=initial_weights, progress=progress,
        progress_every=progress_every, chain=chain,
    )


def ncnvx_adap(
    federation: Federation,
    public_features: np.ndarray,
    public_labels: np.ndarray,
    **options,
) -> AdaptationResult:
    """NCnvxAdap: PNCnvxAdap with noise off (epsilon = inf; simulation sites only)."""
    return pncnvx_adap(federation, public_features, public_labels, epsilon=math.inf,
                       delta=0.0, **options)
