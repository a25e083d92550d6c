"""Differentially private Frank-Wolfe over an l1 ball (seed 002,
../shared/seeds/002_1280d45208a19d26.txt, Algorithm 2 "A_Noise-FW(polytope)";
Talwar, Thakurta and Zhang 2015, Algorithm 2).

The paper's pseudocode, with C = conv(S), S = {+-h e_j} the l1 ball of radius
h (||C||_1 = h) and L the mean loss with ||grad l(theta; d_i)||_inf <= L_1:

    1: theta_1 in C (here 0, the ball's centre)
    2: for t = 1 to T - 1:
    3:   alpha_s <- <s, grad L(theta_t; D)> + Lap(L_1 ||C||_1 sqrt(8 T log(1/delta)) / (n eps))
    4:   theta~_t <- argmin_s alpha_s
    5:   theta_{t+1} <- (1 - mu_t) theta_t + mu_t theta~_t,  mu_t = 2 / (t + 2)
    6: output theta_T

Here ``iterations`` counts the steps (the paper's T - 1), each one private
query. The loss is the squared loss (y - <theta, x>)^2 of linear regression
(logistic also works); L_1 is enforced by clipping each per-record gradient to
infinity norm C (``clip_norm``), so L_1 = C. The ball may be centred at a
public point c (theta = c + offset, offset in the ball): what transfer from
public sources needs (:mod:`.dp_fw_transfer`); c = 0 is the paper's case.

Sensitivity (derived in :mod:`privadapt.common.kernels.l1_vertex_scores`):
replacing one record moves each score <+-h e_j, grad L> by at most 2hC/n
(hC/n under add/remove); the sites work in sum units (times n), 2hC.

Two routes, one result without noise (``epsilon = inf``):

* ``"selection"`` (one data holder): line 3-4 at the site. It computes the 2d
  scores (``l1_vertex_scores``), adds Laplace noise of scale b itself and
  releases only the index (report-noisy-min, pure 2 Delta / b per step with
  Delta = 2hC plus the site's grid rounding). b is calibrated by the accountant
  so that the T selections compose to (epsilon, delta) (default), or is the
  paper's scale ``calibration="paper"``: b = C h sqrt(8 T log(1/delta)) /
  epsilon in sum units. Under the site's report-noisy-min charge
  (2 Delta / b with Delta = 2hC under replace-one) the paper's scale costs
  1.65 epsilon (T = 100) to 1.72 epsilon (T = 1,000) at delta = 1e-6 by the
  accountant: the per-step charge 2 Delta / b = 2 epsilon / sqrt(2 T
  log(1/delta)) is twice the per-step budget epsilon / sqrt(2 T log(1/delta))
  of advanced composition, and PLD composition recovers part of the factor.
  The ledger reports what the site charges.
* ``"secure_sum"`` (several sites; a selection cannot be made on summed scores
  without revealing them): the sites release the clipped gradient sum g by
  secure sum with distributed Gaussian noise (``linf_gradient``, L2
  sensitivity 2 sqrt(d) C under replace-one), accounted as the vector release
  it is (T Gaussians, multiplier calibrated by the accountant, or Bassily et
  al.'s closed form for ``"paper"``), and the coordinator selects
  argmin_s <s, g~> (post-processing).

Which wins (equal epsilon, delta): the selection's noise on each score is
b ~ 2hC sqrt(T log(1/delta)) / epsilon (a Laplace per score; the argmin errs
by about b log(2d)); the secure sum's is h sigma ~ 2hC sqrt(d) sqrt(T log(1/delta))
/ epsilon per score (Gaussian, the argmin errs by about h sigma sqrt(2 log(2d))).
So the single holder's selection is better by about sqrt(d) / sqrt(log d); the
number of sites does not change the secure sum's total noise (each adds a
share), only that the selection is unavailable once there are two.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from privadapt.common.accounting.calibration import (
    ReleasePlan,
    noise_multiplier,
    noise_scale,
    paper_closed_form,
)
from privadapt.common.federation import Federation, SitePrivacy
from privadapt.common.kernels.base import SIZING_RECORDS
from privadapt.common.kernels.grid_rounding import (
    COARSEST_FRACTIONAL_BITS,
)
from privadapt.common.kernels.l1_vertex_scores import (
    L1VertexScores,
    L1VertexScoresParams,
    scores_from_gradient,
    vertex,
)
from privadapt.common.kernels.linear_gradient import LinearGradientParams
from privadapt.common.kernels.linf_gradient import LinfGradient
from privadapt.common.losses import BinaryLoss
from privadapt.common.mechanisms import Adjacency, Mechanism, ReportNoisyMin
from privadapt.server.algorithms.gradient_descent.noisy_gd import paper_noise_multiplier

Calibration = Literal["accountant", "paper"]
Route = Literal["auto", "selection", "secure_sum"]
ROUTES = ("auto", "selection", "secure_sum")
SCORES = L1VertexScores()
GRADIENT = LinfGradient()


@dataclass(frozen=True)
class FrankWolfePlan:
    """What each of the T queries asks: the route, its mechanism, and the
    Laplace scale (selection) or Gaussian sigma (secure sum) on each score's
    gradient entry, in sum units (0 without noise)."""

    route: str
    mechanism: Mechanism
    noise_scale: float
    iterations: int


@dataclass
class FrankWolfeResult:
    """theta_T = centre + offset, the vertices chosen, and what it cost."""

    weights: np.ndarray
    offset: np.ndarray
    selected: list[int] = field(default_factory=list)
    plan: FrankWolfePlan | None = None
    privacy: dict[str, SitePrivacy] = field(default_factory=dict)


def resolve_route(route: str, num_sites: int, epsilon: float) -> str:
    """``"auto"``: the selection at a single holder, the secure sum across
    several; without noise (epsilon = inf) always the secure sum of
    ``linf_gradient`` (a selection is private or refused)."""
    if route not in ROUTES:
        raise ValueError(f"route must be one of {ROUTES}, got {route!r}")
    if math.isinf(epsilon):
        return "secure_sum"
    if route == "auto":
        return "selection" if num_sites == 1 else "secure_sum"
    if route == "selection" and num_sites != 1:
        raise ValueError(f"the selection route needs a single data holder, the federation "
                         f"has {num_sites} sites: use route='secure_sum'")
    return route


def unit_selection(multiplier: float) -> ReportNoisyMin:
    """One report-noisy-min step of score sensitivity 1 and scale z: its
    charge depends on b / Delta only, so z = b / Delta for any Delta."""
    return ReportNoisyMin(1.0, multiplier)


def selection_multiplier(epsilon: float, delta: float, iterations: int,
                         already_spent: tuple[Mechanism, ...] = ()) -> float:
    """z = b / Delta such that ``already_spent`` then T report-noisy-min
    selections of per-step epsilon 2 / z (whatever Delta: the charge depends
    on b / Delta only) compose to (epsilon, delta) under the site's accountant.
    Kept across calls (``ReleasePlan.reuse``): a pilot's charges recur across
    fits, and the search costs seconds."""
    return noise_multiplier(epsilon, delta, ReleasePlan(iterations, unit_selection,
                                                        already_spent=already_spent, reuse=True))


@paper_closed_form("dp_frank_wolfe_selection")
def selection_paper_scale(epsilon: float, delta: float, iterations: int, *,
                          clip_norm: float, radius: float) -> float:
    """The paper's Laplace scale of a selection step, in sum units:
    b = C h sqrt(8 T log(1/delta)) / epsilon (module docstring)."""
    return clip_norm * radius * math.sqrt(8 * iterations * math.log(1 / delta)) / epsilon


def planned_score_sensitivity(params: L1VertexScoresParams, max_records: int) -> float:
    """Delta as a site on the coarsest grid charges it (replace-one, sized for
    ``max_records``): 2hC plus the grid step and float errors, the same public
    bounds the site's admission adds (``score_rounding_charged``)."""
    (charged,) = set(SCORES.charged_score_sensitivities(
        params, Adjacency.REPLACE_ONE, params.dim, COARSEST_FRACTIONAL_BITS, max_records))
    return charged


def plan_queries(
    *, route: str, dim: int, radius: float, clip_norm: float, epsilon: float, delta: float,
    iterations: int, calibration: Calibration, num_records: int,
    already_spent: Sequence[Mechanism] = (),
) -> FrankWolfePlan:
    """The one mechanism every step uses (module docstring). With the
    accountant, ``already_spent`` (this job's earlier releases, e.g. a pilot)
    is composed first, so that everything together meets (epsilon, delta)."""
    if calibration not in ("accountant", "paper"):
        raise ValueError(f"calibration must be 'accountant' or 'paper', got {calibration!r}")
    gradient_params = LinearGradientParams(np.zeros(dim), "squared", clip_norm)
    if math.isinf(epsilon):
        mechanism = GRADIENT.mechanism(gradient_params, math.inf, Adjacency.REPLACE_ONE, dim=dim)
        return FrankWolfePlan("secure_sum", mechanism, 0.0, iterations)
    if route == "selection":
        params = L1VertexScoresParams(np.zeros(dim), radius, clip_norm)
        sensitivity = planned_score_sensitivity(params, max(num_records, 1))
        plan = ReleasePlan(iterations, unit_selection, already_spent=tuple(already_spent),
                           reuse=True, paper=functools.partial(
                               selection_paper_scale, clip_norm=clip_norm, radius=radius))
        scale = noise_scale(epsilon, delta, plan, sensitivity, calibration=calibration)
        return FrankWolfePlan(route, ReportNoisyMin(sensitivity, scale), scale, iterations)

    def gaussian(multiplier: float) -> Mechanism:
        return GRADIENT.mechanism(gradient_params, multiplier, Adjacency.REPLACE_ONE, dim=dim,
                                  max_records=max(num_records, SIZING_RECORDS))

    multiplier = noise_multiplier(epsilon, delta, ReleasePlan(
        iterations, gaussian, already_spent=tuple(already_spent), paper=paper_noise_multiplier),
        calibration=calibration)
    mechanism = gaussian(multiplier)
    return FrankWolfePlan(route, mechanism, float(mechanism.noise_scales[0]), iterations)


def select_vertex(
    federation: Federation, plan: FrankWolfePlan, *, center: np.ndarray | None,
    offset: np.ndarray, radius: float, clip_norm: float, loss: BinaryLoss,
) -> int:
    """Lines 3-4: the index of the (noisy) best vertex at theta = center + offset."""
    if plan.route == "selection":
        params = L1VertexScoresParams(offset, radius, clip_norm, loss, center)
        return federation.select(SCORES.name, params.to_wire(), plan.mechanism).index
    point = offset if center is None else center + offset
    params = LinearGradientParams(point, loss, clip_norm)
    answer = federation.query(GRADIENT.name, params.to_wire(), plan.mechanism)
    return int(np.argmin(scores_from_gradient(answer.value, radius)))


def frank_wolfe_step(offset: np.ndarray, chosen: np.ndarray, iteration: int,
                     radius: float) -> np.ndarray:
    """Line 5 with mu_t = 2 / (t + 2), kept inside the ball against rounding."""
    mu = 2.0 / (iteration + 2.0)
    offset = (1.0 - mu) * offset + mu * chosen
    norm = math.fsum(np.abs(offset))
    return offset * (radius / norm) if norm > radius else offset


def dp_frank_wolfe(
    federation: Federation,
    *,
    dim: int,
    radius: float,
    clip_norm: float,
    epsilon: float,
    delta: float,
    iterations: int,
    loss: BinaryLoss,
    calibration: Calibration,
    route: Route,
    center: np.ndarray | None = None,
    already_spent: Sequence[Mechanism] = (),
    progress: Callable[[int, np.ndarray], None] | None = None,
) -> FrankWolfeResult:
    """Fit theta = center + offset, ||offset||_1 <= ``radius``, on the
    federation's private records (module docstring); ``progress`` gets
    (iteration, theta) after every step. ``already_spent``: this job's
    earlier releases, composed first so the whole job meets (epsilon, delta).
    The values arrive checked: :class:`~.estimators.DPFrankWolfe` and
    :class:`~.estimators.DPFrankWolfeTransfer` validate them at fit."""
    chosen_route = resolve_route(route, federation.num_sites, epsilon)
    plan = plan_queries(route=chosen_route, dim=dim, radius=radius, clip_norm=clip_norm,
                        epsilon=epsilon, delta=delta, iterations=iterations,
                        calibration=calibration, already_spent=already_spent,
                        num_records=sum(federation.site_sizes.values()))
    center = None if center is None else np.asarray(center, dtype=float)
    offset = np.zeros(dim)
    selected: list[int] = []
    for iteration in range(1, iterations + 1):
        index = select_vertex(federation, plan, center=center, offset=offset, radius=radius,
                              clip_norm=clip_norm, loss=loss)
        selected.append(index)
        offset = frank_wolfe_step(offset, vertex(index, dim, radius), iteration, radius)
        if progress is not None:
            progress(iteration, offset if center is None else center + offset)
    weights = offset if center is None else center + offset
    return FrankWolfeResult(weights, offset, selected, plan,
                            federation.privacy_spent(None if math.isinf(epsilon) else delta))
