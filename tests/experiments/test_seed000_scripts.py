"""Each seed 000 experiment script runs end to end with ``--quick`` and writes a
CSV with the expected rows and finite numbers."""

import csv
import math

import pytest

from tests.experiments.script_runs import run_script as run_main


def run_script(name, out, *extra):
    result = run_main(f"experiments.seed000.{name}", "--quick", "--out", str(out), *extra)
    assert result.returncode == 0, result.stderr
    assert (out / f"{name}.png").stat().st_size > 1000  # matplotlib: an experiments extra
    with open(out / f"{name}.csv", newline="") as handle:
        return result.stdout, list(csv.DictReader(handle))


def finite(rows, column):
    return all(math.isfinite(float(row[column])) for row in rows)


@pytest.mark.slow
def test_table1_writes_relative_mse_for_every_method(tmp_path):
    out, rows = run_script("table1", tmp_path, "--splits", "1")
    methods = ["target-only", "source-only", "pooled", "KMM", "DM", "CnvxAdap"]
    for dataset in ("synthetic", "diabetes"):
        mine = [r for r in rows if r["dataset"] == dataset]
        assert [r["method"] for r in mine] == methods
        assert float(mine[0]["relative_mse_mean"]) == pytest.approx(1.0)
    assert finite(rows, "relative_mse_mean") and finite(rows, "test_mse_mean")
    assert "non-private" in out


@pytest.mark.slow
def test_figure1_writes_every_epsilon_and_size_with_the_ledger_epsilon(tmp_path):
    # Two of the five epsilons: noisy SGD's calibration (sampled Gaussian PLDs)
    # takes seconds per fit, growing with epsilon (about 40 s at 15).
    _, rows = run_script("figure1", tmp_path, "--epsilons", "0.5", "1")
    sizes = sorted({int(r["n"]) for r in rows})
    assert len(sizes) == 2
    for n in sizes:
        cells = {(r["method"], float(r["epsilon"])) for r in rows if int(r["n"]) == n}
        assert ("CnvxAdap", math.inf) in cells
        assert len(cells) == 1 + 3 * 2
        for epsilon in (0.5, 1.0):
            assert ("PCnvxAdap", epsilon) in cells
            assert ("noisy GD (target only)", epsilon) in cells
            assert ("noisy SGD (target only)", epsilon) in cells
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


@pytest.mark.slow
def test_figure4_writes_every_line_at_every_size_within_its_epsilon(tmp_path):
    _, rows = run_script("figure4", tmp_path)
    sizes = {int(r["n"]) for r in rows}
    assert len(sizes) == 2
    for n in sizes:
        lines = {(r["method"], float(r["epsilon"])) for r in rows if int(r["n"]) == n}
        assert {("NCnvxAdap", math.inf), ("train source", math.inf)} <= lines
        assert {e for m, e in lines if m == "PNCnvxAdap"} == {1.0, 5.0, 10.0, 15.0}
    assert all(50.0 < float(r["accuracy_mean_percent"]) <= 100.0 for r in rows)
    for row in rows:
        if row["method"] == "PNCnvxAdap":
            assert 0 < float(row["ledger_epsilon"]) <= float(row["epsilon"]) + 1e-9


def discrepancy_rows(rows):
    exact = float(next(r for r in rows if r["method"] == "exact d-hat")["d_dp_mean"])
    private = [r for r in rows if r["method"] in ("federated", "single holder")]
    return exact, private


@pytest.mark.slow
def test_discrepancy_estimates_stay_near_the_exact_value_within_their_epsilon(tmp_path):
    _, rows = run_script("discrepancy", tmp_path)
    exact, private = discrepancy_rows(rows)
    assert {r["method"] for r in private} == {"federated", "single holder"}
    for row in private:
        assert float(row["ledger_epsilon"]) <= float(row["epsilon"]) + 1e-9
        # At epsilon = 1 on 9,782 records both estimates land within 5% of d-hat.
        assert abs(float(row["d_dp_mean"]) - exact) < 0.05 * exact


@pytest.mark.slow
def test_discrepancy_runs_through_site_daemons_with_networked(tmp_path):
    out, rows = run_script("discrepancy", tmp_path, "--networked")
    exact, private = discrepancy_rows(rows)
    assert "sites: site daemons on 127.0.0.1" in out
    for row in private:
        assert 0 < float(row["ledger_epsilon"]) <= float(row["epsilon"]) + 1e-9
        assert abs(float(row["d_dp_mean"]) - exact) < 0.05 * exact
