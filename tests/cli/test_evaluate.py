"""``privadapt evaluate``: a result model's figures on a labelled file, and a
model of other features refused before anything is scored."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from privadapt.cli.main import main
from privadapt.cli.model_metrics import balanced_accuracy, roc_auc
from privadapt.common.data.schema import Schema
from privadapt.common.data.schema_digest import SchemaDigest
from privadapt.server.jobs.result_files import NAMES_FROM_SCHEMA, write_model

CLASSIFIER = Schema(label="y", numeric=("x",), numeric_scale={"x": (0.0, 10.0)},
                    label_map={"no": -1.0, "yes": 1.0}, intercept=True)
# x scaled to [0, 1]; the model predicts "yes" when x > 5 (weights 2, -1: 2 x/10 - 1 >= 0).
TEST_ROWS = "x,y\n1,no\n4,no\n6,no\n9,yes\n7,yes\n2,yes\n"


def write_files(tmp_path: Path, schema: Schema, weights, rows: str) -> tuple[Path, Path, Path]:
    schema_path = tmp_path / "schema.toml"
    schema_path.write_text(schema.to_toml())
    data = tmp_path / "test.csv"
    data.write_text(rows)
    weights = np.asarray(weights, dtype=float)
    digest = SchemaDigest.of(schema, weights.shape[0]).digest
    model = write_model(tmp_path, "job-1", {"weights": weights}, digest,
                        schema.feature_names(), f"{NAMES_FROM_SCHEMA}: test")
    return model, data, schema_path


def evaluate_json(model: Path, data: Path, schema: Path, capsys) -> dict:
    assert main(["evaluate", "--model", str(model), "--data", str(data), "--schema",
                 str(schema), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_classifier_is_scored_by_accuracy_balanced_accuracy_and_roc_auc(tmp_path, capsys):
    files = write_files(tmp_path, CLASSIFIER, [2.0, -1.0], TEST_ROWS)
    report = evaluate_json(*files, capsys)
    assert report["task"] == "binary classification" and report["records"] == 6
    # predicted yes for x = 6, 9, 7; right on 1, 4 (no), 9, 7 (yes): 4 of 6.
    assert report["metrics"]["accuracy"] == pytest.approx(4 / 6)
    assert report["metrics"]["balanced_accuracy"] == pytest.approx((2 / 3 + 2 / 3) / 2)
    # scores rise with x: pairs (yes, no) ordered right: 9 and 7 beat all 3 no's, 2 beats 1.
    assert report["metrics"]["roc_auc"] == pytest.approx(7 / 9)
    assert report["job_id"] == "job-1"


def test_the_text_report_names_each_figure(tmp_path, capsys):
    model, data, schema = write_files(tmp_path, CLASSIFIER, [2.0, -1.0], TEST_ROWS)
    assert main(["evaluate", "--model", str(model), "--data", str(data), "--schema",
                 str(schema)]) == 0
    out = capsys.readouterr().out
    assert "6 records, binary classification" in out
    assert re.search(r"accuracy\s+0\.6667", out) and re.search(r"ROC AUC\s+0\.7778", out)


def test_a_regression_is_scored_by_mse_mae_and_r2(tmp_path, capsys):
    schema = Schema(label="y", numeric=("x",))
    files = write_files(tmp_path, schema, [2.0], "x,y\n1,2\n2,5\n3,6\n")
    metrics = evaluate_json(*files, capsys)["metrics"]
    # predictions 2, 4, 6; residuals 0, 1, 0; mean label 13/3.
    assert metrics["mse"] == pytest.approx(1 / 3) and metrics["mae"] == pytest.approx(1 / 3)
    total = sum((y - 13 / 3) ** 2 for y in (2, 5, 6))
    assert metrics["r2"] == pytest.approx(1 - 1 / total)


def test_a_multiclass_model_predicts_the_class_of_its_largest_score(tmp_path, capsys):
    schema = Schema(label="y", categorical={"c": ("a", "b", "c")},
                    label_map={"ant": 0.0, "bee": 1.0, "cat": 2.0})
    weights = np.eye(3)  # the category's indicator is the class's score
    files = write_files(tmp_path, schema, weights, "c,y\na,ant\nb,bee\nc,cat\nc,ant\n")
    report = evaluate_json(*files, capsys)
    assert report["task"] == "multi-class classification"
    assert report["metrics"]["accuracy"] == pytest.approx(3 / 4)


def test_a_model_of_another_schema_is_refused_naming_the_first_differing_feature(
        tmp_path, capsys):
    model, data, _ = write_files(tmp_path, CLASSIFIER, [2.0, -1.0], TEST_ROWS)
    other = Schema(label="y", numeric=("z",), numeric_scale={"z": (0.0, 10.0)},
                   label_map={"no": -1.0, "yes": 1.0}, intercept=True)
    (tmp_path / "other.toml").write_text(other.to_toml())
    data.write_text(TEST_ROWS.replace("x,y", "z,y"))
    assert main(["evaluate", "--model", str(model), "--data", str(data), "--schema",
                 str(tmp_path / "other.toml")]) == 2
    err = capsys.readouterr().err
    assert "trained under another schema" in err and "'x' in the model, 'z' in the schema" in err


def test_a_model_of_another_dimension_is_refused(tmp_path, capsys):
    model, data, schema = write_files(tmp_path, CLASSIFIER, [2.0, -1.0, 0.0], TEST_ROWS)
    assert main(["evaluate", "--model", str(model), "--data", str(data), "--schema",
                 str(schema)]) == 2
    assert "the model weighs 3 features but the schema gives 2" in capsys.readouterr().err


def test_a_missing_model_file_is_one_line_without_traceback(tmp_path):
    _, data, schema = write_files(tmp_path, CLASSIFIER, [2.0, -1.0], TEST_ROWS)
    result = subprocess.run([sys.executable, "-m", "privadapt.cli.main", "evaluate", "--model",
                             str(tmp_path / "nope.npz"), "--data", str(data), "--schema",
                             str(schema)], capture_output=True, text=True, check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "model file not found" in result.stderr


def test_roc_auc_is_the_share_of_positive_negative_pairs_ordered_right_ties_half():
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 5, 40).astype(float)  # many ties
    positive = rng.random(40) < 0.4
    pairs = list(itertools.product(scores[positive], scores[~positive]))
    by_pairs = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in pairs) / len(pairs)
    assert roc_auc(positive, scores) == pytest.approx(by_pairs)
    assert roc_auc(np.ones(3, dtype=bool), np.arange(3.0)) is None


def test_balanced_accuracy_weighs_each_class_alike():
    labels = np.array([1, 1, 1, 1, -1.0])
    assert balanced_accuracy(labels, np.ones(5)) == pytest.approx(0.5)
