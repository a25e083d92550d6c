"""The files ``privadapt result JOB --out DIR`` writes, and the rule that
keeps one job's results from replacing another's.

``model.npz`` holds the model's arrays plus what they mean: ``job_id``,
``feature_names`` (the order of the weights), ``schema_digest`` (the schema
the job's parties agreed on: common/data/schema_digest.py) and
``feature_names_source`` (where the names come from), so a model file read
months later still says which features its weights belong to.

Feature names (:func:`model_features`). The sites send only a digest of their
schema, never its names, so the names come from a schema the coordinator holds
itself (its ``public_source_schema``, with or without a public sample, or
the features of its public sample): when the digest the parties agreed on is
that schema's, its names are the model's. Otherwise nothing names the
features, and they are the placeholders ``x0`` .. ``x{d-1}``, which
``feature_names_source`` says.
``privacy_report.json`` is the job's privacy report and ``report.html`` its
page for an auditor. A directory that holds another job's files (or files of
no known job) is refused: the operator chooses another ``--out``; the same
job's files are replaced.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from privadapt.common.data.schema_digest import SchemaDigest, placeholder_feature_names
from privadapt.common.errors import ConfigError

MODEL_FILE = "model.npz"
REPORT_FILE = "privacy_report.json"
PAGE_FILE = "report.html"
#: Arrays written beside the model's own; a model never names an array so.
METADATA_ARRAYS = ("job_id", "feature_names", "schema_digest", "feature_names_source")
#: ``feature_names_source`` of a model whose names came from no schema (an
#: older coordinator's result says nothing: :data:`NAMES_NOT_STATED`).
NAMES_FROM_SCHEMA = "schema"
NAMES_PLACEHOLDER = "placeholder"
NAMES_NOT_STATED = "not stated (a coordinator older than this command)"


@dataclass(frozen=True)
class ModelFeatures:
    """What a job's model weights mean: the agreed schema digest ("" if
    none), the feature names and where they come from (``source``: a
    sentence starting with :data:`NAMES_FROM_SCHEMA` or
    :data:`NAMES_PLACEHOLDER`)."""

    schema_digest: str
    names: tuple[str, ...]
    source: str


def model_features(agreed: SchemaDigest | None, dim: int,
                   schema_names: Mapping[str, Sequence[str]]) -> ModelFeatures:
    """The feature names of a model of dimension ``dim`` whose parties agreed
    on the schema digest ``agreed``: the names of the schema of that digest
    among ``schema_names`` (digest -> names: the schemas the coordinator
    holds), else placeholders, saying which and why."""
    digest = "" if agreed is None else agreed.digest
    names = schema_names.get(digest) if agreed is not None and agreed.from_schema else None
    if names is not None and len(names) == dim:
        return ModelFeatures(digest, tuple(names), f"{NAMES_FROM_SCHEMA}: the schema the "
                             f"parties agreed on (digest {digest[:12]})")
    if agreed is None:
        why = "the parties agreed on no schema digest"
    elif not agreed.from_schema:
        why = "the parties hold plain arrays without a schema file, which name no features"
    else:
        why = ("the coordinator holds no schema of the digest the parties agreed on (give it "
               "the federation's schema as [coordinator] public_source_schema)")
    return ModelFeatures(digest, placeholder_feature_names(dim), f"{NAMES_PLACEHOLDER}: {why}")


def files_owner(out: Path) -> str | None:
    """The job whose result files ``out`` holds: None if it holds none, ""
    if they name no job (or cannot be read)."""
    owners = set()
    report, model = out / REPORT_FILE, out / MODEL_FILE
    if report.exists():
        try:
            owners.add(str(json.loads(report.read_text()).get("job_id", "")))
        except (OSError, ValueError, AttributeError):
            owners.add("")
    if model.exists():
        try:
            with np.load(model, allow_pickle=False) as stored:
                owners.add(str(stored["job_id"]) if "job_id" in stored.files else "")
        except (OSError, ValueError, zipfile.BadZipFile):
            owners.add("")
    if (out / PAGE_FILE).exists() and not owners:
        owners.add("")
    if not owners:
        return None
    return owners.pop() if len(owners) == 1 else ""


def claim_output(out: Path, job_id: str) -> None:
    """Refuse ``out`` if it holds the result files of another job (or of no
    known job); create it otherwise."""
    owner = files_owner(out)
    if owner is not None and owner != job_id:
        held = f"the result of job {owner!r}" if owner else "result files of an unknown job"
        raise ConfigError(f"{out} already holds {held}; nothing was written. Choose another "
                          f"--out, e.g. {out / job_id}")
    out.mkdir(parents=True, exist_ok=True)


def write_model(out: Path, job_id: str, model: Mapping[str, np.ndarray], schema_digest: str,
                feature_names: Sequence[str], feature_names_source: str = NAMES_NOT_STATED
                ) -> Path:
    """``out/model.npz``: the model's arrays and what they mean."""
    clash = sorted(set(model) & set(METADATA_ARRAYS))
    if clash:
        raise ConfigError(f"the model of job {job_id!r} has arrays named {clash}, which "
                          "model.npz keeps for its metadata")
    path = out / MODEL_FILE
    np.savez(path, **model, job_id=np.array(job_id),
             feature_names=np.array(list(feature_names), dtype=str),
             schema_digest=np.array(schema_digest),
             feature_names_source=np.array(feature_names_source))
    return path
