"""Private grid search over the norm of the unknown minimiser (seed 004,
../shared/seeds/004_2b354816f00c2aef.txt, Algorithm 1 and its Theorem, in its
federated form).

The algorithm. For guesses B_j = 2^j, j = 1..K, of ||w*||, a DP learner A
(any estimator with a ``radius`` hyperparameter: the ball it returns a model
in) is trained on the first part S1 of the private data at (epsilon / 2K,
delta / 2K) each: w_j = A(S1, B_j). Each w_j is scored on the second part S2
(n records) by its penalised validation loss

    L~_j = L(w_j; S2) + tau_j,
    tau_j = Delta(B_j) log(4K / beta) / n + sqrt(4 Y^2 log(4K / beta) / n),

and the generalized exponential mechanism (GEM, Raskhodnikova and Smith 2016;
:class:`~privadapt.common.mechanisms.GeneralizedExponentialMechanism`) at
epsilon / 2 and confidence beta / 4 picks j* among the sensitivity/score
pairs (0, Y^2), (Delta(B_1), L~_1), ..., (Delta(B_K), L~_K); candidate 0 is
the zero model w_0 = 0, whose loss is at most Y^2 whatever the record.

Reconstructed from the OCR. (a) Algorithm 1's line 7 prints log(K / beta) in
tau_j, the accuracy proof defines tau_j with log(4K / beta) ("the term added to
each L(w_j; S2) in Algorithm 1") and needs it for its union bound (Bernstein
at beta / 2K per guess): we use log(4K / beta). (b) The algorithm passes
sensitivity Delta(B_j) with the *mean* loss L(w_j; S2), whose sensitivity is
Delta(B_j) / n; the proof's GEM error term 4 Delta log(4K/beta) / (n epsilon)
is the one of the mean with sensitivity Delta / n. We work with sums: the
scores are n L~_j = sum_i min(l(w_j; z_i), Delta(B_j)) + n tau_j with
sensitivity Delta(B_j), which GEM treats exactly as the means with Delta / n
(its normalised scores are invariant under scaling scores and sensitivities
together). (c) Delta(B): Assumption 1 asks for a bound on |l(A(S1, B); z)|
over S2; for a learner that returns a model in the ball of radius B (noisy
projected GD) and records ||x|| <= r, |y| <= Y it is the loss bound of the
ball, (B r + Y)^2 for the squared loss and log(1 + exp(B r Y)) for the
logistic one (:func:`privadapt.common.losses.loss_bounds`; the paper's
Y^2 + H B^2 r^2 is the same bound for an H-smooth loss, up to constants).
Clipping each loss at Delta(B_j) makes it hold for every record, so the
sensitivity is sound even for records outside the norm bounds (the paper
instead needs Assumption 1's failure probability inside delta). (d) "Y^2"
is the zero model's loss bound: for the logistic loss we use its value,
log 2 (exact for every record), in the pair for candidate 0 and in tau's
variance term.

The zero model, or the free source-only model. The pair (0, Y^2 n) is public:
the kernel scores it with loss bound 0 (the constant 0, sensitivity 0) and
the public offset Y^2 n. If the coordinator gives a model ``source_model``
fitted for free on its public source, it takes candidate 0's place: its loss
on S2 is not public, so it is scored like the guesses, clipped at
Delta(||w_src||) and penalised by tau of that bound; its sensitivity is
Delta(||w_src||) (it never touched private data, so its training costs
nothing, but its score does, inside the same selection).

Privacy. Training: K runs at (epsilon / 2K, delta / 2K) on S1, (epsilon / 2,
delta / 2) by basic composition (the sites' accountant composes them, usually
tighter). Selection, touching S2 only:

* One data holder (``method="exponential"``, ``"auto"`` at one site): the
  site runs GEM on its K + 1 penalised sums (``select``, only the index leaves
  it), pure epsilon / 2-DP. Sequential composition: (epsilon, delta / 2).
* Several sites (``method="secure_sum"``): GEM's input would be the sum over
  sites, which no site holds. Each guess's clipped sum s_j is released by the
  secure sum with Gaussian noise sigma_j = z Delta(B_j) (one query per guess,
  so each is noised in proportion to its own sensitivity, as GEM weighs it),
  z calibrated by the accountant so that the K Gaussian releases together are
  exactly (epsilon / 2, delta / 2)-DP; the penalties, candidate 0's public
  score and the choice are post-processing: (epsilon, delta) in all.
  Choice (GEM's scoring on the noisy sums): j* = argmin_j (s~_j + n tau_j +
  t sigma_j), t = sqrt(2 log(8 K' / beta)) for the K' noisy candidates. With
  probability >= 1 - beta / 4 every |s~_j - s_j| <= t sigma_j (Gaussian tail
  P(|N(0, s^2)| > t s) <= 2 exp(-t^2 / 2) = beta / 4K', union bound), and then
  q_{j*} <= s~_{j*} + n tau_{j*} + t sigma_{j*} <= s~_j + n tau_j + t sigma_j
  <= q_j + 2 t sigma_j for every j, with q_j = n L~_j: GEM's guarantee
  q_{j*} <= min_j (q_j + 4 Delta_j log(N / beta') / epsilon') with its
  4 log / epsilon' replaced by 2 t z. The rest of the Theorem's proof (which
  only uses this inequality and tau) goes through unchanged.

Grid limit (several sites): a site refuses noise too coarse for the
federation's fixed-point grid (default 2^-32: a standard deviation up to about
2^20 / reach, :func:`privadapt.common.noise.floating.max_grid_safe_noise`); the largest
guess's sigma_K = z Delta(2^K) grows like 4^K, so pick K with it in range
(squared loss, r = 1, Y = 5: K <= 5) or a coarser grid.

What the sites see as S1 and S2: two federations over disjoint records
(``train_federation``, ``validation_federation``), e.g. each site's records
split once at random; the coordinator cannot split a site's records itself.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privadapt.common.accounting.calibration import ReleasePlan, noise_multiplier
from privadapt.common.federation import Federation, SitePrivacy
from privadapt.common.kernels.validation_loss import ValidationLoss, ValidationLossParams
from privadapt.common.losses import loss_bounds
from privadapt.common.mechanisms import Adjacency, GeneralizedExponentialMechanism
from privadapt.server.algorithms.base import PrivateEstimator, clone, parts_of_one_job
from privadapt.server.algorithms.model_selection.private_selection import resolve_method

KERNEL = ValidationLoss()
GRID_LOSSES = ("squared", "logistic")


@dataclass
class GridSearchResult:
    """The chosen model (index 0: the zero or source model; j >= 1: guess B_j)
    and everything the choice was made from."""

    weights: np.ndarray
    best_index: int
    radii: np.ndarray  # (K,): B_1..B_K
    candidates: np.ndarray  # (K + 1, d)
    loss_bounds: np.ndarray  # (K + 1,): Delta of each candidate (0 for the zero model)
    penalties: np.ndarray  # (K + 1,): n tau_j, or candidate 0's public score
    learners: list[PrivateEstimator]
    num_validation_records: int
    method: str
    noisy_sums: np.ndarray | None = None  # secure sum only: s~_j (nan for public ones)
    noise_stds: np.ndarray | None = None
    train_privacy: dict[str, SitePrivacy] = field(default_factory=dict)
    validation_privacy: dict[str, SitePrivacy] = field(default_factory=dict)


def loss_bound(loss: str, radius: float, feature_bound: float, label_bound: float) -> float:
    """Delta(B): the loss of a model of norm <= B on ||x|| <= r, |y| <= Y."""
    return loss_bounds(loss, feature_bound, label_bound, radius)[0]


def penalty(bound: float, zero_bound: float, num_records: int, num_guesses: int,
            beta: float) -> float:
    """n tau_j for a candidate of loss bound Delta_j (module docstring, with
    Y^2 the zero model's loss bound): Delta_j log(4K/beta) + sqrt(4 Y^2 n log(4K/beta))."""
    log_term = math.log(4 * num_guesses / beta)
    return bound * log_term + math.sqrt(4 * zero_bound * num_records * log_term)


def train_candidates(train_federation: Federation, learner: PrivateEstimator,
                     radii: np.ndarray, epsilon: float, delta: float,
                     fit_options: dict[str, Any],
                     guess_params: Sequence[Mapping[str, Any]] | None = None,
                     ) -> list[PrivateEstimator]:
    """w_j = A(S1, B_j): the learner cloned per guess at (epsilon/2K, delta/2K),
    with ``guess_params[j]`` (when given) set on clone j too."""
    share = len(radii) * 2
    fitted = []
    with parts_of_one_job():  # the K learners are one job's, on one federation
        for j, radius in enumerate(radii):
            model = clone(learner)
            model.set_params(radius=float(radius), epsilon=epsilon / share, delta=delta / share,
                             **(guess_params[j] if guess_params else {}))
            fitted.append(model.fit(train_federation, **fit_options))
    return fitted


def private_grid_search(
    train_federation: Federation,
    validation_federation: Federation,
    *,
    num_guesses: int,
    learner: PrivateEstimator,
    loss: str,
    label_bound: float,
    feature_bound: float,
    epsilon: float,
    delta: float,
    beta: float,
    method: str,
    num_validation_records: int | None,
    source_model: np.ndarray | None = None,
    fit_options: dict[str, Any] | None = None,
    guess_params: Sequence[Mapping[str, Any]] | None = None,
) -> GridSearchResult:
    """Algorithm 1 (module docstring): K guesses trained on ``train_federation``
    (S1), selected on ``validation_federation`` (S2), (epsilon, delta)-DP.
    ``num_validation_records``: a public n of S2 for the penalties and the
    zero model's score, for sites whose sizes are private (add/remove
    adjacency); default the federation's public site sizes. A wrong n costs
    accuracy only: n is a public parameter of the selection. ``guess_params``:
    per guess, more hyperparameters of its clone (e.g. its own site-side chain
    for a learner with per-job state at the sites, so K descents share a job).
    The values arrive checked: :class:`~.grid_search.PrivateGridSearch`
    validates them at fit."""
    method = resolve_method(method, validation_federation.num_sites, epsilon, None)
    radii = 2.0 ** np.arange(1, num_guesses + 1)
    learners = train_candidates(train_federation, learner, radii, epsilon, delta,
                                fit_options or {}, guess_params)
    weights = [np.asarray(m.coef_, dtype=float) for m in learners]
    dim = weights[0].shape[0]
    n = (int(sum(validation_federation.site_sizes.values())) if num_validation_records is None
         else int(num_validation_records))
    zero_bound = loss_bound(loss, 0.0, feature_bound, label_bound)
    bounds = [loss_bound(loss, float(b), feature_bound, label_bound) for b in radii]
    if source_model is None:
        first, first_bound = np.zeros(dim), 0.0
        first_penalty = zero_bound * n  # the public score of the zero model
    else:
        first = np.asarray(source_model, dtype=float)
        first_bound = loss_bound(loss, float(np.linalg.norm(first)), feature_bound, label_bound)
        first_penalty = penalty(first_bound, zero_bound, n, num_guesses, beta)
    candidates = np.stack([first, *weights])
    all_bounds = np.array([first_bound, *bounds])
    penalties = np.array([first_penalty,
                          *(penalty(b, zero_bound, n, num_guesses, beta) for b in bounds)])
    result = GridSearchResult(
        weights=first, best_index=0, radii=radii, candidates=candidates,
        loss_bounds=all_bounds, penalties=penalties, learners=learners,
        num_validation_records=n, method=method)
    if method == "exponential":
        _select_at_the_site(validation_federation, result, loss, epsilon, beta)
    else:
        _select_on_noisy_sums(validation_federation, result, loss, epsilon, delta, beta)
    result.weights = candidates[result.best_index]
    result.train_privacy = train_federation.privacy_spent(delta / 2)
    return result


def _select_at_the_site(federation: Federation, result: GridSearchResult, loss: str,
                        epsilon: float, beta: float) -> None:
    """GEM at epsilon/2, beta/4 run by the single site on its penalised sums."""
    params = ValidationLossParams(result.candidates, loss, result.loss_bounds,
                                  result.penalties)
    mechanism = GeneralizedExponentialMechanism(
        tuple(float(b) for b in result.loss_bounds), epsilon / 2, beta / 4, minimize=True)
    answer = federation.select(KERNEL.name, params.to_wire(), mechanism)
    result.best_index = answer.index
    result.validation_privacy = federation.privacy_spent(None)  # pure: delta unused


def _select_on_noisy_sums(federation: Federation, result: GridSearchResult, loss: str,
                          epsilon: float, delta: float, beta: float) -> None:
    """One secure-sum Gaussian release per data-dependent candidate, noise in
    proportion to its own bound, calibrated to (epsilon/2, delta/2) together;
    the choice is post-processing (module docstring)."""
    noisy_rows = np.flatnonzero(result.loss_bounds > 0)
    multiplier = noise_multiplier(epsilon / 2, delta / 2, ReleasePlan(len(noisy_rows)))
    sums = np.full(len(result.candidates), np.nan)
    stds = np.zeros(len(result.candidates))
    dim = result.candidates.shape[1]
    for row in noisy_rows:
        params = ValidationLossParams(result.candidates[row:row + 1], loss,
                                      float(result.loss_bounds[row]))
        mechanism = KERNEL.mechanism(params, multiplier, Adjacency.REPLACE_ONE, dim=dim)
        answer = federation.query(KERNEL.name, params.to_wire(), mechanism)
        sums[row] = float(np.asarray(answer.value, dtype=float)[0])
        stds[row] = float(mechanism.noise_scales[0])
    confidence = math.sqrt(2 * math.log(8 * len(noisy_rows) / beta))
    scores = np.where(np.isnan(sums), 0.0, sums) + result.penalties + confidence * stds
    result.best_index = int(np.argmin(scores))
    result.noisy_sums, result.noise_stds = sums, stds
    result.validation_privacy = federation.privacy_spent(delta / 2)
