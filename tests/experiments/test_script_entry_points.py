"""Each experiment script the tests run in process (tests/experiments/
script_runs.py) also starts as ``python -m``: its ``__main__`` block parses the
command line and exits with ``main``'s status (``--help`` here: 0 and the usage)."""

import runpy
import sys

import pytest

SCRIPTS = [
    "experiments.adapter_study", "experiments.adult_splits", "experiments.epsilon_monotonicity",
    "experiments.diabetes_cross_fitting",
    "experiments.step_rule_study", "experiments.seed000.discrepancy",
    "experiments.seed000.figure1", "experiments.seed000.figure4", "experiments.seed000.table1",
    "experiments.seed000.table4", "experiments.seed001.cost_tables",
    "experiments.seed001.nna_capture",
    "experiments.seed002.transfer", "experiments.seed003.section7",
    "experiments.seed003.private_capture",
    "experiments.seed003.single_stage_steps", "experiments.seed004.boosting",
]


# runpy warns when the module is imported already (the in-process runs import
# them); it executes the module's code afresh all the same.
@pytest.mark.filterwarnings("ignore:.*found in sys.modules after import:RuntimeWarning")
@pytest.mark.parametrize("module", SCRIPTS)
def test_every_script_starts_as_a_module(module, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [module, "--help"])
    with pytest.raises(SystemExit) as stop:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    assert stop.value.code == 0
    assert capsys.readouterr().out.startswith("usage:")
