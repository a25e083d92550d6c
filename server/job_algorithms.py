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
from privadapt.server.algorithms.noisy_gd import noisy_gd

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


_NUMBER = (int, float)
ALGORITHMS: dict[str, Algorithm] = {
    "noisy_gd": Algorithm(
        _run_noisy_gd,
        required={"loss": str, "iterations": int, "learning_rate": _NUMBER, "radius": _NUMBER,
                  "clip_norm": _NUMBER},
        optional={"checkpoint_every": int},
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
        if isinstance(value, bool) or not isinstance(value, known[name]):
            raise ConfigError(f"hyperparameter {name!r} has the wrong type: {value!r}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"hyperparameter {name!r} must be finite, got {value}")
