"""PCnvxAdap (seed 000, Algorithm 1) and its noise-free version CnvxAdap.

Paper: ../shared/seeds/000_c994082081daf396.txt, Section 4. Noisy projected
gradient descent on the convex objective F of problem (6) (squared loss,
linear w, ||w|| <= Lambda; see ``adaptation_objectives`` for F and how its
garbled k1 bracket was rebuilt), run as a federated loop
(``reweighted_descent``): per iteration one query whose released blocks are
the clipped private w-gradient (L2 sensitivity 2(1-alpha)G/n, Lemma 1 (ii),
G = 2r(Lambda r + Y)) and two aggregates of the sites' u's, and whose local
block is the private u-gradient each site noises itself (sensitivity
(1-alpha)^2 B/n^2, Lemma 1 (iii), B = (Lambda r + Y)^2). Returns the average
iterate (line 13).

Rebuilt from the OCR and the proof of Theorem 2 (Appendix C.2):

* lines 2-3: sigma_1 = 2 s_1 sqrt(T log(2/delta)) / epsilon, s_1 = 2(1-alpha)G/n,
  and sigma_2 = 2 s_2 sqrt(T log(2/delta)) / epsilon, s_2 = (1-alpha)^2 B/n^2
  (the printed bound of Theorem 2 has 32 (1-alpha)^2 ... d log(2/delta) =
  d sigma_1^2 n^2 epsilon^2 / (T ...), which fixes the factor 2 and log(2/delta));
* line 4: the minimisers of the bound in the proof's last display with
  ||u_0 - u*||^2 taken as 1: eta_w = Lambda / sqrt(T (G^2 + d sigma_1^2)),
  eta_Pub = m^(3/2) / (sqrt(T) alpha^2 (B + B')), eta_Priv = n^(3/2) /
  sqrt(T ((1-alpha)^4 B'^2 + n^4 sigma_2^2)), B' = B + k1 + k2 + kinf.

Where this deviates from the paper, and why:

* F's max term kinf / min_i u_i needs the minimum over every site's u's, and
  secure aggregation releases only sums. The federated algorithm therefore
  optimises F_mu, F with that term replaced by the mu-softmax
  kinf (1/mu) log sum_i exp(mu/u_i) of Section 5 (convex too; F <= F_mu <=
  F + kinf log(m+n)/mu), whose gradient needs only the sum Z = sum_i exp(mu/u_i).
  Releasing a private minimum exactly (a max over sites) would need a
  per-site release outside the secure sum; a large mu approaches it.
* The paper's u is public (its gradient is noised and u is returned); here
  each site's u never leaves it, and the global terms need S = sum_i 1/u_i^2
  and Z, which the sites release (noised, ``aggregate_noise_ratio`` times the
  w block's noise multiplier). They are extra releases the paper does not
  have, so ``calibration="paper"`` spends more than epsilon; the ledger
  charges the truth and ``calibration="accountant"`` (default) meets
  (epsilon, delta) exactly for all four blocks.
* The u-noise of line 10 protects u because the paper publishes u. Here u
  never leaves its site, and every released block keeps its sensitivity for
  any value of the changed record's u_j >= n/(1-alpha) (all other u_i are equal
  on neighbouring datasets given what was released), so the releases are
  (epsilon, delta)-DP without it. ``weight_noise=True`` (default) keeps the
  paper's noise and accounts it; ``weight_noise=False`` drops that block,
  which lowers the noise of the released blocks for the same epsilon and
  stops the u's from random-walking (measured: much lower test MSE). The
  estimators default to ``weight_noise=False`` (this function keeps
  the paper's default).
* Step sizes, iteration count, warm start and clip radius: the estimators
  default to the public rules of ``noise_aware_plan`` (``step_sizes=
  "noise_aware"``, ``step_distance``, ``DataBounds.clip_radius``); this
  function keeps the paper-shaped defaults, so fixed-seed results stay.
* The paper's line-4 step sizes assume ||u_0 - u*||^2 <= 1, while u lives on the
  scale n: with them u hardly moves. The default ``step_sizes="curvature"``
  uses block steps from the objective's curvature bounds
  (``curvature_step_sizes``); ``"paper"`` gives line 4.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import numpy as np

from privadapt.common.federation import Federation
from privadapt.server.algorithms.reweighting.descent import (
    AdaptationResult,
    Calibration,
    DataBounds,
    IterationRecord,
    StepSizes,
    choose_step_sizes,
    curvature_step_sizes,
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


def paper_step_sizes(
    hyper: ReweightingHyperparameters,
    bounds: DataBounds,
    num_public: int,
    num_private: int,
    dim: int,
    iterations: int,
    noise_multiplier: float,
    weight_noise: bool = True,
) -> StepSizes:
    """Alg. 1 line 4 (rebuilt, module docstring) for the noise multiplier z of lines 2-3
    (sigma_2 = 0 when the sites update u without noise)."""
    loss_bound, gradient_bound = bounds.loss_and_gradient_bounds("squared")
    alpha, n, m, t = hyper.alpha, num_private, num_public, iterations
    z = 0.0 if math.isinf(noise_multiplier) else noise_multiplier
    sigma_1 = z * 2.0 * (1.0 - alpha) * gradient_bound / n
    sigma_2 = z * (1.0 - alpha) ** 2 * loss_bound / n**2 if weight_noise else 0.0
    bound_sum = loss_bound + hyper.k1 + hyper.k2 + hyper.kinf
    return StepSizes(
        weights=bounds.radius / math.sqrt(t * (gradient_bound**2 + dim * sigma_1**2)),
        public_weights=m**1.5 / (math.sqrt(t) * alpha**2 * (loss_bound + bound_sum)),
        private_weights=n**1.5 / math.sqrt(
            t * ((1.0 - alpha) ** 4 * bound_sum**2 + n**4 * sigma_2**2)),
    )


def pcnvx_adap(
    federation: Federation,
    public_features: np.ndarray,
    public_labels: np.ndarray,
    *,
    hyper: ReweightingHyperparameters,
    bounds: DataBounds,
    epsilon: float,
    delta: float,
    iterations: int,
    step_scale: float,
    step_distance: float | None,
    calibration: Calibration,
    aggregate_noise_ratio: float,
    chain: str,
    step_sizes: StepSizeChoice = "curvature",
    weight_noise: bool = True,
    initial_weights: np.ndarray | None = None,
    progress: Callable[[IterationRecord], None] | None = None,
    progress_every: int = 10,
) -> AdaptationResult:
    """PCnvxAdap on the federation's private records and the public source
    (``public_features``, ``public_labels``); ``epsilon = inf`` is CnvxAdap.
    Returns the average iterate (``result.weights``) and each site's spend.
    ``chain`` names the sites' weights of this descent within the job. The
    values arrive checked: :class:`~.estimators.PCnvxAdap` validates them at
    fit, all but the pairing of ``kinf`` with a finite ``mu``, checked here."""
    if hyper.kinf > 0 and math.isinf(hyper.mu):
        raise ValueError("the federated F smooths its max term (module docstring): give a "
                         "finite mu, or kinf = 0")
    public_features = np.asarray(public_features, dtype=float)
    public_labels = np.asarray(public_labels, dtype=float)
    m, n = len(public_labels), sum(federation.site_sizes.values())
    noise = plan_noise(epsilon, delta, iterations, bounds, "squared", calibration,
                       aggregate_noise_ratio, weight_noise, dim=public_features.shape[1])
    distance = default_step_distance(bounds, initial_weights is not None) \
        if step_distance is None else step_distance
    steps = choose_step_sizes(
        step_sizes,
        paper=lambda: paper_step_sizes(hyper, bounds, m, n, public_features.shape[1],
                                       iterations, noise.noise_multiplier, weight_noise),
        curvature=lambda: curvature_step_sizes("convex", "squared", hyper, bounds, m, n,
                                               step_scale),
        noise_aware=lambda smooth: noise_aware_step_sizes(
            curvature_step_sizes("convex", "squared", hyper, bounds, m, n, step_scale),
            "squared", hyper, bounds, n, public_features.shape[1], iterations,
            noise.noise_multiplier, distance, smooth),
    )
    return run_reweighted_descent(
        federation, public_features, public_labels, objective="convex", loss="squared",
        hyper=hyper, bounds=bounds, iterations=iterations, noise=noise, step_sizes=steps,
        output_iteration=None, report_delta=None if math.isinf(epsilon) else delta,
        weight_noise=weight_noise, initial_weights=initial_weights, progress=progress,
        progress_every=progress_every, chain=chain,
    )


def cnvx_adap(
    federation: Federation,
    public_features: np.ndarray,
    public_labels: np.ndarray,
    **options,
) -> AdaptationResult:
    """CnvxAdap: PCnvxAdap with noise off (epsilon = inf; only simulation sites,
    policy ``allow_non_private``, answer it)."""
    return pcnvx_adap(federation, public_features, public_labels, epsilon=math.inf,
                      delta=0.0, **options)
