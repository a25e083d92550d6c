"""The highest round a site has taken part in, per job, kept in the site's own
database (next to its ledger, DESIGN.md section 7).

A site never publishes a key for a round at or below the last one it saw for
that job, so a stale or replayed announcement cannot make it mask a second
share in an old epoch, and after a restart (of the site or the coordinator) it
tells the coordinator where it stands (proto ``JobProgress``) so rounds resume
above it. Written before the site's key leaves, in its own committed
transaction.

Durability, and why this table is not synced at its own commit: it lives in
the ledger's database file (the daemon and :class:`~privadapt.client.daemon.worker.SiteWorker`
insist on it), whose WAL is one append-only file shared by both connections.
Its commits use ``synchronous=NORMAL``: they survive the site process dying at
once (the WAL frames are in the operating system's hands), and a power cut or
kernel crash can lose only the frames written after the WAL was last synced.
The ledger syncs the WAL at every charge (``synchronous=FULL``), and a sync of
the file covers every frame before it, while recovery replays the WAL as a
prefix (its frames are checksummed cumulatively). So by the time a round's
share can leave -- after its charge committed -- the round's progress row is
as durable as the charge. What a power cut can lose is only a progress row
whose round charged nothing (the key was published, then the machine went
down before the roster was answered): that round's key died with the process
(its private half was never stored), nothing was masked or charged under it,
and answering the round after the restart, under a fresh key, is the first
and only answer this site gives it. A lost ``finish`` mark only makes the
site report the job's last round again when it connects, which a coordinator
uses only to go above it. Syncing here as well cost one more fsync
per round (1.3 to 2.9 ms at three sites, benchmarks/network_round.py) for no
guarantee.
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
    """Per-job round high-water marks in SQLite (WAL); safe across threads.

    ``path`` is the site's ledger database (module docstring: its rows are
    made durable by the ledger's next charge)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        try:
            self._conn = sqlite3.connect(self.path, isolation_level=None,
                                         check_same_thread=False, timeout=60.0)
            self._conn.execute("PRAGMA journal_mode=WAL")
            # Synced by the ledger's next charge, before any share leaves (module docstring).
            self._conn.execute("PRAGMA synchronous=NORMAL")
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
