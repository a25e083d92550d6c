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



def _run(out: Path, *options: str) -> dict[tuple, dict]:
    result = subprocess.run(
        [sys.executable, "-m", "experiments.seed002.transfer", "--quick", "--epsilons", "inf",
         "--auxiliary", "5", "--out", str(out), *options],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    with open(out / "transfer.csv", newline="") as handle:
        return {(r["method"], r["k"], float(r["epsilon"])): r for r in csv.DictReader(handle)}


@pytest.mark.slow
def test_networked_run_prints_the_same_rows_as_in_process_without_noise(tmp_path):
    """Through site daemons (one per fit, each a new process: about 7 s a fit
    on a loaded machine, so only epsilon = inf and k = 5 here; the finite
    epsilons' networked ledgers are tested on the job itself in
    tests/test_network_dp_frank_wolfe_transfer.py)."""
    networked = _run(tmp_path / "net", "--networked")
    local = _run(tmp_path / "local")
    assert networked.keys() == local.keys() == {
        ("dp_fw", "", math.inf), ("dp_fw_sum", "", math.inf), ("noisy_gd", "", math.inf),
        ("transfer", "5", math.inf)}
    for key, row in networked.items():
        # Without noise the site daemons compute what in-process sites do.
        assert float(row["sse_mean"]) == pytest.approx(float(local[key]["sse_mean"]),
                                                       rel=1e-9, abs=1e-12)
    assert float(networked[("transfer", "5", math.inf)]["informative_recall"]) == 1.0
