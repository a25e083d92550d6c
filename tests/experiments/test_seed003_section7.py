"""Seed 003's Section 7 script runs end to end with ``--quick`` and writes both
figures' CSVs with every line and finite numbers."""

import csv
import math

import numpy as np
import pytest

from experiments.seed003 import section7
from privadapt.server.algorithms.discrepancy_minimization.single_stage_frank_wolfe import (
    single_stage_frank_wolfe,
)
from privadapt.server.algorithms.discrepancy_minimization.smoothed_discrepancy import (
    SmoothedDiscrepancy,
    second_moment,
)
from privadapt.server.algorithms.discrepancy_minimization.unlabeled_adaptation import weighted_ridge
from tests.experiments.script_runs import run_script


@pytest.mark.slow
def test_section7_quick_writes_both_figures(tmp_path):
    result = run_script("experiments.seed003.section7", "--quick", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    for name, expected in (
        ("figure1", {"noisy_fw", "noisy_md", "federated_fw", "two_stage_fw_nonprivate"}),
        ("figure2", {"single_stage_fw", "two_stage_fw", "two_stage_md", "public_only",
                     "oracle", "single_stage_fw_nonprivate", "federated_two_stage_fw"}),
    ):
        with open(tmp_path / f"{name}.csv", newline="") as handle:
            rows = list(csv.DictReader(handle))
        assert expected <= {row["method"] for row in rows}
        assert all(math.isfinite(float(row["mean"])) for row in rows)
        assert (tmp_path / f"{name}.png").stat().st_size > 1000
    with open(tmp_path / "runs.csv", newline="") as handle:
        runs = list(csv.DictReader(handle))
    assert {row["n"] for row in runs} == {"400", "800"}
    assert {row["seed"] for row in runs} == {"0"}
    with open(tmp_path / "figure2_paired.csv", newline="") as handle:
        paired = list(csv.DictReader(handle))
    assert {row["method"] for row in paired} == {
        "single_stage_fw", "two_stage_fw", "two_stage_md", "federated_two_stage_fw",
        "two_stage_fw_nonprivate", "two_stage_md_nonprivate", "single_stage_fw_nonprivate"}
    assert all(int(row["beats_public_only"]) <= int(row["runs"]) == 1 for row in paired)


@pytest.mark.slow
def test_section7_quick_networked_runs_the_federated_route_over_site_daemons(tmp_path):
    # One n: the route is the same at every n, and each fit starts 3 site daemons.
    result = run_script("experiments.seed003.section7", "--quick", "--networked", "--sizes",
                        "400", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "site daemons on 127.0.0.1" in result.stdout
    with open(tmp_path / "figure1.csv", newline="") as handle:
        federated = [row for row in csv.DictReader(handle) if row["method"] == "federated_fw"]
    assert {row["epsilon"] for row in federated} == {"1.0", "10.0"}
    assert all(math.isfinite(float(row["mean"])) for row in federated)


def test_non_private_single_stage_fw_beats_public_only_at_the_papers_size():
    """Alg. 1 without noise at m = 1,000, n = 1,000, K = 1,000 on Section 7's
    data (drawn as ``one_run`` draws it): with Corollary 2's step (the default)
    its w-hat has lower target test MSE than the public-only ridge; with the
    former default 1 / sqrt(K) it was worse."""
    for seed in (0, 1):
        rng = np.random.default_rng(seed)
        points, labels = section7.source_sample(1000, rng)
        target = section7.gaussian(1000, section7.TARGET_SIGNS, rng)
        test_x = section7.gaussian(5000, section7.TARGET_SIGNS, rng)
        test = (test_x, section7.label(test_x))
        objective = SmoothedDiscrepancy(points, second_moment(target),
                                        section7.mu_for(points, 1000, 1000), 0.0)
        public = section7.test_error(
            weighted_ridge(points, labels, np.full(1000, 1e-3), section7.RIDGE), test)
        default, generic = (
            single_stage_frank_wolfe(objective, labels, radius=section7.RADIUS,
                                     iterations=1000, step_size=step).coef
            for step in (None, 1000**-0.5))
        assert section7.test_error(default, test) < public < section7.test_error(generic, test)


def test_single_stage_steps_quick_writes_its_table(tmp_path):
    result = run_script("experiments.seed003.single_stage_steps", "--quick", "--out",
                        str(tmp_path))
    assert result.returncode == 0, result.stderr
    with open(tmp_path / "single_stage_steps.csv", newline="") as handle:
        lines = {row["line"] for row in csv.DictReader(handle)}
    assert lines == {"public_only", "oracle", "eta=corollary2", "eta=1/sqrt(K)"}
