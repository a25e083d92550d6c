"""ConfidenceBoosting: one private model per site, the best chosen privately
(seed 004, ../shared/seeds/004_2b354816f00c2aef.txt, Appendix E, "Boosting",
in its federated form).

The paper splits one sample S into chunks S_1..S_{m+1}, runs a DP learner A
on each of S_1..S_m alone, and picks among the m models by report-noisy-max
of their negated empirical risks on the held-out chunk S_{m+1}. In a
federation the chunks are already there: the sites. Here

* site k trains one model w_k with ``learner`` (noisy GD or output
  perturbation) on the "train"
  record part of its own records only, through a one-site view of the job
  (:class:`privadapt.common.federation.OneSiteView`: per-site releases asked
  of site k alone, charged to site k's ledger only); noisy GD runs in the
  ball ||w - w_0|| <= ``radius_factor`` ||w_0|| around the source-only model
  w_0, started there and tail-averaged (ball GD, seed 002's offset; its
  privacy is plain noisy GD's, noisy_gd.py), or with ``radius_factor`` None
  from zero in the ball ``radius`` as the paper's learner;
* the free source-only model w_0 (the ball-constrained ERM on the public
  source, ``server/algorithms/public_erm.py``; it reads no private record) is
  always a candidate, and candidate 0;
* the other candidates (``combine``): with "select", the paper's, the K
  per-site models w_1..w_K; with "average" (default), their average
  w_avg = sum_k (n_k / n) w_k (the sites' public sizes) and, for ball GD,
  its copy shrunk to the ball of radius 1/4 ||w_0|| around w_0 (section
  "Averaged" below);
* for a classifier, the public constant (the source's majority label;
  ``constant_candidate`` "auto") as candidate 1, free like w_0;
* one private selection among the free models and those candidates on the
  "validation" record parts of every site: by default for a classifier the
  error score (``server/algorithms/model_selection/error_selection.py``:
  one Gaussian release of every candidate's validation error count, a
  learned candidate delivered only when certified better than both free
  models, else the free one of fewer noisy errors), for a regression the
  paired score (``private_selection.py``: each w_k's validation loss minus
  w_0's, clipped at clips a histogram release chooses, then one Gaussian
  release of the K sums over all sites, secure sum, the two composing to
  one release at the selection's budget); with ``selection_score="loss"``
  seed 004's K + 1 clipped validation-loss sums, and with a single site and
  no baseline margin the site runs the exponential mechanism itself. The paper's
  Laplace report-noisy-max on one chunk becomes this release because a
  held-out "chunk" here is spread over all sites, whose scores must be
  summed before an argmax; the Gaussian release is the secure sum's form of
  the same selection.

Privacy, per site (replace-one, as each site's policy states; the record
parts' own argument, common/data/record_parts.py, turns a release on a part into
a release on the site's whole data at the larger of the part's add/remove
and replace-one sensitivities, which is what the site charges). Fix a site
k and two neighbouring datasets of its own, D_k ~ D_k'; the other sites'
records are the same in both worlds. Then:

* w_j for j != k is computed from site j's records only: its distribution is
  the same in both worlds (it does not depend on D_k at all: cost 0 to site
  k). This is parallel composition across sites: every record lives at one
  site, so only the one model trained where it lives sees it.
* w_k is (epsilon_t, delta_t)-DP in D_k: noisy GD calibrated to exactly
  that budget (``server/algorithms/gradient_descent/noisy_gd.py``), or output perturbation's
  one release calibrated to it (``server/algorithms/output_perturbation/perturbed_erm.py``).
* the selection, for any fixed candidates, is (epsilon_s, delta_s)-DP in the
  union of the validation parts, hence in D_k; it takes w_k as an input, an
  adaptive choice, which sequential composition (Dwork and Roth 2014,
  Thm. 3.16, which holds for adaptively chosen mechanisms) covers.
* the average of the released models, its shrunk copy (functions of the
  w_k and of the public sizes and w_0), the index chosen, ``coef_`` and
  every fitted attribute are post-processing.

So the job is (epsilon_t + epsilon_s, delta_t + delta_s)-DP for the records of
every site k, with (epsilon_t, delta_t) = ((1 - s) epsilon, (1 - s) delta) and
(epsilon_s, delta_s) = (s epsilon, s delta) at ``selection_share`` s: the plan
adds up to the job's (epsilon, delta) at every site, and site k's ledger
holds exactly its own T gradient releases plus the one selection release
(composed there with the PLD accountant, which comes out below the plan's
basic composition). Compared with training every candidate on every site
(``SelectedAdaptation``, where M candidates share (1 - s) epsilon), each
per-site model gets the whole training budget: the chunks are disjoint.

What this buys (Appendix E, Theorem E.1, sketched): the chosen model's risk
is within the selection's noise of the best per-site model's and of the
source-only model's; the paper's point is a high-probability bound from
learners whose guarantee holds in expectation. With ``baseline_confidence``
beta the selection keeps a free model unless a learned one beats it
clearly, so with probability 1 - beta a regression's delivered model has
a paired loss difference to source-only of at most 0 on the validation
records, and a classifier's makes fewer validation errors than every free
model when it is learned, and otherwise at most the release's resolution
more than the better of source-only and the majority label
(error_selection.py): the majority label may be delivered with up to
that many more errors than source-only. The price: each model sees
one site's records only, so with many small sites each candidate is noisy;
it pays where one site is large, or where the sites' distributions differ
and one of them resembles the target.

Why the ball (GAIN_STUDY.md 4.4, ``[boost]``, 3 splits, gain captured at
epsilon 1 / 3 / 10 / inf): a third of the records per model made noisy GD
from zero worse than source-only at every finite epsilon on the regressions
(heavy tail 0 / 0 / 0 / 0.48); per-site ball GD at ``radius_factor`` 0.25
captured 0 / 0 / 0.48 / 0.92 there, 0.21 / 0.51 / 0.86 / 0.99 on the
synthetic shift and 0.49 / 0.84 / 0.99 / 1.0 on Adult education (today
0 / 0.08 / 0.44 / 0.85), but less on Adult marital at epsilon 1-3 (0.38 /
0.72 against 0.76 / 0.89), where source-only is far from the target's
optimum and a small ball keeps the models near it.

Averaged (``combine="average"``, the default). Each per-site model sees
n_k of the n training records, so its noise (the gradient noise over a sum
of n_k clipped terms) is n / n_k times a pooled model's at the same
budget: on the heavy-tailed row of GAIN_STUDY.md (500 training records a
site, epsilon 10) the best of the three per-site models in the 0.25 ball
captured 0.05 / 0.56 / 0.48 of the gain in three splits even when chosen
non-privately (**non-private oracle**), and the paired selection among the
three certified none (each gain of about 0.0013 per record against a
certified margin of about as much: three entries, t sigma sqrt(3)). The
average of the K models is post-processing of what the sites released, so
free, and better than choosing one of them in two ways: (1) for a convex
loss l(sum_k a_k w_k; z) <= sum_k a_k l(w_k; z) on every record z (Jensen,
a_k = n_k / n), so its loss, and its paired difference to w_0, is at most
the sites' weighted mean on every record, never worse than the typical
site's model; (2) the sites' training noises are independent, so the
average's is sqrt(sum a_k^2) of one site's, 1/sqrt(K) for equal sites,
which lets a larger ball pay: per-site models in the ball of radius ||w_0||
were worse than source-only one by one on the heavy tail (1.0-1.5 times its
MSE) while their average captured 0.56 / 0.85 / 0.21. Hence the default
radius factor 1 and the average with its shrunk copy (the copy keeps a gain
where the whole offset is too noisy, as in SelectedAdaptation's default
candidate): two selection entries instead of K. The paper's selection among
the per-site models (Appendix E) stays available as ``combine="select"``; it
is the better choice where one site resembles the target and the others do
not (the average then mixes them).
"""

from __future__ import annotations

import inspect
import math

import numpy as np

from privadapt.common.accounting.accountant import epsilon_spent
from privadapt.common.data.record_parts import TRAIN, RecordPart
from privadapt.common.federation import Federation, OneSiteView, SitePrivacy
from privadapt.server.algorithms.base import (
    CALIBRATION_PARAMETER,
    DELTA,
    EPSILON,
    FLAG,
    ITERATIONS,
    POSITIVE,
    VALIDATION_FRACTION_PARAMETER,
    Interval,
    InvalidParameterError,
    Options,
    PrivateEstimator,
    PublicSource,
    fit_context,
    hyperparameter,
    record_parts,
    require_public_arrays,
)
from privadapt.server.algorithms.gradient_descent.estimators import NoisyGD
from privadapt.server.algorithms.linear_model import LinearModelMixin
from privadapt.server.algorithms.model_selection.candidates import shrunk_copy
from privadapt.server.algorithms.model_selection.error_selection import (
    check_error_score,
    error_scored_constant,
    error_selection,
    resolve_score,
)
from privadapt.server.algorithms.model_selection.private_selection import private_selection
from privadapt.server.algorithms.model_selection.selected_adaptation import (
    HISTOGRAM_SHARE,
    PAIRED_CLIPS,
    auto_loss_bound,
)
from privadapt.server.algorithms.output_perturbation.estimators import OutputPerturbation
from privadapt.server.algorithms.public_erm import fit_linear, public_constant_model

SOURCE_ONLY = "source_only"
PUBLIC_CONSTANT = "public_constant"
#: The DP learners a site can train its model with (a job names one).
LEARNERS = ("noisy_gd", "output_perturbation")
#: What the selection chooses among besides source-only (module docstring).
COMBINATIONS = ("average", "select")
# Each site's ball around source-only, / ||w_src|| (module docstring, "Averaged").
SITE_RADIUS_FACTOR = 1.0
# The average's free shrunk copy: its offset to source-only projected on this
# times ||w_src||, as SelectedAdaptation's default candidate's copy.
AVERAGE_SHRINK = 0.25
#: The free candidates "average" adds (module docstring, "Averaged").
AVERAGE, AVERAGE_SHRUNK = "average", f"average:shrink={AVERAGE_SHRINK:g}"


class ConfidenceBoosting(LinearModelMixin, PrivateEstimator):
    """One private model per site, privately selected with the free
    source-only model as candidate 0 (module docstring: plan, guarantee).

    Hyperparameters: ``combine`` ("average", default: the selection among
    source-only, the sites' models averaged and its shrunk copy; "select":
    among source-only and each site's model, the paper's; module
    docstring), ``learner`` (``"noisy_gd"``, or
    ``"output_perturbation"``: regularised ERM solved at the site and
    released once, :class:`OutputPerturbation`) and its problem (``loss``
    "logistic" or "squared", ``radius``, ``clip_norm``; noisy GD's
    ``iterations``, ``learning_rate``, ``calibration`` and
    ``radius_factor``, its ball around source-only (module docstring;
    None: from zero in the ball ``radius``); output
    perturbation's ``regularization`` lambda and ``label_bound``, its
    iterations sized by the site's public n); ``epsilon``, ``delta`` (each site's
    whole budget for the job); ``selection_share`` s; ``selection_score``
    ("auto" (default): "error" for the logistic loss, "paired" for the
    squared one; "error": validation errors, certified against every free
    model, so that the guarantee is on accuracy, not log loss
    (error_selection.py); "paired": each per-site model's validation loss
    minus source-only's, clipped per model at clips a private histogram
    chooses; "loss": the clipped loss, seed 004's score);
    ``constant_candidate`` (the free public constant, the public source's
    majority class or mean label, as candidate 1 where the source has an
    intercept column and, under the error score, it is not 0 (a public
    source with no majority label: error_selection.counts_errors); "auto"
    (default): for the logistic loss only, where
    the error score certifies against it; a regression's was tried and not
    taken, GAIN_STUDY.md 11.2); ``loss_bound`` L
    of the "loss" score (each validation
    loss clipped to [0, L]; "auto": the 95th percentile of the source-only
    model's losses on the public source); ``baseline_confidence`` beta (None: plain
    argmin); ``validation_fraction`` (each site's validation part).

    Fitted: ``coef_`` (the delivered model), ``chosen_`` (``"source_only"``,
    ``"public_constant"``,
    ``"average"``, ``"average:shrink=0.25"`` or, with "select", the name of
    the site whose model won), ``candidate_names_`` (source_only, the
    public constant if asked for, then the average and its copy, or the
    sites in the federation's order),
    ``candidates_`` (their coefficients, stacked), ``best_index_``,
    ``learners_`` (site -> its fitted learner), ``noisy_losses_``,
    ``margin_``, ``loss_bound_``, ``budget_plan_`` ("train" and "selection"
    -> (epsilon, delta), the same at every site), ``site_train_epsilon_``
    (site -> the epsilon its own ledger reports for its training releases,
    at the training delta; NaN where the federation reports no ledger) and
    ``privacy_`` (each site's ledger for the whole job)."""

    requires_public_source = True

    loss: str = hyperparameter([Options("logistic", "squared")])
    radius: float = hyperparameter(POSITIVE)
    epsilon: float = hyperparameter(EPSILON)
    delta: float = hyperparameter(DELTA)
    learner: str = hyperparameter([Options(*LEARNERS)], default="noisy_gd")
    clip_norm: float = hyperparameter(POSITIVE, default=1.0)
    iterations: int = hyperparameter(ITERATIONS, default=100)
    learning_rate: float = hyperparameter(POSITIVE, default=1.0)
    calibration: str = CALIBRATION_PARAMETER
    radius_factor: float | None = hyperparameter([*POSITIVE, None],
                                                 default=SITE_RADIUS_FACTOR)
    combine: str = hyperparameter([Options(*COMBINATIONS)], default="average")
    constant_candidate: bool | str = hyperparameter([*FLAG, Options("auto")], default="auto")
    regularization: float | str = hyperparameter([*POSITIVE, Options("auto")], default="auto")
    label_bound: float = hyperparameter(POSITIVE, default=1.0)
    selection_share: float = hyperparameter([Interval(float, 0, 1, closed="neither")],
                                            default=0.25)
    loss_bound: float | str = hyperparameter([*POSITIVE, Options("auto")], default="auto")
    selection_score: str = hyperparameter([Options("auto", "paired", "loss", "error")],
                                          default="auto")
    baseline_confidence: float | None = hyperparameter(
        [Interval(float, 0, 1, closed="neither"), None], default=0.1)
    validation_fraction: float = VALIDATION_FRACTION_PARAMETER

    def _prediction_loss(self) -> str:
        return self.loss

    def budget_plan(self) -> dict[str, tuple[float, float]]:
        """"train" (each site's own model) and "selection" -> (epsilon,
        delta); they add up to the job's budget at every site (module
        docstring). Without noise (epsilon = inf) both are (inf, 0)."""
        if math.isinf(self.epsilon):
            return {"train": (math.inf, 0.0), "selection": (math.inf, 0.0)}
        share = self.selection_share
        return {"train": ((1 - share) * self.epsilon, (1 - share) * self.delta),
                "selection": (share * self.epsilon, share * self.delta)}

    def _check_together(self) -> None:
        super()._check_together()
        check_error_score(type(self).__name__, self.selection_score, self.loss)

    def _with_constant(self) -> bool:
        """``constant_candidate`` with "auto" resolved: a classifier's
        candidates hold the majority label (the error score certifies
        against it, error_selection.py), a regression's do not (module
        docstring, "Averaged")."""
        if self.constant_candidate == "auto":
            return self.loss == "logistic"
        return bool(self.constant_candidate)

    def _site_learner(self, epsilon: float, delta: float,
                      source_only: np.ndarray) -> NoisyGD | OutputPerturbation:
        if self.learner == "output_perturbation":
            return OutputPerturbation(loss=self.loss, regularization=self.regularization,
                                      radius=self.radius, epsilon=epsilon, delta=delta,
                                      clip_norm=self.clip_norm, label_bound=self.label_bound)
        descent = {"loss": self.loss, "epsilon": epsilon, "delta": delta,
                   "iterations": self.iterations, "learning_rate": self.learning_rate,
                   "clip_norm": self.clip_norm, "calibration": self.calibration}
        if self.radius_factor is None:
            return NoisyGD(radius=self.radius, **descent)
        scale = float(np.linalg.norm(source_only))
        if not scale > 0:
            raise InvalidParameterError(
                f"{type(self).__name__}: the ball around source-only has radius radius_factor "
                "x ||w_src||, and the source-only model is 0 here; set radius_factor=None "
                "(noisy GD from zero in the ball 'radius')")
        return NoisyGD(center=source_only, radius=self.radius_factor * scale, average="tail",
                       **descent)

    def _candidates(self, source_only: np.ndarray,
                    learners: dict[str, NoisyGD | OutputPerturbation],
                    sizes: dict[str, int]) -> tuple[list[str], np.ndarray]:
        """The selection's candidates, source-only first (module docstring):
        with ``combine`` "select" each site's model; with "average" the
        sites' models averaged with weights n_k / n (their public sizes) and,
        with a ball, that average's copy shrunk to AVERAGE_SHRINK ||w_src||.
        Post-processing of the released models and of public values."""
        models = {site: np.asarray(model.coef_, dtype=float) for site, model in learners.items()}
        if self.combine == "select":
            return [SOURCE_ONLY, *models], np.stack([source_only, *models.values()])
        weights = np.array([sizes[site] for site in models], dtype=float)
        average = np.tensordot(weights / weights.sum(), np.stack(list(models.values())), 1)
        if self.radius_factor is None or self.learner != "noisy_gd":
            return [SOURCE_ONLY, AVERAGE], np.stack([source_only, average])
        shrunk = shrunk_copy(average, source_only, AVERAGE_SHRINK)
        return [SOURCE_ONLY, AVERAGE, AVERAGE_SHRUNK], np.stack([source_only, average, shrunk])

    @fit_context(prefer_skip_nested_validation=True)
    def fit(self, federation: Federation, public_source: PublicSource | None = None, *,
            source_only: np.ndarray | None = None) -> ConfidenceBoosting:
        """Train one model per site on its own train part, fit the
        source-only model on ``public_source`` (required) and select on
        every site's validation part, all in one job of ``federation``.
        ``source_only``: candidate 0 when the caller has already fitted it
        on the same public source (an experiment's repeated fits; it is
        public, so it changes no privacy argument)."""
        name = type(self).__name__
        _check_one_site_queries(federation, name)
        features, labels = require_public_arrays(public_source, name)
        _, validation = record_parts(federation, self.validation_fraction, name)
        train_part = RecordPart(TRAIN, self.validation_fraction, federation.job_id)
        plan = self.budget_plan()
        if source_only is None:  # free: public data only
            source_only = fit_linear(features, labels, self.loss, self.radius)
        score = resolve_score(self.selection_score, self.loss)
        constant = (public_constant_model(features, labels, self.loss, self.radius,
                                          getattr(public_source, "feature_names", None))
                    if self._with_constant() else None)
        if score == "error":
            constant = error_scored_constant(name, source_only, constant)
        learners: dict[str, NoisyGD | OutputPerturbation] = {}
        train_epsilon: dict[str, float] = {}
        epsilon, delta = plan["train"]
        for site in federation.site_sizes:
            view = OneSiteView(federation, site, train_part)
            learners[site] = self._site_learner(epsilon, delta, source_only).fit(
                view, public_source)
            train_epsilon[site] = _own_epsilon(view.privacy_spent().get(site), delta)
        names, coefficients = self._candidates(source_only, learners, federation.site_sizes)
        if constant is not None:  # free: public data only; right after source-only
            names.insert(1, PUBLIC_CONSTANT)
            coefficients = np.insert(coefficients, 1, constant, axis=0)
        epsilon, delta = plan["selection"]
        loss_bound = None
        if score == "error":
            # Each record scores its error, certified against every free
            # model (error_selection.py): the guarantee is on accuracy.
            loss_bound = 1.0
            result = error_selection(
                validation, candidates=coefficients, num_free=2 if constant is not None else 1,
                epsilon=epsilon, delta=delta, baseline_confidence=self.baseline_confidence)
        elif score == "paired":
            # Differences to source-only (candidate 0), as SelectedAdaptation's
            # default: the clipped loss's order can differ from the true one
            # on a heavy-tailed target even without noise.
            result = private_selection(
                validation, candidates=coefficients[1:], loss=self.loss, epsilon=epsilon,
                delta=delta, baseline_confidence=self.baseline_confidence, method="auto",
                reference=source_only, clips=PAIRED_CLIPS, histogram_share=HISTOGRAM_SHARE,
                public_source=(features, labels))
        else:
            loss_bound = self.loss_bound
            if loss_bound == "auto":
                loss_bound = auto_loss_bound(self.loss, source_only, features, labels)
            result = private_selection(
                validation, candidates=coefficients, loss=self.loss, loss_bound=loss_bound,
                epsilon=epsilon, delta=delta, baseline_confidence=self.baseline_confidence,
                method="auto")
        self.candidate_names_ = names
        self.candidates_ = coefficients
        self.learners_ = learners
        self.best_index_ = result.best_index
        self.chosen_ = self.candidate_names_[result.best_index]
        self.coef_ = coefficients[result.best_index]
        self.noisy_losses_ = (None if result.noisy_loss_sums is None
                              else result.noisy_loss_sums / result.num_records)
        self.margin_ = result.margin
        self.loss_bound_ = loss_bound
        self.budget_plan_ = plan
        self.site_train_epsilon_ = train_epsilon
        self.privacy_ = federation.privacy_spent(None if self.delta == 0 else self.delta)
        self.n_features_in_ = features.shape[1]
        return self

    def model_arrays(self) -> dict[str, np.ndarray]:
        """weights (the delivered model), candidates (source-only first, then
        those of ``candidate_names_``), best_index, and the noisy
        mean validation losses when they left the sites."""
        self._check_is_fitted()
        model = {"weights": self.coef_, "candidates": self.candidates_,
                 "best_index": np.asarray(self.best_index_, dtype=np.int64)}
        if self.noisy_losses_ is not None:
            model["noisy_losses"] = np.asarray(self.noisy_losses_, dtype=float)
        return model


def _check_one_site_queries(federation: Federation, who: str) -> None:
    """InvalidParameterError unless the federation can ask one site alone
    (``sites`` on ``query_per_site``) and split records into parts."""
    ask = getattr(federation, "query_per_site", None)
    if ask is None or "sites" not in inspect.signature(ask).parameters:
        raise InvalidParameterError(
            f"{who}: fit needs the job's own federation (LocalFederation, NetworkFederation), "
            "which can ask one site alone (query_per_site(..., sites=...)): each site trains "
            "its model on its own records only; a record-part view cannot")


def _own_epsilon(spent: SitePrivacy | None, delta: float) -> float:
    """The site's epsilon at ``delta`` for the releases its ledger holds for
    the job so far: called right after its own training, before the
    selection, that is its training alone (no other site's is charged there)."""
    if spent is None:  # not reported (a dry run charges nothing)
        return math.nan
    if delta == 0:
        return math.inf
    return epsilon_spent(spent.mechanisms, delta).epsilon
