"""The seed 002 experiment's low-dimensional uniform design (the slides' own
simulation) runs end to end with ``--quick``, its data are what the design
says, and the one fit the script skips (target-only DP Frank-Wolfe's
secure-sum route without noise) really is the selection route's fit."""

import csv
import functools
import math

import numpy as np
import pytest

import experiments.seed002  # noqa: F401  (single-threaded BLAS before numpy work)
from experiments.grid import Runner, run_logged
from experiments.run_log import RunLog
from experiments.seed002 import designs, transfer
from experiments.seed002.designs import LOW, LOW_CONTRAST, LOW_CONTRAST_L1, SPARSE, low_problem
from tests.experiments.script_runs import run_script


def test_low_design_sources_are_migrated_uniform_designs():
    beta, (features, labels), sources = low_problem(3, 5)
    np.testing.assert_array_equal(beta, [1.0, 1.0, 1.0])  # (b, w_1, w_2) as on the slides
    assert features.shape == (500, 3) and labels.shape == (500,)
    assert np.all(features[:, 0] == 1.0)  # the intercept's constant feature
    assert features[:, 1:].min() >= 0.0 and features[:, 1:].max() <= 1.0
    assert len(sources) == 5 + LOW.distractors
    lows = [source[0][:, 1:].min() for source in sources]
    assert len(set(np.round(lows, 1))) > 1  # each source on its own shifted square
    # The same run gives the same data whatever k; the first sources coincide.
    again = low_problem(3, 10)
    np.testing.assert_array_equal(again[1][0], features)
    np.testing.assert_array_equal(again[2][0][0], sources[0][0])


def test_informative_contrasts_are_small_and_distractors_far(monkeypatch):
    """Noise-free labels (the random stream is unchanged: the noise is still
    drawn, times 0) give each source's coefficient exactly."""
    monkeypatch.setattr(designs, "NOISE", 0.0)
    beta, _, sources = low_problem(0, 20)
    fits = np.array([np.linalg.lstsq(x, y, rcond=None)[0] for x, y in sources])
    np.testing.assert_allclose(np.abs(fits[:20] - beta), LOW_CONTRAST, atol=1e-9)
    np.testing.assert_allclose(np.abs(fits[:20] - beta).sum(axis=1), LOW_CONTRAST_L1)
    np.testing.assert_allclose(fits[20:] - beta, 2.0, atol=1e-9)  # the distractors
    assert np.linalg.norm(fits[20:] - beta, axis=1).min() > LOW.transfer["informative_threshold"]


@pytest.mark.slow
def test_quick_low_design_writes_every_cell_within_its_epsilon(tmp_path):
    result = run_script("experiments.seed002.transfer", "--quick", "--design", "low",
                        "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "== design low ==" in result.stdout and "== design sparse ==" not in result.stdout
    assert (tmp_path / "transfer_low_quick.png").stat().st_size > 1000
    assert not (tmp_path / "transfer_quick.csv").exists()  # the sparse design did not run
    with open(tmp_path / "transfer_low_quick.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    cells = {(r["method"], r["k"], float(r["epsilon"])): r for r in rows}
    for epsilon in (0.5, 1.0, 3.0, math.inf):
        for k in ("0", "5", "10", "15", "20"):
            assert ("transfer", k, epsilon) in cells
        for method in ("dp_fw", "dp_fw_sum", "noisy_gd"):
            assert (method, "", epsilon) in cells
    for row in rows:
        assert row["design"] == "low"
        assert math.isfinite(float(row["sse_mean"]))
        assert float(row["ledger_epsilon_max"]) <= float(row["epsilon"])
    # Without noise the pilot is exact enough to find informative sources and
    # to keep every distractor out.
    for k in ("5", "10", "15", "20"):
        row = cells[("transfer", k, math.inf)]
        assert float(row["informative_recall"]) > 0.5 and float(row["distractors_kept"]) == 0


@pytest.mark.parametrize("design", ["low", "sparse"])
def test_noise_free_secure_sum_fit_equals_the_selection_routes(tmp_path, design):
    """Why dp_fw_sum's row at epsilon = inf may be copied from dp_fw's."""
    iterations = {"low": LOW, "sparse": SPARSE}[design].quick_iterations
    if design == "sparse":
        iterations = {**iterations, "main": 5, "pilot": 5}  # d = 200: keep it short
    unit = {"design": design, "k": "", "epsilon": math.inf, "run": 1}
    fits = [transfer.compute({**unit, "method": method}, tmp_path, iterations, None)
            for method in ("dp_fw", "dp_fw_sum")]
    assert fits[0]["sse"] == fits[1]["sse"]
    assert fits[0]["ledger_epsilon"] == fits[1]["ledger_epsilon"] == math.inf
    assert not any(tmp_path.iterdir())  # each unit's ledger is removed when done


def test_problem_is_generated_once_and_read_only():
    first = transfer.problem("low", 7, 5)
    assert transfer.problem("low", 7, 5) is first
    with pytest.raises(ValueError):
        first[1][0][0, 0] = 2.0


def test_secure_sum_row_without_noise_is_copied_from_the_logged_fit(tmp_path, monkeypatch):
    log = RunLog(tmp_path / "runs.csv", transfer.LOG_HEADER, transfer.LOG_KEY, "s")
    unit = {"design": "low", "k": "", "epsilon": math.inf, "run": 4}
    log.append({**unit, "method": "dp_fw", "sse": 0.125, "ledger_epsilon": math.inf,
                "informative_recall": math.nan, "distractors_kept": math.nan})

    def no_fit(*args, **kwargs):
        raise AssertionError("the noise-free secure-sum fit ran again")

    monkeypatch.setattr(transfer, "reference_run", no_fit)
    compute = functools.partial(transfer.compute, ledgers=tmp_path,
                                iterations=LOW.quick_iterations, daemons=None)
    options = {"twin": transfer.twin, "from_twin": transfer.from_twin}
    run_logged(log, [{**unit, "method": "dp_fw_sum"}], compute, Runner(workers=1), **options)
    row = log.row(log.key({**unit, "method": "dp_fw_sum"}))
    assert float(row["sse"]) == 0.125 and float(row["ledger_epsilon"]) == math.inf
    with pytest.raises(AssertionError, match="ran again"):  # with noise: a fit of its own
        run_logged(log, [{**unit, "method": "dp_fw_sum", "epsilon": 1.0}], compute,
                   Runner(workers=1), **options)
    log.close()
