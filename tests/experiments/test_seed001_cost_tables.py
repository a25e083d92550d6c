"""Seed 001's cost-table script runs end to end with ``--quick``: a CSV with a
row per (dataset, method, privacy, coreset, sites, k), finite costs inside
[0, 1] (every point is in the ball of radius 1/2), the non-private STC never
worse than ClusterT, NNA over 3 sites present, a PNG and a printed table; and
it resumes from its log of finished units without recomputing any."""

import csv
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO_ROOT


@pytest.mark.slow
def test_quick_cost_tables(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "experiments.seed001.cost_tables", "--quick", "--out",
         str(tmp_path)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=240, check=False)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "cost_tables_quick.png").stat().st_size > 1000
    with open(tmp_path / "cost_tables_quick.csv", newline="") as handle:
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
def test_quick_networked_nna_through_site_daemons_equals_in_process_without_noise(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "experiments.seed001.cost_tables", "--quick", "--networked",
         "--datasets", "synthetic_2", "--out", str(tmp_path)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=240, check=False)
    assert result.returncode == 0, result.stderr
    with open(tmp_path / "cost_tables_quick_networked.csv", newline="") as handle:
        (row,) = list(csv.DictReader(handle))
    assert row["dataset"] == "synthetic_2" and row["sites"] == "3"
    assert row["noise_free_equal"] == "True" and float(row["max_abs_difference"]) == 0.0
    assert int(row["targets_sent"]) > 0 and 0 <= float(row["private_cost"]) <= 1
    assert "site daemons" in result.stdout


def _quick(out: Path, *options: str) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "-m", "experiments.seed001.cost_tables", "--quick", "--out", str(out),
         *options], cwd=REPO_ROOT, capture_output=True, text=True, timeout=240, check=False)
    assert result.returncode == 0, result.stderr
    return result


@pytest.mark.slow
def test_a_restart_does_no_work_and_a_resumed_table_equals_one_from_scratch(tmp_path):
    """Each unit (one release of one row, costed at every k) is logged as it
    finishes; a second run recomputes nothing, and a run cut short (a torn
    last line) then restarted ends with the from-scratch table."""
    out = tmp_path / "out"
    first = _quick(out, "--datasets", "synthetic_2")
    log, table = out / "cost_tables_quick_runs.csv", out / "cost_tables_quick.csv"
    whole_log, whole_table = log.read_bytes(), table.read_bytes()
    header, *units = whole_log.decode().splitlines()
    assert len(units) == 16 and "[16/16]" in first.stdout

    second = _quick(out, "--datasets", "synthetic_2")
    assert "16 units already done, 0 to do" in second.stdout and "[1/" not in second.stdout
    assert log.read_bytes() == whole_log and table.read_bytes() == whole_table
    printed = _quick(out, "--datasets", "synthetic_2", "--tables-only")
    assert "k=70" in printed.stdout and printed.stdout in second.stdout

    log.write_text("\n".join([header, *units[:4]]) + "\n" + units[4][:25])
    third = _quick(out, "--datasets", "synthetic_2")
    assert "4 units already done, 12 to do" in third.stdout
    assert sorted(log.read_text().splitlines()) == sorted(whole_log.decode().splitlines())
    assert table.read_bytes() == whole_table

