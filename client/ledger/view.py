"""Reading a site's privacy ledger: its connections, the in-memory chain
and totals kept up to date with the rows, and what it has spent.

:class:`LedgerView` is what every ledger object is; a
:class:`~privadapt.client.ledger.privacy_ledger.PrivacyLedger` adds charging (and is what a
site, ``ledger show`` and ``ledger report`` open). The reads here never
write: each catches up with the charges other objects or processes
committed since (reading only those rows) inside one read snapshot, so a
read never composes a stale or half-written ledger.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

from privadapt.client.ledger import latches as latches
from privadapt.client.ledger.accounting import Multiset, exact_report, parse_mechanism
from privadapt.client.ledger.chain import (
    check_head_file,
    genesis,
    head_file,
    read_head_file,
)
from privadapt.client.ledger.opening import Rebuilt, rebuild, verify_derived
from privadapt.client.ledger.schema import UNKNOWN_KERNEL, row_columns
from privadapt.client.ledger.totals import LedgerTotals
from privadapt.client.policy import SitePolicy
from privadapt.common.accounting.accountant import AccountingMethod, EpsilonReport
from privadapt.common.errors import ConfigError
from privadapt.common.mechanisms import Mechanism
from privadapt.common.transactions import ThreadConnections, transaction

# Waiting for another writer (thread or process) to commit its charge.
BUSY_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Charge:
    """One committed release. ``epsilon_after`` is the site's running epsilon
    (at its cap delta) including this release, by ``method``'s accountant or
    an upper bound on it: the exact figure when the charge needed it, else the
    bound that admitted it (:mod:`privadapt.client.ledger.totals`). It never
    decreases and is never below what :meth:`PrivacyLedger.spent` reports for
    the ledger as it stood right after this charge."""

    job_id: str
    query_id: str
    mechanism: Mechanism
    epsilon_after: float
    method: AccountingMethod
    timestamp: float
    kernel: str = UNKNOWN_KERNEL  # recorded since schema 3


class LedgerView:
    """A ledger database read under ``policy`` (its cap, adjacency and
    accountant); one SQLite connection per thread."""

    #: Whether each commit is synced to disk (False: a simulation ledger).
    durable = True

    def __init__(self, path: str | Path, policy: SitePolicy, read_only: bool) -> None:
        self.path = Path(path)
        self.policy = policy
        self.read_only = read_only
        self._lock = threading.RLock()
        self._columns: str | None = None
        self._totals = LedgerTotals(policy.adjacency,
                                    policy.accounting == AccountingMethod.PLD)
        self._head = genesis(policy.site_name)
        self._last_id = 0
        self._last: tuple[float, AccountingMethod] | None = None
        self._checkpointed = 0  # charges at the newest checkpoint in _head
        # Per job asked about: mechanism JSON -> charges, kept up to _last_id.
        self._job_groups: dict[str, Counter[str]] = {}
        self._connections = ThreadConnections(self._connect, f"ledger {self.path}")

    # -- connections -------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        return self._connections.get()

    def _connect(self) -> sqlite3.Connection:
        try:
            if self.read_only:
                uri = self.path.resolve().as_uri() + "?mode=ro"
                conn = sqlite3.connect(
                    uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                    check_same_thread=False,
                )
            else:
                # Each connection is used by its own thread only (ThreadConnections);
                # check_same_thread=False lets it be finalised from another.
                conn = sqlite3.connect(
                    self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                    check_same_thread=False,
                )
                # A charge must survive a power cut once the answer is sent:
                # FULL syncs the WAL at every commit (NORMAL would not). A
                # simulation ledger (not durable) never syncs, not even when
                # it switches a new file to WAL.
                conn.execute("PRAGMA synchronous=FULL" if self.durable
                             else "PRAGMA synchronous=OFF")
                conn.execute("PRAGMA journal_mode=WAL")
        except sqlite3.Error as err:
            raise ConfigError(f"ledger {self.path}: not a usable ledger database: {err}") from None
        return conn

    def _transaction(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        # IMMEDIATE: no other thread or process can charge between our read of
        # the ledger and our insert.
        return transaction(self._connection())

    def close(self) -> None:
        """Close the calling thread's connection (each other thread's closes on
        its next use)."""
        self._connections.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _row_columns(self, conn: sqlite3.Connection) -> str:
        if self._columns is None:
            self._columns = row_columns(conn)
        return self._columns

    def _catch_up(self, conn: sqlite3.Connection) -> None:
        """Add to the in-memory chain and totals the charges another ledger
        object or process committed since; reads only those rows (and the
        checkpoints linked among them)."""
        state = Rebuilt(self._head, self._totals, self._last_id,
                        checkpointed=self._checkpointed)
        state.advance(conn, self._row_columns(conn), self._count_for_job)
        if state.rows:
            self._head, self._last_id = state.head, state.last_id
            self._checkpointed = state.checkpointed
            self._last = (state.last_epsilon, AccountingMethod(state.last_method))

    def _reload_totals(self) -> None:
        """Forget the in-memory totals; the next charge rebuilds them from the rows."""
        self._totals = LedgerTotals(self.policy.adjacency,
                                    self.policy.accounting == AccountingMethod.PLD)
        self._head, self._last_id, self._last = genesis(self.policy.site_name), 0, None
        self._checkpointed = 0
        self._job_groups = {}

    def _count_for_job(self, job_id: str, text: str) -> None:
        """One more charge of mechanism ``text`` in ``job_id``'s groups, if
        they are kept (a job's groups are read once, when first asked for)."""
        groups = self._job_groups.get(job_id)
        if groups is not None:
            groups[text] += 1

    # -- reading -------------------------------------------------------------

    def spent(self, delta: float | None = None) -> EpsilonReport:
        """The site's composed epsilon over every charge, at ``delta`` (default:
        the cap's, the figure the cap is checked against): the policy's exact
        accountant over the groups, cached by them."""
        with self._lock:
            conn = self._connection()
            with transaction(conn, write=False):
                self._catch_up(conn)
            groups = dict(self._totals.groups)
        return exact_report(groups, self.policy, delta)

    def verify(self) -> str:
        """Check the hash chain over every row against the stored head and the
        head file; a one-line account of it, or ``ConfigError``."""
        with self._lock:
            conn = self._connection()
            with transaction(conn, write=False):
                scratch = LedgerTotals(self.policy.adjacency, track_pld=False)
                rebuilt = rebuild(conn, self.policy.site_name, scratch)
                verify_derived(conn, self.path, rebuilt, self.policy.adjacency.value)
            stored = read_head_file(head_file(self.path))
            behind = check_head_file(self.path, stored, rebuilt.head, rebuilt.behind(stored))
        state = ("one charge behind the database (a crash before it was synced; the site "
                 "repairs it when it next opens the ledger)" if behind and stored is not None
                 else "missing (no charge yet)" if behind else "in agreement")
        return (f"hash chain verified: {rebuilt.head.count} charges, head "
                f"{rebuilt.head.digest[:16]}; head file {head_file(self.path).name} {state}")

    def spent_by_job(self, job_id: str, delta: float | None = None) -> EpsilonReport:
        """The composed epsilon of one job's charges, at ``delta`` (default:
        the cap's). Asked after every charge (the share reports it), so its
        cost must not grow with the job's length: the job's groups are counted
        from its rows once, then kept up to date from each new row (charged
        here or caught up from another process), like the ledger's totals."""
        with self._lock:
            conn = self._connection()
            with transaction(conn, write=False):
                self._catch_up(conn)
                if job_id not in self._job_groups:
                    # Same snapshot as the catch-up: every row up to _last_id.
                    self._job_groups[job_id] = Counter(_multiset(conn, job_id))
            groups = dict(self._job_groups[job_id])
        return exact_report(groups, self.policy, delta)

    def charges(self, job_id: str | None = None) -> list[Charge]:
        """Every charge (of ``job_id`` if given), oldest first."""
        sql = f"SELECT {self._row_columns(self._connection())} FROM charges"
        args: tuple[str, ...] = ()
        if job_id is not None:
            sql, args = sql + " WHERE job_id = ?", (job_id,)
        rows = self._connection().execute(sql + " ORDER BY id", args).fetchall()
        return [
            Charge(job, query, parse_mechanism(text), epsilon, AccountingMethod(method), created,
                   UNKNOWN_KERNEL if kernel is None else kernel)
            for job, query, text, epsilon, method, created, kernel in rows
        ]

    def job_state(self, job_id: str) -> bytes | None:
        """The state last stored with a charge of ``job_id``, if any."""
        try:
            row = self._connection().execute(
                "SELECT state FROM job_state WHERE job_id = ?", (job_id,)).fetchone()
        except sqlite3.OperationalError:  # a read-only ledger from before the table
            return None
        return None if row is None else bytes(row[0])

    def active_latch(self, kernel: str) -> latches.KernelLatch | None:
        """``kernel``'s latch if the site has it latched off (one indexed
        lookup, asked before every query: client/ledger/latches.py)."""
        with self._lock:
            return latches.active(self._connection(), kernel)

    def certificates_run(self, kernel: str) -> int:
        """Certificates of ``kernel`` armed since its latch was last cleared."""
        with self._lock:
            return latches.certificates_run(self._connection(), kernel)

    def latches(self) -> list[latches.KernelLatch]:
        """Every kernel latch the site ever set, active or cleared, oldest first."""
        with self._lock:
            return latches.every(self._connection())

    def jobs(self) -> list[str]:
        """Job ids with at least one charge, in order of their first charge."""
        rows = self._connection().execute(
            "SELECT job_id FROM charges GROUP BY job_id ORDER BY MIN(id)"
        ).fetchall()
        return [job for (job,) in rows]


def _multiset(conn: sqlite3.Connection, job_id: str | None) -> Multiset:
    sql = "SELECT mechanism_json, COUNT(*) FROM charges"
    args: tuple[str, ...] = ()
    if job_id is not None:
        sql, args = sql + " WHERE job_id = ?", (job_id,)
    return dict(conn.execute(sql + " GROUP BY mechanism_json", args).fetchall())
