"""Seed 001's cost-table script runs end to end with ``--quick``: a CSV with a
row per (dataset, method, privacy, coreset, sites, k), finite costs inside
[0, 1] (every point is in the ball of radius 1/2), the non-private STC never
worse than ClusterT, NNA over 3 sites present, a PNG and a printed table; and
it resumes from its log of finished units without recomputing any.

One quick run serves every test here (module fixture): the restart and the
networked check continue from copies of its output."""

import csv
import math
import shutil
from pathlib import Path

import pytest

from tests.experiments.script_runs import ScriptRun, run_script


def _quick(out: Path, *options: str) -> ScriptRun:
    result = run_script("experiments.seed001.cost_tables", "--quick", "--out", str(out),
                        *options)
    assert result.returncode == 0, result.stderr
    return result


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory) -> tuple[ScriptRun, Path]:
    """The quick tables from scratch (32 units: 2 datasets x 16 rows), and their folder."""
    out = tmp_path_factory.mktemp("cost_tables") / "out"
    return _quick(out), out


@pytest.mark.slow
def test_quick_cost_tables(quick_run):
    result, out = quick_run
    assert (out / "cost_tables_quick.png").stat().st_size > 1000
    with open(out / "cost_tables_quick.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert {r["dataset"] for r in rows} == {"synthetic_2", "digits_1to7"}
    assert {r["method"] for r in rows} == {"NNA", "NAS", "ClusterT", "PrivateKmeans (DP Lloyd)",
                                           "DP mixture (for DP-GAN)", "STC (non-private)"}
    assert all(0 <= float(r["cost_mean"]) <= 1 and math.isfinite(float(r["cost_mean"]))
               for r in rows)
    for dataset in ("synthetic_2", "digits_1to7"):
        for privacy in ("eps=3", "rho=3"):
            nna = {(r["coreset"], r["sites"]) for r in rows if r["dataset"] == dataset
                   and r["method"] == "NNA" and r["privacy"] == privacy}
            assert nna == {("yes", "1"), ("no", "1"), ("yes", "3")}
        for k in ("10", "70"):
            cost = {r["method"]: float(r["cost_mean"]) for r in rows
                    if r["dataset"] == dataset and r["k"] == k and r["privacy"] == "none"}
            assert cost["STC (non-private)"] <= cost["ClusterT"] + 1e-12
    assert "k=70" in result.stdout


@pytest.mark.slow
def test_quick_networked_nna_through_site_daemons_equals_in_process_without_noise(
        quick_run, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(quick_run[1], out)  # every unit logged: only the daemons' check runs
    result = _quick(out, "--networked", "--datasets", "synthetic_2")
    assert "0 to do" in result.stderr
    with open(out / "cost_tables_quick_networked.csv", newline="") as handle:
        (row,) = list(csv.DictReader(handle))
    assert row["dataset"] == "synthetic_2" and row["sites"] == "3"
    assert row["noise_free_equal"] == "True" and float(row["max_abs_difference"]) == 0.0
    assert int(row["targets_sent"]) > 0 and 0 <= float(row["private_cost"]) <= 1
    assert "site daemons" in result.stdout


@pytest.mark.slow
def test_a_restart_does_no_work_and_a_resumed_table_equals_one_from_scratch(quick_run,
                                                                           tmp_path):
    """Each unit (one release of one row, costed at every k) is logged as it
    finishes; a second run recomputes nothing, and a run cut short (a torn
    last line) then restarted ends with the from-scratch table."""
    first, scratch = quick_run
    out = tmp_path / "out"
    shutil.copytree(scratch, out)
    log, table = out / "cost_tables_quick_runs.csv", out / "cost_tables_quick.csv"
    whole_log, whole_table = log.read_bytes(), table.read_bytes()
    header, *units = whole_log.decode().splitlines()
    assert len(units) == 32 and "[32/32]" in first.stderr

    second = _quick(out)
    assert "32 units already done, 0 to do" in second.stderr and "[1/" not in second.stderr
    assert log.read_bytes() == whole_log and table.read_bytes() == whole_table
    printed = _quick(out, "--tables-only")
    assert "k=70" in printed.stdout and printed.stdout in second.stdout

    log.write_text("\n".join([header, *units[:28]]) + "\n" + units[28][:25])
    third = _quick(out)
    assert "28 units already done, 4 to do" in third.stderr
    assert sorted(log.read_text().splitlines()) == sorted(whole_log.decode().splitlines())
    assert table.read_bytes() == whole_table
