"""SelectedAdaptation: the job-level "select" step: no hand-picked method.

One job trains a few named private learners on one part of each site's
records, fits the source-only model for free on the public source, and
delivers the one a single private release of clipped validation losses on
the other part prefers (seed 004, ../shared/seeds/004_2b354816f00c2aef.txt,
Algorithm 1 with the candidates being different learners instead of
different norm guesses, and Appendix E's confidence boosting, whose
report-noisy-max over chunks is the same shape; the release and its
derivation are ``server/algorithms/model_selection/private_selection.py``).

Budget plan. With ``selection_share`` s, M named private candidates and a
scale c (below):

* each candidate learner: (c (1 - s) epsilon / M, (1 - s) delta / M),
  trained on ``train_federation`` (its noise calibrated to exactly that);
* the selection: (c s epsilon, s delta), one release on ``validation_federation``;
* the free candidates, (0, 0): they read only public data. Candidate 0 is
  the source-only model; candidate 1, with ``constant_candidate`` (default)
  and whenever the public source has an intercept column, the public
  constant (candidates.py: the public source's majority label,
  resp. mean label, predicted everywhere; under the error score not where
  it is 0, a public source with no majority label, whose errors the
  release cannot count: error_selection.counts_errors).

A candidate may carry settings (``"pncnvx_adap_smooth:alpha=0.2"``,
candidates.py): a grid of the job's other hyperparameters is M such
candidates, each with its share and its own privacy line (``candidate_privacy_``).

``composition="basic"`` (c = 1, the plan before joint calibration, kept
bit for bit): the M + 1 budgets add up to (epsilon, delta), so by sequential
composition (Dwork and Roth 2014, Thm. 3.16) the job is (epsilon, delta)-DP;
the ledgers' PLD total came to 0.57 epsilon (epsilon 1, two candidates).

``composition="pld"`` (default; "rdp" for sites whose ledgers account by
RDP): c is the largest factor found for which the job's releases at c,
composed by the ledgers' own accountant (replace-one), give at most epsilon
at the job's delta and at least 0.99 epsilon (``calibrate_scale`` on runs
of this fit on stand-ins, the planning of ``launch --dry-run``; c depends on
public values only, so it costs nothing). Its soundness (joint_calibration.py)
needs a data-independent release sequence, which this job has: noisy GD runs
its fixed T; an adapter's T ("auto") is a function of (epsilon_i, delta_i,
the public n, d); every noise multiplier comes from (epsilon_i, delta_i, T),
every sensitivity from the public clipping, ``loss_bound`` and part sizes;
the free candidates and the candidate list (settings included) are public;
the selection's answer is used only after it. So the sites' run repeats the
plan release for release (the tests compare every ledger with it), and the
job is (epsilon_total, delta)-DP with epsilon_total <= epsilon. Replace-one
only: the job reads the sites' public sizes, which a federation refuses for
a site accounting under add/remove.

Either way, the two parts holding disjoint records would allow parallel
composition (max instead of sum); it is not used, so the plan is sound even
if a site's parts overlap. The index chosen, ``coef_`` and every fitted
attribute are post-processing of these releases and of public data.

The score (``selection_score``, default "auto": "error" for the logistic
loss, "paired" for the squared one).

"error" (a classifier's default; error_selection.py derives it and says
why): one release of the candidates' validation error counts at the whole
selection budget; a learned candidate is delivered only when certified
fewer errors than every free model (source-only and, where it is a
candidate, the public constant, the majority label), else the free model
of fewer noisy errors. With probability >= 1 - beta the delivered model
is then never worse on the validation records than the better free model
by more than the release's resolution (``selection_resolution_``), and
never worse at all when it is learned: the promise a user who judges a
classifier by accuracy needs (experiments/results/GAIN_STUDY.md 11.4, 12).

"paired" (a regression's default): the release scores each other
candidate's per-record loss
difference to the source-only model (the reference), clipped to its own
C_k and divided by it; C_k is chosen privately on the validation records by
a histogram release at 30% of the selection's noise budget, the paired
release takes the other 70%, and the two compose to exactly the one Gaussian
release at the selection's (epsilon, delta) (private_selection.py derives
both). Why: the clipped loss min(l, L) scores L for every
candidate on a record whose loss exceeds L, so on a heavy-tailed target it
ranks by the bulk of the records and, even without noise, delivered the
public constant at 4.4x source-only's MSE where the paired score delivers
the model of least unclipped loss (experiments/results/GAIN_STUDY.md, 3a and
4.1). The rule: keep source-only unless a candidate's upper confidence bound
on its clipped mean difference to it is below 0, then the least estimate
among those (``safe_argmin``): with probability >= 1 - beta over the noise
the delivered model's clipped mean loss difference to source-only on the
validation records is <= 0, the promise below in paired form. The public
constant stays a candidate like any other there. "loss" stays selectable;
the paragraphs on the margin m describe it.

Too small to certify (paired score). The paired release resolves a mean
difference of rho_sel C_k per record, rho_sel = t 2 sqrt(K') z_sel / n_val
(t = sqrt(2 log(max(K', 2) / beta)), K' the candidates other than
source-only, z_sel the paired release's noise multiplier after the joint
calibration, n_val the public number of validation records): public. A mean
difference above C_k / 4 is rare when C_k is a 98th percentile of |d|, so
with rho_sel > 1/4 the job could deliver only a free model: ``fit`` then
releases nothing at all (no training, no selection), delivers source-only
and says so in ``warning_`` (GAIN_STUDY.md 4.3 rule 3, 4.6: diabetes, 24
validation records, below epsilon about 30). ``launch --dry-run`` runs the
same ``fit`` on stand-ins, so it plans no release either.

Utility with the clipped loss (never worse than the free baseline). Candidate 0 is
the source-only model and ``baseline_confidence`` beta keeps it unless
another candidate's noisy loss sum is below it by the margin
m = 2 sigma sqrt(2 log(K / beta)) (private_selection.py, the Gaussian tail
and a union bound over the K candidates' noises): with probability >= 1 - beta
over the selection's noise, the delivered model's clipped mean loss on the
validation records is no larger than the source-only model's. Since the
candidates are fitted on the other part, the validation records are an
independent sample for them, and by Hoeffding's inequality over the K
candidates the clipped population loss differs from the validation mean by at
most L sqrt(log(2K / beta) / (2 n_val)) for each, with probability >= 1 - beta:
with probability >= 1 - 2 beta the delivered model's clipped population loss
exceeds source-only's by at most 2 L sqrt(log(2K / beta) / (2 n_val)). Seed
004's Theorem 1 gets a variance-sensitive (Bernstein) version of this step
and its Eq. for tau_j; the plain bound suffices here. The price is that an
improvement smaller than m / n_val on the validation mean is not taken: at
small n or epsilon the job delivers the source-only model, as it should.

Two free candidates (clipped loss). K counts every candidate, so the above
holds as stated with the public constant among them; it gets a weaker
promise of its own: when all K noises are within m / 2 (probability >= 1 -
2 beta), the delivered model's clipped validation mean is within 2 m / n_val
of the constant's (s~_j <= s~_k for the one delivered, or s~_0 <= s~_best +
m). The error score certifies against both instead (above). The constant
is on by default because it costs no privacy; its price is utility, one
more noisy entry (candidates.py says why its confidence is the public
log-odds).

The clip L (``loss_bound``, "auto" by default: a quantile of the free
model's public losses, so public) is derived in candidates.py.

``selection_share`` "auto" (default) spends the budget where it pays:
s = 0.25, or s = 0.5 where at 0.25 the release could only certify a
difference coarser than 0.05 per record: 0.05 clips for the paired score
(rho_sel, "Too small to certify" above), 0.05 in error rate (5 points of
accuracy) for the error score (error_selection.error_resolution), from
the public validation size, the number of candidates, epsilon and delta.
Why: the default candidate (ball GD started at source-only) moves from a
good place and gains little from a larger training share, while the
selection's resolution is what keeps a real gain from being certified at
small epsilon. Measured (experiments/gain_study.py, 3 splits, gain
captured at epsilon 1 / 10): Adult education 0.30 / 0.99 at s = 0.25 and
0.77 / 1.01 at 0.5, Adult marital 0.83 / 1.00 and 0.96 / 1.00, but the
heavy-tailed regression 0 / 0.87 and 0 / 0.75: hence a rule, not one
number. The threshold is 0.05, not 0.1, so that the share does not fall
back to 0.25 between epsilon 1 and 3 on Adult (a smaller gain at the larger
epsilon: at 3 the ball model's clip is 2.4 and at 0.25 its gain of 0.13
was not certified, its shrunk copy's was). With
the clipped-loss scores (the adapters' measurements,
experiments/adapter_study.py) 0.25 was chosen: at 0.1 the selection kept
the source-only model at epsilon 1 where the adapter was 40 points more
accurate; at 0.5 the candidates' smaller budgets cost accuracy.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from privadapt.common.accounting.accountant import AccountingMethod
from privadapt.common.federation import Federation
from privadapt.server.algorithms.base import (
    CALIBRATION_PARAMETER,
    DELTA,
    EPSILON,
    FLAG,
    ITERATIONS,
    NON_NEGATIVE,
    POSITIVE,
    VALIDATION_FRACTION_PARAMETER,
    Constraints,
    Interval,
    Options,
    PrivateEstimator,
    PublicSource,
    fit_context,
    hyperparameter,
    record_parts,
    require_public_arrays,
)
from privadapt.server.algorithms.gradient_descent.estimators import NoisyGD
from privadapt.server.algorithms.joint_calibration import (
    JointCalibration,
    calibrate_scale,
    stand_in,
)
from privadapt.server.algorithms.linear_model import LinearModelMixin
from privadapt.server.algorithms.model_selection.candidates import (
    BALL_GD,
    CANDIDATE_IDS,
    DEFAULT_CANDIDATES,
    PUBLIC_CONSTANT,
    SOURCE_ONLY,
    CandidateList,
    CandidateSpec,
    auto_loss_bound,
    ball_center,
    candidate_learner,
    candidate_models,
    parse_candidates,
    public_constant_model,
)
from privadapt.server.algorithms.model_selection.error_selection import (
    check_error_score,
    error_resolution,
    error_scored_constant,
    error_selection,
    resolve_score,
)
from privadapt.server.algorithms.model_selection.private_selection import (
    SelectionResult,
    paired_resolution,
    private_selection,
)
from privadapt.server.algorithms.public_erm import fit_linear
from privadapt.server.algorithms.step_privacy import charges_so_far, report_delta, step_epsilon

# composition -> the accountant the joint calibration composes with (module docstring).
COMPOSITIONS = {"pld": AccountingMethod.PLD, "rdp": AccountingMethod.RDP}
# The paired score's clips and the share of the selection that chooses them
# (private_selection.py; GAIN_STUDY.md 4.1: private clips keep the order at
# epsilon 10 on the heavy tail where public ones lose it).
PAIRED_CLIPS = "private"
HISTOGRAM_SHARE = 0.3
# Above this rho_sel the paired release cannot certify a realistic gain
# (module docstring, "Too small to certify"): release nothing.
MAX_RESOLUTION = 0.25
# selection_share="auto": the first share, or the second where the first
# leaves the paired release a resolution coarser than WIDE_RESOLUTION clips
# per record (module docstring, "Budget plan").
SELECTION_SHARES = (0.25, 0.5)
WIDE_RESOLUTION = 0.05


class SelectedAdaptation(LinearModelMixin, PrivateEstimator):
    """Train named private candidates, privately keep the best or the free
    source-only model (module docstring: plan, guarantee, utility).

    Hyperparameters: the learning problem (``loss`` "logistic" or "squared",
    ``radius`` of the ball, ``clip_norm``, ``iterations`` and
    ``learning_rate`` of noisy GD; ``feature_norm``, ``label_bound``,
    ``alpha``, ``penalty`` (the adapters' l1 = l2 = linf, resp. k1 = k2 =
    kinf), ``mu``, ``step_scale`` and ``adapter_iterations`` ("auto" or T) of
    the reweighting adapters), ``candidates`` (names from
    :data:`CANDIDATE_IDS`, comma-separated), ``epsilon`` and ``delta`` (the
    whole job's budget), ``selection_share``, ``loss_bound`` L (each
    validation loss is clipped to [0, L]; "auto": the 95th percentile of
    the source-only model's losses on the public source, module
    docstring), ``baseline_confidence`` beta,
    ``calibration`` and ``seed`` (the adapters' coordinator randomness),
    ``composition`` ("pld", "rdp" or "basic": how the sub-budgets are
    sized, module docstring), ``constant_candidate`` (the free public
    constant as candidate 1 when the public source has an intercept),
    ``selection_score`` ("error", for classifiers: validation errors,
    certified against every free model; "paired": clipped loss differences
    to source-only with private clips; "loss": clipped validation losses;
    "auto" (default): "error" for the logistic loss, "paired" for the
    squared one; module docstring). With "paired" or "error"
    ``loss_bound`` is unused; the guarantee is on the 0-1 loss for "error",
    on the loss otherwise.

    Fitted: ``selection_score_`` (what the release scored), ``coef_`` (the
    delivered model), ``chosen_`` (its name, with
    its settings as the job wrote them), ``candidate_names_`` (the free ones
    first: source_only, then public_constant if present), ``candidate_learners_``
    (each one's id in CANDIDATE_IDS), ``best_index_`` (into them),
    ``candidates_`` (their coefficients, stacked), ``learners_`` (the fitted
    private candidates), ``noisy_losses_`` (noisy mean clipped validation
    losses; for "paired" the noisy mean clipped differences to source-only,
    0 for it; None if the site selected itself or nothing was released),
    ``selection_clips_`` ("paired": the clips C_k, 0 for source-only, else
    None), ``selection_resolution_`` (the least difference the release
    certifies: rho_sel for "paired", planned; for "error" the error rate
    t sqrt(2) sigma / n from the noise std sigma the release carried
    (``margin_`` / n); 0 for "loss"),
    ``warning_`` (None, or why nothing was released), ``margin_`` (for
    "paired": t sigma on the normalised sums), ``budget_plan_``
    (name -> planned (epsilon, delta), "selection" included, at the scale
    ``budget_scale_``), ``joint_calibration_`` (the
    :class:`~.joint_calibration.JointCalibration`: the scale, the planned
    releases and their composed epsilon; None for "basic" or without noise),
    ``loss_bound_`` (the L used; None for "paired"), ``candidate_privacy_`` (name -> each
    site's epsilon for that step's releases at its planned delta, from the
    site's ledger view),
    ``train_privacy_`` (the sites' job spend after training) and ``privacy_``
    (after the selection: the whole job when both federations charge the
    same ledgers and job, as record parts of one job do)."""

    requires_public_source = True

    loss: str = hyperparameter([Options("logistic", "squared")])
    radius: float = hyperparameter(POSITIVE)
    epsilon: float = hyperparameter(EPSILON)
    delta: float = hyperparameter(DELTA)
    clip_norm: float = hyperparameter(POSITIVE, default=1.0)
    iterations: int = hyperparameter(ITERATIONS, default=100)
    learning_rate: float = hyperparameter(POSITIVE, default=1.0)
    feature_norm: float = hyperparameter(POSITIVE, default=1.0)
    label_bound: float = hyperparameter(POSITIVE, default=1.0)
    alpha: float = hyperparameter([Interval(float, 0, 1, closed="neither")], default=0.5)
    penalty: float = hyperparameter(NON_NEGATIVE, default=0.0)
    mu: float = hyperparameter(POSITIVE, default=100.0)
    step_scale: float = hyperparameter(POSITIVE, default=1.0)
    adapter_iterations: int | str = hyperparameter([*ITERATIONS, Options("auto")],
                                                   default="auto")
    candidates: str = hyperparameter([CandidateList()], default=DEFAULT_CANDIDATES)
    loss_bound: float | str = hyperparameter([*POSITIVE, Options("auto")], default="auto")
    selection_share: float | str = hyperparameter(
        [Interval(float, 0, 1, closed="neither"), Options("auto")], default="auto")
    baseline_confidence: float | None = hyperparameter(
        [Interval(float, 0, 1, closed="neither"), None], default=0.1)
    calibration: str = CALIBRATION_PARAMETER
    seed: int | None = hyperparameter([Interval(int, 0, math.inf, closed="left"), None],
                                      default=None)
    validation_fraction: float = VALIDATION_FRACTION_PARAMETER
    composition: str = hyperparameter([Options("pld", "rdp", "basic")], default="pld")
    constant_candidate: bool = hyperparameter(FLAG, default=True)
    selection_score: str = hyperparameter([Options("auto", "paired", "loss", "error")],
                                          default="auto")

    def _prediction_loss(self) -> str:
        return self.loss

    def budget_plan(self, scale: float = 1.0) -> dict[str, tuple[float, float]]:
        """name -> (epsilon, delta) of each step (module docstring), every
        epsilon times ``scale``; at scale 1 they add up to the job's (epsilon,
        delta) (the "basic" plan). Without noise (epsilon = inf) every step is
        (inf, 0)."""
        names = [spec.name for spec in parse_candidates(self.candidates, self.loss)]
        if math.isinf(self.epsilon):
            return {**{name: (math.inf, 0.0) for name in names}, "selection": (math.inf, 0.0)}
        selection = self._share()
        share = (1.0 - selection) / len(names)
        plan = {name: (scale * share * self.epsilon, share * self.delta) for name in names}
        plan["selection"] = (scale * selection * self.epsilon, selection * self.delta)
        return plan

    def _share(self) -> float:
        """The selection's share: the hyperparameter, or with "auto" the one
        ``fit`` chose (the first of SELECTION_SHARES before it)."""
        if self.selection_share != "auto":
            return float(self.selection_share)
        return getattr(self, "selection_share_", SELECTION_SHARES[0])

    def _auto_share(self, validation_federation: Federation, context: _Context) -> float:
        """selection_share="auto" (module docstring, "Budget plan"): the first
        of SELECTION_SHARES unless the paired release's resolution at it, from
        public values only, is coarser than WIDE_RESOLUTION."""
        if self.selection_share != "auto":
            return float(self.selection_share)
        if self.selection_score_ == "loss" or math.isinf(self.epsilon):
            return SELECTION_SHARES[0]
        first = SELECTION_SHARES[0]
        resolution = self._resolution(validation_federation, context,
                                      {"selection": (first * self.epsilon, first * self.delta)})
        return first if resolution <= WIDE_RESOLUTION else SELECTION_SHARES[1]

    @fit_context(prefer_skip_nested_validation=True)
    def fit(
        self,
        train_federation: Federation,
        validation_federation: Federation | None = None,
        public_source: PublicSource | None = None,
    ) -> SelectedAdaptation:
        """Fit the source-only model on ``public_source`` (required), every
        named candidate on ``train_federation`` and select on
        ``validation_federation``: records other than the training ones. When
        it is not given (a networked job), the two are the "train" and
        "validation" record parts of the one federation given, split at
        ``validation_fraction`` under the job id as salt
        (common/data/record_parts.py: each site splits its own records by a
        content hash; the coordinator never learns which record is where).
        With ``composition`` "pld" or "rdp" the budgets are first calibrated
        jointly on stand-ins of the two (module docstring); nothing is asked
        of the sites until then."""
        name = type(self).__name__
        specs = parse_candidates(self.candidates, self.loss, name)
        if validation_federation is None:
            train_federation, validation_federation = record_parts(
                train_federation, self.validation_fraction, name)
        features, labels = require_public_arrays(public_source, name)
        # The free candidates: public data only.
        free = {SOURCE_ONLY: fit_linear(features, labels, self.loss, self.radius)}
        self.selection_score_ = self._score()
        constant = (public_constant_model(features, labels, self.loss, self.radius,
                                          getattr(public_source, "feature_names", None))
                    if self.constant_candidate else None)
        if self.selection_score_ == "error":
            constant = error_scored_constant(name, free[SOURCE_ONLY], constant)
        if constant is not None:
            free[PUBLIC_CONSTANT] = constant
        loss_bound = self.loss_bound
        if self.selection_score_ == "error":
            loss_bound = 1.0  # each record scores its error, in [0, 1] (error_scored)
        elif self.selection_score_ == "paired":
            loss_bound = None  # the clips are chosen by the selection itself
        elif loss_bound == "auto":
            loss_bound = auto_loss_bound(self.loss, free[SOURCE_ONLY], features, labels)
        # A ball candidate without a ball is refused before any release, not
        # after the candidates before it were trained and charged.
        for spec in specs:
            if spec.learner == BALL_GD:
                ball_center(spec, free[SOURCE_ONLY])
        context = _Context(specs, free, public_source, loss_bound, (features, labels))
        self.selection_share_ = self._auto_share(validation_federation, context)
        calibration = None
        if self.composition in COMPOSITIONS and math.isfinite(self.epsilon) and self.delta > 0:
            calibration = self._calibrate(train_federation, validation_federation, context)
        plan = self.budget_plan(1.0 if calibration is None else calibration.scale)
        self.loss_bound_ = loss_bound
        self.budget_plan_ = plan
        self.budget_scale_ = 1.0 if calibration is None else calibration.scale
        self.joint_calibration_ = calibration
        self.n_features_in_ = features.shape[1]
        self.selection_resolution_ = self._resolution(validation_federation, context, plan)
        self.warning_ = None
        if self.selection_score_ == "paired" and self.selection_resolution_ > MAX_RESOLUTION:
            return self._deliver_source_only(validation_federation, free)
        run = self._train_and_select(train_federation, validation_federation, context, plan)
        self.candidate_names_ = [*free, *(name for spec in specs for name in spec.model_names)]
        self.candidate_learners_ = [*free, *(spec.learner for spec in specs
                                             for _ in spec.model_names)]
        self.candidates_ = run.coefficients
        self.learners_ = run.learners
        self.best_index_ = run.result.best_index
        self.chosen_ = self.candidate_names_[run.result.best_index]
        self.coef_ = run.coefficients[run.result.best_index]
        self.noisy_losses_ = (None if run.result.noisy_loss_sums is None
                              else run.result.noisy_loss_sums / run.result.num_records)
        self.selection_clips_ = run.result.clips
        self.margin_ = run.result.margin
        if self.selection_score_ == "error" and run.result.noisy_loss_sums is not None:
            # The noise the release carried, not the calibrated one: collusion
            # tolerance widens it by AggregateAnswer.noise_std_factor.
            self.selection_resolution_ = run.result.margin / max(run.result.num_records, 1)
        self.num_validation_records_ = run.result.num_records
        self.selection_method_ = run.result.method
        self.candidate_privacy_ = run.privacy
        self.train_privacy_ = run.train_privacy
        self.privacy_ = validation_federation.privacy_spent(report_delta(self.delta))
        return self

    def _resolution(self, validation_federation: Federation, context: _Context,
                    plan: Mapping[str, tuple[float, float]]) -> float:
        """The selection release's resolution from public values only:
        rho_sel of the paired release (module docstring, "Too small to
        certify"), the error-rate resolution of the error score
        (error_selection.py); 0 for the clipped loss."""
        if self.selection_score_ == "loss":
            return 0.0
        epsilon, delta = plan["selection"]
        records = sum(validation_federation.site_sizes.values())
        # Every scored entry: a ball candidate's shrunk copy is one more.
        others = len(context.free) - 1 + sum(len(spec.model_names) for spec in context.specs)
        if self.selection_score_ == "error":
            return error_resolution(others + 1, len(context.free), records, epsilon, delta,
                                    self.baseline_confidence)
        return paired_resolution(others, records, epsilon, delta, clips=PAIRED_CLIPS,
                                 histogram_share=HISTOGRAM_SHARE,
                                 confidence=self.baseline_confidence)

    def _deliver_source_only(self, validation_federation: Federation,
                             free: dict[str, np.ndarray]) -> SelectedAdaptation:
        """No release at all: the free source-only model, and a warning that
        says why (module docstring, "Too small to certify")."""
        self.warning_ = (
            f"{type(self).__name__}: the selection could certify only a mean paired "
            f"difference of {self.selection_resolution_:.3g} clips per record (more than "
            f"{MAX_RESOLUTION:g}) at this epsilon and number of validation records; nothing "
            "was released and the free source-only model is delivered")
        warnings.warn(self.warning_, stacklevel=3)
        self.candidate_names_ = list(free)
        self.candidate_learners_ = list(free)
        self.candidates_ = np.stack(list(free.values()))
        self.learners_ = {}
        self.best_index_ = 0
        self.chosen_ = SOURCE_ONLY
        self.coef_ = free[SOURCE_ONLY]
        self.noisy_losses_ = None
        self.selection_clips_ = None
        self.margin_ = math.nan
        self.num_validation_records_ = sum(validation_federation.site_sizes.values())
        self.selection_method_ = "none"
        self.candidate_privacy_ = {}
        self.privacy_ = validation_federation.privacy_spent(report_delta(self.delta))
        self.train_privacy_ = self.privacy_
        return self

    def _validate_params(self, checked: Mapping[str, Constraints] | None = None) -> None:
        """The candidate list first (its message names the bad candidate or
        setting, and whether it suits the loss; ``launch`` and ``--dry-run``
        call this), then every constraint."""
        if isinstance(self.candidates, str) and isinstance(self.loss, str):
            parse_candidates(self.candidates, self.loss, type(self).__name__)
        super()._validate_params(checked)

    def _check_together(self) -> None:
        super()._check_together()
        check_error_score(type(self).__name__, self.selection_score, self.loss)

    def _score(self) -> str:
        """What the selection release scores: ``selection_score`` with
        "auto" resolved (module docstring, "The score")."""
        return resolve_score(self.selection_score, self.loss)

    def _calibrate(self, train_federation: Federation, validation_federation: Federation,
                   context: _Context) -> JointCalibration:
        """The joint calibration of this job's budgets: this same fit, at each
        scale tried, on stand-ins of the two federations (module docstring)."""
        def releases_at(scale: float) -> list:
            train_recorder, train_view = stand_in(train_federation)
            validation_recorder, validation_view = stand_in(validation_federation)
            self._train_and_select(train_view, validation_view, context,
                                   self.budget_plan(scale))
            return [*train_recorder.releases, *validation_recorder.releases]

        return calibrate_scale(releases_at, epsilon=self.epsilon, delta=self.delta,
                               dim=train_federation.dim,
                               method=COMPOSITIONS[self.composition])

    def _train_and_select(self, train_federation: Federation,
                          validation_federation: Federation, context: _Context,
                          plan: Mapping[str, tuple[float, float]]) -> _Run:
        """Every candidate trained at its planned budget, then the selection:
        the job's releases, in order (on the sites, or on stand-ins)."""
        settings = self.get_params()
        learners, privacy = {}, {}
        for spec in context.specs:
            epsilon, delta = plan[spec.name]
            before = charges_so_far(train_federation)
            learner = candidate_learner(spec, settings, epsilon, delta,
                                        center=context.free[SOURCE_ONLY])
            if isinstance(learner, NoisyGD):
                learner.fit(train_federation, context.public_source)
            else:
                learner.fit(train_federation, context.public_source,
                            initial_weights=context.free[SOURCE_ONLY])
            learners[spec.name] = learner
            privacy[spec.name] = step_epsilon(train_federation, before, delta)
        train_privacy = train_federation.privacy_spent(report_delta(self.delta))
        epsilon, delta = plan["selection"]
        before = charges_so_far(validation_federation)
        source_only = context.free[SOURCE_ONLY]
        coefficients = np.stack([*context.free.values(), *(
            model for spec in context.specs
            for model in candidate_models(spec, learners[spec.name].coef_, source_only))])
        if self._score() == "paired":
            # Source-only (candidate 0) is the reference; the index is into
            # [reference, *others], the order of ``coefficients``.
            result = private_selection(
                validation_federation, candidates=coefficients[1:], loss=self.loss,
                epsilon=epsilon, delta=delta, baseline_confidence=self.baseline_confidence,
                method="auto", reference=coefficients[0], clips=PAIRED_CLIPS,
                histogram_share=HISTOGRAM_SHARE, public_source=context.public)
        elif self._score() == "error":
            result = error_selection(
                validation_federation, candidates=coefficients, num_free=len(context.free),
                epsilon=epsilon, delta=delta, baseline_confidence=self.baseline_confidence)
        else:
            result = private_selection(
                validation_federation, candidates=coefficients, loss=self.loss,
                loss_bound=context.loss_bound, epsilon=epsilon, delta=delta,
                baseline_confidence=self.baseline_confidence, method="auto")
        privacy["selection"] = step_epsilon(validation_federation, before, delta)
        return _Run(learners, coefficients, result, privacy, train_privacy)

    def model_arrays(self) -> dict[str, np.ndarray]:
        """weights (the delivered model), candidates (all K, source-only first),
        candidate_ids (each candidate's position in :data:`CANDIDATE_IDS`:
        the wire carries numbers, not names), best_index (into candidates) and
        chosen_id (the delivered one's position in CANDIDATE_IDS), the
        noisy mean validation losses when they left the sites, and, when
        nothing was released (``warning_``), selection_resolution: the
        rho_sel that stopped the job (the result carries numbers only)."""
        self._check_is_fitted()
        ids = [CANDIDATE_IDS.index(n) for n in self.candidate_learners_]
        model = {"weights": self.coef_, "candidates": self.candidates_,
                 "candidate_ids": np.asarray(ids, dtype=np.int64),
                 "best_index": np.asarray(self.best_index_, dtype=np.int64),
                 "chosen_id": np.asarray(ids[self.best_index_], dtype=np.int64)}
        if self.noisy_losses_ is not None:
            model["noisy_losses"] = np.asarray(self.noisy_losses_, dtype=float)
        if self.warning_ is not None:
            model["selection_resolution"] = np.asarray(self.selection_resolution_, dtype=float)
        return model


@dataclass(frozen=True)
class _Context:
    """What every run of the job shares: public, computed once per fit."""

    specs: list[CandidateSpec]
    free: dict[str, np.ndarray]  # the free candidates by name, source-only first
    public_source: PublicSource
    loss_bound: float | None  # None for the paired score (its clips are the selection's)
    public: tuple[np.ndarray, np.ndarray]  # the public source's (features, labels)


@dataclass(frozen=True)
class _Run:
    """One run's fitted candidates, selection and privacy lines."""

    learners: dict[str, PrivateEstimator]
    coefficients: np.ndarray
    result: SelectionResult
    privacy: dict[str, dict[str, float]]
    train_privacy: dict

