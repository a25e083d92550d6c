"""``privadapt evaluate --model MODEL.npz --data TEST.csv --schema schema.toml [--json]``.

Scores a job's model (the ``model.npz`` that ``privadapt result`` or
``privadapt simulate`` writes) on a labelled file encoded by the schema the
job's parties used: accuracy, balanced accuracy and ROC AUC for a classifier;
mean squared error, mean absolute error and R^2 for a regression
(:mod:`privadapt.cli.model_metrics`). The file is read by the sites' own
loader (CSV, Parquet or ``.npz``, the same checks; values outside the
schema's ranges are clipped and counted on stderr).

A model whose weights belong to other features is refused before anything
is scored: another dimension, or, when the model's names come from a schema,
another schema digest (common/data/schema_digest.py), naming the first
feature that differs.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from privadapt.cli.model_metrics import model_metrics, task_of
from privadapt.common.data.dataset import load_dataset
from privadapt.common.data.schema import Schema
from privadapt.common.data.schema_digest import SchemaDigest
from privadapt.common.errors import ConfigError
from privadapt.server.jobs.result_files import NAMES_FROM_SCHEMA

_LABELS = {"accuracy": "accuracy", "balanced_accuracy": "balanced accuracy",
           "roc_auc": "ROC AUC", "mse": "mean squared error", "mae": "mean absolute error",
           "r2": "R^2"}


@dataclass(frozen=True)
class ModelFile:
    """A result's ``model.npz``: the ``weights`` and what they mean."""

    path: Path
    weights: np.ndarray
    job_id: str
    feature_names: tuple[str, ...]
    schema_digest: str
    names_from_schema: bool

    @classmethod
    def read(cls, path: Path) -> ModelFile:
        """``ConfigError`` for a missing or unreadable file, or one without weights."""
        try:
            with np.load(path, allow_pickle=False) as stored:
                arrays = {name: stored[name] for name in stored.files}
        except FileNotFoundError:
            raise ConfigError(f"model file not found: {path}") from None
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
            raise ConfigError(f"{path}: cannot read it as a model .npz: {exc}") from None
        if "weights" not in arrays:
            raise ConfigError(f"{path}: no 'weights' array (a linear model's coefficients); it "
                              f"holds {', '.join(sorted(arrays)) or 'nothing'}")
        names = arrays.get("feature_names", np.array([], dtype=str))
        return cls(path, np.asarray(arrays["weights"], dtype=float),
                   str(arrays.get("job_id", "")), tuple(str(n) for n in names),
                   str(arrays.get("schema_digest", "")),
                   str(arrays.get("feature_names_source", "")).startswith(NAMES_FROM_SCHEMA))


def check_model_fits(model: ModelFile, schema: Schema, dim: int) -> None:
    """Refuse a model whose weights do not belong to the schema's features."""
    if model.weights.shape[0] != dim:
        raise ConfigError(f"{model.path}: the model weighs {model.weights.shape[0]} features "
                          f"but the schema gives {dim}; evaluate with the schema the job's "
                          f"sites used")
    ours = SchemaDigest.of(schema, dim).digest
    if model.names_from_schema and model.schema_digest and model.schema_digest != ours:
        differing = next((f"{a!r} in the model, {b!r} in the schema" for a, b
                          in zip(model.feature_names, schema.feature_names(), strict=False)
                          if a != b), "the same feature names, other constants")
        raise ConfigError(f"{model.path}: the model was trained under another schema (digest "
                          f"{model.schema_digest[:12]}, this one's {ours[:12]}: {differing}); "
                          f"evaluate with the schema the job's sites used")


def evaluate(model_path: Path, data_path: Path, schema_path: Path, as_json: bool) -> int:
    """Print the model's figures on the data (one JSON document if ``as_json``)."""
    schema = Schema.from_toml(schema_path)
    model = ModelFile.read(model_path)
    data = load_dataset(data_path, schema)
    check_model_fits(model, schema, data.dim)
    task = task_of(model.weights, schema)
    metrics = model_metrics(model.weights, data.features, data.labels, task)
    if as_json:
        print(json.dumps({"model": str(model_path), "job_id": model.job_id,
                          "data": str(data_path), "records": data.num_records, "task": task,
                          "metrics": metrics}, indent=2))
        return 0
    job = f" (job {model.job_id})" if model.job_id else ""
    print(f"{model_path}{job} on {data_path}: {data.num_records} records, {task}")
    for name, value in metrics.items():
        shown = "undefined on these records" if value is None else f"{value:.4f}"
        print(f"  {_LABELS[name]:<20} {shown}")
    return 0
