"""Private grid search over the norm of the unknown minimiser (seed 004,
../shared/seeds/004_2b354816f00c2aef.txt, Algorithm 1 and its Theorem, in its
federated form), and what the package runs by default instead of its
selection score: see "Selection" below.

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

Free models and offsets around the public model (with a public source).
The doubling grid B_j = 2^j starts from the zero model, and at the norm
bounds of a real task its guesses are worse than what the coordinator fits
for free (experiments/results/GAIN_STUDY.md, 4.4: the zero model chosen in
every run of a classification shift, accuracy below the majority class).
When the coordinator has a public source, the candidates are therefore

* the free models: the source-only model w_src (``fit_linear`` on the
  public source) and, where the source has an intercept column, the public
  constant (its majority class, resp. mean label, predicted everywhere);
  public, trained on no private record;
* the guesses as offsets around w_src (seed 002's theta = w_src + delta):
  rho_j = 2^(j - K) ||w_src||, j = 1..K, guess j in the ball
  ||w - w_src|| <= rho_j. ONE model is trained, in the largest ball, at the
  whole training budget (epsilon / 2, delta / 2): the learner started at
  w_src with its own norm bound ||w_src|| + rho_K (the ball around 0 that
  holds the ball around w_src), its model then projected onto
  ||w - w_src|| <= rho_K; the other guesses are free projections of it,
  w_src + Proj_{rho_j}(w - w_src), post-processing of one release sequence
  (the prototype ``[shrink3]`` of experiments/gain_prototype.py: 0.56 of the
  gain against 0.12 for five trained guesses at epsilon 10, 4.4). A learner
  that projects each iterate onto the ball around w_src itself would fit the
  offsets a little better; the learners' projections are around 0 today.

Every guess's loss bound is that of its ball's norm bound (||w_src|| + rho_j);
the free models are scored privately with their own bounds (their losses on
S2 are not public). Without a public source the grid is seed 004's, with the
zero model (public score Y^2 n) as candidate 0 and the K guesses each
trained at (epsilon / 2K, delta / 2K).

Selection (grid_selection.py). ``score="penalised"`` is the paper's GEM on
the penalised clipped losses below. Its clipped loss orders the candidates
as their true loss only where the clip never bites, and it keeps no
baseline: on a heavy-tailed target it delivered the public constant, 4.4x
source-only's error (GAIN_STUDY.md, 3a). ``score="paired"`` (the estimator's
default for the squared loss) scores each candidate by its clipped loss
difference to candidate 0 (the source-only model, or the zero model without
a public source) and keeps candidate 0 unless another is certified better
at confidence beta (private_selection.py's paired score and
``safe_argmin``); ``score="error"`` (the default for the logistic loss
where a public source gives a free model other than 0) scores validation
errors and delivers a guess only when certified better than every free
model (error_selection.py); both at the same (epsilon / 2,
delta / 2) on S2. The rest of this docstring is the paper's score.

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

Re-planned before any release (``grid_plan.py``). A site refuses noise too
coarse for the federation's fixed-point grid (default 2^-32: a standard
deviation up to about 2^20 / reach,
:func:`privadapt.common.noise.floating.max_grid_safe_noise`), and the largest
guess's sigma_K = z Delta(B_K) grows like 4^K: at K = 5, epsilon 1 such a
refusal came at query 205, after 0.48 of epsilon 1 had been charged. So the
whole search first runs on stand-ins (server/federation/planning.py), every
planned release's noise is compared with the grid of the federation's codec,
and the largest guesses are dropped until every selection release fits
(``dropped``); a training release the grid cannot carry (no guess to drop
changes it) refuses the fit before the first charge, naming the release.

Budget by joint calibration (``composition`` "pld" or "rdp"): the release
sequence is data-independent (T and K' fixed, every sensitivity from the
public bounds, the selection's answer used only after it), so the training
and selection budgets are scaled together by the factor c that the sites'
own accountant composes to the whole epsilon (server/algorithms/
joint_calibration.py), where basic composition left about half of epsilon
unspent. ``"basic"``: c = 1, the split above. It needs the sites' public
sizes (replace-one); a search given ``num_validation_records`` (add/remove
sites, private sizes) runs its split as planned, without stand-ins.

epsilon = inf: no noise anywhere (simulation sites only); the choice is the
least score.

What the sites see as S1 and S2: two federations over disjoint records
(``train_federation``, ``validation_federation``), e.g. each site's records
split once at random; the coordinator cannot split a site's records itself.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privadapt.common.federation import Federation, SitePrivacy
from privadapt.common.kernels.validation_loss import ValidationLoss
from privadapt.common.losses import loss_bounds
from privadapt.common.numerics.geometry import project_to_ball
from privadapt.server.algorithms.base import PrivateEstimator, clone, parts_of_one_job
from privadapt.server.algorithms.model_selection.grid_plan import (
    GuessGrid,
    calibrate,
    fit_grid,
)
from privadapt.server.algorithms.model_selection.grid_selection import (
    select_at_the_site,
    select_errors,
    select_on_noisy_sums,
    select_paired,
)
from privadapt.server.algorithms.model_selection.private_selection import resolve_method
from privadapt.server.algorithms.step_privacy import report_delta

KERNEL = ValidationLoss()
GRID_LOSSES = ("squared", "logistic")
# The names of the free candidates (GridSearchResult.names); guesses are "guess <j>".
ZERO, SOURCE_ONLY, PUBLIC_CONSTANT = "zero", "source_only", "public_constant"


@dataclass
class GridSearchResult:
    """The chosen model (``best_index`` into ``candidates``: the free models
    first, then the kept guesses) and everything the choice was made from."""

    weights: np.ndarray
    best_index: int
    radii: np.ndarray  # (K,): every guess's radius (2^j, or rho_j around w_src)
    guesses: np.ndarray  # the guess number j (1..K) of each guess candidate
    candidates: np.ndarray  # (F + K', d): free models, then the kept guesses
    names: list[str]
    loss_bounds: np.ndarray  # Delta of each candidate (0 for the zero model)
    penalties: np.ndarray  # n tau of each, or the zero model's public score
    learners: list[PrivateEstimator]
    num_validation_records: int
    method: str
    dropped: tuple[int, ...] = ()  # guess numbers j the grid could not carry
    budget_scale: float = 1.0
    noisy_sums: np.ndarray | None = None  # secure sum only: s~ (nan for public ones)
    noise_stds: np.ndarray | None = None
    estimates: np.ndarray | None = None  # paired: each one's mean difference to candidate 0
    train_privacy: dict[str, SitePrivacy] = field(default_factory=dict)
    validation_privacy: dict[str, SitePrivacy] = field(default_factory=dict)

    @property
    def num_free(self) -> int:
        return len(self.names) - len(self.guesses)


@dataclass(frozen=True)
class SearchSettings:
    """The search's public settings, as :func:`private_grid_search` takes them."""

    learner: PrivateEstimator
    loss: str
    label_bound: float
    feature_bound: float
    beta: float
    method: str
    num_validation_records: int | None
    free: Mapping[str, np.ndarray]  # name -> public model, in candidate order
    fit_options: Mapping[str, Any]
    guess_params: Sequence[Mapping[str, Any]] | None
    score: str  # "paired", "error" or "penalised" (module docstring)
    public_arrays: tuple[np.ndarray, np.ndarray] | None  # the public source's (X, y)


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
                     fit_options: Mapping[str, Any],
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


def train_offsets(train_federation: Federation, learner: PrivateEstimator, grid: GuessGrid,
                  epsilon: float, delta: float, fit_options: Mapping[str, Any],
                  guess_params: Mapping[str, Any] | None) -> tuple[PrivateEstimator,
                                                                   np.ndarray]:
    """The one trained model of the offset grid (module docstring) at
    (epsilon/2, delta/2), started at the center; returns it and the kept
    guesses, its offset projected onto each rho_j (post-processing)."""
    center = grid.center
    assert center is not None
    model = clone(learner)
    options = dict(fit_options)
    if "center" in model.get_params():
        # Noisy GD descends in the largest ball itself, around the public
        # model, and delivers its tail average (ball GD, noisy_gd.py: the
        # same releases and epsilon as from zero).
        model.set_params(center=center, radius=float(grid.radii[grid.kept[-1]]),
                         average="tail", epsilon=epsilon / 2, delta=delta / 2,
                         **(guess_params or {}))
    else:
        model.set_params(radius=float(grid.norm_bounds()[-1]), epsilon=epsilon / 2,
                         delta=delta / 2, **(guess_params or {}))
        if options.get("initial_weights") is None:
            options["initial_weights"] = center
    model.fit(train_federation, **options)
    offset = np.asarray(model.coef_, dtype=float) - center
    guesses = np.stack([center + project_to_ball(offset, float(grid.radii[j]))
                        for j in grid.kept])
    return model, guesses


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
    constant_model: np.ndarray | None = None,
    offsets: bool = False,
    composition: str = "basic",
    score: str = "penalised",
    public_arrays: tuple[np.ndarray, np.ndarray] | None = None,
    fit_options: dict[str, Any] | None = None,
    guess_params: Sequence[Mapping[str, Any]] | None = None,
    name: str = "PrivateGridSearch",
) -> GridSearchResult:
    """Algorithm 1 (module docstring): K guesses trained on ``train_federation``
    (S1), selected on ``validation_federation`` (S2), (epsilon, delta)-DP.
    ``source_model`` and ``constant_model``: the free models (public), which
    lead the candidates; with ``offsets`` the guesses are balls around the
    source model (one trained, the rest its projections), else seed 004's
    balls around 0 (the zero model leads when there is no free model).
    ``num_validation_records``: a public n of S2 for the penalties and the
    zero model's score, for sites whose sizes are private (add/remove
    adjacency); default the federation's public site sizes. A wrong n costs
    accuracy only: n is a public parameter of the selection. ``guess_params``:
    per guess, more hyperparameters of its clone (e.g. its own site-side chain
    for a learner with per-job state at the sites, so K descents share a job).
    ``composition``: "basic" (the split as planned) or the accountant of the
    joint calibration ("pld", "rdp"). ``score``: "penalised" (the paper's
    GEM on penalised clipped losses) or "paired" (differences to candidate
    0, clips chosen privately from ``public_arrays``, the public source's
    (features, labels), or without them the worst-case clips Delta_j). The values arrive checked:
    :class:`~.grid_search.PrivateGridSearch` validates them at fit. Raises
    ``QueryRefusedError`` before any release when the grid cannot carry the
    plan (module docstring)."""
    free = {}
    if source_model is not None:
        free[SOURCE_ONLY] = np.asarray(source_model, dtype=float)
    if constant_model is not None:
        free[PUBLIC_CONSTANT] = np.asarray(constant_model, dtype=float)
    settings = SearchSettings(learner, loss, label_bound, feature_bound, beta, method,
                              num_validation_records, free, fit_options or {}, guess_params,
                              score, public_arrays)
    grid = GuessGrid.doubling(num_guesses, free[SOURCE_ONLY] if offsets else None)
    scale = 1.0
    planned = math.isfinite(epsilon) and num_validation_records is None
    if planned:
        def run(train: Federation, validation: Federation, plan: GuessGrid,
                factor: float) -> GridSearchResult:
            quiet = dataclasses.replace(settings, fit_options={
                key: value for key, value in settings.fit_options.items()
                if key not in ("progress", "checkpoint")})
            return run_search(train, validation, plan, quiet, epsilon * factor, delta)

        grid = fit_grid(run, train_federation, validation_federation, grid, name)
        if composition != "basic" and delta > 0:
            scale = calibrate(run, train_federation, validation_federation, grid, epsilon,
                              delta, composition).scale
    result = run_search(train_federation, validation_federation, grid, settings,
                        epsilon * scale, delta)
    result.budget_scale = scale
    return result



def run_search(train_federation: Federation, validation_federation: Federation,
               grid: GuessGrid, settings: SearchSettings, epsilon: float,
               delta: float) -> GridSearchResult:
    """Train and select at (epsilon, delta) (basic composition; the joint
    calibration passes scaled budgets): every release the search makes, in
    order, on the sites or on stand-ins."""
    method = resolve_method(settings.method, validation_federation.num_sites, epsilon, None)
    kept = list(grid.kept)
    if grid.center is None:
        params = ([settings.guess_params[j] for j in kept] if settings.guess_params
                  else None)
        learners = train_candidates(train_federation, settings.learner, grid.radii[kept],
                                    epsilon, delta, settings.fit_options, params)
        guesses = np.stack([np.asarray(m.coef_, dtype=float) for m in learners])
    else:
        largest = settings.guess_params[kept[-1]] if settings.guess_params else None
        learner, guesses = train_offsets(train_federation, settings.learner, grid, epsilon,
                                         delta, settings.fit_options, largest)
        learners = [learner]
    n = (int(sum(validation_federation.site_sizes.values()))
         if settings.num_validation_records is None else int(settings.num_validation_records))
    free = dict(settings.free) or {ZERO: np.zeros(guesses.shape[1])}
    candidates = np.stack([*free.values(), *guesses])
    bounds, penalties = _scores_setup(settings, free, grid, n, len(kept))
    result = GridSearchResult(
        weights=candidates[0], best_index=0, radii=grid.radii,
        guesses=np.asarray(kept, dtype=int) + 1, candidates=candidates,
        names=[*free, *(f"guess {j + 1}" for j in kept)], loss_bounds=bounds,
        penalties=penalties, learners=learners, num_validation_records=n, method=method,
        dropped=tuple(j + 1 for j in range(len(grid.radii)) if j not in grid.kept))
    if settings.score == "error":
        choice = select_errors(validation_federation, candidates, len(free), epsilon, delta,
                               settings.beta, settings.method)
    elif settings.score == "paired":
        choice = select_paired(validation_federation, candidates, bounds, settings.loss,
                               epsilon, delta, settings.beta, settings.method,
                               settings.public_arrays)
    elif method == "exponential":
        choice = select_at_the_site(validation_federation, candidates, bounds, penalties,
                                    settings.loss, epsilon, settings.beta)
    else:
        choice = select_on_noisy_sums(validation_federation, candidates, bounds, penalties,
                                      settings.loss, epsilon, delta, settings.beta)
    # A guess whose ball holds the trained model is that same model; their
    # scores differ only by the release's rounding, so the choice names the
    # first (smallest ball) of the identical ones (post-processing).
    result.best_index = next(k for k in range(len(candidates))
                             if np.array_equal(candidates[k], candidates[choice.best_index]))
    result.method = choice.method
    result.noisy_sums, result.noise_stds = choice.noisy_sums, choice.noise_stds
    result.estimates = choice.estimates
    result.validation_privacy = choice.privacy
    result.weights = candidates[result.best_index]
    result.train_privacy = train_federation.privacy_spent(
        None if math.isinf(epsilon) else report_delta(delta / 2))
    return result


def _scores_setup(settings: SearchSettings, free: Mapping[str, np.ndarray], grid: GuessGrid,
                  n: int, num_guesses: int) -> tuple[np.ndarray, np.ndarray]:
    """Each candidate's loss bound Delta and penalty n tau (module docstring):
    the zero model's bound is 0 and its penalty its public score Y^2 n."""
    def bound(norm: float) -> float:
        return loss_bound(settings.loss, norm, settings.feature_bound, settings.label_bound)

    zero_bound = bound(0.0)
    bounds, penalties = [], []
    for name, model in free.items():
        if name == ZERO:
            bounds.append(0.0)
            penalties.append(zero_bound * n)
            continue
        bounds.append(bound(float(np.linalg.norm(model))))
        penalties.append(penalty(bounds[-1], zero_bound, n, num_guesses, settings.beta))
    for norm in grid.norm_bounds():
        bounds.append(bound(float(norm)))
        penalties.append(penalty(bounds[-1], zero_bound, n, num_guesses, settings.beta))
    return np.asarray(bounds), np.asarray(penalties)
