"""Job specifications: what ``privadapt launch job.toml`` sends.

::

    [job]
    id = "adult-noisy-gd"            # optional; the coordinator picks one if absent
    algorithm = "noisy_gd"
    epsilon = 1.0                    # inf only with simulation sites (allow_non_private)
    delta = 1e-6
    sites = ["site-a", "site-b"]     # optional; default: every registered site
    collusion_tolerance = 0          # t: sites that may collude with the coordinator
    min_participants = 2             # a round needs at least this many sites
    calibration = "accountant"       # or "paper"
    seed = 7                         # optional; the coordinator's own randomness
    allow_large_delta = false        # true: a delta of 1e-3 or more, on purpose
    [hyperparameters]
    loss = "logistic"
    iterations = 100
    learning_rate = 16.0
    radius = 20.0
    clip_norm = 1.0

The spec travels as ``privadapt.v1.JobSpec`` and is stored as its JSON form,
so a resumed job runs with exactly the spec it was launched with.

``privadapt launch job.toml --id NAME --set KEY=VALUE`` (and ``privadapt
simulate --set KEY=VALUE``, for every job it runs) overrides the file
without editing it, so a refused launch is retried by changing the command
line: ``KEY`` is a ``[job]`` key or a hyperparameter (``job.KEY`` or
``hyperparameters.KEY`` when it must be said), ``VALUE`` a TOML value
(``epsilon=3``, ``loss=logistic``, ``sites=["a", "b"]``).

A delta of 1e-3 or more is refused unless the job says ``allow_large_delta``
(common/accounting/delta_guard.py); the check against each site's size is made where the
sizes are known (server/jobs/launch_checks.py).
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from privadapt.common.accounting.delta_guard import large_delta_refusal
from privadapt.common.config import Layout, read_sections, read_toml
from privadapt.common.errors import ConfigError, WireError
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.wire.messages import params_from_proto, params_to_proto
from privadapt.server.algorithms.base import (
    CALIBRATION,
    CALIBRATION_PARAMETER,
    CALIBRATIONS,
    EPSILON,
    Constraints,
    satisfies,
)

_JOB_LAYOUT: Layout = {
    "job": {
        "id": (str, False), "algorithm": (str, True), "epsilon": ((int, float), True),
        "delta": ((int, float), True), "sites": (list, False),
        "collusion_tolerance": (int, False), "min_participants": (int, False),
        "calibration": (str, False), "seed": (int, False), "allow_large_delta": (bool, False),
    },
}
_SECTIONS = ("job", "hyperparameters")
#: The help of ``--set`` wherever a command reads job files (launch, simulate).
SET_HELP = ("override a [job] key or a hyperparameter (repeatable), e.g. --set epsilon=3 "
            "--set iterations=50")
# The estimators' own constraints on the values a spec gives them: a job's
# epsilon and calibration are checked here, once, in that vocabulary.
CHECKED_BY_SPEC: dict[str, Constraints] = {"epsilon": EPSILON, "calibration": CALIBRATION}


def job_spec_from_toml(path: str | Path, overrides: Sequence[str] = (),
                       job_id: str | None = None) -> tuple[pb.JobSpec, str]:
    """The spec in a job file and its optional id, after ``overrides``
    (``KEY=VALUE`` strings, see the module docstring) and ``job_id``."""
    path = Path(path)
    data = read_toml(path, "job", "pass the path of a job TOML (see deploy/job.toml)")
    source = f"job file {path}"
    for override in overrides:
        apply_override(data, override)
    if job_id is not None:
        data.setdefault("job", {})["id"] = job_id
    if overrides or job_id is not None:
        source += " (with the command line's --id/--set)"
    hyperparameters = data.pop("hyperparameters", {})
    if not isinstance(hyperparameters, dict):
        raise ConfigError(f"{source}: [hyperparameters] must be a table")
    values = read_sections(data, _JOB_LAYOUT, source)
    sites = values.get("sites", [])
    if not all(isinstance(s, str) and s for s in sites):
        raise ConfigError(f"{source}: [job] sites must be a list of site names")
    spec = pb.JobSpec(
        algorithm=values["algorithm"], epsilon=float(values["epsilon"]),
        delta=float(values["delta"]), sites=sites,
        collusion_tolerance=_non_negative(values.get("collusion_tolerance", 0),
                                          "collusion_tolerance", source),
        min_participants=_non_negative(values.get("min_participants", 0),
                                       "min_participants", source),
        calibration=values.get("calibration", CALIBRATION_PARAMETER.default),
        allow_large_delta=values.get("allow_large_delta", False),
    )
    if "seed" in values:
        spec.seed = _non_negative(values["seed"], "seed", source)
    try:
        params_to_proto(hyperparameters, spec.hyperparameters, f"{source} [hyperparameters]")
    except WireError as err:
        raise ConfigError(str(err)) from None
    validate_spec(spec, source)
    return spec, values.get("id", "")


def apply_override(data: dict[str, Any], override: str) -> None:
    """Set one ``KEY=VALUE`` of ``--set`` in the parsed job file ``data``."""
    key, sep, text = override.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {override!r}: expected KEY=VALUE, such as --set epsilon=3 "
                          "or --set iterations=50")
    section, dot, name = key.partition(".")
    if not dot:
        section, name = ("job" if key in _JOB_LAYOUT["job"] else "hyperparameters"), key
    elif section not in _SECTIONS:
        raise ConfigError(f"--set {override!r}: a dotted key starts with job. or "
                          f"hyperparameters., got {section!r}")
    try:
        value = tomllib.loads(f"value = {text.strip()}")["value"]
    except tomllib.TOMLDecodeError:
        value = text.strip()  # a bare word: loss=logistic
    table = data.setdefault(section, {})
    if not isinstance(table, dict):
        raise ConfigError(f"--set {override!r}: [{section}] in the job file is not a table")
    table[name] = value


def _non_negative(value: int, key: str, source: str) -> int:
    if value < 0:
        raise ConfigError(f"{source}: [job] {key} must be >= 0, got {value}")
    return value


def validate_spec(spec: pb.JobSpec, source: str = "job") -> None:
    """Refuse a spec no algorithm could run, before anything is stored."""
    if not spec.algorithm:
        raise ConfigError(f"{source}: algorithm is empty")
    if not satisfies(spec.epsilon, EPSILON):
        raise ConfigError(f"{source}: epsilon must be > 0 (inf for a non-private simulation), "
                          f"got {spec.epsilon}")
    if not 0 < spec.delta < 1:
        raise ConfigError(f"{source}: delta must be in (0, 1), got {spec.delta}")
    refusal = large_delta_refusal(spec.delta, "delta", "[job] allow_large_delta")
    if refusal and not spec.allow_large_delta:
        raise ConfigError(f"{source}: {refusal}")
    if spec.calibration and not satisfies(spec.calibration, CALIBRATION):
        raise ConfigError(f"{source}: calibration must be one of {', '.join(CALIBRATIONS)}, "
                          f"got {spec.calibration!r}")
    if len(set(spec.sites)) != len(spec.sites):
        raise ConfigError(f"{source}: sites lists a site twice: {list(spec.sites)}")
    if spec.sites and spec.min_participants > len(spec.sites):
        raise ConfigError(f"{source}: min_participants={spec.min_participants} exceeds the "
                          f"{len(spec.sites)} sites listed")


def job_state_to_proto(state: str) -> int:
    """The wire value of a stored job state ("running" -> JOB_STATE_RUNNING)."""
    return pb.JobState.Value(f"JOB_STATE_{state.upper()}")


def job_state_name(value: int) -> str:
    """The stored name of a wire job state (JOB_STATE_RUNNING -> "running")."""
    return pb.JobState.Name(value).removeprefix("JOB_STATE_").lower()


def hyperparameters(spec: pb.JobSpec) -> dict[str, Any]:
    return params_from_proto(spec.hyperparameters, "hyperparameters")


def spec_to_json(spec: pb.JobSpec) -> str:
    return json_format.MessageToJson(spec, indent=None, sort_keys=True)


def spec_from_json(text: str) -> pb.JobSpec:
    return json_format.Parse(text, pb.JobSpec())
