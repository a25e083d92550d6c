"""The seed 002 transfer experiment runs end to end with ``--quick``: a CSV row
per method, k and epsilon with finite SSEs, the ledgers within each epsilon,
and the PNG."""

import csv
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_quick_run_writes_every_cell_within_its_epsilon(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "experiments.seed002.transfer", "--quick", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "transfer.png").stat().st_size > 1000
    with open(tmp_path / "transfer.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    cells = {(r["method"], r["k"], float(r["epsilon"])) for r in rows}
    for epsilon in (0.5, 1.0, 3.0, math.inf):
        for k in ("0", "5", "10", "15", "20"):
            assert ("transfer", k, epsilon) in cells
        for method in ("dp_fw", "dp_fw_sum", "noisy_gd"):
            assert (method, "", epsilon) in cells
    for row in rows:
        assert math.isfinite(float(row["sse_mean"]))
        assert float(row["ledger_epsilon_max"]) <= float(row["epsilon"])
    # The informative sources are found whenever there are some.
    assert all(float(r["informative_recall"]) == 1.0 for r in rows
               if r["method"] == "transfer" and r["k"] != "0")
