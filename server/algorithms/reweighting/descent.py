"""The coordinator loop shared by PCnvxAdap (Alg. 1) and PNCnvxAdap (Alg. 2) of seed 000.

Both are noisy projected gradient descent on (w, u^Pub, u^Priv) over
||w|| <= Lambda, u_i >= m/alpha (public), u_i >= n/(1-alpha) (private); they differ
in the objective (F or J), the loss and the step sizes, which their own
modules choose. Federated form (DESIGN.md section 5): per iteration t one
``reweighted_gradient`` query (``privadapt.common.kernels.reweighted_gradient``)
at (w_t, u_t) carrying the public aggregates S_t = sum_i 1/u_i^2 and
log Z_t = log sum_i exp(mu/u_i). Each site

* releases (secure sum, distributed Gaussian) the clipped private w-gradient
  at u_t, and S and Z of its own u's at u_{t+1};
* updates its own u_i with its own full-sigma Gaussian noise (Alg. 1 line 10)
  and projects (line 11); the u's never leave the site.

The coordinator updates w (lines 6-7) and u^Pub (lines 8-9) with the same
S_t, Z_t, so the iteration is exactly the paper's joint step at (w_t, u_t).
At t = 0 every private u_i is n/(1-alpha) (q = the reference p^0 of Section 3),
so S_0 and Z_0 are public. The four blocks of a query (w-gradient, S, Z, the
local u-gradient) are one multi-block Gaussian release, charged as such by
every site's ledger.

The released S and Z are post-processed with public bounds (each site term
lies in (0, 1] after scaling, and Z's in (exp(-mu (1-alpha)/n), 1]) so noise
can never make S or Z non-positive.

With the softmax cross-entropy the model is W in R^{d x C} (``DataBounds.num_classes``
C), carried flattened row-major through the loop and the queries, projected on
the Frobenius ball ||W||_F <= Lambda, and returned as (d, C).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scipy import special

from privadapt.common import losses
from privadapt.common.accounting.calibration import (
    ReleasePlan,
    noise_multiplier,
    paper_closed_form,
)
from privadapt.common.federation import Federation, SitePrivacy
from privadapt.common.kernels.reweighted_gradient import (
    ReweightedGradient,
    ReweightedGradientParams,
)
from privadapt.common.losses import (
    SOFTMAX_CROSS_ENTROPY,
    Loss,
    Objective,
    class_indices,
    loss_bounds,
    penalty_gradient,
)
from privadapt.common.mechanisms import Adjacency, Mechanism
from privadapt.common.numerics.geometry import project_to_ball
from privadapt.common.validation import (
    check_int_at_least,
    check_positive,
    check_positive_finite,
)
from privadapt.server.algorithms.gradient_descent.noisy_gd import Calibration, IterationRecord
from privadapt.server.algorithms.reweighting.objectives import (
    ReweightingHyperparameters,
    weighted_loss_gradient,
)

KERNEL = ReweightedGradient()


@dataclass(frozen=True)
class DataBounds:
    """||x|| <= r (``feature_norm``), |y| <= Y (``label_bound``), ||w|| <= Lambda
    (``radius``): job parameters, enforced by clipping at the sites; and the
    number of classes C of the softmax cross-entropy (labels 0..C-1, refused
    otherwise by the sites; unused by the binary losses).

    ``clip_radius`` (None: ``radius``) is the radius whose bounds (B, G) the
    sites clip each record's loss and gradient to, and so what sets the
    released blocks' sensitivities: the kernel is sent it as its ``radius``.
    The coordinator still projects w on ||w|| <= ``radius``. A clip radius
    below the model radius is gradient clipping (as in DP-SGD): the kernel
    clips every record's gradient to G whatever w it is sent, so the
    sensitivities, and the ledger's charge, hold for any iterate; it only
    changes the private objective (records whose gradient exceeds G count
    as if it were G), and lowers the noise, which is set by G, not by the
    gradients actually seen."""

    feature_norm: float
    label_bound: float
    radius: float
    num_classes: int = 2
    clip_radius: float | None = None

    def __post_init__(self) -> None:
        for name in ("feature_norm", "label_bound", "radius"):
            check_positive_finite(name, getattr(self, name))
        if self.clip_radius is not None:
            check_positive_finite("clip_radius", self.clip_radius)
        check_int_at_least("num_classes", self.num_classes, 2)

    @property
    def kernel_radius(self) -> float:
        """The radius the sites clip to (``clip_radius``, else ``radius``)."""
        return self.radius if self.clip_radius is None else self.clip_radius

    def loss_and_gradient_bounds(self, loss: Loss) -> tuple[float, float]:
        """(B, G) of seed 000, Section 4 (squared), their logistic analogue, or
        the softmax cross-entropy's (``privadapt.common.losses``), at the clip
        radius: the bounds of what the sites release."""
        return loss_bounds(loss, self.feature_norm, self.label_bound, self.kernel_radius,
                           int(self.num_classes))

    def model_size(self, loss: Loss, dim: int) -> int:
        """Entries of the model: d, or d C for the softmax cross-entropy."""
        return dim * int(self.num_classes) if loss == SOFTMAX_CROSS_ENTROPY else dim


@dataclass(frozen=True)
class StepSizes:
    """eta_w, eta_{u^Pub}, eta_{u^Priv} (Alg. 1 line 4)."""

    weights: float
    public_weights: float
    private_weights: float

    def __post_init__(self) -> None:
        for name in ("weights", "public_weights", "private_weights"):
            check_positive_finite(f"step size {name}", getattr(self, name))


@dataclass(frozen=True)
class NoisePlan:
    """The per-iteration release: its mechanism and the sigma-over-sensitivity
    multiplier z of the w block (the u block has z too, S and Z have
    ``aggregate_noise_ratio`` z); ``inf`` when noise is off."""

    mechanism: Mechanism
    noise_multiplier: float


@dataclass
class AdaptationResult:
    """The fitted linear model and what it cost each site.

    ``weights`` is the algorithm's output (the average iterate for Alg. 1, a
    uniformly random iterate for Alg. 2): w of shape (d,), or W of shape (d, C)
    for the softmax cross-entropy (as are ``average_weights`` and
    ``last_weights``); ``public_weights`` the matching u^Pub. The private u's
    stay at the sites."""

    weights: np.ndarray
    public_weights: np.ndarray
    average_weights: np.ndarray
    last_weights: np.ndarray
    output_iteration: int | None
    noise_plan: NoisePlan
    step_sizes: StepSizes
    history: list[IterationRecord] = field(default_factory=list)
    privacy: dict[str, SitePrivacy] = field(default_factory=dict)


@paper_closed_form("reweighting")
def paper_noise_multiplier(epsilon: float, delta: float, iterations: int) -> float:
    """sigma / sensitivity of Alg. 1 lines 2-3: sigma_j = 2 s_j sqrt(T log(2/delta)) / epsilon."""
    return 2.0 * math.sqrt(iterations * math.log(2.0 / delta)) / epsilon


def query_params(
    weights: np.ndarray,
    step: int,
    *,
    objective: Objective,
    loss: Loss,
    hyper: ReweightingHyperparameters,
    bounds: DataBounds,
    total_private_records: int,
    inverse_square_sum: float,
    log_partition: float,
    step_size: float,
    weight_noise: bool,
    chain: str,
) -> ReweightedGradientParams:
    """The ``reweighted_gradient`` query of iteration ``step`` at w = ``weights``
    with the public aggregates S_t and log Z_t (module docstring)."""
    return ReweightedGradientParams(
        weights=weights, step=step, objective=objective, loss=loss, alpha=hyper.alpha,
        total_private_records=total_private_records, feature_norm=bounds.feature_norm,
        label_bound=bounds.label_bound, radius=bounds.kernel_radius, k1=hyper.k1, k2=hyper.k2,
        kinf=hyper.kinf, mu=_softmax_mu(hyper), inverse_square_sum=inverse_square_sum,
        log_partition=log_partition, step_size=step_size, weight_noise=weight_noise,
        num_classes=int(bounds.num_classes), chain=chain)


def _softmax_mu(hyper: ReweightingHyperparameters) -> float:
    """mu of the max term's softmax (any value when kinf = 0: the term is off)."""
    return hyper.mu if math.isfinite(hyper.mu) else 1.0


def plan_noise(
    epsilon: float,
    delta: float,
    iterations: int,
    bounds: DataBounds,
    loss: Loss,
    calibration: Calibration,
    aggregate_noise_ratio: float,
    weight_noise: bool = True,
    *,
    dim: int,
) -> NoisePlan:
    """One multi-block Gaussian per iteration on d = ``dim`` features, built by
    the kernel (its sensitivities plus rounding) with the S and Z blocks at
    ``aggregate_noise_ratio`` times z. ``accountant``: the least z with T
    releases meeting (epsilon, delta) (PLD, replace one); ``paper``: z of lines
    2-3 (the S and Z blocks are ours, so the ledger then reports more than
    epsilon: see ``cnvx_adap``)."""
    # The sensitivities depend on the loss, the clip region and weight_noise
    # alone: any step's (and any chain's) parameters give the same mechanism.
    probe = query_params(
        np.zeros(bounds.model_size(loss, dim)), 0, objective="smooth", loss=loss,
        hyper=ReweightingHyperparameters(alpha=0.5), bounds=bounds, total_private_records=1,
        inverse_square_sum=1.0, log_partition=0.0, step_size=1.0, weight_noise=weight_noise,
        chain="")

    def make(z: float) -> Mechanism:
        ratios = (1.0, aggregate_noise_ratio, aggregate_noise_ratio) \
            + (1.0,) * len(KERNEL.local_l2_sensitivities(probe, Adjacency.REPLACE_ONE))
        return KERNEL.mechanism(probe, z, Adjacency.REPLACE_ONE, dim=dim, block_ratios=ratios)

    if math.isinf(epsilon):
        return NoisePlan(make(math.inf), math.inf)
    check_positive("aggregate_noise_ratio", aggregate_noise_ratio)
    z = noise_multiplier(epsilon, delta,
                         ReleasePlan(iterations, make, paper=paper_noise_multiplier),
                         calibration=calibration)
    return NoisePlan(make(z), z)


def run_reweighted_descent(
    federation: Federation,
    public_features: np.ndarray,
    public_labels: np.ndarray,
    *,
    objective: Objective,
    loss: Loss,
    hyper: ReweightingHyperparameters,
    bounds: DataBounds,
    iterations: int,
    noise: NoisePlan,
    step_sizes: StepSizes,
    output_iteration: int | None,
    report_delta: float | None,
    chain: str,
    weight_noise: bool = True,
    initial_weights: np.ndarray | None = None,
    progress: Callable[[IterationRecord], None] | None = None,
    progress_every: int = 10,
) -> AdaptationResult:
    """T iterations of the federated loop (module docstring). ``output_iteration``
    t* in 1..T selects the returned iterate (Alg. 2); ``None`` returns the
    average of w_1..w_T (Alg. 1 line 13). ``weight_noise = False`` lets the
    sites update u without the noise of line 10 (u never leaves them; see the
    kernel's docstring). ``chain``: the sites' weights this descent uses
    among the job's (common/kernels/reweighted_chains.py; "" the default
    one). ``report_delta``: the delta at which
    each site's spend is reported (``None``: each site's cap delta)."""
    m = len(public_labels)
    n = sum(federation.site_sizes.values())
    if m < 1 or n < 1:
        raise ValueError(f"need public and private records, got m={m}, n={n}")
    dim = bounds.model_size(loss, public_features.shape[1])
    softmax = loss == SOFTMAX_CROSS_ENTROPY
    if softmax:
        class_indices(public_labels, bounds.num_classes)  # the public labels too
    mu = _softmax_mu(hyper)
    public_lower, private_lower = m / hyper.alpha, n / (1.0 - hyper.alpha)
    weights = project_to_ball(np.zeros(dim) if initial_weights is None
                              else _initial_weights(initial_weights, dim), bounds.radius)
    u_public = np.full(m, public_lower)
    private_square_sum = n / private_lower**2  # every private u_i starts at its bound
    private_log_z = math.log(n) + mu / private_lower
    weight_sum, u_public_sum = np.zeros(dim), np.zeros(m)
    chosen = (weights, u_public)
    history: list[IterationRecord] = []
    for t in range(iterations):
        inverse_square_sum = float(np.sum(u_public**-2.0)) + private_square_sum
        log_z = float(np.logaddexp(special.logsumexp(mu / u_public), private_log_z))
        params = query_params(
            weights, t, objective=objective, loss=loss, hyper=hyper, bounds=bounds,
            total_private_records=n, inverse_square_sum=inverse_square_sum,
            log_partition=log_z, step_size=step_sizes.private_weights,
            weight_noise=weight_noise, chain=chain)
        answer = federation.query(KERNEL.name, params.to_wire(), noise.mechanism)
        gradient_sum, square_sum, partition = answer.blocks
        _, grad_w, grad_u_loss = weighted_loss_gradient(
            weights, u_public, public_features, public_labels, loss, hyper.discrepancy)
        grad_w = grad_w + gradient_sum / private_lower
        grad_u = grad_u_loss + penalty_gradient(
            u_public, objective=objective, k1=hyper.k1, k1_coefficient=1.0 / public_lower**2,
            k2=hyper.k2, kinf=hyper.kinf, mu=mu, inverse_square_sum=inverse_square_sum,
            log_partition=log_z)
        weights = project_to_ball(weights - step_sizes.weights * grad_w, bounds.radius)
        u_public = np.maximum(u_public - step_sizes.public_weights * grad_u, public_lower)
        # Post-processing with public bounds: each site term is in (0, 1] after scaling.
        private_square_sum = float(np.clip(square_sum[0], 0.0, n)) / private_lower**2
        floor = n * math.exp(-mu / private_lower)
        private_log_z = math.log(float(np.clip(partition[0], floor, n))) + mu / private_lower
        weight_sum += weights
        u_public_sum += u_public
        if output_iteration == t + 1:
            chosen = (weights, u_public)
        record = IterationRecord(t + 1, float(np.linalg.norm(grad_w)),
                                 float(np.linalg.norm(weights)))
        history.append(record)
        if progress is not None and ((t + 1) % progress_every == 0 or t + 1 == iterations):
            progress(record)
    average = weight_sum / iterations
    output = (average, u_public_sum / iterations) if output_iteration is None else chosen
    shape = (public_features.shape[1], bounds.num_classes) if softmax else (dim,)
    return AdaptationResult(
        weights=output[0].reshape(shape), public_weights=output[1],
        average_weights=average.reshape(shape), last_weights=weights.reshape(shape),
        output_iteration=output_iteration, noise_plan=noise,
        step_sizes=step_sizes, history=history,
        privacy=federation.privacy_spent(report_delta),
    )


def _initial_weights(initial_weights: np.ndarray, size: int) -> np.ndarray:
    """A warm start w_0 (for the softmax cross-entropy W as (d, C) or flattened)."""
    weights = np.asarray(initial_weights, float)
    if weights.size != size:
        raise ValueError(f"initial_weights must hold {size} entries, got shape {weights.shape}")
    return weights.reshape(size)


def loss_smoothness(loss: Loss, bounds: DataBounds) -> float:
    """beta_w: smoothness in w of sum_i l_i / u_i, using sum_i 1/u_i <= 1 under the
    constraints (:func:`privadapt.common.losses.loss_smoothness`)."""
    return losses.loss_smoothness(loss, bounds.feature_norm, bounds.label_bound)


def curvature_step_sizes(
    objective: Objective,
    loss: Loss,
    hyper: ReweightingHyperparameters,
    bounds: DataBounds,
    num_public: int,
    num_private: int,
    scale: float = 1.0,
) -> StepSizes:
    """Per-block steps c/beta_block from the block bounds of the Hessian in the
    proof of Lemma 3 (Appendix D.1, eqs. (19)-(21)), each u block taken at its own
    lower bound lb (diagonal terms 2(B + d + l1)/lb^3 + 3 k2/lb^3, coupling terms
    (k2 + 2 kinf)/lb_min^3 + kinf mu/lb_min^4), and c = scale / (2 + kappa),
    kappa = ||K_pub||/sqrt(beta_w beta_pub) + ||K_priv||/sqrt(beta_w beta_priv)
    with ||K|| <= G alpha^2/m^(3/2), G (1-alpha)^2/n^(3/2) (eq. (21)), so that the
    block-rescaled Hessian has norm about 1. Our choice ("tuned"), not the paper's:
    its single step 1/beta leaves u nearly frozen, because u lives on the scale
    n while w lives on the scale 1."""
    loss_bound, gradient_bound = bounds.loss_and_gradient_bounds(loss)
    alpha = hyper.alpha
    lowers = (num_public / alpha, num_private / (1.0 - alpha))
    lowest = min(lowers)
    mu = hyper.mu if math.isfinite(hyper.mu) else 0.0
    sum_curvature = hyper.k1 if objective == "smooth" else 0.0  # F's k1 term is linear
    coupling = (hyper.k2 + 2.0 * hyper.kinf) / lowest**3 + hyper.kinf * mu / lowest**4
    betas = []
    for lower, offset in zip(lowers, (hyper.discrepancy, 0.0), strict=True):
        diagonal = 2.0 * (loss_bound + offset + sum_curvature) + 3.0 * hyper.k2
        betas.append(diagonal / lower**3 + coupling)
    beta_w = loss_smoothness(loss, bounds)
    cross = (gradient_bound * alpha**2 / num_public**1.5,
             gradient_bound * (1.0 - alpha) ** 2 / num_private**1.5)
    kappa = sum(k / math.sqrt(beta_w * b) for k, b in zip(cross, betas, strict=True))
    c = scale / (2.0 + kappa)
    return StepSizes(c / beta_w, c / betas[0], c / betas[1])


def choose_step_sizes(
    choice: str | StepSizes,
    *,
    paper: Callable[[], StepSizes],
    curvature: Callable[[], StepSizes],
    noise_aware: Callable[[bool], StepSizes],
) -> StepSizes:
    """``"noise_aware"``, ``"noise_aware_smooth"`` (``noise_aware(smooth)``),
    ``"paper"``, ``"curvature"`` or explicit ``StepSizes``."""
    if isinstance(choice, StepSizes):
        return choice
    if choice in ("noise_aware", "noise_aware_smooth"):
        return noise_aware(choice == "noise_aware_smooth")
    if choice == "paper":
        return paper()
    if choice == "curvature":
        return curvature()
    raise ValueError("step_sizes must be 'noise_aware', 'noise_aware_smooth', 'curvature', "
                     "'paper' or StepSizes, "
                     f"got {choice!r}")
