"""SelectedAdaptation: the job-level "select" step of issue 13, section 2.

One job trains a few named private learners on one part of each site's
records, fits the source-only model for free on the public source, and
delivers the one a single private release of clipped validation losses on
the other part prefers (seed 004, ../shared/seeds/004_2b354816f00c2aef.txt,
Algorithm 1 with the candidates being different learners instead of
different norm guesses, and Appendix E's confidence boosting, whose
report-noisy-max over chunks is the same shape; the release and its
derivation are ``server/algorithms/private_selection.py``).

Budget plan (basic composition; the numbers every ledger line is checked
against). With ``selection_share`` s and M named private candidates:

* each candidate learner: (epsilon_c, delta_c) = ((1 - s) epsilon / M, (1 - s) delta / M),
  trained on ``train_federation`` (its noise calibrated to exactly that);
* the selection: (s epsilon, s delta), one release on ``validation_federation``;
* the source-only model: (0, 0), it reads only public data.

The M + 1 budgets add up to (epsilon, delta), so by sequential composition
(Dwork and Roth 2014, Thm. 3.16) the job is (epsilon, delta)-DP whatever
records each part holds. The sites' ledgers compose the same releases with
the PLD accountant, which is tighter than basic composition of releases each
calibrated to its (epsilon_i, delta_i) by far more than its discretisation
error: a site's ledger total for the job at delta comes out below epsilon
(0.57 at epsilon 1 with two candidates; the tests check <= epsilon). That the two parts
hold disjoint records would allow parallel composition (max instead of sum);
it is not used, so the plan is sound even if a site's parts overlap. The
index chosen, ``coef_`` and every fitted attribute are post-processing of
these releases and of public data.

Utility (the issue's "never worse than the free baseline"). Candidate 0 is
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

The clip L (``loss_bound``). The margin grows with L (sigma = z sqrt(K) L),
so a worst-case L wastes the selection: on the synthetic regression the
losses are about 0.01 and L = 1 kept the source-only model at epsilon 10,
n = 2000, where the oracle's choice has half its MSE. ``"auto"`` sets L to
the 95th percentile of the source-only model's per-record losses on the
public source: a function of public data only, so the release's sensitivity
(L per record, the kernel's) and the guarantee above are unchanged. Records
whose loss exceeds L count as L, which understates the badness of a model
that fails on them (the shift may make source-only such a model): the
selection then errs towards keeping candidate 0, the safe side.

Default ``selection_share`` 0.25, measured (experiments/adapter_study.py,
README): at 0.1 the selection kept the source-only model at epsilon 1 on
the demo Adult split, where the adapter is 40 points more accurate; at 0.5
the candidates' smaller budgets cost accuracy (0.91-0.92 against 0.92-0.93
there at epsilon 1-3) without changing which model was chosen.
"""

from __future__ import annotations

import difflib
import math
from typing import Any, ClassVar

import numpy as np

from privadapt.common.accounting import epsilon_spent
from privadapt.common.federation import Federation
from privadapt.common.losses import loss_values
from privadapt.server.algorithms.private_selection import private_selection
from privadapt.server.algorithms.public_erm import fit_linear
from privadapt.server.estimators.base import (
    CALIBRATION,
    DELTA,
    EPSILON,
    ITERATIONS,
    NON_NEGATIVE,
    POSITIVE,
    VALIDATION_FRACTION,
    Constraint,
    Constraints,
    Interval,
    InvalidParameterError,
    Options,
    PrivateEstimator,
    PublicSource,
    record_parts,
    require_public_arrays,
)
from privadapt.server.estimators.gradient_descent import NoisyGD
from privadapt.server.estimators.linear_model import LinearModelMixin
from privadapt.server.estimators.reweighting import PCnvxAdap, PNCnvxAdap

SOURCE_ONLY = "source_only"
# Every candidate a job can name, in a fixed order: model_arrays reports the
# candidates as positions in this tuple (the wire carries numbers only), so it
# only ever grows at the end.
CANDIDATE_IDS = (SOURCE_ONLY, "noisy_gd", "pcnvx_adap", "pcnvx_adap_smooth", "pncnvx_adap",
                 "pncnvx_adap_smooth")
DEFAULT_CANDIDATES = "noisy_gd,pncnvx_adap_smooth"
# loss_bound="auto" (auto_loss_bound): a quantile of the free model's public losses.
AUTO_LOSS_QUANTILE = 0.95
MIN_AUTO_LOSS_BOUND = 1e-6
# PCnvxAdap minimises the squared loss only.
_SQUARED_ONLY = frozenset({"pcnvx_adap", "pcnvx_adap_smooth"})
# The reweighting adapters: each site keeps their weights u as the job's
# state (common/kernels/reweighted_gradient.py, one state per job id), so a
# job can run one of them; a second would find the site's weights at the
# first one's last step and be refused.
_SITE_STATE = frozenset({"pcnvx_adap", "pcnvx_adap_smooth", "pncnvx_adap", "pncnvx_adap_smooth"})


def parse_candidates(text: str, loss: str, who: str = "SelectedAdaptation") -> list[str]:
    """The named private candidates of ``text`` ("a,b,c"), in order, or
    InvalidParameterError naming the first bad one (with the closest known name)."""
    names = [name.strip() for name in text.split(",")]
    known = CANDIDATE_IDS[1:]
    if not names or any(not name for name in names):
        raise InvalidParameterError(f"{who}: parameter 'candidates' must be a comma-separated "
                                    f"list of names among {list(known)}; got {text!r}")
    for name in names:
        if name == SOURCE_ONLY:
            raise InvalidParameterError(f"{who}: {SOURCE_ONLY!r} is always candidate 0 (it is "
                                        "free); name only the private candidates")
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InvalidParameterError(f"{who}: unknown candidate {name!r}{hint}; known: "
                                        f"{list(known)}")
        if name in _SQUARED_ONLY and loss != "squared":
            raise InvalidParameterError(f"{who}: candidate {name!r} needs loss 'squared' "
                                        f"(PCnvxAdap's F is a squared loss); got {loss!r}")
    if len(set(names)) != len(names):
        raise InvalidParameterError(f"{who}: parameter 'candidates' names a learner twice: "
                                    f"{text!r}")
    stateful = [name for name in names if name in _SITE_STATE]
    if len(stateful) > 1:
        raise InvalidParameterError(
            f"{who}: at most one reweighting adapter per job, got {stateful}: each site keeps "
            "one set of reweighting weights per job (the reweighted_gradient kernel's state)")
    return names


class CandidateList(Constraint):
    """A comma-separated string of known candidate names (a job's
    hyperparameter is a scalar; ``fit`` says which name is wrong and why)."""

    def is_satisfied_by(self, value: Any) -> bool:
        if not isinstance(value, str):
            return False
        names = [name.strip() for name in value.split(",")]
        return (all(name in CANDIDATE_IDS[1:] for name in names)
                and len(set(names)) == len(names)
                and sum(name in _SITE_STATE for name in names) <= 1)

    @property
    def wire_types(self) -> tuple[type, ...]:
        return (str,)

    def __str__(self) -> str:
        return (f"a comma-separated list of distinct names among {list(CANDIDATE_IDS[1:])}, "
                "at most one of them a reweighting adapter")


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
    ``calibration`` and ``seed`` (the adapters' coordinator randomness).

    Fitted: ``coef_`` (the delivered model), ``chosen_`` (its name),
    ``candidate_names_`` (source_only first), ``best_index_`` (into them),
    ``candidates_`` (their coefficients, stacked), ``learners_`` (the fitted
    private candidates), ``noisy_losses_`` (noisy mean clipped validation
    losses; None if the site selected itself), ``margin_``, ``budget_plan_``
    (name -> planned (epsilon, delta), "selection" included),
    ``loss_bound_`` (the L used), ``candidate_privacy_`` (name -> each
    site's epsilon for that step's releases at its planned delta, from the
    site's ledger view),
    ``train_privacy_`` (the sites' job spend after training) and ``privacy_``
    (after the selection: the whole job when both federations charge the
    same ledgers and job, as record parts of one job do)."""

    requires_public_source = True

    _parameter_constraints: ClassVar[dict[str, Constraints]] = {
        "loss": [Options("logistic", "squared")], "radius": POSITIVE, "clip_norm": POSITIVE,
        "iterations": ITERATIONS, "learning_rate": POSITIVE, "feature_norm": POSITIVE,
        "label_bound": POSITIVE, "alpha": [Interval(float, 0, 1, closed="neither")],
        "penalty": NON_NEGATIVE, "mu": POSITIVE, "step_scale": POSITIVE,
        "adapter_iterations": [*ITERATIONS, Options("auto")],
        "candidates": [CandidateList()], "epsilon": EPSILON, "delta": DELTA,
        "selection_share": [Interval(float, 0, 1, closed="neither")],
        "loss_bound": [*POSITIVE, Options("auto")],
        "baseline_confidence": [Interval(float, 0, 1, closed="neither"), None],
        "calibration": CALIBRATION, "seed": [Interval(int, 0, math.inf, closed="left"), None],
        "validation_fraction": VALIDATION_FRACTION,
    }

    def __init__(
        self,
        *,
        loss: str,
        radius: float,
        epsilon: float,
        delta: float,
        clip_norm: float = 1.0,
        iterations: int = 100,
        learning_rate: float = 1.0,
        feature_norm: float = 1.0,
        label_bound: float = 1.0,
        alpha: float = 0.5,
        penalty: float = 0.0,
        mu: float = 100.0,
        step_scale: float = 1.0,
        adapter_iterations: int | str = "auto",
        candidates: str = DEFAULT_CANDIDATES,
        loss_bound: float | str = "auto",
        selection_share: float = 0.25,
        baseline_confidence: float | None = 0.1,
        calibration: str = "accountant",
        seed: int | None = None,
        validation_fraction: float = 0.25,
    ) -> None:
        self.loss = loss
        self.radius = radius
        self.clip_norm = clip_norm
        self.iterations = iterations
        self.learning_rate = learning_rate
        self.feature_norm = feature_norm
        self.label_bound = label_bound
        self.alpha = alpha
        self.penalty = penalty
        self.mu = mu
        self.step_scale = step_scale
        self.adapter_iterations = adapter_iterations
        self.candidates = candidates
        self.epsilon = epsilon
        self.delta = delta
        self.selection_share = selection_share
        self.loss_bound = loss_bound
        self.baseline_confidence = baseline_confidence
        self.calibration = calibration
        self.seed = seed
        self.validation_fraction = validation_fraction

    def _prediction_loss(self) -> str:
        return self.loss

    def budget_plan(self) -> dict[str, tuple[float, float]]:
        """name -> (epsilon, delta) of each step (module docstring); they add
        up to the job's (epsilon, delta). Without noise (epsilon = inf) every
        step is (inf, 0)."""
        names = parse_candidates(self.candidates, self.loss)
        if math.isinf(self.epsilon):
            return {**{name: (math.inf, 0.0) for name in names}, "selection": (math.inf, 0.0)}
        share = (1.0 - self.selection_share) / len(names)
        plan = {name: (share * self.epsilon, share * self.delta) for name in names}
        plan["selection"] = (self.selection_share * self.epsilon,
                             self.selection_share * self.delta)
        return plan

    def _learner(self, name: str, epsilon: float, delta: float) -> PrivateEstimator:
        """The unfitted candidate ``name`` at its budget."""
        if name == "noisy_gd":
            return NoisyGD(loss=self.loss, epsilon=epsilon, delta=delta,
                           iterations=self.iterations, learning_rate=self.learning_rate,
                           radius=self.radius, clip_norm=self.clip_norm,
                           calibration=self.calibration)
        shared = {"alpha": self.alpha, "epsilon": epsilon, "delta": delta,
                  "feature_norm": self.feature_norm, "label_bound": self.label_bound,
                  "radius": self.radius, "iterations": self.adapter_iterations,
                  "mu": self.mu, "step_scale": self.step_scale, "calibration": self.calibration,
                  "step_sizes": "noise_aware_smooth" if name.endswith("_smooth")
                  else "noise_aware"}
        if name.startswith("pcnvx_adap"):
            return PCnvxAdap(k1=self.penalty, k2=self.penalty, kinf=self.penalty, **shared)
        return PNCnvxAdap(loss=self.loss, l1=self.penalty, l2=self.penalty, linf=self.penalty,
                          seed=self.seed, **shared)

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
        (common/record_parts.py: each site splits its own records by a
        content hash; the coordinator never learns which record is where)."""
        name = type(self).__name__
        if isinstance(self.candidates, str):  # first: its message names the bad candidate
            parse_candidates(self.candidates, self.loss, name)
        self._validate_params()
        names = parse_candidates(self.candidates, self.loss, name)
        if validation_federation is None:
            train_federation, validation_federation = record_parts(
                train_federation, self.validation_fraction, name)
        features, labels = require_public_arrays(public_source, name)
        source_only = fit_linear(features, labels, self.loss, self.radius)  # free: public only
        plan = self.budget_plan()
        learners, privacy = {}, {}
        for candidate in names:
            epsilon, delta = plan[candidate]
            before = _charges(train_federation)
            learner = self._learner(candidate, epsilon, delta)
            if isinstance(learner, NoisyGD):
                learner.fit(train_federation, public_source)
            else:
                learner.fit(train_federation, public_source, initial_weights=source_only)
            learners[candidate] = learner
            privacy[candidate] = _step_epsilon(train_federation, before, delta)
        self.train_privacy_ = train_federation.privacy_spent(_report_delta(self.delta))
        epsilon, delta = plan["selection"]
        before = _charges(validation_federation)
        coefficients = np.stack([source_only, *(learners[c].coef_ for c in names)])
        loss_bound = self.loss_bound
        if loss_bound == "auto":
            loss_bound = auto_loss_bound(self.loss, source_only, features, labels)
        result = private_selection(
            validation_federation, candidates=coefficients, loss=self.loss,
            loss_bound=loss_bound, epsilon=epsilon, delta=delta,
            baseline_confidence=self.baseline_confidence)
        privacy["selection"] = _step_epsilon(validation_federation, before, delta)
        self.candidate_names_ = [SOURCE_ONLY, *names]
        self.candidates_ = coefficients
        self.learners_ = learners
        self.best_index_ = result.best_index
        self.chosen_ = self.candidate_names_[result.best_index]
        self.coef_ = coefficients[result.best_index]
        self.noisy_losses_ = (None if result.noisy_loss_sums is None
                              else result.noisy_loss_sums / result.num_records)
        self.loss_bound_ = loss_bound
        self.margin_ = result.margin
        self.num_validation_records_ = result.num_records
        self.selection_method_ = result.method
        self.budget_plan_ = plan
        self.candidate_privacy_ = privacy
        self.privacy_ = validation_federation.privacy_spent(_report_delta(self.delta))
        self.n_features_in_ = features.shape[1]
        return self

    def model_arrays(self) -> dict[str, np.ndarray]:
        """weights (the delivered model), candidates (all K, source-only first),
        candidate_ids (each candidate's position in :data:`CANDIDATE_IDS`:
        the wire carries numbers, not names), best_index (into candidates) and
        chosen_id (the delivered one's position in CANDIDATE_IDS), and the
        noisy mean validation losses when they left the sites."""
        self._check_is_fitted()
        model = {"weights": self.coef_, "candidates": self.candidates_,
                 "candidate_ids": np.asarray([CANDIDATE_IDS.index(n)
                                              for n in self.candidate_names_], dtype=np.int64),
                 "best_index": np.asarray(self.best_index_, dtype=np.int64),
                 "chosen_id": np.asarray(CANDIDATE_IDS.index(self.chosen_), dtype=np.int64)}
        if self.noisy_losses_ is not None:
            model["noisy_losses"] = np.asarray(self.noisy_losses_, dtype=float)
        return model


def auto_loss_bound(loss: str, source_only: np.ndarray, features: np.ndarray,
                    labels: np.ndarray) -> float:
    """L = the ``AUTO_LOSS_QUANTILE`` quantile of the source-only model's
    per-record losses on the public source (at least ``MIN_AUTO_LOSS_BOUND``):
    computed from public data only, so it is a public parameter of the
    release and costs nothing (module docstring)."""
    losses = loss_values(loss, np.asarray(features, float) @ source_only,
                         np.asarray(labels, float))
    return max(float(np.quantile(losses, AUTO_LOSS_QUANTILE)), MIN_AUTO_LOSS_BOUND)


def candidate_names(candidate_ids: np.ndarray) -> list[str]:
    """The names of a job result's ``candidate_ids`` (the inverse of model_arrays)."""
    return [CANDIDATE_IDS[int(i)] for i in np.asarray(candidate_ids).ravel()]


def _report_delta(delta: float) -> float | None:
    return None if delta == 0 else delta  # the noise-free run: each site's cap delta


def _charges(federation: Federation) -> dict[str, int]:
    """How many releases each site's ledger holds for the job so far."""
    return {site: len(spent.mechanisms) for site, spent in federation.privacy_spent().items()}


def _step_epsilon(federation: Federation, before: dict[str, int], delta: float
                  ) -> dict[str, float]:
    """Each site's epsilon at ``delta`` for the releases charged since ``before``
    (one step's own privacy line; inf for the noise-free run)."""
    if delta == 0:
        return {site: math.inf for site in before}
    spent = federation.privacy_spent()
    return {site: epsilon_spent(spent[site].mechanisms[before.get(site, 0):], delta).epsilon
            for site in spent}
