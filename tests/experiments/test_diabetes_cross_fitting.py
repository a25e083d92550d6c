"""experiments/diabetes_cross_fitting.py: the statistics' sensitivity and
the budgets it reports hold as derived, its certificates keep source-only
when nothing is certified, and the study runs end to end with ``--quick``."""

import csv
import math

import numpy as np
import pytest

from experiments.diabetes_cross_fitting import (
    DESIGNS,
    STATS_SENSITIVITY,
    shift_certificate,
    site_releases,
    spent,
)
from privadapt.common.accounting.calibration import calibrate_noise_multiplier
from tests.experiments.script_runs import run_script


def statistic(x, y):
    return np.concatenate([np.outer(x, x).ravel(), x * y])


def test_the_statistics_move_by_at_most_their_sensitivity_under_replace_one():
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(2000):
        x, x2 = (v / max(1.0, np.linalg.norm(v)) for v in rng.normal(size=(2, 10)))
        y, y2 = rng.uniform(-1, 1, size=2)
        worst = max(worst, np.linalg.norm(statistic(x, y) - statistic(x2, y2)))
    assert worst <= STATS_SENSITIVITY
    # The bound is attained: unit records at x.x' = -1/2 with labels of one sign.
    x = np.zeros(10)
    x[0] = 1.0
    x2 = np.zeros(10)
    x2[:2] = [-0.5, math.sqrt(0.75)]
    assert np.linalg.norm(statistic(x, 1.0) - statistic(x2, 1.0)) == pytest.approx(
        STATS_SENSITIVITY)


def test_cross_fitting_fits_epsilon_only_with_parallel_composition_or_halved_shares():
    z_total = calibrate_noise_multiplier(10.0, 1e-5, 1)
    today, parallel = (spent(r, z_total) for r in site_releases(
        DESIGNS["cross-fit: ball GD, parallel"], 200))
    assert parallel == pytest.approx(10.0, rel=0.01) and today > 13.0
    today, parallel = (spent(r, z_total) for r in site_releases(
        DESIGNS["cross-fit: ball GD, sequential"], 200))
    assert today == pytest.approx(10.0, rel=0.01) and parallel < today


def test_a_shift_no_better_than_its_noise_keeps_source_only():
    fold = {"shift": -0.1, "residual": -5.0, "sigma": 3.0, "size": 50}
    assert shift_certificate([fold, fold])["index"] == 0
    exact = {**fold, "sigma": 0.0}
    assert shift_certificate([exact, exact])["index"] == 1


@pytest.mark.slow  # a few seconds of CPU
def test_quick_writes_every_design(tmp_path):
    result = run_script("experiments.diabetes_cross_fitting", "--quick", "--out",
                        str(tmp_path / "designs.csv"))
    assert result.returncode == 0, result.stderr
    with open(tmp_path / "designs.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert {r["design"] for r in rows} == set(DESIGNS)
    for row in rows:  # with parallel composition every design fits its epsilon
        if row["epsilon"] != "inf":
            assert float(row["epsilon_parallel"]) <= float(row["epsilon"]) * 1.001
