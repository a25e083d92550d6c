"""experiments/run_log.py: finished units survive a reopen exactly (floats
included), a torn last line from a crash is dropped, and a log made with
another setting is refused instead of mixed into the table; a second writer
is refused and a read-only reader changes nothing on disk."""

import math

import pytest

from experiments.run_log import LogBusyError, RunLog, SettingMismatchError

HEADER = ("name", "run", "value")
KEY = ("name", "run")


def test_rows_read_back_exactly_and_keys_are_known(tmp_path):
    log = RunLog(tmp_path / "log.csv", HEADER, KEY, "s1")
    values = [0.1 + 0.2, math.pi / 3, 1e-300, math.inf]
    for run, value in enumerate(values):
        log.append({"name": "a", "run": run, "value": value})
    log.close()
    again = RunLog(tmp_path / "log.csv", HEADER, KEY, "s1")
    assert len(again) == 4 and ("a", 2) in again and ("a", 4) not in again
    assert [float(r["value"]) for r in again.rows()] == values
    with pytest.raises(ValueError, match="already"):
        again.append({"name": "a", "run": 0, "value": 1.0})


def test_a_torn_last_line_is_dropped(tmp_path):
    path = tmp_path / "log.csv"
    log = RunLog(path, HEADER, KEY, "s1")
    log.append({"name": "a", "run": 0, "value": 1.5})
    log.close()
    with path.open("a") as handle:
        handle.write("s1,a,1,2.")  # killed mid-write
    again = RunLog(path, HEADER, KEY, "s1")
    assert len(again) == 1 and ("a", 1) not in again
    again.append({"name": "a", "run": 1, "value": 2.5})
    again.close()
    assert path.read_text().splitlines()[-1] == "s1,a,1,2.5"
    assert len(RunLog(path, HEADER, KEY, "s1")) == 2


def test_another_setting_is_refused(tmp_path):
    log = RunLog(tmp_path / "log.csv", HEADER, KEY, "iterations 100")
    log.append({"name": "a", "run": 0, "value": 1.0})
    log.close()
    with pytest.raises(SettingMismatchError, match="iterations 30"):
        RunLog(tmp_path / "log.csv", HEADER, KEY, "iterations 30")
    with pytest.raises(SettingMismatchError, match="columns"):
        RunLog(tmp_path / "log.csv", ("name", "run", "other"), KEY, "iterations 100")


def test_a_second_writer_is_refused_and_a_reader_changes_nothing(tmp_path):
    path = tmp_path / "log.csv"
    writer = RunLog(path, HEADER, KEY, "s1")
    writer.append({"name": "a", "run": 0, "value": 1.0})
    with path.open("a") as handle:
        handle.write("s1,a,1,")  # a unit the writer is still writing
    before = path.read_bytes()
    with pytest.raises(LogBusyError):
        RunLog(path, HEADER, KEY, "s1")
    reader = RunLog(path, HEADER, KEY, "s1", read_only=True)
    assert len(reader) == 1 and path.read_bytes() == before
    with pytest.raises(ValueError, match="read-only"):
        reader.append({"name": "a", "run": 2, "value": 1.0})
    writer.close()
