"""The ``jobs`` table: each job's spec and state; a finished job's state is final."""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from privadapt.common.errors import ConfigError
from privadapt.server.store.database import StoreDatabase, insert_row, select_rows

JOB_STATES = ("pending", "running", "succeeded", "failed", "cancelled")
FINISHED_STATES = ("succeeded", "failed", "cancelled")


@dataclass(frozen=True)
class JobRecord:
    job_id: str
    algorithm: str
    spec_json: str
    seed: int
    state: str
    message: str
    created: float
    updated: float


class JobTable(StoreDatabase):
    """The store's methods on jobs."""

    def create_job(self, job_id: str, algorithm: str, spec_json: str, seed: int) -> JobRecord:
        """Store a new job in state ``pending``; ``ConfigError`` if the id is taken."""
        if not isinstance(job_id, str) or not job_id:
            raise ValueError(f"job_id must be a non-empty string, got {job_id!r}")
        now = time.time()
        record = JobRecord(job_id, algorithm, spec_json, int(seed), "pending", "", now, now)
        with self._transaction() as conn:
            if _job_state(conn, job_id) is not None:
                raise ConfigError(
                    f"job {job_id!r} already exists in {self.path}; choose another job id"
                )
            insert_row(conn, "jobs", record)
        return record

    def discard_unstarted_failure(self, job_id: str) -> bool:
        """Forget ``job_id`` if it failed before its first round (nothing was
        asked of any site, so nothing was spent), freeing its id for a retry;
        False, and nothing changed, for any other job."""
        with self._transaction() as conn:
            if _job_state(conn, job_id) != "failed" or any(
                    conn.execute(f"SELECT 1 FROM {table} WHERE job_id = ? LIMIT 1",
                                 (job_id,)).fetchone()
                    for table in ("rounds", "answers", "models", "arrays")):
                return False
            conn.execute("DELETE FROM jobs WHERE job_id = ?", (job_id,))
        return True

    def job(self, job_id: str) -> JobRecord | None:
        found = self._select_jobs("WHERE job_id = ?", (job_id,))
        return found[0] if found else None

    def jobs(self) -> list[JobRecord]:
        """Every job, oldest first."""
        return self._select_jobs("")

    def unfinished_jobs(self) -> list[JobRecord]:
        """Jobs a restarted coordinator must resume (pending or running), oldest first."""
        return self._select_jobs("WHERE state IN ('pending', 'running')")

    def _select_jobs(self, where: str, args: tuple[str, ...] = ()) -> list[JobRecord]:
        rows = select_rows(self._connection(), JobRecord, "jobs",
                           where + " ORDER BY created, rowid", args)
        return [JobRecord(**row) for row in rows]

    def set_job_state(self, job_id: str, state: str, message: str = "") -> None:
        """Move a job to ``state``. A finished job's state is final (``ValueError``)."""
        if state not in JOB_STATES:
            raise ValueError(f"job state must be one of {', '.join(JOB_STATES)}, got {state!r}")
        with self._transaction() as conn:
            current = require_job(conn, job_id, self.path)
            if current in FINISHED_STATES:
                raise ValueError(
                    f"job {job_id!r} is already {current}; a finished job cannot become {state}"
                )
            conn.execute(
                "UPDATE jobs SET state = ?, message = ?, updated = ? WHERE job_id = ?",
                (state, message, time.time(), job_id),
            )


def require_job(conn: sqlite3.Connection, job_id: str, store_path: Path) -> str:
    """The state of ``job_id``; ``KeyError`` if the store has no such job
    (every row of rounds, answers and models belongs to a stored job)."""
    state = _job_state(conn, job_id)
    if state is None:
        raise KeyError(f"no job {job_id!r} in coordinator store {store_path}")
    return state


def _job_state(conn: sqlite3.Connection, job_id: str) -> str | None:
    row = conn.execute("SELECT state FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
    return None if row is None else row[0]
