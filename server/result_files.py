"""The files ``privadapt result JOB --out DIR`` writes, and the rule that
keeps one job's results from replacing another's.

``model.npz`` holds the model's arrays plus what they mean: ``job_id``,
``feature_names`` (the order of the weights) and ``schema_digest`` (the schema
the job's parties agreed on: common/schema_digest.py), so a model file read
months later still says which features its weights belong to.
``privacy_report.json`` is the job's privacy report and ``report.html`` its
page for an auditor. A directory that holds another job's files (or files of
no known job) is refused: the operator chooses another ``--out``; the same
job's files are replaced.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from privadapt.common.errors import ConfigError

MODEL_FILE = "model.npz"
REPORT_FILE = "privacy_report.json"
PAGE_FILE = "report.html"
#: Arrays written beside the model's own; a model never names an array so.
METADATA_ARRAYS = ("job_id", "feature_names", "schema_digest")


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
                feature_names: Sequence[str]) -> Path:
    """``out/model.npz``: the model's arrays and what they mean."""
    clash = sorted(set(model) & set(METADATA_ARRAYS))
    if clash:
        raise ConfigError(f"the model of job {job_id!r} has arrays named {clash}, which "
                          "model.npz keeps for its metadata")
    path = out / MODEL_FILE
    np.savez(path, **model, job_id=np.array(job_id),
             feature_names=np.array(list(feature_names), dtype=str),
             schema_digest=np.array(schema_digest))
    return path
