"""The seed 002 transfer experiment runs end to end with ``--quick``: a CSV row
per method, k and epsilon with finite SSEs, the ledgers within each epsilon,
and the PNG. It resumes: a second run does no work and prints the same table,
and a run cut short then restarted ends with the table of a run from scratch.

One quick run of the sparse design (module fixture; the low design's has its
own test), on epsilon 1 and inf and k = 0, 5, 20 (each cell's code path; the
other values only repeat it), serves every test here: the restart continues
from a copy of its output, and the networked and single-cell runs are
compared with its rows."""

import csv
import math
import shutil
from pathlib import Path

import pytest

from tests.experiments.script_runs import ScriptRun, run_script


def _quick(out: Path, *options: str) -> ScriptRun:
    result = run_script("experiments.seed002.transfer", "--quick", "--out", str(out),
                        *options)
    assert result.returncode == 0, result.stderr
    return result


def _rows(path: Path) -> dict[tuple, dict[str, str]]:
    with open(path, newline="") as handle:
        return {(r["method"], r["k"], float(r["epsilon"])): r for r in csv.DictReader(handle)}


EPSILONS, AUXILIARY = (1.0, math.inf), ("0", "5", "20")
CELLS = ("--design", "sparse", "--epsilons", "1", "inf", "--auxiliary", *AUXILIARY)


@pytest.fixture(scope="module")
def sparse_run(tmp_path_factory) -> tuple[ScriptRun, Path]:
    """The sparse design's quick table from scratch on one finite epsilon and
    no noise, without and with informative sources (2 epsilons x (3 k + 3
    target-only methods) = 12 units), and its folder."""
    out = tmp_path_factory.mktemp("transfer") / "out"
    return _quick(out, *CELLS), out


@pytest.mark.slow
def test_quick_run_writes_every_cell_within_its_epsilon(sparse_run):
    out = sparse_run[1]
    assert (out / "transfer_quick.png").stat().st_size > 1000
    with open(out / "transfer_quick.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    cells = {(r["method"], r["k"], float(r["epsilon"])) for r in rows}
    assert len(rows) == len(EPSILONS) * (len(AUXILIARY) + 3)
    for epsilon in EPSILONS:
        for k in AUXILIARY:
            assert ("transfer", k, epsilon) in cells
        for method in ("dp_fw", "dp_fw_sum", "noisy_gd"):
            assert (method, "", epsilon) in cells
    for row in rows:
        assert math.isfinite(float(row["sse_mean"]))
        assert float(row["ledger_epsilon_max"]) <= float(row["epsilon"])
    # The informative sources are found whenever there are some.
    assert all(float(r["informative_recall"]) == 1.0 for r in rows
               if r["method"] == "transfer" and r["k"] != "0")


@pytest.mark.slow
def test_networked_run_prints_the_same_rows_as_in_process_without_noise(sparse_run, tmp_path):
    """Through site daemons (one per fit, each a new process: about 7 s a fit
    on a loaded machine, so only epsilon = inf and k = 5 here; the finite
    epsilons' networked ledgers are tested on the job itself in
    tests/system/test_network_dp_frank_wolfe_transfer.py)."""
    _quick(tmp_path, "--design", "sparse", "--epsilons", "inf", "--auxiliary", "5",
           "--networked")
    networked = _rows(tmp_path / "transfer_quick_networked.csv")
    local = _rows(sparse_run[1] / "transfer_quick.csv")
    assert networked.keys() == {
        ("dp_fw", "", math.inf), ("dp_fw_sum", "", math.inf), ("noisy_gd", "", math.inf),
        ("transfer", "5", math.inf)}
    for key, row in networked.items():
        # Without noise the site daemons compute what in-process sites do.
        assert float(row["sse_mean"]) == pytest.approx(float(local[key]["sse_mean"]),
                                                       rel=1e-9, abs=1e-12)
    assert float(networked[("transfer", "5", math.inf)]["informative_recall"]) == 1.0


@pytest.mark.slow
def test_a_restart_does_no_work_and_a_resumed_table_equals_one_from_scratch(sparse_run,
                                                                           tmp_path):
    first, scratch = sparse_run
    out = tmp_path / "out"
    shutil.copytree(scratch, out)
    log, table = out / "transfer_quick_runs.csv", out / "transfer_quick.csv"
    whole_log, whole_table = log.read_bytes(), table.read_bytes()
    units = whole_log.decode().splitlines()[1:]
    assert len(units) == 12 and "[12/12]" in first.stderr

    second = _quick(out, *CELLS)
    assert "12 units already done, 0 to do" in second.stderr
    assert "] dp_fw" not in second.stderr and "] transfer" not in second.stderr  # no fit ran
    assert log.read_bytes() == whole_log and table.read_bytes() == whole_table
    before_total = first.stdout.split("total")[0].replace(str(scratch), str(out))
    assert second.stdout.split("total")[0] == before_total
    printed = _quick(out, "--design", "sparse", "--tables-only")
    assert printed.stdout in second.stdout
    assert "| inf | " in printed.stdout and log.read_bytes() == whole_log

    # Cut short: the first 8 units finished, the 9th torn mid-line by a kill.
    header = whole_log.decode().splitlines()[0]
    log.write_text("\n".join([header, *units[:8]]) + "\n" + units[8][:20])
    third = _quick(out, *CELLS)
    assert "8 units already done, 4 to do" in third.stderr
    assert sorted(log.read_text().splitlines()) == sorted(whole_log.decode().splitlines())
    assert table.read_bytes() == whole_table


@pytest.mark.slow
def test_a_unit_does_not_depend_on_what_ran_before_it(sparse_run, tmp_path):
    """Each unit's data and noise are seeded by its own key: transfer at k = 20
    and DP FW at epsilon = 1 alone give the rows they give in the whole table."""
    _quick(tmp_path, "--design", "sparse", "--epsilons", "1", "--auxiliary", "20")
    alone = _rows(tmp_path / "transfer_quick_runs.csv")
    whole = _rows(sparse_run[1] / "transfer_quick_runs.csv")
    assert alone.keys() == {("dp_fw", "", 1.0), ("dp_fw_sum", "", 1.0),
                            ("noisy_gd", "", 1.0), ("transfer", "20", 1.0)}
    for key, row in alone.items():
        assert whole[key] == row
