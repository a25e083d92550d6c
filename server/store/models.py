"""The ``models`` table: per-step checkpoints and each job's final result
(with its privacy report); their arrays live in the ``arrays`` table."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Mapping, Sequence

import numpy as np

from privadapt.server.store.arrays import delete_arrays, read_arrays, write_arrays
from privadapt.server.store.database import StoreDatabase
from privadapt.server.store.jobs import FINISHED_STATES, require_job

_CHECKPOINT, _RESULT, _RESULT_STEP = "checkpoint", "result", -1


class ModelTable(StoreDatabase):
    """The store's methods on checkpoints and results."""

    def save_checkpoint(
        self, job_id: str, step: int, model: Mapping[str, np.ndarray | float | int]
    ) -> None:
        """Store the model after ``step``. Saving a step again replaces it: a
        coordinator that crashed between answer and checkpoint recomputes it."""
        named = _model_items(model)
        with self._transaction() as conn:
            require_job(conn, job_id, self.path)
            _write_model(conn, _CHECKPOINT, job_id, int(step), named, None)

    def latest_checkpoint(self, job_id: str) -> tuple[int, dict[str, np.ndarray]] | None:
        """The highest-step checkpoint of ``job_id`` as (step, model), or None."""
        with self._transaction(write=False) as conn:
            (step,) = conn.execute(
                "SELECT MAX(step) FROM models WHERE kind = ? AND job_id = ?", (_CHECKPOINT, job_id)
            ).fetchone()
            if step is None:
                return None
            return step, dict(read_arrays(conn, _CHECKPOINT, job_id, step))

    def save_result(
        self, job_id: str, model: Mapping[str, np.ndarray | float | int], privacy_report_json: str
    ) -> None:
        """Store a job's final model and privacy report. It may be rewritten
        while the job is unfinished (a resumed job recomputes it), not after."""
        named = _model_items(model)
        with self._transaction() as conn:
            state = require_job(conn, job_id, self.path)
            if state in FINISHED_STATES:
                raise ValueError(f"job {job_id!r} is already {state}; its result is final")
            _write_model(conn, _RESULT, job_id, _RESULT_STEP, named, privacy_report_json)

    def result(self, job_id: str) -> tuple[dict[str, np.ndarray], str] | None:
        with self._transaction(write=False) as conn:
            row = conn.execute(
                "SELECT privacy_report_json FROM models WHERE kind = ? AND job_id = ?",
                (_RESULT, job_id),
            ).fetchone()
            if row is None:
                return None
            return dict(read_arrays(conn, _RESULT, job_id, _RESULT_STEP)), row[0]


def _model_items(model: Mapping[str, np.ndarray | float | int]) -> list[tuple[str, np.ndarray]]:
    """A model's parameters as named arrays; scalars become 0-d arrays."""
    for name in model:
        if not isinstance(name, str) or not name:
            raise ValueError(f"model parameter names must be non-empty strings, got {name!r}")
    return [(name, np.asarray(value)) for name, value in model.items()]


def _write_model(conn: sqlite3.Connection, kind: str, job_id: str, step: int,
                 named: Sequence[tuple[str, np.ndarray]], report: str | None) -> None:
    conn.execute(
        "INSERT OR REPLACE INTO models (kind, job_id, step, privacy_report_json, created) "
        "VALUES (?, ?, ?, ?, ?)", (kind, job_id, step, report, time.time()),
    )
    delete_arrays(conn, kind, job_id, step)
    write_arrays(conn, kind, job_id, step, named)
