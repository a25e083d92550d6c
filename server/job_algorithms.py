"""The algorithms a coordinator can run as jobs, by name.

Each runner adapts one algorithm of ``privadapt.server.algorithms`` (written
against the ``Federation`` protocol only) to a job: it reads its
hyperparameters from the spec, runs, and returns the model as named arrays.
Transport code never names an algorithm; this table is the only link
(STYLE.md section 2).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from privadapt.common.data import Dataset
from privadapt.common.errors import ConfigError
from privadapt.common.federation import Federation
from privadapt.common.proto import federation_pb2 as pb
from privadapt.server.algorithms.adaptation_objectives import ReweightingHyperparameters
from privadapt.server.algorithms.cnvx_adap import pcnvx_adap
from privadapt.server.algorithms.ncnvx_adap import pncnvx_adap
from privadapt.server.algorithms.noisy_gd import noisy_gd
from privadapt.server.algorithms.reweighted_descent import DataBounds

Model = dict[str, np.ndarray]
Checkpoint = Callable[[int, Model], None]


@dataclass(frozen=True)
class JobContext:
    federation: Federation
    spec: pb.JobSpec
    hyperparameters: Mapping[str, Any]
    dim: int
    seed: int
    checkpoint: Checkpoint
    public_source: Dataset | None = None  # the coordinator's public sample, if configured


@dataclass(frozen=True)
class Algorithm:
    run: Callable[[JobContext], Model]
    required: Mapping[str, type | tuple[type, ...]]
    optional: Mapping[str, type | tuple[type, ...]]


def _run_noisy_gd(job: JobContext) -> Model:
    h = job.hyperparameters
    every = int(h.get("checkpoint_every", 10))

    def checkpoint(iteration: int, weights: np.ndarray) -> None:
        if iteration % every == 0:
            job.checkpoint(iteration, {"weights": weights})

    result = noisy_gd(
        job.federation, dim=job.dim, loss=h["loss"], epsilon=job.spec.epsilon,
        delta=job.spec.delta, iterations=int(h["iterations"]),
        learning_rate=float(h["learning_rate"]), radius=float(h["radius"]),
        clip_norm=float(h["clip_norm"]), calibration=job.spec.calibration or "accountant",
        checkpoint=checkpoint,
    )
    model = {"weights": result.weights, "average_weights": result.average_weights}
    if math.isfinite(result.noise_multiplier):  # infinite without noise (epsilon = inf)
        model["noise_multiplier"] = np.asarray(result.noise_multiplier)
    return model


def _reweighted(job: JobContext, convex: bool) -> Model:
    """PCnvxAdap (``convex``) or PNCnvxAdap on the coordinator's public source
    and the sites' private target (seed 000, Alg. 1 and 2)."""
    if job.public_source is None:
        raise ConfigError(f"{job.spec.algorithm} needs the public source sample: set "
                          "[coordinator] public_source in the coordinator's configuration")
    h = job.hyperparameters
    penalty = ("k1", "k2", "kinf") if convex else ("l1", "l2", "linf")
    hyper = ReweightingHyperparameters(
        alpha=float(h["alpha"]), k1=float(h.get(penalty[0], 0.0)),
        k2=float(h.get(penalty[1], 0.0)), kinf=float(h.get(penalty[2], 0.0)),
        mu=float(h.get("mu", math.inf if convex else 100.0)),
        discrepancy=float(h.get("discrepancy", 0.0)))
    bounds = DataBounds(feature_norm=float(h["feature_norm"]),
                        label_bound=float(h["label_bound"]), radius=float(h["radius"]))
    common = dict(
        hyper=hyper, bounds=bounds, epsilon=job.spec.epsilon, delta=job.spec.delta,
        iterations=int(h["iterations"]), step_scale=float(h.get("step_scale", 1.0)),
        calibration=job.spec.calibration or "accountant",
        weight_noise=bool(h.get("weight_noise", True)),
    )
    source = job.public_source
    if convex:
        result = pcnvx_adap(job.federation, source.features, source.labels, **common)
    else:
        result = pncnvx_adap(job.federation, source.features, source.labels, seed=job.seed,
                             loss=h.get("loss", "logistic"),
                             return_average=bool(h.get("return_average", False)), **common)
    return {"weights": result.weights, "public_weights": result.public_weights,
            "average_weights": result.average_weights, "last_weights": result.last_weights}


_NUMBER = (int, float)
_REWEIGHTED_REQUIRED = {"alpha": _NUMBER, "iterations": int, "feature_norm": _NUMBER,
                        "label_bound": _NUMBER, "radius": _NUMBER}
_REWEIGHTED_OPTIONAL = {"mu": _NUMBER, "discrepancy": _NUMBER, "step_scale": _NUMBER,
                        "weight_noise": bool}
ALGORITHMS: dict[str, Algorithm] = {
    "noisy_gd": Algorithm(
        _run_noisy_gd,
        required={"loss": str, "iterations": int, "learning_rate": _NUMBER, "radius": _NUMBER,
                  "clip_norm": _NUMBER},
        optional={"checkpoint_every": int},
    ),
    "pcnvx_adap": Algorithm(
        lambda job: _reweighted(job, convex=True), required=_REWEIGHTED_REQUIRED,
        optional={**_REWEIGHTED_OPTIONAL, "k1": _NUMBER, "k2": _NUMBER, "kinf": _NUMBER},
    ),
    "pncnvx_adap": Algorithm(
        lambda job: _reweighted(job, convex=False), required=_REWEIGHTED_REQUIRED,
        optional={**_REWEIGHTED_OPTIONAL, "l1": _NUMBER, "l2": _NUMBER, "linf": _NUMBER,
                  "loss": str, "return_average": bool},
    ),
}


def validate_hyperparameters(algorithm: str, values: Mapping[str, Any]) -> None:
    """ConfigError for an unknown algorithm or a missing, unknown or mistyped
    hyperparameter, before a job is stored."""
    if algorithm not in ALGORITHMS:
        raise ConfigError(f"unknown algorithm {algorithm!r}; available: {sorted(ALGORITHMS)}")
    spec = ALGORITHMS[algorithm]
    known = {**spec.required, **spec.optional}
    for name in spec.required:
        if name not in values:
            raise ConfigError(f"algorithm {algorithm!r} needs hyperparameter {name!r}")
    for name, value in values.items():
        if name not in known:
            raise ConfigError(f"algorithm {algorithm!r} has no hyperparameter {name!r}; "
                              f"known: {sorted(known)}")
        expected = known[name]
        if (isinstance(value, bool) and expected is not bool) or not isinstance(value, expected):
            raise ConfigError(f"hyperparameter {name!r} has the wrong type: {value!r}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"hyperparameter {name!r} must be finite, got {value}")
