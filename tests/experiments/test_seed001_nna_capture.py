"""Seed 001's NNA-capture study runs at a tiny size: one row per stage,
privacy, diameter, gamma, calibration and k, with the ClusterT and STC
references and the share of STC's gain."""

import csv
import math

import pytest

from tests.experiments.script_runs import run_script


@pytest.mark.slow
def test_nna_capture_quick_writes_every_stage(tmp_path):
    out = tmp_path / "capture.csv"
    result = run_script("experiments.seed001.nna_capture", "--quick", "--privacies", "eps=3",
                        "rho=3", "--diameters", "0", "0.2", "--gammas", "0.05", "0.5",
                        "--calibrations", "accountant", "paper", "--out", str(out))
    assert result.returncode == 0, result.stderr
    with open(out, newline="") as handle:
        rows = list(csv.DictReader(handle))
    exact = [row for row in rows if row["stage"] == "exact"]
    # The exact stage has no privacy, gamma or calibration: once per diameter.
    assert len(exact) == 2 and {row["diameter"] for row in exact} == {"0.0", "0.2"}
    private = [row for row in rows if row["stage"] == "private"]
    assert len(private) == 2 * 2 * 2 * 2
    assert len([row for row in rows if row["stage"] == "exact_threshold"]) == len(private)
    for row in rows:
        assert 0 <= float(row["stc"]) <= float(row["cluster_t"]) <= 1
        share = (float(row["cluster_t"]) - float(row["cost_mean"])) / (
            float(row["cluster_t"]) - float(row["stc"]))
        assert math.isclose(float(row["share"]), share)


def test_a_stricter_threshold_keeps_fewer_exact_cells():
    from experiments.seed001 import datasets as ds
    from experiments.seed001.nna_capture import Variant, stand_in_source

    data = ds.digits_pair((1, 7), 0)  # ~180 source points over ~180 cells: small counts
    kept = [len(stand_in_source(data, Variant(stage, "eps=3", 0.0, gamma, "accountant"), 0))
            for stage, gamma in (("exact", math.nan), ("exact_threshold", 0.2),
                                 ("exact_threshold", 0.001))]
    assert kept[0] > kept[1] > kept[2] > 0
