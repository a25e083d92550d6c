"""experiments/adapter_study.py runs end to end with ``--quick`` (about 10 s),
writes its CSV, and the new default plan does what the study claims on its
fixed seeds: better than the previous defaults, no worse as epsilon grows,
and within reach of the non-private adapter at epsilon 10; the privately
selected model is never worse than source-only by more than 1% (the
usefulness target, 90th percentile over splits), and the oracle is labelled non-private."""

import csv
import subprocess
import sys

import pytest

from tests.experiments.script_runs import run_script
from tests.paths import REPO_ROOT


@pytest.mark.slow
def test_adapter_study_quick_writes_the_table(tmp_path):
    result = run_script("experiments.adapter_study", "--quick", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "gap to non-private %" in result.stdout
    with open(tmp_path / "adapter_study_quick.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    cell = {(r["dataset"], r["method"], float(r["epsilon"])): r for r in rows}
    datasets = {r["dataset"] for r in rows}
    # 7 methods: with the smooth step, the private selection and its non-private oracle
    assert len(datasets) == 2 and len(rows) == 2 * 7 * 3
    assert {r["method"] for r in rows} >= {"selected (private)", "oracle (non-private)"}
    for dataset in datasets:  # both regressions: lower MSE is better
        mse = {(m, e): float(cell[dataset, m, e]["metric_mean"])
               for m in ("before", "after") for e in (1.0, 3.0, 10.0)}
        for epsilon in (1.0, 3.0, 10.0):
            assert mse["after", epsilon] < mse["before", epsilon]
        assert mse["after", 1.0] >= mse["after", 3.0] >= mse["after", 10.0]
        smooth = [float(cell[dataset, "after, smooth step", e]["metric_mean"])
                  for e in (1.0, 3.0, 10.0)]
        assert smooth[0] >= smooth[1] >= smooth[2]
        assert float(cell[dataset, "after", 10.0]["gap_to_nonprivate_percent"]) < 10.0
        for epsilon in (1.0, 3.0, 10.0):
            selected = cell[dataset, "selected (private)", epsilon]
            assert float(selected["p90_shortfall_percent"]) <= 1.0


@pytest.mark.slow  # about 10 s of CPU
def test_the_grid_runs_beside_the_default_selection_into_its_own_csv(tmp_path):
    """--grid: the selection job with the grid's private candidates (ADAPTER
    standing for the task's adapter) next to the one without it; the p90
    target holds for both and the oracle rows say they are non-private."""
    # One of the two tasks: the grid's code path is the same for both.
    result = run_script("experiments.adapter_study", "--quick", "--grid",
                        "noisy_gd, noisy_gd:iterations=25, ADAPTER, ADAPTER_smooth",
                        "--tasks", "diabetes sex1->sex2@100", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "adapter_study_quick.csv").exists()
    with open(tmp_path / "adapter_study_quick_grid.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    methods = {r["method"] for r in rows}
    assert {"selected (private)", "selected, grid (private)",
            "oracle, grid (non-private)"} <= methods
    assert {r["dataset"] for r in rows} == {"diabetes sex1->sex2"} and len(rows) == 9 * 3
    for row in rows:
        if row["method"].startswith("selected"):
            assert float(row["p90_shortfall_percent"]) <= 1.0, row


def test_the_grid_needs_a_selection():
    result = subprocess.run(
        [sys.executable, "-m", "experiments.adapter_study", "--grid", "noisy_gd"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode != 0 and "--grid needs" in result.stderr


def test_the_grid_names_the_tasks_adapter():
    from experiments.adapter_study import selection_settings, study_tasks
    for task, _ in study_tasks(quick=True):
        settings = selection_settings(task, 1.0, 0, grid="noisy_gd, ADAPTER_smooth:alpha=0.2")
        assert settings["candidates"] == "noisy_gd, pcnvx_adap_smooth:alpha=0.2"
        assert selection_settings(task, 1.0, 0)["candidates"] == "noisy_gd,pcnvx_adap_smooth"
