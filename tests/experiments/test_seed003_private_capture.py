"""Seed 003's private-capture study runs every part at a tiny size and writes
one row per run, each paired with public-only and the oracle on its draw."""

import csv
import math

import pytest

from tests.experiments.script_runs import run_script


@pytest.mark.slow
def test_private_capture_quick_writes_every_part(tmp_path):
    out = tmp_path / "capture.csv"
    result = run_script("experiments.seed003.private_capture", "--quick", "--out", str(out))
    assert result.returncode == 0, result.stderr
    with open(out, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert {row["part"] for row in rows} == {"iterations", "mu", "noise_free", "single_stage"}
    assert {(row["method"], row["iterations"]) for row in rows if row["part"] == "iterations"} \
        == {(method, count) for method in ("noisy_fw", "noisy_md") for count in ("5", "10")}
    assert {row["mu_factor"] for row in rows if row["part"] == "mu"} == {"0.3", "1.0"}
    # Alg. 1 runs on the released M_0 and on the exact one.
    stage = [row for row in rows if row["part"] == "single_stage"]
    assert {row["epsilon"] for row in stage} == {"10.0", "inf"}
    # Exact M_0 once per draw, whatever the number of epsilons: 2 K x 2 mu factors.
    assert len([row for row in stage if row["epsilon"] == "inf"]) == 4
    for row in rows:
        assert all(math.isfinite(float(row[c])) for c in ("test_mse", "public_only", "oracle"))
    free = [row for row in rows if row["part"] == "noise_free"]
    assert free and all(float(row["noise_scale"]) == 0 for row in free)
    noisy = [row for row in rows if row["part"] == "iterations"]
    assert all(float(row["noise_scale"]) > 0 for row in noisy)
