"""The seed 002 transfer experiment runs end to end with ``--quick``: a CSV row
per method, k and epsilon with finite SSEs, the ledgers within each epsilon,
and the PNG. It resumes: a second run does no work and prints the same table,
and a run cut short then restarted ends with the table of a run from scratch."""

import csv
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO_ROOT


@pytest.mark.slow
def test_quick_run_writes_every_cell_within_its_epsilon(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "experiments.seed002.transfer", "--quick", "--out", str(tmp_path)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "transfer_quick.png").stat().st_size > 1000
    with open(tmp_path / "transfer_quick.csv", newline="") as handle:
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
        [sys.executable, "-m", "experiments.seed002.transfer", "--quick", "--design", "sparse",
         "--epsilons", "inf", "--auxiliary", "5", "--out", str(out), *options],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    stem = "transfer_quick_networked" if "--networked" in options else "transfer_quick"
    with open(out / f"{stem}.csv", newline="") as handle:
        return {(r["method"], r["k"], float(r["epsilon"])): r for r in csv.DictReader(handle)}


@pytest.mark.slow
def test_networked_run_prints_the_same_rows_as_in_process_without_noise(tmp_path):
    """Through site daemons (one per fit, each a new process: about 7 s a fit
    on a loaded machine, so only epsilon = inf and k = 5 here; the finite
    epsilons' networked ledgers are tested on the job itself in
    tests/system/test_network_dp_frank_wolfe_transfer.py)."""
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


def _quick(out: Path, *options: str) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "-m", "experiments.seed002.transfer", "--quick", "--out", str(out),
         *options], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    return result


@pytest.mark.slow
def test_a_restart_does_no_work_and_a_resumed_table_equals_one_from_scratch(tmp_path):
    """On 2 epsilons and 2 values of k (10 units; 20-50 s on a loaded machine)."""
    out = tmp_path / "out"
    cells = ("--design", "sparse", "--epsilons", "1", "inf", "--auxiliary", "0", "5")
    first = _quick(out, *cells)
    log, table = out / "transfer_quick_runs.csv", out / "transfer_quick.csv"
    whole_log, whole_table = log.read_bytes(), table.read_bytes()
    units = whole_log.decode().splitlines()[1:]
    assert len(units) == 2 * (3 + 2) and "[10/10]" in first.stderr

    second = _quick(out, *cells)
    assert "10 units already done, 0 to do" in second.stderr
    assert "] dp_fw" not in second.stderr and "] transfer" not in second.stderr  # no fit ran
    assert log.read_bytes() == whole_log and table.read_bytes() == whole_table
    assert second.stdout.split("total")[0] == first.stdout.split("total")[0]
    printed = _quick(out, "--design", "sparse", "--tables-only")
    assert printed.stdout in second.stdout
    assert "| inf | " in printed.stdout and log.read_bytes() == whole_log

    # Cut short: the first 4 units finished, the 5th torn mid-line by a kill.
    header = whole_log.decode().splitlines()[0]
    log.write_text("\n".join([header, *units[:4]]) + "\n" + units[4][:20])
    third = _quick(out, *cells)
    assert "4 units already done, 6 to do" in third.stderr
    assert sorted(log.read_text().splitlines()) == sorted(whole_log.decode().splitlines())
    assert table.read_bytes() == whole_table


@pytest.mark.slow
def test_a_unit_does_not_depend_on_what_ran_before_it(tmp_path):
    """Each unit's data and noise are seeded by its own key: transfer at k = 20
    and DP FW at epsilon = 1 alone give the rows they give in the whole table."""
    _quick(tmp_path / "alone", "--design", "sparse", "--epsilons", "1", "--auxiliary", "20")
    _quick(tmp_path / "reversed", "--design", "sparse", "--epsilons", "inf", "1",
           "--auxiliary", "20", "5")

    def rows(name: str) -> dict[tuple, str]:
        with open(tmp_path / name / "transfer_quick_runs.csv", newline="") as handle:
            return {(r["method"], r["k"], r["epsilon"]): r for r in csv.DictReader(handle)}

    alone, reversed_ = rows("alone"), rows("reversed")
    assert alone.keys() == {("dp_fw", "", "1.0"), ("dp_fw_sum", "", "1.0"),
                            ("noisy_gd", "", "1.0"), ("transfer", "20", "1.0")}
    for key, row in alone.items():
        assert reversed_[key] == row
