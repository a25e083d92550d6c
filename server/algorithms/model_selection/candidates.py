"""The candidates of :class:`~.selected_adaptation.SelectedAdaptation`: which
learners a job can name, with which settings, how a candidate list is
checked, each candidate built at its budget, the free public-constant model,
and the validation losses' clip ``loss_bound="auto"``.

Kept apart from the estimator so that the estimator's module holds its plan,
fit and guarantee only; everything here is a function of public settings or
of the public source.

A candidate list (the job's ``candidates``, one scalar string) names the
private learners, comma-separated, each optionally with settings of its own
(a small grid of a job's other hyperparameters, selected
privately by the same release)::

    noisy_gd, pncnvx_adap_smooth:alpha=0.2, pncnvx_adap_smooth:alpha=0.8:step_scale=30

A setting overrides the job's hyperparameter of that name for that candidate
only (:data:`GRID_SETTINGS`: iterations and learning_rate of noisy GD;
alpha, iterations, step_scale, mu and penalty of the adapters; the step
rule is the learner's name, ``_smooth`` or not). Each value is checked
against the learner's own constraint on it, so a bad setting is refused when
the job is launched or dry-run, naming the candidate. At most
:data:`MAX_PRIVATE_CANDIDATES` (8): each costs a share of the budget, and
each adapter holds a reweighting chain at every site (at most 16 per job,
common/kernels/reweighted_chains.py). Chains: an adapter named without
settings runs on the chain named after it (as before grids existed); one with
settings on ``<name>-<position>`` (its 1-based position in the list), a valid
chain name of at most 21 characters, so no two candidates share weights.

Ball GD (``ball_gd``; seed 002's offset theta = w_src + delta, GAIN_STUDY.md
4.2): noisy GD started at the free source-only model w_src and projected on
the ball ||w - w_src|| <= ``radius_factor`` ||w_src|| (default
:data:`BALL_RADIUS_FACTOR`), delivering the mean of its last half of
iterates. It charges exactly what noisy GD charges (noisy_gd.py: the
gradient clip does not depend on w; w_src and the radius are public). Its
settings: ``radius_factor``, ``iterations``, ``learning_rate``. A
``shrink=s`` setting (0 < s < radius_factor) adds a free candidate: the
trained model projected on the ball of radius s ||w_src|| around w_src
(post-processing: no budget, one more entry in the selection). Measured
(GAIN_STUDY.md 4.3): one ball model trained at the whole training share plus
that copy at s = 0.25 beat two trained candidates (heavy tail at epsilon 10:
0.84 of the gain against 0.24). The trained model is named as written
without its shrink setting, the copy as written::

    ball_gd:radius_factor=1:shrink=0.25  ->  ball_gd:radius_factor=1 (trained),
                                            ball_gd:radius_factor=1:shrink=0.25 (its copy)

The clip L (``loss_bound``). The margin grows with L (sigma = z sqrt(K) L),
so a worst-case L wastes the selection: on the synthetic regression the
losses are about 0.01 and L = 1 kept the source-only model at epsilon 10,
n = 2000, where the oracle's choice has half its MSE. ``"auto"`` sets L to
the 95th percentile of the source-only model's per-record losses on the
public source: a function of public data only, so the release's sensitivity
(L per record, the kernel's) and the selection's guarantee
(selected_adaptation.py) are unchanged. Records whose loss exceeds L count
as L, which understates the badness of a model that fails on them (the
shift may make source-only such a model): the selection then errs towards
keeping candidate 0, the safe side.

The public constant (:func:`public_constant_model`): the best model, on the
public source, among those that predict the same value for every record,
i.e. that use only the intercept column: ``fit_linear`` on that column
alone, in the job's ball. For the logistic loss that is the public source's
log-odds, so it predicts the source's majority label everywhere (its
confidence fitted to the source's label balance, never to the target's);
for the squared loss the source's mean label. It reads only public data, so
it is free, like source-only. Its confidence is the public log-odds, never
more: a constant at the ball's edge scores a low clipped logistic loss
wherever the target is lopsided, and on Adult men -> women it would beat
source-only's (0.16 against 0.22) while 2.6 points less accurate.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privadapt.common.losses import loss_values
from privadapt.common.numerics.geometry import project_to_ball
from privadapt.server.algorithms.base import (
    POSITIVE,
    Constraint,
    InvalidParameterError,
    PrivateEstimator,
    describe,
    satisfies,
)
from privadapt.server.algorithms.gradient_descent.estimators import NoisyGD

# The free constant lives beside the public ERM it is fitted by; named here too,
# where the job's candidate list is read.
from privadapt.server.algorithms.public_erm import intercept_column as intercept_column
from privadapt.server.algorithms.public_erm import (
    public_constant_model as public_constant_model,
)
from privadapt.server.algorithms.reweighting.estimators import PCnvxAdap, PNCnvxAdap

SOURCE_ONLY = "source_only"
PUBLIC_CONSTANT = "public_constant"
# Every candidate a job can name, in a fixed order: model_arrays reports the
# candidates as positions in this tuple (the wire carries numbers only), so it
# only ever grows at the end.
CANDIDATE_IDS = (SOURCE_ONLY, "noisy_gd", "pcnvx_adap", "pcnvx_adap_smooth", "pncnvx_adap",
                 "pncnvx_adap_smooth", PUBLIC_CONSTANT, "ball_gd")
# The free candidates (public data only); every other id is a private learner.
FREE_CANDIDATES = frozenset({SOURCE_ONLY, PUBLIC_CONSTANT})
PRIVATE_LEARNERS = tuple(i for i in CANDIDATE_IDS if i not in FREE_CANDIDATES)
# One trained model, noisy GD in the ball of radius ||w_src|| around the free
# source-only model, and its free copy shrunk to a quarter of that ball: on
# every row of experiments/results/GAIN_STUDY.md (4.2-4.3) one model trained
# at the whole budget and started at the public model beat two trained ones
# from zero (each extra candidate halves every one's budget), and the shrunk
# copy keeps a gain at small epsilon where the whole ball is too noisy.
DEFAULT_CANDIDATES = "ball_gd:radius_factor=1:shrink=0.25"
MAX_PRIVATE_CANDIDATES = 8
# loss_bound="auto" (auto_loss_bound): a quantile of the free model's public losses.
AUTO_LOSS_QUANTILE = 0.95
MIN_AUTO_LOSS_BOUND = 1e-6
# PCnvxAdap minimises the squared loss only.
_SQUARED_ONLY = frozenset({"pcnvx_adap", "pcnvx_adap_smooth"})
_ADAPTER_SETTINGS = {"alpha": "alpha", "iterations": "adapter_iterations",
                     "step_scale": "step_scale", "mu": "mu", "penalty": "penalty"}
BALL_GD = "ball_gd"
# ball_gd's radius / ||w_src|| unless the candidate sets it (module docstring).
BALL_RADIUS_FACTOR = 1.0
SHRINK = "shrink"
_DESCENT_SETTINGS = {"iterations": "iterations", "learning_rate": "learning_rate"}
# learner -> {setting as written -> SelectedAdaptation's hyperparameter it
# overrides; ball_gd's radius_factor is its own, read by candidate_learner}.
GRID_SETTINGS: dict[str, dict[str, str]] = {
    "noisy_gd": _DESCENT_SETTINGS,
    BALL_GD: {"radius_factor": "radius_factor", **_DESCENT_SETTINGS},
    **{name: _ADAPTER_SETTINGS for name in PRIVATE_LEARNERS
       if name not in ("noisy_gd", BALL_GD)}}
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


@dataclass(frozen=True)
class CandidateSpec:
    """One named private candidate: ``name`` as the job wrote it (spaces
    removed; the key of its budget, privacy line and ``chosen_``), its
    ``learner`` id, the ``settings`` it overrides (SelectedAdaptation's
    hyperparameter names) and the reweighting ``chain`` it runs on; ``shrink``:
    the radius factor of its free shrunk copy (ball_gd only; None: none)."""

    name: str
    learner: str
    settings: dict[str, Any] = field(default_factory=dict)
    chain: str = ""
    shrink: float | None = None

    @property
    def model_names(self) -> tuple[str, ...]:
        """The selection entries it gives: the trained model (``name``
        without its shrink setting), then its shrunk copy (``name``) if any."""
        if self.shrink is None:
            return (self.name,)
        trained = ":".join(part for part in self.name.split(":")
                           if not part.startswith(f"{SHRINK}="))
        return trained, self.name


def _setting_value(text: str) -> Any:
    """An int, a float or a word ("auto") as a job file would carry it."""
    if _NUMBER.fullmatch(text):
        return int(text) if re.fullmatch(r"[+-]?\d+", text) else float(text)
    return text


def _learner_constraints(learner: str, setting: str):
    """The learner's own constraint on what ``setting`` sets in it."""
    if setting in ("radius_factor", SHRINK):
        return POSITIVE
    if learner in ("noisy_gd", BALL_GD):
        return NoisyGD._parameter_constraints[setting]
    target = {"penalty": "l1", "iterations": "iterations"}.get(setting, setting)
    if learner.startswith("pcnvx_adap") and setting == "penalty":
        target = "k1"
    cls = PCnvxAdap if learner.startswith("pcnvx_adap") else PNCnvxAdap
    return cls._parameter_constraints[target]


def _parse_one(text: str, position: int, loss: str | None, who: str) -> CandidateSpec:
    learner, *assignments = text.split(":")
    known = PRIVATE_LEARNERS
    if learner == SOURCE_ONLY:
        raise InvalidParameterError(f"{who}: {SOURCE_ONLY!r} is always candidate 0 (it is "
                                    "free); name only the private candidates")
    if learner == PUBLIC_CONSTANT:
        raise InvalidParameterError(f"{who}: {PUBLIC_CONSTANT!r} is free and set by "
                                    "'constant_candidate'; name only the private candidates")
    if learner not in known:
        close = difflib.get_close_matches(learner, known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise InvalidParameterError(f"{who}: unknown candidate {learner!r}{hint}; known: "
                                    f"{list(known)}")
    if loss is not None and learner in _SQUARED_ONLY and loss != "squared":
        raise InvalidParameterError(f"{who}: candidate {learner!r} needs loss 'squared' "
                                    f"(PCnvxAdap's F is a squared loss); got {loss!r}")
    settings: dict[str, Any] = {}
    shrink: float | None = None
    for assignment in assignments:
        key, equals, value_text = assignment.partition("=")
        allowed = GRID_SETTINGS[learner]
        takes = sorted(allowed) + ([SHRINK] if learner == BALL_GD else [])
        if key == SHRINK and learner != BALL_GD:
            raise InvalidParameterError(
                f"{who}: candidate {text!r}: shrink (a free copy of the trained model "
                f"projected towards source-only) is a setting of {BALL_GD!r} only")
        if not equals or key not in takes or not value_text:
            raise InvalidParameterError(
                f"{who}: candidate {text!r}: settings are written name=value after a ':', "
                f"and {learner} takes {takes}; got {assignment!r}")
        if (shrink is not None if key == SHRINK else allowed[key] in settings):
            raise InvalidParameterError(f"{who}: candidate {text!r} sets {key!r} twice")
        value = _setting_value(value_text)
        constraints = _learner_constraints(learner, key)
        if not satisfies(value, constraints):
            raise InvalidParameterError(f"{who}: candidate {text!r}: {key} must be "
                                        f"{describe(constraints)}; got {value_text!r}")
        if key == SHRINK:
            shrink = float(value)
        else:
            settings[allowed[key]] = value
    factor = settings.get("radius_factor", BALL_RADIUS_FACTOR)
    if shrink is not None and shrink >= factor:
        raise InvalidParameterError(
            f"{who}: candidate {text!r}: shrink must be below radius_factor ({factor:g}): "
            f"the copy is the trained model projected on the ball of radius shrink x "
            f"||w_src|| around source-only, and a ball no smaller than the model's own "
            f"leaves it unchanged; got shrink={shrink:g}")
    chain = learner if not settings else f"{learner}-{position}"
    return CandidateSpec(text, learner, settings, chain, shrink)


def parse_candidates(text: str, loss: str | None = None,
                     who: str = "SelectedAdaptation") -> list[CandidateSpec]:
    """The named private candidates of ``text`` ("a,b:alpha=0.2,c"), in
    order, or InvalidParameterError naming the first bad one (with the closest
    known name, or the setting and what it must be). ``loss`` None skips the
    check that a learner fits the job's loss."""
    names = ["".join(name.split()) for name in text.split(",")]
    if not names or any(not name for name in names):
        raise InvalidParameterError(f"{who}: parameter 'candidates' must be a comma-separated "
                                    f"list of names among {list(PRIVATE_LEARNERS)}, each "
                                    f"optionally with :name=value settings; got {text!r}")
    if len(names) > MAX_PRIVATE_CANDIDATES:
        raise InvalidParameterError(f"{who}: parameter 'candidates' names {len(names)} private "
                                    f"candidates, more than {MAX_PRIVATE_CANDIDATES} (each costs "
                                    "a share of the budget); make the grid smaller")
    specs = [_parse_one(name, position, loss, who)
             for position, name in enumerate(names, start=1)]
    seen = [(spec.learner, sorted(spec.settings.items())) for spec in specs]
    if any(seen.count(one) > 1 for one in seen):
        raise InvalidParameterError(f"{who}: parameter 'candidates' names the same learner with "
                                    f"the same settings twice: {text!r}")
    return specs


class CandidateList(Constraint):
    """A candidate list :func:`parse_candidates` accepts (a job's
    hyperparameter is a scalar; ``fit`` and the launch check say which
    candidate is wrong and why)."""

    def is_satisfied_by(self, value: Any) -> bool:
        if not isinstance(value, str):
            return False
        try:
            parse_candidates(value)
        except InvalidParameterError:
            return False
        return True

    @property
    def wire_types(self) -> tuple[type, ...]:
        return (str,)

    def __str__(self) -> str:
        return (f"a comma-separated list of at most {MAX_PRIVATE_CANDIDATES} distinct names "
                f"among {list(PRIVATE_LEARNERS)}, each optionally with :name=value settings")


def candidate_learner(spec: CandidateSpec, settings: Mapping[str, Any], epsilon: float,
                      delta: float, center: np.ndarray | None = None) -> PrivateEstimator:
    """The unfitted candidate ``spec`` at the budget (``epsilon``, ``delta``),
    with the learning settings of a SelectedAdaptation's ``get_params()``
    overridden by the candidate's own. ``center``: the free source-only
    model, which ball_gd starts at and stays near (required for it; public,
    so it changes no privacy argument)."""
    settings = {**settings, **spec.settings}
    if spec.learner in ("noisy_gd", BALL_GD):
        descent = {"loss": settings["loss"], "epsilon": epsilon, "delta": delta,
                   "iterations": settings["iterations"],
                   "learning_rate": settings["learning_rate"],
                   "clip_norm": settings["clip_norm"], "calibration": settings["calibration"]}
        if spec.learner == "noisy_gd":
            return NoisyGD(radius=settings["radius"], **descent)
        return NoisyGD(center=ball_center(spec, center), average="tail",
                       radius=settings.get("radius_factor", BALL_RADIUS_FACTOR)
                       * float(np.linalg.norm(center)), **descent)
    penalty = settings["penalty"]
    shared = {"alpha": settings["alpha"], "epsilon": epsilon, "delta": delta,
              "feature_norm": settings["feature_norm"], "label_bound": settings["label_bound"],
              "radius": settings["radius"], "iterations": settings["adapter_iterations"],
              "mu": settings["mu"], "step_scale": settings["step_scale"],
              "calibration": settings["calibration"], "chain": spec.chain,
              "step_sizes": "noise_aware_smooth" if spec.learner.endswith("_smooth")
              else "noise_aware"}
    if spec.learner.startswith("pcnvx_adap"):
        return PCnvxAdap(k1=penalty, k2=penalty, kinf=penalty, **shared)
    return PNCnvxAdap(loss=settings["loss"], l1=penalty, l2=penalty, linf=penalty,
                      seed=settings["seed"], **shared)


def ball_center(spec: CandidateSpec, center: np.ndarray | None) -> np.ndarray:
    """The source-only model ball_gd is centred at, or InvalidParameterError."""
    if center is None:
        raise InvalidParameterError(f"candidate {spec.name!r}: ball_gd needs center (the free "
                                    "source-only model it starts at and stays near)")
    center = np.asarray(center, dtype=float)
    if not np.isfinite(np.linalg.norm(center)) or not np.linalg.norm(center) > 0:
        raise InvalidParameterError(
            f"candidate {spec.name!r}: ball_gd's radius is radius_factor x ||w_src||, and the "
            f"source-only model has norm {np.linalg.norm(center):g}; name noisy_gd instead")
    return center


def candidate_models(spec: CandidateSpec, weights: np.ndarray,
                     center: np.ndarray | None) -> list[np.ndarray]:
    """The selection entries of a fitted candidate (``spec.model_names``, in
    order): its model ``weights``, then with a shrink setting the free copy
    w_src + the offset (weights - w_src) projected on the ball of radius
    shrink x ||w_src|| (``center`` = w_src; post-processing of the model and
    of public data: it costs no budget)."""
    if spec.shrink is None:
        return [weights]
    return [weights, shrunk_copy(weights, ball_center(spec, center), spec.shrink)]


def shrunk_copy(model: np.ndarray, center: np.ndarray, shrink: float) -> np.ndarray:
    """``center`` + the offset (model - center) projected on the ball of
    radius shrink x ||center||: the free shrunk copy of a model trained
    around the source-only model ``center``."""
    return project_to_ball(model, shrink * float(np.linalg.norm(center)), center)


def candidate_names(candidate_ids: np.ndarray, candidates: str | None = None) -> list[str]:
    """The names of a job result's ``candidate_ids`` (the inverse of
    model_arrays): the learners' ids, or, given the job's ``candidates``
    hyperparameter, each private candidate as the job named it, settings
    included (they follow the free ones in the job's order; a shrunk copy
    follows its trained model, ``CandidateSpec.model_names``), so that
    ``best_index`` maps back to the settings it chose."""
    names = [CANDIDATE_IDS[int(i)] for i in np.asarray(candidate_ids).ravel()]
    if candidates is None:
        return names
    free = [name for name in names if name in FREE_CANDIDATES]
    if len(free) == len(names):
        return names  # a job that released nothing delivers from the free ones only
    private = [name for spec in parse_candidates(candidates) for name in spec.model_names]
    return free + private


def auto_loss_bound(loss: str, source_only: np.ndarray, features: np.ndarray,
                    labels: np.ndarray) -> float:
    """L = the ``AUTO_LOSS_QUANTILE`` quantile of the source-only model's
    per-record losses on the public source (at least ``MIN_AUTO_LOSS_BOUND``):
    computed from public data only, so it is a public parameter of the
    release and costs nothing (selected_adaptation's module docstring)."""
    losses = loss_values(loss, np.asarray(features, float) @ source_only,
                         np.asarray(labels, float))
    return max(float(np.quantile(losses, AUTO_LOSS_QUANTILE)), MIN_AUTO_LOSS_BOUND)
