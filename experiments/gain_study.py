"""How much of the available gain does private adaptation
capture, and where is it lost?

Per row (a shift, a private size and its sites), repeated splits of the private
target (``split_records`` of experiments/selection.py: split k holds the same
records in every study) and epsilon in {1, 3, 10, inf} (delta = 1e-5), it
measures the target test loss L (MSE for the regressions; log loss, accuracy
and balanced accuracy for the classifiers) of

* ``source-only``: ball-constrained ERM on the public source (free);
* ``constant``: the public constant, the source's mean label or majority class
  at the source's log-odds (free; selection_candidates.public_constant_model;
  on a source without an intercept column it is evaluated as the constant
  prediction it is, although no linear candidate of the package can be it);
* ``target-only (non-private)``: the same ERM on all private records, read
  directly (a reference, not something a site would allow);
* ``adapter (non-private)``: the task's adapter at epsilon = inf, warm-started
  at source-only (as experiments/adapter_study.py's ``non-private``);
* ``noisy GD``: target-only noisy projected GD on all private records at epsilon;
* ``SelectedAdaptation``, ``PrivateGridSearch`` and ``ConfidenceBoosting``: each
  estimator as a job would run it with its defaults (the task settings of
  experiments/adapter_study.py's ``selection_settings``; the grid search with a
  noisy-GD learner, K = 5, r = Y = 1, the default zero model as candidate 0),
  each one job at (epsilon, 1e-5) on every site's records split into record
  parts as a networked job's sites split them.

From these, per row and epsilon: the fraction of the available gain captured,
(L_src - L_delivered) / (L_src - L_oracle), where L_oracle is the best of the
non-private references and the free models (**non-private oracle**, mean over
splits), and the p90 over splits of the relative shortfall to source-only.

``--prototype`` adds the candidate fixes of GAIN_STUDY.md, prototyped here and
not in the package (section "Prototype" below).

The package's ball GD (``--methods`` names; NoisyGD with ``center="source_only"``,
``average="tail"``, radius ||w_src||, the task's T, step and clip):

* ``ball GD``: on all private records at the whole epsilon, against ``noisy GD``
  (the same settings from zero, in the ball ``radius``);
* ``ball GD (prototype plan)``: the prototype's ``[shrink]`` candidate rebuilt
  with the package: the same job id (so the same train record part), sites and
  noise seed, on the train part at the epsilon whose one Gaussian release has
  the prototype's training multiplier z_total / sqrt(1 - s) (NoisyGD then
  calibrates its T releases to it), and ``ball GD shrunk (prototype plan)``,
  its free copy at 0.25 ||w_src|| (candidates.candidate_models).

Run from the repository root (single-threaded BLAS, see common/blas_threads.py):
    OPENBLAS_NUM_THREADS=1 .venv/bin/python -m experiments.gain_study [--quick]
        [--splits 3] [--tasks NAME,...] [--methods NAME,...] [--prototype]
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, replace
from pathlib import Path

from privadapt.common.blas_threads import default_to_single_threaded_blas

default_to_single_threaded_blas()

import numpy as np  # noqa: E402

from experiments.adapter_study import (  # noqa: E402
    BEFORE,
    RAM_DIRECTORY,
    VALIDATION_FRACTION,
    adapter,
    federation,
    selection_settings,
)
from experiments.grid import add_runner_options, run_logged, runner_from  # noqa: E402
from experiments.run_log import RunLog  # noqa: E402
from experiments.seed000.diabetes import load_diabetes_domains  # noqa: E402
from experiments.seed000.reporting import print_table  # noqa: E402
from experiments.seed000.synthetic import ShiftedRegression, make_shifted_regression  # noqa: E402
from experiments.selection import Task, adult_task, regression_task, split_records  # noqa: E402
from privadapt import (  # noqa: E402
    ConfidenceBoosting,
    Dataset,
    NoisyGD,
    PrivateGridSearch,
    SelectedAdaptation,
    load_adult_domains,
)
from privadapt.common.accounting.accountant import epsilon_spent  # noqa: E402
from privadapt.common.accounting.calibration import calibrate_noise_multiplier  # noqa: E402
from privadapt.common.data.record_parts import VALIDATION, RecordPart, RecordSplitter  # noqa: E402
from privadapt.common.losses import loss_values  # noqa: E402
from privadapt.common.mechanisms import Adjacency, GaussianMechanism  # noqa: E402
from privadapt.server.algorithms.base import record_parts  # noqa: E402
from privadapt.server.algorithms.model_selection.candidates import (  # noqa: E402
    candidate_models,
    parse_candidates,
    public_constant_model,
)
from privadapt.server.algorithms.public_erm import fit_linear  # noqa: E402

EPSILONS = (1.0, 3.0, 10.0, math.inf)
DELTA = 1e-5
RESULTS = Path("experiments/results")
GRID_GUESSES = 5  # K, the number of norm guesses
FREE = ("source-only", "constant")
REFERENCES = ("target-only (non-private)", "adapter (non-private)")
DEFAULTS = ("noisy GD", "SelectedAdaptation", "PrivateGridSearch", "ConfidenceBoosting")
HEADER = ["task", "split", "epsilon", "method", "loss", "accuracy", "balanced_accuracy",
          "status", "detail", "seconds"]


# ----------------------------------------------------------------------------- rows


@dataclass(frozen=True)
class Row:
    """A task at one private size, with what the study needs besides it."""

    task: Task
    constant: np.ndarray | None  # the free constant as a linear model, if expressible
    constant_value: float  # the constant's prediction (regression) or log-odds


def scaled_with_intercept(features: np.ndarray, labels: np.ndarray,
                          feature_clip: float = 8.0, label_clip: float = 10.0
                          ) -> tuple[np.ndarray, np.ndarray]:
    """The heavy-tailed rows' public scaling: ||x|| clipped to ``feature_clip``
    then divided by it, |y| clipped to ``label_clip`` then divided by it, an
    intercept column appended and the features divided by sqrt 2, so that
    ||x|| <= 1 and |y| <= 1."""
    norms = np.linalg.norm(features, axis=1)
    features = features / np.maximum(1.0, norms / feature_clip)[:, None] / feature_clip
    with_intercept = np.hstack([features, np.ones((len(features), 1))]) / np.sqrt(2.0)
    return with_intercept, np.clip(labels, -label_clip, label_clip) / label_clip


def heavy_tailed_regression(num_source: int = 1000, num_target: int = 6000, dim: int = 5,
                            tail: float = 0.12, tail_scale: float = 2.5,
                            bulk_scale: float = 0.35, attenuate: float = 0.35,
                            concept_shift: float = 0.8, source_noise: float = 0.5,
                            target_noise: float = 0.3, dof: float = 3.0,
                            seed: int = 0) -> ShiftedRegression:
    """A regression shift whose target loss tail is heavy.

    Source: x ~ N(0, I_d), y = w* . x + 0.5 N(0, 1) (w* of synthetic.py).
    Target, a mixture: a bulk (1 - ``tail``) of records with x ~ N(0, 0.35^2 I)
    whose labels follow an attenuated slope ``attenuate`` w*, and a tail of
    outlying covariates x ~ N(0, 2.5^2 I) whose labels follow w* + 0.8 v
    (v = e_1 - e_d, a concept shift); target noise 0.3 Student-t(3). Scaled
    with public constants as synthetic.py (||x|| <= 8 then / 8, |y| <= 10
    then / 10) and with an intercept column, everything divided by sqrt 2,
    so ||x|| <= 1 and |y| <= 1. On it the default clip (the 95th percentile
    of source-only's public losses) bites about 20% of the target's records
    under source-only, the public constant's clipped loss is below
    source-only's while its MSE is 4-5 times higher, and the target-only
    model's clipped loss is above source-only's while its MSE is a third
    lower (GAIN_STUDY.md)."""
    rng = np.random.default_rng(seed)
    w_star = np.linspace(1.0, -1.0, dim) + 0.5
    shift = np.zeros(dim)
    shift[0], shift[-1] = 1.0, -1.0
    source = rng.normal(size=(num_source, dim))
    y_source = source @ w_star + source_noise * rng.normal(size=num_source)
    in_tail = rng.random(num_target) < tail
    target = np.where(in_tail[:, None], tail_scale, bulk_scale) * rng.normal(size=(num_target, dim))
    slopes = np.where(in_tail[:, None], w_star + concept_shift * shift, attenuate * w_star)
    y_target = np.sum(target * slopes, axis=1) + target_noise * rng.standard_t(dof, num_target)

    xs, ys = scaled_with_intercept(source, y_source)
    xt, yt = scaled_with_intercept(target, y_target)
    return ShiftedRegression(xs, ys, xt, yt, np.full(dim + 1, np.nan))


def lognormal_scale_regression(num_source: int = 1000, num_target: int = 6000, dim: int = 10,
                               scale_sigma: float = 0.6, concept_shift: float = 0.6,
                               source_noise: float = 0.5, target_noise: float = 0.4,
                               dof: float = 2.5, seed: int = 7) -> ShiftedRegression:
    """A held-out regression shift whose target loss tail is heavy by a
    continuous scale law, not by a mixture: no row's default was tuned on it.

    Source: x ~ N(0, I_d), y = w* . x + 0.5 N(0, 1) (w* of synthetic.py, d = 10).
    Target: every record has its own scale s ~ lognormal(0, ``scale_sigma`` = 0.6),
    x = s z with z ~ N(0, I_d), and labels follow w* + 0.6 u (u a fixed unit
    vector along e_2 + e_7 - e_9, a concept shift) plus noise 0.4
    Student-t(2.5). The tail is heavy twice over: the lognormal scale makes
    ||x|| and so the residual under any wrong slope lognormal-tailed (no
    moment generating function), and t(2.5) noise has no finite fourth
    moment, so the squared loss has infinite variance. Scaled with public
    constants as ``heavy_tailed_regression`` (||x|| <= 8 then / 8, |y| <= 10
    then / 10, an intercept column, everything divided by sqrt 2)."""
    rng = np.random.default_rng(seed)
    w_star = np.linspace(1.0, -1.0, dim) + 0.5
    shift = np.zeros(dim)
    shift[[1, 6]], shift[8] = 1.0, -1.0
    shift /= np.linalg.norm(shift)
    source = rng.normal(size=(num_source, dim))
    y_source = source @ w_star + source_noise * rng.normal(size=num_source)
    record_scale = rng.lognormal(0.0, scale_sigma, size=num_target)
    target = record_scale[:, None] * rng.normal(size=(num_target, dim))
    y_target = (target @ (w_star + concept_shift * shift)
                + target_noise * rng.standard_t(dof, num_target))

    xs, ys = scaled_with_intercept(source, y_source)
    xt, yt = scaled_with_intercept(target, y_target)
    return ShiftedRegression(xs, ys, xt, yt, np.full(dim + 1, np.nan))


def adult_split_task(base: Task, split: str, size: int) -> Task:
    domains = load_adult_domains(num_sites=1, seed=0, split=split)
    pool, test = domains.target_sites[0], domains.target_test
    return replace(base, name=f"adult {split}", private_size=size,
                   source=(domains.source.features, domains.source.labels),
                   pool=(pool.features, pool.labels), test=(test.features, test.labels),
                   source_names=domains.source.feature_names)


# Adult splits no default was tuned on, each with an available gain (target-only
# against source-only, log loss) above 2%: 20%, 9%, 12%, 31% on splits 0-2.
HELD_OUT_ADULT_SPLITS = ("age-under-30", "occupation-blue-collar", "workclass-self-employed",
                         "race-non-white")


def make_rows(quick: bool) -> dict[str, Row]:
    """Every row by name (the study's --tasks names)."""
    synthetic = make_shifted_regression(num_source=1000, num_target=4000, seed=0)
    heavy = heavy_tailed_regression()
    tasks = [
        regression_task("diabetes", load_diabetes_domains(), 100, 2, None, quick),
        regression_task("synthetic", synthetic, 2000, 3, 2000, quick),
        regression_task("heavy-tail", heavy, 2000, 3, 2000, quick),
    ]
    adult = adult_task(quick)
    tasks += [adult_split_task(adult, "marital-not-married", 3000),
              adult_split_task(adult, "education-bachelors-plus", 3000)]
    # Held out: rows no default was tuned on (GAIN_STUDY.md section 14).
    tasks.append(regression_task("heavy-tail-lognormal", lognormal_scale_regression(), 2000, 3,
                                 2000, quick))
    tasks += [adult_split_task(adult, split, 3000) for split in HELD_OUT_ADULT_SPLITS]
    rows = {}
    for task in tasks:
        features, labels = task.source
        constant = public_constant_model(features, labels, task.loss, task.radius,
                                         task.source_names)
        if task.loss == "squared":
            value = float(np.mean(labels))
        else:
            positive = float(np.mean(labels > 0))
            value = math.log(positive / (1 - positive))
        rows[task.name] = Row(task, constant, value)
    return rows


# ----------------------------------------------------------------------- metrics


def scores(task: Task, predictions: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """L (MSE, or log loss), and for classifiers accuracy and balanced accuracy,
    of margins / predictions ``predictions``."""
    if task.loss == "squared":
        return {"loss": float(np.mean((predictions - labels) ** 2)), "accuracy": math.nan,
                "balanced_accuracy": math.nan}
    log_loss = float(np.mean(np.logaddexp(0.0, -labels * predictions)))
    guess = np.where(predictions >= 0, 1.0, -1.0)
    recalls = [float(np.mean(guess[labels == c] == c)) for c in (-1.0, 1.0)
               if np.any(labels == c)]
    return {"loss": log_loss, "accuracy": float(np.mean(guess == labels)),
            "balanced_accuracy": float(np.mean(recalls))}


def model_scores(task: Task, weights: np.ndarray, test) -> dict[str, float]:
    return scores(task, test[0] @ weights, test[1])


def constant_scores(row: Row, test) -> dict[str, float]:
    if row.constant is not None:
        return model_scores(row.task, row.constant, test)
    return scores(row.task, np.full(len(test[1]), row.constant_value), test[1])


# ------------------------------------------------------------------ one method


def job_id(task: Task, split: int, epsilon: float, method: str) -> str:
    slug = "".join(c if c.isalnum() else "-" for c in f"{task.name}-{method}").lower()
    return f"gain-{slug}-s{split}-e{epsilon:g}"[:60]


def sites(task: Task, private, seed: int, epsilon: float, name: str):
    """The job's federation: private sites, or non-private simulation sites at inf."""
    fed = federation(*private, task.num_sites, seed, private=math.isfinite(epsilon))
    return fed.new_job(name)


SELECTION_OVERRIDES: dict = {}


def run_selected(row: Row, private, test, epsilon: float, split: int, seed: int) -> dict:
    task = row.task
    settings = selection_settings(task, epsilon if math.isfinite(epsilon) else 1.0, seed)
    # The library's default candidates and split, not the adapter study's grid.
    del settings["candidates"]
    settings.update(epsilon=epsilon, validation_fraction=VALIDATION_FRACTION,
                    **SELECTION_OVERRIDES)
    name = job_id(task, split, epsilon, "selected")
    with sites(task, private, seed, epsilon, name) as fed:
        public = task.source if task.source_names is None else \
            Dataset(*task.source, task.source_names)
        model = SelectedAdaptation(**settings).fit(fed, public_source=public)
        spent = _max_epsilon(fed, epsilon)
    features, labels = validation_records(task, private, name)
    candidate_test = [model_scores(task, w, test)["loss"] for w in model.candidates_]
    candidate_acc = [model_scores(task, w, test)["accuracy"] for w in model.candidates_]
    # The clipped-loss score, noise-free, on the validation records it read
    # (the paired score has no L: its clips are in detail["clips"]).
    bound = math.inf if model.loss_bound_ is None else model.loss_bound_
    clipped = [float(np.mean(np.minimum(loss_values(task.loss, features @ w, labels),
                                        bound))) for w in model.candidates_]
    errors = [float(np.mean(np.where(features @ w >= 0, 1.0, -1.0) != labels))
              for w in model.candidates_] if task.loss == "logistic" else None
    source_losses = loss_values(task.loss, test[0] @ model.candidates_[0], test[1])
    detail = {
        "chosen": model.chosen_, "names": model.candidate_names_,
        "score": model.selection_score_, "loss_bound": model.loss_bound_,
        "bite_source_only_test": float(np.mean(source_losses > bound)),
        "clips": None if getattr(model, "selection_clips_", None) is None
        else list(map(float, model.selection_clips_)),
        "warning": getattr(model, "warning_", None),
        "validation_records": int(model.num_validation_records_),
        "margin_per_record": float(model.margin_ / max(model.num_validation_records_, 1)),
        "noisy_scores": None if model.noisy_losses_ is None else list(map(float,
                                                                           model.noisy_losses_)),
        "clipped_validation": clipped, "validation_errors": errors,
        "test_loss": candidate_test, "test_accuracy": candidate_acc,
        "budget_plan": {k: [float(v[0]), float(v[1])] for k, v in model.budget_plan_.items()},
        "epsilon_spent": spent,
    }
    return {**model_scores(task, model.coef_, test), "detail": detail}


def validation_records(task: Task, private, job: str):
    """The validation record part a job ``job`` scores (read directly, for the
    noise-free diagnostics only)."""
    return validation_records_of(task, private, job, VALIDATION_FRACTION)


def validation_records_of(task: Task, private, job: str, fraction: float):
    """The validation record part at ``fraction`` of job ``job``'s sites."""
    names = tuple(f"x{i}" for i in range(private[0].shape[1]))
    blocks = np.array_split(np.arange(len(private[1])), task.num_sites)
    part = RecordPart(VALIDATION, fraction, job)
    parts = [RecordSplitter(Dataset(private[0][b], private[1][b], names)).records(part)
             for b in blocks]
    return (np.concatenate([p.features for p in parts]),
            np.concatenate([p.labels for p in parts]))


def _max_epsilon(fed, epsilon: float) -> float:
    if not math.isfinite(epsilon):
        return math.inf
    spent = fed.privacy_spent(DELTA)
    return max(float(s.job.epsilon) for s in spent.values())


def run_grid_search(row: Row, private, test, epsilon: float, split: int, seed: int) -> dict:
    """PrivateGridSearch with the public source: the free models and the
    guesses as offsets around the source-only model (epsilon = inf: no noise)."""
    task = row.task
    finite = math.isfinite(epsilon)
    learner = NoisyGD(loss=task.loss, epsilon=epsilon, delta=DELTA if finite else 0.0,
                      iterations=task.iterations, radius=1.0, **{
                          k: v for k, v in task.noisy_gd.items() if k != "radius"})
    name = job_id(task, split, epsilon, "grid")
    with sites(task, private, seed, epsilon, name) as fed:
        train, validation = record_parts(fed, VALIDATION_FRACTION, "PrivateGridSearch")
        search = PrivateGridSearch(learner=learner, num_guesses=GRID_GUESSES, epsilon=epsilon,
                                   delta=DELTA if finite else 0.0, loss=task.loss,
                                   label_bound=1.0, feature_bound=1.0)
        public = task.source if task.source_names is None else \
            Dataset(*task.source, task.source_names)
        try:
            search.fit(train, validation, public)
        except Exception as err:
            return {"status": f"refused: {type(err).__name__}: {str(err)[:300]}"}
        spent = _max_epsilon(fed, epsilon)
    detail = {"best_index": int(search.best_index_), "radius": float(search.radius_),
              "chosen": search.candidate_names_[search.best_index_],
              "names": search.candidate_names_, "dropped": list(search.dropped_),
              "budget_scale": float(search.budget_scale_),
              "noisy_sums": [None if not np.isfinite(v) else float(v)
                             for v in search.noisy_sums_] if search.noisy_sums_ is not None
              else None,
              "test_loss": [model_scores(task, w, test)["loss"] for w in search.candidates_],
              "test_accuracy": [model_scores(task, w, test)["accuracy"]
                                for w in search.candidates_],
              "epsilon_spent": spent}
    return {**model_scores(task, search.coef_, test), "detail": detail}


def run_boosting(row: Row, private, test, epsilon: float, split: int, seed: int,
                 source_only: np.ndarray) -> dict:
    task = row.task
    name = job_id(task, split, epsilon, "boost")
    # The source's column names, as a job's public source carries them (the
    # public constant needs its intercept column).
    public = task.source if task.source_names is None else \
        Dataset(*task.source, task.source_names)
    with sites(task, private, seed, epsilon, name) as fed:
        model = ConfidenceBoosting(
            loss=task.loss, radius=task.radius, epsilon=epsilon,
            delta=DELTA if math.isfinite(epsilon) else 0.0,
            learning_rate=task.noisy_gd["learning_rate"], iterations=task.iterations,
            clip_norm=task.noisy_gd["clip_norm"]).fit(fed, public, source_only=source_only)
        spent = _max_epsilon(fed, epsilon)
    bound = math.nan if model.loss_bound_ is None else float(model.loss_bound_)  # paired: clips
    detail = {"chosen": model.chosen_, "names": model.candidate_names_, "loss_bound": bound,
              "test_loss": [model_scores(task, w, test)["loss"] for w in model.candidates_],
              "test_accuracy": [model_scores(task, w, test)["accuracy"]
                                for w in model.candidates_],
              "noisy_scores": None if model.noisy_losses_ is None
              else list(map(float, model.noisy_losses_)),
              "margin": float(model.margin_), "epsilon_spent": spent}
    if task.loss == "logistic":  # noise-free, on the validation records the release read
        features, labels = validation_records_of(task, private, name, model.validation_fraction)
        detail["validation_errors"] = [
            float(np.mean(np.where(features @ w >= 0, 1.0, -1.0) != labels))
            for w in model.candidates_]
    return {**model_scores(task, model.coef_, test), "detail": detail}


def run_noisy_gd(row: Row, private, test, epsilon: float, split: int, seed: int) -> dict:
    task = row.task
    name = job_id(task, split, epsilon, "gd")
    with sites(task, private, seed, epsilon, name) as fed:
        model = NoisyGD(loss=task.loss, epsilon=epsilon,
                        delta=DELTA if math.isfinite(epsilon) else 0.0,
                        iterations=task.iterations, **task.noisy_gd).fit(fed)
    return model_scores(task, model.coef_, test)


BALL_METHODS = ("ball GD", "ball GD (prototype plan)", "ball GD shrunk (prototype plan)")
_BALL_CACHE: dict[tuple, dict[str, dict]] = {}


def ball_learner(task: Task, epsilon: float, source_only: np.ndarray) -> NoisyGD:
    """NoisyGD around source-only (fitted on the public source in ``fit``),
    radius ||w_src||, tail-averaged; the task's noisy-GD settings."""
    settings = {k: v for k, v in task.noisy_gd.items() if k != "radius"}
    return NoisyGD(loss=task.loss, epsilon=epsilon,
                   delta=DELTA if math.isfinite(epsilon) else 0.0,
                   iterations=task.iterations, center="source_only", average="tail",
                   radius=float(np.linalg.norm(source_only)), source_radius=task.radius,
                   **settings)


def run_ball_gd(row: Row, private, test, epsilon: float, split: int, seed: int,
                source_only: np.ndarray) -> dict:
    task = row.task
    with sites(task, private, seed, epsilon, job_id(task, split, epsilon, "ball")) as fed:
        model = ball_learner(task, epsilon, source_only).fit(fed, task.source)
        spent = _max_epsilon(fed, epsilon)
    return {**model_scores(task, model.coef_, test), "detail": {"epsilon_spent": spent}}


def prototype_training_epsilon(epsilon: float, selection_share: float = 0.25) -> float:
    """The epsilon (at DELTA) of one Gaussian release at the prototype's
    training multiplier z_total / sqrt(1 - s): NoisyGD calibrated to it
    spreads that over its T releases as the prototype's z_total sqrt(T / (1 - s))."""
    z_total = calibrate_noise_multiplier(epsilon, DELTA, 1)
    gaussian = GaussianMechanism.single(1.0, z_total / math.sqrt(1.0 - selection_share),
                                        Adjacency.REPLACE_ONE)
    return epsilon_spent([gaussian], DELTA).epsilon


def run_ball_prototype_plan(row: Row, method: str, private, test, epsilon: float, split: int,
                            seed: int, source_only: np.ndarray) -> dict:
    """The prototype's [shrink] candidates rebuilt with the package (module docstring)."""
    task = row.task
    key = (task.name, split, epsilon)
    if key not in _BALL_CACHE:
        from experiments.gain_prototype import CONFIGS
        config = CONFIGS["shrink"]
        train_epsilon = (prototype_training_epsilon(epsilon, config.selection_share)
                         if math.isfinite(epsilon) else math.inf)
        name = job_id(task, split, epsilon, f"proto-{config.name}")
        with sites(task, private, seed, epsilon, name) as fed:
            train, _ = record_parts(fed, config.validation_fraction, "prototype")
            model = ball_learner(task, train_epsilon, source_only).fit(train, task.source)
            spent = _max_epsilon(fed, epsilon)
        spec, = parse_candidates("ball_gd:radius_factor=1:shrink=0.25", task.loss)
        trained, shrunk = candidate_models(spec, model.coef_, source_only)
        detail = {"train_epsilon": train_epsilon, "epsilon_spent": spent,
                  "noise_multiplier": model.noise_multiplier_}
        _BALL_CACHE[key] = {
            BALL_METHODS[1]: {**model_scores(task, trained, test), "detail": detail},
            BALL_METHODS[2]: {**model_scores(task, shrunk, test), "detail": detail}}
    return _BALL_CACHE[key][method]


def run_method(row: Row, method: str, split: int, epsilon: float, source_only: np.ndarray
               ) -> dict:
    task = row.task
    private, test = split_records(task, task.private_size, split)
    seed = 1000 * split + (99 if math.isinf(epsilon) else int(epsilon))
    if method == "source-only":
        return model_scores(task, source_only, test)
    if method == "constant":
        return constant_scores(row, test)
    if method == "target-only (non-private)":
        return model_scores(task, fit_linear(*private, task.loss, task.radius), test)
    if method == "adapter (non-private)":
        with federation(*private, task.num_sites, split, private=False) as fed:
            model = adapter(task, math.inf, split, BEFORE).fit(fed, task.source,
                                                               initial_weights=source_only)
        return model_scores(task, model.coef_, test)
    if method == "noisy GD":
        return run_noisy_gd(row, private, test, epsilon, split, seed)
    if method == "SelectedAdaptation":
        return run_selected(row, private, test, epsilon, split, seed + 1)
    if method == "PrivateGridSearch":
        return run_grid_search(row, private, test, epsilon, split, seed + 2)
    if method == "ConfidenceBoosting":
        return run_boosting(row, private, test, epsilon, split, seed + 3, source_only)
    if method == BALL_METHODS[0]:
        return run_ball_gd(row, private, test, epsilon, split, seed + 5, source_only)
    if method in BALL_METHODS:  # the prototype's sites and noise seed (run_prototype's)
        return run_ball_prototype_plan(row, method, private, test, epsilon, split, seed + 4,
                                       source_only)
    from experiments.gain_prototype import CONFIGS, prototype_methods, run_prototype
    config = method[1:method.index("]")] if method.startswith("[") else "base"
    if config in CONFIGS and method in prototype_methods(config):
        return run_prototype(row, method, private, test, epsilon, split, seed + 4, source_only,
                             config)
    raise ValueError(f"unknown method {method!r}")


# ------------------------------------------------------------------- summary


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def summarise(log_rows: list[dict], rows: dict[str, Row], methods: list[str]) -> list[list]:
    """Per task, method and epsilon: mean L, accuracy, gain captured, p90 shortfall."""
    table = []
    by_key = {}
    for r in log_rows:
        by_key[r["task"], int(r["split"]), r["epsilon"], r["method"]] = r
    for name in rows:
        task = rows[name].task
        splits = sorted({k[1] for k in by_key if k[0] == name})
        if not splits:
            continue

        def value(method, split, eps, column="loss", name=name):
            for key in ((name, split, eps, method), (name, split, "all", method)):
                if key in by_key:
                    return _float(by_key[key][column])
            return math.nan

        for method in methods:
            for eps in EPSILONS:
                e = f"{eps:g}"
                losses = [value(method, s, e) for s in splits]
                if all(math.isnan(v) for v in losses):
                    statuses = {by_key[(name, s, e, method)]["status"] for s in splits
                                if (name, s, e, method) in by_key}
                    if statuses:
                        table.append([name, method, e, "; ".join(sorted(statuses))[:70]])
                    continue
                src = [value("source-only", s, e) for s in splits]
                oracle = [min(value(m, s, e) for m in (*FREE, *REFERENCES)) for s in splits]
                gain = (np.nanmean(src) - np.nanmean(losses)) / (np.nanmean(src)
                                                                 - np.nanmean(oracle))
                shortfall = [(v - s0) / s0 for v, s0 in zip(losses, src, strict=True)]
                # Never above the better free model's loss: the worst split's margin.
                above_free = max(v - min(value(m, s, e) for m in FREE)
                                 for v, s in zip(losses, splits, strict=True))
                cells = [name, method, e, float(np.nanmean(losses)),
                         float(np.nanstd(losses, ddof=1)) if len(losses) > 1 else math.nan,
                         float(gain), 100 * float(np.nanpercentile(shortfall, 90)),
                         sum(not math.isnan(v) for v in losses), float(above_free)]
                if task.loss == "logistic":
                    cells += accuracy_cells(value, method, splits, e)
                else:
                    cells += [math.nan] * 4
                cells.append(choices(by_key, name, method, splits, e))
                table.append(cells)
    return table


def accuracy_cells(value, method: str, splits: list[int], e: str) -> list[float]:
    """A classifier's mean accuracy and balanced accuracy, the gain captured
    in accuracy, (acc - acc_src) / (acc_best - acc_src) with acc_best the
    best non-private reference or free model (non-private oracle, split
    means), and "never below": the worst split's accuracy minus the better
    of source-only's and the majority label's (the constant's)."""
    acc = [value(method, s, e, "accuracy") for s in splits]
    bacc = [value(method, s, e, "balanced_accuracy") for s in splits]
    src_acc = [value("source-only", s, e, "accuracy") for s in splits]
    best_acc = [max(value(m, s, e, "accuracy") for m in (*FREE, *REFERENCES)) for s in splits]
    gain_acc = (np.nanmean(acc) - np.nanmean(src_acc)) / (np.nanmean(best_acc)
                                                          - np.nanmean(src_acc))
    below_free = min(a - max(value(m, s, e, "accuracy") for m in FREE)
                     for a, s in zip(acc, splits, strict=True))
    return [float(np.nanmean(acc)), float(np.nanmean(bacc)), float(gain_acc), float(below_free)]


def choices(by_key: dict, name: str, method: str, splits: list[int], e: str) -> str:
    """How often each model was delivered over the splits ("chosen" of the
    jobs' details), e.g. "public_constant 2, ball_gd:radius_factor=1 1"."""
    chosen = []
    for s in splits:
        row = by_key.get((name, s, e, method))
        detail = json.loads(row["detail"]) if row and row.get("detail") else {}
        if "chosen" in detail:
            chosen.append(str(detail["chosen"]))
    return ", ".join(f"{c} {chosen.count(c)}" for c in sorted(set(chosen)))


KEY = ("task", "split", "epsilon", "method")


def study_units(names: list[str], splits: int, methods: list[str],
                epsilons: tuple[float, ...]) -> list[dict]:
    """Every (task, split, epsilon, method) of the study, row by row and
    split by split; the free models and references once, at epsilon "all"."""
    units = []
    for name in names:
        for split in range(splits):
            for method in methods:
                once = method in FREE or method in REFERENCES
                for eps in (("all",) if once else epsilons):
                    units.append({"task": name, "split": split, "method": method,
                                  "epsilon": eps if once else f"{eps:g}"})
    return units


@functools.lru_cache(maxsize=2)
def study_rows(quick: bool) -> dict[str, Row]:
    """``make_rows(quick)``, once per process."""
    return make_rows(quick)


@functools.lru_cache(maxsize=16)
def source_only_fit(quick: bool, name: str) -> np.ndarray:
    task = study_rows(quick)[name].task
    return fit_linear(*task.source, task.loss, task.radius)


def compute_unit(unit: dict, quick: bool, selection_overrides: dict) -> dict:
    """One unit's log row; an error is recorded in its status, not raised."""
    SELECTION_OVERRIDES.clear()
    SELECTION_OVERRIDES.update(selection_overrides)
    once = unit["epsilon"] == "all"
    begun = time.perf_counter()
    try:
        result = run_method(study_rows(quick)[unit["task"]], unit["method"], unit["split"],
                            math.inf if once else float(unit["epsilon"]),
                            source_only_fit(quick, unit["task"]))
    except Exception as err:
        traceback.print_exc()
        result = {"status": f"error: {type(err).__name__}: {err}"[:300]}
    return {**unit, "loss": result.get("loss", math.nan),
            "accuracy": result.get("accuracy", math.nan),
            "balanced_accuracy": result.get("balanced_accuracy", math.nan),
            "status": result.get("status", "ok"),
            "detail": json.dumps(result.get("detail", {})),
            "seconds": round(time.perf_counter() - begun, 2)}


def describe_unit(unit: dict, row: dict) -> str:
    return (f"{unit['task']} split {unit['split']} eps {unit['epsilon']} {unit['method']}: "
            f"L={row['loss']} acc={row['accuracy']} ({row['seconds']:.0f} s)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", type=int, default=3)
    parser.add_argument("--quick", action="store_true",
                        help="fewer iterations (the tasks' quick settings), 2 splits")
    parser.add_argument("--tasks", default=None, help="comma-separated row names")
    parser.add_argument("--methods", default=None, help="comma-separated method names")
    parser.add_argument("--epsilons", default=None, help="comma-separated, e.g. 1,10,inf")
    parser.add_argument("--prototype", default=None,
                        help="also the prototyped fixes (experiments/gain_prototype.py) in "
                             "these comma-separated configurations (CONFIGS there, e.g. base)")
    parser.add_argument("--log", type=Path, default=None,
                        help="the run log (default experiments/results/gain_study[_quick].csv)")
    parser.add_argument("--summary-only", action="store_true")
    parser.add_argument("--selection-share", type=float, default=None,
                        help="SelectedAdaptation's selection_share (default: its own)")
    add_runner_options(parser)
    args = parser.parse_args(argv)
    overrides = ({} if args.selection_share is None
                 else {"selection_share": args.selection_share})
    if RAM_DIRECTORY.is_dir():
        tempfile.tempdir = str(RAM_DIRECTORY)
    splits = 2 if args.quick else args.splits
    rows = study_rows(args.quick)
    names = list(rows) if args.tasks is None else args.tasks.split(",")
    methods = [*FREE, *REFERENCES, *DEFAULTS]
    proto = []
    if args.prototype:
        from experiments.gain_prototype import prototype_methods
        proto = [m for c in args.prototype.split(",") for m in prototype_methods(c)]
        methods += proto
    if args.methods is not None:
        methods = [*args.methods.split(","), *proto]
    epsilons = EPSILONS if args.epsilons is None else tuple(float(e) for e in
                                                            args.epsilons.split(","))
    path = args.log or RESULTS / ("gain_study_quick.csv" if args.quick else "gain_study.csv")
    setting = "quick" if args.quick else "full"
    log = RunLog(path, HEADER, KEY, setting, read_only=args.summary_only)
    try:
        if not args.summary_only:
            for name in names:
                task = rows[name].task
                print(f"{name}: m={len(task.source[1])} public, n={task.private_size} private "
                      f"over {task.num_sites} sites, T={task.iterations}", flush=True)
            run_logged(log, study_units(names, splits, methods, epsilons),
                       functools.partial(compute_unit, quick=args.quick,
                                         selection_overrides=overrides),
                       runner_from(args), describe=describe_unit)
    finally:
        log.close()
    shown = [*FREE, *REFERENCES, *DEFAULTS, *proto] if args.methods is None else methods
    table = summarise(RunLog(path, HEADER, KEY, setting, read_only=True).rows(), rows, shown)
    print("\nL: test MSE (regressions) or log loss (classifiers); gain: (L_src - L) / "
          "(L_src - L_oracle), L_oracle the best non-private reference or free model "
          "(non-private oracle); p90: 90th percentile over splits of (L - L_src) / L_src, %; "
          "L-free: the worst split's L minus the smaller of source-only's and the "
          "constant's (<= 0: never above); acc-free: the worst split's accuracy minus the "
          "larger of source-only's and the majority label's (>= 0: never below); "
          "gain acc: the gain captured in accuracy")
    columns = ["task", "method", "eps", "L mean", "L std", "gain", "p90 %", "runs", "L-free",
               "acc", "bal acc", "gain acc", "acc-free", "choices"]
    print_table(columns, [r + [""] * (len(columns) - len(r)) for r in table])
    return 0


if __name__ == "__main__":
    sys.exit(main())
