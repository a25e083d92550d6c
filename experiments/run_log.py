"""An append-only CSV of finished work units, so a long experiment that is
stopped (killed, out of time, machine rebooted) resumes where it stopped.

Each finished unit is one CSV row, written in one call, flushed and fsync'd
before the next unit starts: after a crash the file holds every unit that
finished and at most one torn last line, which is dropped on reopening. A
restart reads the keys already present and skips them, so nothing is
recomputed; the summary tables are derived from this file, never kept apart
from it. Units must not depend on each other's randomness (each seeds its own
from its key), so a resumed table equals a from-scratch one.

The file records the ``setting`` it was made with (iterations, in-process or
networked, ...): reopening it with another setting is refused rather than
mixing rows of two experiments in one table. A writer holds an exclusive
lock (flock) on the log until ``close()`` or its exit, so a second writer on
the same log is refused; ``read_only=True`` (for printing the tables of a log another
process is still writing) takes no lock and changes nothing on disk.
"""

from __future__ import annotations

import csv
import fcntl
import io
import os
from collections.abc import Sequence
from pathlib import Path

SETTING_COLUMN = "setting"


class SettingMismatchError(ValueError):
    """The log on disk was made with another setting."""


class LogBusyError(RuntimeError):
    """Another process is writing this log."""


class RunLog:
    """Rows of finished units in ``path``; ``key_columns`` identify a unit."""

    def __init__(self, path: Path, header: Sequence[str], key_columns: Sequence[str],
                 setting: str, *, read_only: bool = False) -> None:
        missing = [c for c in key_columns if c not in header]
        if missing:
            raise ValueError(f"key columns {missing} not in the header")
        self.path = Path(path)
        self.header = [SETTING_COLUMN, *header]
        self.key_columns = tuple(key_columns)
        self.setting = setting
        self.read_only = read_only
        self._rows: dict[tuple[str, ...], dict[str, str]] = {}
        self._lock = None if read_only else _exclusive_lock(self.path)
        self._open()

    def _open(self) -> None:
        if self.read_only:
            text = self.path.read_text() if self.path.exists() else _line(self.header)
            self._read(text[: text.rfind("\n") + 1] or _line(self.header))
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not self.path.exists() or self.path.stat().st_size == 0:
            self.path.write_text(_line(self.header))
            _fsync(self.path)
            return
        text = self.path.read_text()
        if not text.endswith("\n"):  # a unit torn by a crash mid-write: drop it
            text = text[: text.rfind("\n") + 1]
            with self.path.open("r+") as handle:
                handle.truncate(len(text.encode()))
            _fsync(self.path)
        self._read(text)

    def _read(self, text: str) -> None:
        reader = csv.DictReader(io.StringIO(text))
        if reader.fieldnames != self.header:
            raise SettingMismatchError(
                f"{self.path}: columns {reader.fieldnames}, expected {self.header}")
        for row in reader:
            if row[SETTING_COLUMN] != self.setting:
                raise SettingMismatchError(
                    f"{self.path} was made with setting {row[SETTING_COLUMN]!r}, this run "
                    f"uses {self.setting!r}: use another --out (or remove the file)")
            self._rows[self.key(row)] = row

    def close(self) -> None:
        """Release the writer's lock (the rows stay readable)."""
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def key(self, row: dict[str, object]) -> tuple[str, ...]:
        """A unit's key as the strings the CSV holds."""
        return tuple(str(row[c]) for c in self.key_columns)

    def __contains__(self, key: tuple[object, ...]) -> bool:
        return tuple(str(part) for part in key) in self._rows

    def __len__(self) -> int:
        return len(self._rows)

    def row(self, key: tuple[object, ...]) -> dict[str, str]:
        """The finished unit ``key``'s row (KeyError if it is not logged)."""
        return self._rows[tuple(str(part) for part in key)]

    def rows(self) -> list[dict[str, str]]:
        """Every finished unit's row (strings, as read back from the CSV)."""
        return list(self._rows.values())

    def append(self, row: dict[str, object]) -> None:
        """Record one finished unit durably (one write, flush, fsync)."""
        if self.read_only:
            raise ValueError(f"{self.path} was opened read-only")
        values = [self.setting, *(row[c] for c in self.header[1:])]
        stored = {name: str(value) for name, value in zip(self.header, values, strict=True)}
        key = self.key(stored)
        if key in self._rows:
            raise ValueError(f"unit {key} is already in {self.path}")
        with self.path.open("a", newline="") as handle:
            handle.write(_line(values))
            handle.flush()
            os.fsync(handle.fileno())
        self._rows[key] = stored


def _exclusive_lock(path: Path):
    """The log opened and locked exclusively (released by closing it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a")  # noqa: SIM115 (held open: the lock lives with it)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise LogBusyError(f"{path} is being written by another process") from None
    return handle


def _line(values: Sequence[object]) -> str:
    """One CSV line; floats as ``str`` (shortest repr), so they read back exactly."""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow(values)
    return buffer.getvalue()


def _fsync(path: Path) -> None:
    with path.open("rb+") as handle:
        os.fsync(handle.fileno())
