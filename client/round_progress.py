"""The highest round a site has taken part in, per job, kept in the site's own
database (next to its ledger, DESIGN.md section 7).

A site never publishes a key for a round at or below the last one it saw for
that job, so a stale or replayed announcement cannot make it mask a second
share in an old epoch, and after a restart (of the site or the coordinator) it
tells the coordinator where it stands (proto ``JobProgress``) so rounds resume
above it. Written before the site's key leaves, in its own committed
transaction.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from privadapt.common.errors import ConfigError
from privadapt.common.transactions import transaction

_SCHEMA = """
CREATE TABLE IF NOT EXISTS round_progress (
    job_id TEXT PRIMARY KEY,
    last_round INTEGER NOT NULL,
    finished INTEGER NOT NULL DEFAULT 0
)
"""


class RoundProgress:
    """Per-job round high-water marks in SQLite (WAL); safe across threads."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        try:
            self._conn = sqlite3.connect(self.path, isolation_level=None,
                                         check_same_thread=False, timeout=60.0)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.execute(_SCHEMA)
        except sqlite3.Error as err:
            raise ConfigError(f"site database {self.path}: unusable: {err}") from None

    def last_round(self, job_id: str) -> int:
        with self._lock:
            row = self._conn.execute(
                "SELECT last_round FROM round_progress WHERE job_id = ?", (job_id,)
            ).fetchone()
        return 0 if row is None else int(row[0])

    def enter_round(self, job_id: str, round: int) -> bool:
        """Record ``round`` as seen; False (and nothing changes) if it is not
        above the last round of ``job_id``."""
        with self._lock, transaction(self._conn) as conn:
            row = conn.execute(
                "SELECT last_round FROM round_progress WHERE job_id = ?", (job_id,)
            ).fetchone()
            if row is not None and round <= row[0]:
                return False
            conn.execute(
                "INSERT INTO round_progress (job_id, last_round) VALUES (?, ?) "
                "ON CONFLICT (job_id) DO UPDATE SET last_round = excluded.last_round",
                (job_id, round),
            )
            return True

    def finish(self, job_id: str) -> None:
        with self._lock:
            self._conn.execute("UPDATE round_progress SET finished = 1 WHERE job_id = ?",
                               (job_id,))

    def unfinished(self) -> dict[str, int]:
        """Last round of every job not known to be over."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT job_id, last_round FROM round_progress WHERE finished = 0"
            ).fetchall()
        return {job: int(last) for job, last in rows}

    def close(self) -> None:
        with self._lock:
            self._conn.close()
