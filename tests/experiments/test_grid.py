"""The grids' shared loop: a process pool or Ray logs what a serial run logs,
in the same order, and any of them resumes a log another one started."""

import functools
import sys
import time
import types
from pathlib import Path

import numpy as np
import pytest

from experiments import grid
from experiments.grid import Runner, run_logged
from experiments.run_log import RunLog
from tests.experiments.script_runs import run_script

HEADER, KEY = ("n", "value"), ("n",)


def noisy_square(unit: dict) -> dict:
    """A unit whose randomness depends on its key only; the early units finish last."""
    time.sleep(0.05 * (4 - unit["n"]) if unit["n"] < 4 else 0)
    return {**unit, "value": unit["n"] ** 2 + np.random.default_rng(unit["n"]).normal()}


def logged(path: Path, runner: Runner, units: list[dict], **options) -> list[str]:
    log = RunLog(path, HEADER, KEY, "test")
    try:
        run_logged(log, units, noisy_square, runner, **options)
    finally:
        log.close()
    return path.read_text().splitlines()


UNITS = [{"n": n} for n in range(6)]


def test_a_pool_logs_a_serial_runs_rows_in_its_order(tmp_path):
    serial = logged(tmp_path / "serial.csv", Runner(workers=1), UNITS)
    pooled = logged(tmp_path / "pooled.csv", Runner(workers=2), UNITS)
    assert pooled == serial and len(serial) == 1 + len(UNITS)


def test_a_run_resumes_from_the_log_and_computes_only_what_is_missing(tmp_path, capsys):
    whole = logged(tmp_path / "whole.csv", Runner(workers=1), UNITS)
    path = tmp_path / "resumed.csv"
    path.write_text("\n".join(whole[:3]) + "\n")  # two units done
    assert logged(path, Runner(workers=2), UNITS) == whole
    assert "2 units already done, 4 to do" in capsys.readouterr().err


def test_a_unit_with_a_twin_takes_its_row_from_the_twin_without_computing(tmp_path):
    def twin(unit: dict) -> dict | None:
        return {"n": 0} if unit["n"] == 5 else None

    rows = logged(tmp_path / "log.csv", Runner(workers=2), UNITS, twin=twin,
                  from_twin=lambda unit, row: {**unit, "value": row["value"]})
    assert rows[-1].split(",")[-1] == rows[1].split(",")[-1]  # n = 5 copies n = 0


def test_a_runner_needs_a_worker():
    with pytest.raises(ValueError, match="at least 1"):
        Runner(workers=0)


TINY = ("--quick", "--design", "low", "--epsilons", "1", "inf", "--auxiliary", "5")


def transfer_files(out: Path, *options: str) -> tuple[bytes, bytes]:
    result = run_script("experiments.seed002.transfer", *TINY, "--out", str(out), *options)
    assert result.returncode == 0, result.stderr
    return ((out / "transfer_low_quick_runs.csv").read_bytes(),
            (out / "transfer_low_quick.csv").read_bytes())


@pytest.fixture(scope="module")
def serial_transfer(tmp_path_factory) -> tuple[bytes, bytes]:
    """Seed 002's transfer table at its tiniest (8 units), computed serially."""
    return transfer_files(tmp_path_factory.mktemp("serial"), "--workers", "1")


def test_a_grid_over_a_process_pool_writes_the_serial_runs_csv(serial_transfer, tmp_path):
    assert transfer_files(tmp_path, "--workers", "2") == serial_transfer


@pytest.mark.ray
def test_a_grid_on_ray_resumes_a_serial_log_and_writes_its_csv(serial_transfer, tmp_path,
                                                               ray_instance):
    log, _ = serial_transfer
    lines = log.decode().splitlines(keepends=True)
    tmp_path.joinpath("transfer_low_quick_runs.csv").write_text("".join(lines[:4]))
    assert transfer_files(tmp_path, "--ray-address", "local") == serial_transfer


def test_a_grid_run_as_a_module_hands_ray_its_compute_by_the_modules_name(monkeypatch):
    """Under ``python -m experiments...`` the compute function lives in
    ``__main__``; Ray gets the same function from the module's real name."""
    main = types.ModuleType("__main__")
    main.__spec__ = types.SimpleNamespace(name=__name__)
    monkeypatch.setitem(sys.modules, "__main__", main)

    def main_copy(unit: dict) -> dict:
        raise AssertionError("the __main__ copy cannot be pickled by reference")

    main_copy.__module__, main_copy.__name__ = "__main__", "noisy_square"
    compute = grid._importable(functools.partial(main_copy, {"n": 2}))
    assert compute.func is noisy_square and compute() == noisy_square({"n": 2})


class StandInRay(types.ModuleType):
    """The calls ``_ray_map`` makes of Ray, recorded; a task's reference is
    its unit, and reading it computes the unit here."""

    def __init__(self) -> None:
        super().__init__("ray")
        self.cancelled: list[dict] = []

    def is_initialized(self) -> bool:
        return True

    def remote(self, function):
        return types.SimpleNamespace(remote=lambda shared, unit: (shared, unit))

    def put(self, value):
        return value

    def get(self, ref):
        shared, unit = ref
        return shared(unit)

    def cancel(self, ref) -> None:
        self.cancelled.append(ref[1])


def test_a_grid_on_ray_cancels_only_the_units_it_has_not_read(monkeypatch):
    ray = StandInRay()
    monkeypatch.setitem(sys.modules, "ray", ray)
    assert [row["n"] for row in grid._ray_map(noisy_square, UNITS[:3], "auto")] == [0, 1, 2]
    assert ray.cancelled == []  # a run read to its end cancels nothing
    results = grid._ray_map(noisy_square, UNITS, "auto")
    next(results), next(results)
    results.close()  # an early stop
    assert ray.cancelled == UNITS[2:]
