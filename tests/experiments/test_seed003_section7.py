"""Seed 003's Section 7 script runs end to end with ``--quick`` and writes both
figures' CSVs with every line and finite numbers."""

import csv
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_section7_quick_writes_both_figures(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "experiments.seed003.section7", "--quick", "--out",
         str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    for name, expected in (
        ("figure1", {"noisy_fw", "noisy_md", "federated_fw", "two_stage_fw_nonprivate"}),
        ("figure2", {"single_stage_fw", "two_stage_fw", "two_stage_md", "public_only",
                     "oracle", "single_stage_fw_nonprivate", "federated_two_stage_fw"}),
    ):
        with open(tmp_path / f"{name}.csv", newline="") as handle:
            rows = list(csv.DictReader(handle))
        assert expected <= {row["method"] for row in rows}
        assert all(math.isfinite(float(row["mean"])) for row in rows)
        assert (tmp_path / f"{name}.png").stat().st_size > 1000


@pytest.mark.slow
def test_section7_quick_networked_runs_the_federated_route_over_site_daemons(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "experiments.seed003.section7", "--quick", "--networked",
         "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=180,
        check=False)
    assert result.returncode == 0, result.stderr
    assert "site daemons on 127.0.0.1" in result.stdout
    with open(tmp_path / "figure1.csv", newline="") as handle:
        federated = [row for row in csv.DictReader(handle) if row["method"] == "federated_fw"]
    assert {row["epsilon"] for row in federated} == {"1.0", "10.0"}
    assert all(math.isfinite(float(row["mean"])) for row in federated)
