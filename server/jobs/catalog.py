"""The algorithms a coordinator can run as jobs, by name: a table of estimators.

A job builds the named estimator (``privadapt.server.estimators``) from the
spec's hyperparameters, fits it on the job's ``NetworkFederation`` (and the
coordinator's public source, for the estimators that need one) and stores
``estimator.model_arrays()``. Each estimator's hyperparameter schema
(required, optional, types, defaults) is derived from its hyperparameter
declarations (server/algorithms/base.py), so adding a job is one line here.
Transport code never names an algorithm; this table is the only link
(STYLE.md section 2).
"""

from __future__ import annotations

import difflib
import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from privadapt.common.data.dataset import Dataset
from privadapt.common.errors import ConfigError
from privadapt.common.federation import Federation
from privadapt.common.proto import federation_pb2 as pb
from privadapt.server.algorithms.base import (
    Constraints,
    PrivateEstimator,
    describe,
    parameters_validated,
    satisfies,
)
from privadapt.server.algorithms.discrepancy_minimization.estimators import (
    PrivateDiscrepancyMinimization,
)
from privadapt.server.algorithms.frank_wolfe.estimators import DPFrankWolfeTransfer
from privadapt.server.algorithms.gradient_descent.estimators import NoisyGD
from privadapt.server.algorithms.model_selection.confidence_boosting import ConfidenceBoosting
from privadapt.server.algorithms.model_selection.selected_adaptation import SelectedAdaptation
from privadapt.server.algorithms.output_perturbation.estimators import OutputPerturbation
from privadapt.server.algorithms.reweighting.estimators import PCnvxAdap, PNCnvxAdap
from privadapt.server.algorithms.source_target_clustering.estimators import (
    NeighborNoisyAverages,
    NoisyAverageSet,
)
from privadapt.server.algorithms.source_target_clustering.private_kmeans import PrivateLloydKMeans
from privadapt.server.algorithms.source_target_clustering.private_mixture_sampler import (
    PrivateGaussianMixtureSampler,
)
from privadapt.server.jobs.spec import CHECKED_BY_SPEC

Model = dict[str, np.ndarray]
Checkpoint = Callable[[int, Model], None]

ALGORITHMS: dict[str, type[PrivateEstimator]] = {
    "noisy_gd": NoisyGD,
    "pcnvx_adap": PCnvxAdap,
    "pncnvx_adap": PNCnvxAdap,
    "discrepancy_minimization": PrivateDiscrepancyMinimization,
    "nna": NeighborNoisyAverages,  # seed 001: the coordinator's public source is the target T
    "nas": NoisyAverageSet,  # seed 001: per-site releases (allow_per_site_releases)
    "dp_frank_wolfe_transfer": DPFrankWolfeTransfer,
    # candidates on the sites' train record part, chosen on their validation part
    "selected_adaptation": SelectedAdaptation,
    # seed 001's baselines: the job's epsilon as a pure epsilon-DP (Laplace) budget
    "dp_lloyd_kmeans": PrivateLloydKMeans,
    "dp_mixture": PrivateGaussianMixtureSampler,
    # seed 004 App. E: one model per site (charged there only), selected on the validation parts
    "confidence_boosting": ConfidenceBoosting,
    # seed 004's output perturbation: one noisy regularised-ERM release per site
    "output_perturbation": OutputPerturbation,
}

# Estimator parameters a job takes from its JobSpec, never from [hyperparameters].
FROM_SPEC = ("epsilon", "delta", "calibration", "seed")
# A job option of every estimator whose fit takes a checkpoint callback:
# store the model every this many iterations.
CHECKPOINT_EVERY = "checkpoint_every"
_CHECKPOINT_EVERY_DEFAULT = 10


@dataclass(frozen=True)
class JobContext:
    federation: Federation
    spec: pb.JobSpec
    hyperparameters: Mapping[str, Any]
    seed: int
    checkpoint: Checkpoint
    public_source: Dataset | None = None  # the coordinator's public sample, if configured
    public_sources: tuple[Dataset, ...] = ()  # its several public samples, if configured
    # The job's estimator as its launch built and validated it (unfitted):
    # the run fits it without checking its parameters again. None (a resumed
    # job): built from the spec, and validated by its fit.
    estimator: PrivateEstimator | None = None


@dataclass(frozen=True)
class JobSchema:
    """What a job's [hyperparameters] may hold: each name's accepted types."""

    required: Mapping[str, tuple[type, ...]]
    optional: Mapping[str, tuple[type, ...]]
    defaults: Mapping[str, Any]


def _takes_checkpoint(estimator: type[PrivateEstimator]) -> bool:
    return "checkpoint" in inspect.signature(estimator.fit).parameters


def job_schema(estimator: type[PrivateEstimator]) -> JobSchema:
    """The hyperparameters of ``estimator`` a job file can set: every
    ``__init__`` argument not taken from the JobSpec whose constraints admit a
    wire type (bool, int, float, str), required when it has no default."""
    defaults = estimator.parameter_defaults()
    required, optional = {}, {}
    for name, constraints in estimator._parameter_constraints.items():
        types = tuple(dict.fromkeys(t for c in constraints if c is not None
                                    for t in c.wire_types))
        if name in FROM_SPEC or not types:
            continue
        (optional if name in defaults else required)[name] = types
    job_defaults = {name: defaults[name] for name in optional}
    if _takes_checkpoint(estimator):
        optional[CHECKPOINT_EVERY] = (int,)
        job_defaults[CHECKPOINT_EVERY] = _CHECKPOINT_EVERY_DEFAULT
    return JobSchema(required, optional, job_defaults)


def validate_hyperparameters(algorithm: str, values: Mapping[str, Any]) -> None:
    """ConfigError for an unknown algorithm, or one listing every missing,
    unknown (with the closest known name), mistyped or out-of-range
    hyperparameter at once, before a job is stored: a retry fixes them all."""
    if algorithm not in ALGORITHMS:
        close = difflib.get_close_matches(algorithm, ALGORITHMS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"unknown algorithm {algorithm!r}{hint}; available: "
                          f"{sorted(ALGORITHMS)}")
    estimator = ALGORITHMS[algorithm]
    schema = job_schema(estimator)
    known = {**schema.required, **schema.optional}
    problems = []
    missing = [name for name in schema.required if name not in values]
    if missing:
        plural = "s" * (len(missing) > 1)
        problems.append(f"needs hyperparameter{plural} {', '.join(map(repr, missing))}")
    unknown = False
    for name, value in values.items():
        if name not in known:
            problems.append(f"has no hyperparameter {name!r}{_unknown_hint(name, known)}")
            unknown = True
        else:
            problems.extend(_value_problems(estimator, name, value, known[name]))
    if problems:
        known_list = f"; known: {sorted(known)}" if unknown else ""
        raise ConfigError(f"algorithm {algorithm!r} {'; '.join(problems)}{known_list}")


def _unknown_hint(name: str, known: Mapping[str, Any]) -> str:
    """Where an unknown hyperparameter belongs, or the known one it is closest to."""
    if name in FROM_SPEC:
        return " (it is a [job] key, not a hyperparameter)"
    close = difflib.get_close_matches(name, known, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _value_problems(estimator: type[PrivateEstimator], name: str, value: Any,
                    expected: tuple[type, ...]) -> list[str]:
    """What is wrong with one known hyperparameter's value (empty: nothing)."""
    if (isinstance(value, bool) and bool not in expected) or not isinstance(value, expected):
        kinds = " or ".join(t.__name__ for t in expected)
        return [f"hyperparameter {name!r} has the wrong type: {value!r} (expected {kinds})"]
    if isinstance(value, float) and not math.isfinite(value):
        return [f"hyperparameter {name!r} must be finite, got {value}"]
    constraints = estimator._parameter_constraints.get(name)
    if constraints is not None and not satisfies(value, constraints):
        return [f"hyperparameter {name!r} must be {describe(constraints)}, got {value!r}"]
    if name == CHECKPOINT_EVERY and value < 1:
        return [f"hyperparameter {CHECKPOINT_EVERY!r} must be >= 1, got {value}"]
    return []


def _as_declared(estimator: type[PrivateEstimator], name: str, value: Any) -> Any:
    """A whole number written for a real-valued hyperparameter (``radius = 20``
    in TOML arrives as an int) as a float, so the queries carry the same
    parameters (and fingerprints, which a resumed job compares) either way."""
    constraints = estimator._parameter_constraints.get(name, ())
    kinds = {c.wire_types for c in constraints if c is not None}
    if isinstance(value, int) and not isinstance(value, bool) and (int, float) in kinds \
            and (int,) not in kinds:
        return float(value)
    return value


def estimator_for(spec: pb.JobSpec, hyperparameters: Mapping[str, Any],
                  seed: int) -> PrivateEstimator:
    """The job's estimator, unfitted and unchecked: its hyperparameters and the
    spec's epsilon, delta, calibration (unset: the estimator's default) and seed."""
    estimator_class = ALGORITHMS[spec.algorithm]
    hyper = {name: _as_declared(estimator_class, name, value)
             for name, value in hyperparameters.items() if name != CHECKPOINT_EVERY}
    from_spec = {"epsilon": spec.epsilon, "delta": spec.delta, "seed": seed}
    if spec.calibration:
        from_spec["calibration"] = spec.calibration
    names = estimator_class._get_param_names()
    return estimator_class(**hyper, **{k: v for k, v in from_spec.items() if k in names})


def checked_at_launch(estimator: type[PrivateEstimator], hyperparameters: Mapping[str, Any]
                      ) -> dict[str, Constraints]:
    """What a launch has checked before it builds the estimator: each job
    hyperparameter against the estimator's own constraints
    (:func:`validate_hyperparameters`) and the spec's values against theirs
    (``validate_spec``), name -> constraints; what the estimator must still
    check is the rest (``_validate_params(checked=...)``)."""
    declared = estimator._parameter_constraints
    checked = {name: declared[name] for name in hyperparameters if name in declared}
    return {**checked, **CHECKED_BY_SPEC}


def run_job(job: JobContext) -> Model:
    """Fit the job's estimator on its federation; the model as named arrays."""
    algorithm = job.spec.algorithm
    estimator_class = ALGORITHMS[algorithm]
    every = int(job.hyperparameters.get(CHECKPOINT_EVERY, _CHECKPOINT_EVERY_DEFAULT))
    fit_options: dict[str, Any] = {}
    estimator = job.estimator
    if estimator is None:
        estimator = estimator_for(job.spec, job.hyperparameters, job.seed)
    if estimator.needs_public_source():
        if job.public_source is None:
            raise ConfigError(f"{algorithm} needs the public source sample: set "
                              "[coordinator] public_source in the coordinator's configuration")
        fit_options["public_source"] = job.public_source
    if "public_sources" in inspect.signature(estimator_class.fit).parameters:
        fit_options["public_sources"] = list(job.public_sources) or None
        fit_options.setdefault("public_source", job.public_source)
    if _takes_checkpoint(estimator_class):
        def checkpoint(iteration: int, weights: np.ndarray) -> None:
            if iteration % every == 0:
                job.checkpoint(iteration, {"weights": weights})

        fit_options["checkpoint"] = checkpoint
    if job.estimator is None:
        return estimator.fit(job.federation, **fit_options).model_arrays()
    with parameters_validated():
        return estimator.fit(job.federation, **fit_options).model_arrays()
