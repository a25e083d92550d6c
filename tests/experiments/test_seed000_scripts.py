"""Each seed 000 experiment script runs end to end with ``--quick`` and writes a
CSV with the expected rows and finite numbers."""

import csv
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_script(name, out):
    result = subprocess.run(
        [sys.executable, "-m", f"experiments.seed000.{name}", "--quick", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 0, result.stderr
    with open(out / f"{name}.csv", newline="") as handle:
        return result.stdout, list(csv.DictReader(handle))


def finite(rows, column):
    return all(math.isfinite(float(row[column])) for row in rows)


@pytest.mark.slow
def test_table1_writes_relative_mse_for_every_method(tmp_path):
    out, rows = run_script("table1", tmp_path)
    assert [r["method"] for r in rows] == ["target-only", "source-only", "pooled", "KMM",
                                           "CnvxAdap"]
    assert finite(rows, "relative_mse_mean") and finite(rows, "test_mse_mean")
    assert float(rows[0]["relative_mse_mean"]) == pytest.approx(1.0)
    assert "DM: not implemented" in out and "non-private" in out


@pytest.mark.slow
def test_figure1_writes_every_epsilon_and_size_with_the_ledger_epsilon(tmp_path):
    _, rows = run_script("figure1", tmp_path)
    sizes = sorted({int(r["n"]) for r in rows})
    assert len(sizes) == 2
    for n in sizes:
        cells = {(r["method"], float(r["epsilon"])) for r in rows if int(r["n"]) == n}
        assert ("CnvxAdap", math.inf) in cells
        for epsilon in (0.5, 1.0, 5.0, 10.0, 15.0):
            assert ("PCnvxAdap", epsilon) in cells
            assert ("noisy GD (target only)", epsilon) in cells
    assert finite(rows, "test_mse_mean")
    for row in rows:
        if math.isfinite(float(row["epsilon"])):
            assert float(row["ledger_epsilon"]) <= float(row["epsilon"]) + 1e-9


@pytest.mark.slow
def test_table4_writes_accuracies_and_private_runs_respect_epsilon(tmp_path):
    _, rows = run_script("table4", tmp_path)
    methods = [r["method"] for r in rows]
    assert methods[:4] == ["train source", "train target (non-private)", "KMM", "NCnvxAdap"]
    assert {m for m in methods if m.startswith("PNCnvxAdap")} == {
        "PNCnvxAdap eps=1", "PNCnvxAdap eps=3", "PNCnvxAdap eps=10"}
    assert finite(rows, "accuracy_mean_percent")
    assert all(50.0 < float(r["accuracy_mean_percent"]) <= 100.0 for r in rows)
    for row in rows[4:]:
        epsilon = float(row["method"].split("=")[1])
        assert 0 < float(row["ledger_epsilon"]) <= epsilon + 1e-9
