"""experiments/step_rule_study.py: each rule reads public values only and
does what its name says, and the study runs end to end with ``--quick``."""

import csv

import pytest

from experiments.step_rule_study import RULES, noise_ratio, rule_options
from privadapt.server.algorithms.reweighting.noise_aware_plan import auto_step_rule
from tests.experiments.script_runs import run_script


def test_the_rules_switch_at_the_iteration_rules_cap():
    # rho = 1 exactly where auto_iterations' T reaches 200.
    small, large = (1.0, 100, 10), (10.0, 3000, 10)
    assert noise_ratio(*small) < 1.0 < noise_ratio(*large)
    default = {"step_sizes": "noise_aware"}
    assert rule_options("default", *small, 5.0) == default
    assert rule_options("smooth", *small, 5.0) == {"step_sizes": "noise_aware_smooth"}
    assert rule_options("switch", *small, 5.0) == {"step_sizes": "auto"}  # the estimator's
    assert auto_step_rule(*small[:1], 1e-5, *small[1:]) == "noise_aware"
    assert auto_step_rule(*large[:1], 1e-5, *large[1:]) == "noise_aware_smooth"
    assert rule_options("D ~ n eps", *small, 5.0) == {**default, "step_distance": 1.25}
    assert rule_options("D ~ n eps", *large, 5.0) == {
        **default, "step_distance": pytest.approx(5.0)}


@pytest.mark.slow  # about 5 s of CPU, up to half a minute on a loaded machine
def test_quick_writes_every_rule(tmp_path):
    # One of the two quick tasks: every rule runs the same way on each.
    result = run_script("experiments.step_rule_study", "--quick", "--tasks",
                        "diabetes sex1->sex2@100", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    with open(tmp_path / "step_rules_quick.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert {r["rule"] for r in rows} == {"source-only", "non-private (reference)", *RULES}
    assert {r["dataset"] for r in rows} == {"diabetes sex1->sex2"}
    for row in rows:
        if row["rule"] == "default":
            assert float(row["paired_gain_over_default"]) == 0.0
