"""The site's privacy ledger: every release charged, in SQLite, before it leaves.

DESIGN.md sections 2 and 7; STYLE.md section 1. One database file per site
(WAL mode, ``synchronous=FULL``: a committed charge survives a power cut):

* ``meta``: site name, cap (epsilon, delta), adjacency, accounting method and
  schema version, rewritten from the policy on every open so that
  ``privadapt ledger show`` can read a ledger without the policy file;
* ``charges``: one row per release: job, query id, the *mechanism* as JSON
  (never an epsilon alone, so any accountant can replay the ledger) and the
  running epsilon after it;
* ``groups`` (mechanism JSON -> count) and ``ledger_state`` (number of
  charges, hash-chain head, pure-epsilon sum, RDP curve): derived from the
  rows, written in each charge's own transaction, rebuilt from the rows and
  checked when the ledger opens (:mod:`privadapt.client.ledger_totals`).

A charge is one ``BEGIN IMMEDIATE`` transaction: it takes SQLite's write lock
first, catches up with any charge another process made, then either inserts
the row and commits or rolls back and refuses. Two threads or two processes
charging the same file serialise on the database itself; neither can compose
a stale ledger.

Cost independent of the history: no charge reads the history. A release is
refused before any PLD by closed-form lower bounds when it is new or near the
cap (a composition costs at least its costliest release), and no PLD larger
than :data:`~privadapt.common.accounting.MAX_PLD_POINTS` is ever built (issue
17). It is admitted without any exact figure when an upper bound on the exact
figure, kept by addition (:meth:`~privadapt.client.ledger_totals.Sums.upper_bound`),
fits the cap; only a release whose bound does not fit pays for the policy's
exact figure, over the groups (cost in the number of distinct mechanisms).
So every decision is the one the exact figure would make.

Fail closed (issue 12): a ledger is created only on purpose (``create=True``,
``privadapt ledger init``); a missing, empty or unreadable one is a
``ConfigError``. Every charge extends a hash chain whose head is also synced
to a file beside the ledger before the charge returns
(:mod:`privadapt.client.ledger_chain`); a ledger whose chain, head file or
derived tables disagree is refused at open.
"""
from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from privadapt.client.ledger_accounting import (
    Multiset,
    exact_report,
    mechanism_json,
    parse_mechanism,
)
from privadapt.client.ledger_admission import CheckedCharge, admit
from privadapt.client.ledger_chain import (
    check_head_file,
    extend,
    genesis,
    head_file,
    read_head_file,
    row_bytes,
    write_head_file,
)
from privadapt.client.ledger_open import (
    ROW_COLUMNS,
    init_hint,
    rebuild,
    refuse_missing,
    verify_derived,
    write_derived,
    write_state,
)
from privadapt.client.ledger_totals import LedgerTotals
from privadapt.client.policy import SitePolicy
from privadapt.common.accounting import (
    AccountingMethod,
    EpsilonReport,
)
from privadapt.common.errors import (
    ConfigError,
    QueryRefusedError,
    ReplayError,
)
from privadapt.common.mechanisms import Mechanism
from privadapt.common.transactions import ThreadConnections, transaction

SCHEMA_VERSION = 2
# Waiting for another writer (thread or process) to commit its charge.
_BUSY_TIMEOUT_S = 60.0
#: Issued, unconsumed budget checks a ledger remembers (one per query in flight).
_MAX_ISSUED_CHECKS = 256

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS charges (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    query_id TEXT NOT NULL,
    mechanism_json TEXT NOT NULL,
    epsilon_after REAL NOT NULL,
    method TEXT NOT NULL,
    created_at REAL NOT NULL,
    UNIQUE (job_id, query_id)
);
CREATE TABLE IF NOT EXISTS groups (
    mechanism_json TEXT PRIMARY KEY,
    count INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS ledger_state (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    charges INTEGER NOT NULL,
    head TEXT NOT NULL,
    pure_epsilon REAL NOT NULL,
    rdp BLOB NOT NULL,
    adjacency TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS job_state (
    job_id TEXT PRIMARY KEY,
    query_id TEXT NOT NULL,
    state BLOB NOT NULL,
    updated_at REAL NOT NULL
);
"""


@dataclass(frozen=True)
class Charge:
    """One committed release. ``epsilon_after`` is the site's running epsilon
    (at its cap delta) including this release, by ``method``'s accountant or
    an upper bound on it: the exact figure when the charge needed it, else the
    bound that admitted it (:mod:`privadapt.client.ledger_totals`). It never
    decreases and is never below what :meth:`PrivacyLedger.spent` reports for
    the ledger as it stood right after this charge."""

    job_id: str
    query_id: str
    mechanism: Mechanism
    epsilon_after: float
    method: AccountingMethod
    timestamp: float


class PrivacyLedger:
    """A site's ledger database, charged under ``policy``'s cap.

    ``create=True`` makes a new ledger when the file is missing or empty
    (never when its head file says one existed); without it, a missing,
    empty or non-ledger file is a ``ConfigError`` that says to run
    ``privadapt ledger init``. Safe to share between threads (one SQLite
    connection per thread) and between processes (SQLite's write lock)."""

    def __init__(
        self, path: str | Path, policy: SitePolicy, *, create: bool = False,
        read_only: bool = False,
    ) -> None:
        self.path = Path(path)
        self.policy = policy
        self.read_only = read_only
        self._lock = threading.RLock()
        # The checks this ledger issued and has not consumed, by identity: a
        # CheckedCharge is reused only if it is one of them (never a copy or
        # a forgery handed back by a caller; adversarial review 4).
        self._issued_checks: dict[int, CheckedCharge] = {}
        self._totals = LedgerTotals(policy.adjacency,
                                    policy.accounting == AccountingMethod.PLD)
        self._head = genesis(policy.site_name)
        self._last_id = 0
        self._last: tuple[float, AccountingMethod] | None = None
        # Per job asked about: mechanism JSON -> charges, kept up to _last_id.
        self._job_groups: dict[str, Counter[str]] = {}
        if not read_only:
            refuse_missing(self.path, create)
        self._connections = ThreadConnections(self._connect, f"ledger {self.path}")
        if not read_only:
            self._initialise(create)

    @classmethod
    def open_readonly(cls, path: str | Path) -> PrivacyLedger:
        """Open an existing ledger for reading, with the cap recorded in it
        (no policy file needed); ``ConfigError`` if it is not a ledger."""
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"ledger {path}: no such file; pass the site's ledger database")
        return cls(path, _policy_from_meta(path, _read_meta(path)), read_only=True)

    # -- connections -------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        return self._connections.get()

    def _connect(self) -> sqlite3.Connection:
        try:
            if self.read_only:
                uri = self.path.resolve().as_uri() + "?mode=ro"
                conn = sqlite3.connect(
                    uri, uri=True, timeout=_BUSY_TIMEOUT_S, isolation_level=None,
                    check_same_thread=False,
                )
            else:
                # Each connection is used by its own thread only (ThreadConnections);
                # check_same_thread=False lets it be finalised from another.
                conn = sqlite3.connect(
                    self.path, timeout=_BUSY_TIMEOUT_S, isolation_level=None,
                    check_same_thread=False,
                )
                conn.execute("PRAGMA journal_mode=WAL")
                # A charge must survive a power cut once the answer is sent:
                # FULL syncs the WAL at every commit (NORMAL would not).
                conn.execute("PRAGMA synchronous=FULL")
        except sqlite3.Error as err:
            raise ConfigError(f"ledger {self.path}: not a usable ledger database: {err}") from None
        return conn

    def _transaction(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        # IMMEDIATE: no other thread or process can charge between our read of
        # the ledger and our insert.
        return transaction(self._connection())

    def close(self) -> None:
        self._connections.close()

    def __enter__(self) -> PrivacyLedger:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # -- opening -------------------------------------------------------------

    def _initialise(self, create: bool) -> None:
        try:
            with self._lock, self._transaction() as conn:
                tables = {name for (name,) in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table'")}
                if "charges" not in tables and not create:
                    raise ConfigError(f"ledger {self.path}: not a privadapt ledger (no charges "
                                      f"table); {init_hint(self.path)}")
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                version = self._check_existing(conn)
                # Schema 1 never had the derived tables: a file that claims
                # version 1 but has them was edited (its chain must not restart).
                genuine_v1 = version < 2 and not tables & {"ledger_state", "groups"}
                if version < 2 and not genuine_v1:
                    raise ConfigError(
                        f"ledger {self.path}: it says it was written by schema 1 but holds "
                        "tables schema 1 never had: it was altered; restore the site's "
                        "ledger and its head file from backup")
                self._rebuild_and_verify(conn, upgrading=genuine_v1)
                policy = self.policy
                meta = {
                    "site_name": policy.site_name,
                    "epsilon_cap": repr(policy.epsilon_cap),
                    "delta_cap": repr(policy.delta_cap),
                    "adjacency": policy.adjacency.value,
                    "accounting": policy.accounting.value,
                    "schema_version": str(SCHEMA_VERSION),
                }
                conn.executemany(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", meta.items()
                )
        except sqlite3.DatabaseError as err:
            self.close()
            raise ConfigError(f"ledger {self.path}: not a usable ledger database: {err}") from None
        except ConfigError:
            self.close()
            raise

    def _rebuild_and_verify(self, conn: sqlite3.Connection, upgrading: bool) -> None:
        """Recompute chain and totals from the rows, check every stored copy
        (derived tables, head file), repair only the legitimate crash case.
        ``upgrading``: a schema-1 ledger, whose chain starts now."""
        adjacency = self.policy.adjacency.value
        rebuilt = rebuild(conn, self.policy.site_name, self._totals)
        stored_head = read_head_file(head_file(self.path))
        had_state = verify_derived(conn, self.path, rebuilt, adjacency)
        if not had_state and stored_head is None and (upgrading or rebuilt.head.count == 0):
            rewrite = True  # a new ledger, or a schema-1 one: its chain starts now
        else:
            rewrite = check_head_file(self.path, stored_head, rebuilt.head, rebuilt.before)
        write_derived(conn, rebuilt, adjacency)
        self._head, self._last_id = rebuilt.head, rebuilt.last_id
        if rebuilt.last_epsilon is not None:
            self._last = (rebuilt.last_epsilon, AccountingMethod(rebuilt.last_method))
        if rewrite:
            # Under the write lock, with the committed head: no charge is added here.
            write_head_file(head_file(self.path), rebuilt.head)

    def _check_existing(self, conn: sqlite3.Connection) -> int:
        """Refuse a ledger of another site, schema or adjacency; its schema version."""
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        version = int(meta.get("schema_version", SCHEMA_VERSION))
        if version > SCHEMA_VERSION:
            raise ConfigError(
                f"ledger {self.path}: schema version {version} is newer than this privadapt "
                f"understands ({SCHEMA_VERSION}); upgrade privadapt on this site"
            )
        owner = meta.get("site_name", self.policy.site_name)
        if owner != self.policy.site_name:
            raise ConfigError(
                f"ledger {self.path} belongs to site {owner!r} but the policy is for site "
                f"{self.policy.site_name!r}; point each site at its own ledger database"
            )
        for (text,) in conn.execute("SELECT DISTINCT mechanism_json FROM charges"):
            try:
                parse_mechanism(text).in_adjacency(self.policy.adjacency)
            except ValueError as err:
                raise ConfigError(
                    f"ledger {self.path}: a stored charge cannot be accounted under the "
                    f"policy's adjacency {self.policy.adjacency.value!r} ({err}); keep the "
                    "adjacency the ledger was charged in"
                ) from None
        return version

    def _catch_up(self, conn: sqlite3.Connection) -> None:
        """Add to the in-memory chain and totals the charges another ledger
        object or process committed since; reads only those rows."""
        rows = conn.execute(
            f"SELECT id, {ROW_COLUMNS} FROM charges WHERE id > ? ORDER BY id", (self._last_id,)
        ).fetchall()
        for row_id, job, query, text, epsilon, method, created in rows:
            self._head = extend(self._head, row_bytes(job, query, text, epsilon, method, created))
            self._totals.add(text)
            self._count_for_job(job, text)
            self._last_id, self._last = row_id, (epsilon, AccountingMethod(method))

    def _publish_head(self) -> None:
        """Sync the head file to the database's head, under the write lock so
        that no writer moves it back; called after every commit."""
        with self._transaction() as conn:
            self._catch_up(conn)
            self._sync_head_file()

    def _sync_head_file(self) -> None:
        """Under the write lock: bring the head file up to the database's head.
        Before each charge too, so that with several processes charging, a
        crash leaves the head file at most one charge behind, never more."""
        path = head_file(self.path)
        stored = read_head_file(path)
        if stored is None or stored.count < self._head.count:
            write_head_file(path, self._head)

    # -- charging ------------------------------------------------------------

    def check_charge(self, job_id: str, query_id: str, mechanism: Mechanism) -> CheckedCharge:
        """Refuse now, reading only the ledger, what :meth:`charge` would
        refuse now (``ReplayError``, ``BudgetExceededError``, an oversized
        accounting); else what it would record, for ``charge`` to reuse.

        A site calls this before it touches any private data (issue 17): a
        refusal is unpriced, so one decided after the kernel ran would leak
        the kernel's data-dependent running time for free. Read-only: the
        committing charge still decides under its write lock, reusing this
        result only when nothing was charged in between."""
        text = self._checked_text(job_id, query_id, mechanism)
        with self._lock:
            conn = self._connection()
            with transaction(conn, write=False):
                self._catch_up(conn)
                self._refuse_replay(conn, job_id, query_id)
                epsilon, method = admit(self.policy, self._totals, self._last, job_id,
                                         query_id, mechanism, text)
                head = self._head.digest
            checked = CheckedCharge(job_id, query_id, text, head, self.policy, epsilon, method)
            if len(self._issued_checks) >= _MAX_ISSUED_CHECKS:  # unconsumed: forget the oldest
                self._issued_checks.pop(next(iter(self._issued_checks)))
            self._issued_checks[id(checked)] = checked
        return checked

    def charge(
        self, job_id: str, query_id: str, mechanism: Mechanism, state: bytes | None = None,
        checked: CheckedCharge | None = None,
    ) -> Charge:
        """Record one release, or refuse it. Returns only after the charge is
        committed and the head file synced; raises ``ReplayError`` for a
        (job, query) already charged and ``BudgetExceededError`` when the
        composed epsilon would pass the cap, in which case nothing is stored.
        ``state`` (the job's site-side state after this release,
        client/job_state.py) is stored in the same transaction, so a site that
        restarts has exactly the state its ledger paid for. ``checked``: this
        release's :meth:`check_charge`, whose figure is reused if the ledger
        has not changed since (the cap is not composed twice per query)."""
        text = self._checked_text(job_id, query_id, mechanism)
        with self._lock:
            added = False
            try:
                with self._transaction() as conn:
                    self._catch_up(conn)
                    self._sync_head_file()
                    self._refuse_replay(conn, job_id, query_id)
                    issued = (checked is not None
                              and self._issued_checks.pop(id(checked), None) is checked)
                    if issued and checked.applies(
                            job_id, query_id, text, self._head.digest, self.policy):
                        epsilon, method = checked.epsilon, checked.method
                    else:
                        epsilon, method = admit(self.policy, self._totals, self._last,
                                                 job_id, query_id, mechanism, text)
                    now = time.time()
                    head = extend(self._head, row_bytes(job_id, query_id, text, epsilon,
                                                        method.value, now))
                    cursor = conn.execute(
                        f"INSERT INTO charges ({ROW_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
                        (job_id, query_id, text, epsilon, method.value, now),
                    )
                    conn.execute(
                        "INSERT INTO groups (mechanism_json, count) VALUES (?, 1) "
                        "ON CONFLICT (mechanism_json) DO UPDATE SET count = count + 1", (text,))
                    self._totals.add(text)
                    added = True
                    write_state(conn, self._totals, head, self.policy.adjacency.value)
                    if state is not None:
                        conn.execute(
                            "INSERT INTO job_state (job_id, query_id, state, updated_at) "
                            "VALUES (?, ?, ?, ?) ON CONFLICT (job_id) DO UPDATE SET "
                            "query_id = excluded.query_id, state = excluded.state, "
                            "updated_at = excluded.updated_at",
                            (job_id, query_id, state, now),
                        )
            except BaseException:
                if added:  # not committed: the next use rebuilds from the rows
                    self._reload_totals()
                raise
            self._head, self._last_id, self._last = head, cursor.lastrowid, (epsilon, method)
            self._count_for_job(job_id, text)
            self._publish_head()
        return Charge(job_id, query_id, mechanism, epsilon, method, now)

    def _checked_text(self, job_id: str, query_id: str, mechanism: Mechanism) -> str:
        """The stored form of ``mechanism``, once the release's ids and
        adjacency are checked; refuses on a read-only ledger."""
        if self.read_only:
            raise RuntimeError(f"ledger {self.path} was opened read-only; it cannot charge")
        for name, value in (("job_id", job_id), ("query_id", query_id)):
            if not isinstance(value, str) or not value:
                raise ValueError(f"{name} must be a non-empty string, got {value!r}")
        try:
            mechanism.in_adjacency(self.policy.adjacency)
        except ValueError as err:
            raise QueryRefusedError(f"site {self.policy.site_name!r}: {err}") from None
        return mechanism_json(mechanism)

    def _reload_totals(self) -> None:
        """Forget the in-memory totals; the next charge rebuilds them from the rows."""
        self._totals = LedgerTotals(self.policy.adjacency,
                                    self.policy.accounting == AccountingMethod.PLD)
        self._head, self._last_id, self._last = genesis(self.policy.site_name), 0, None
        self._job_groups = {}

    def _count_for_job(self, job_id: str, text: str) -> None:
        """One more charge of mechanism ``text`` in ``job_id``'s groups, if
        they are kept (a job's groups are read once, when first asked for)."""
        groups = self._job_groups.get(job_id)
        if groups is not None:
            groups[text] += 1

    def _refuse_replay(self, conn: sqlite3.Connection, job_id: str, query_id: str) -> None:
        row = conn.execute(
            "SELECT created_at FROM charges WHERE job_id = ? AND query_id = ?", (job_id, query_id)
        ).fetchone()
        if row is not None:
            when = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(row[0]))
            raise ReplayError(
                f"site {self.policy.site_name!r}: query {query_id!r} of job {job_id!r} was "
                f"already charged (at {when}); a query is answered at most once, so the "
                "coordinator must send a fresh query id"
            )

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
            behind = check_head_file(self.path, stored, rebuilt.head, rebuilt.before)
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
        sql = f"SELECT {ROW_COLUMNS} FROM charges"
        args: tuple[str, ...] = ()
        if job_id is not None:
            sql, args = sql + " WHERE job_id = ?", (job_id,)
        rows = self._connection().execute(sql + " ORDER BY id", args).fetchall()
        return [
            Charge(job, query, parse_mechanism(text), epsilon, AccountingMethod(method), created)
            for job, query, text, epsilon, method, created in rows
        ]

    def job_state(self, job_id: str) -> bytes | None:
        """The state last stored with a charge of ``job_id``, if any."""
        try:
            row = self._connection().execute(
                "SELECT state FROM job_state WHERE job_id = ?", (job_id,)).fetchone()
        except sqlite3.OperationalError:  # a read-only ledger from before the table
            return None
        return None if row is None else bytes(row[0])

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


def _read_meta(path: Path) -> dict[str, str]:
    conn = None
    try:
        conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
        return dict(conn.execute("SELECT key, value FROM meta").fetchall())
    except sqlite3.DatabaseError as err:
        raise ConfigError(f"ledger {path}: not a privadapt ledger database ({err})") from None
    finally:
        if conn is not None:
            conn.close()


def _policy_from_meta(path: Path, meta: Mapping[str, str]) -> SitePolicy:
    """The cap a ledger was last opened with, as a policy that can only read."""
    try:
        return SitePolicy(
            site_name=meta["site_name"],
            epsilon_cap=float(meta["epsilon_cap"]),
            delta_cap=float(meta["delta_cap"]),
            adjacency=meta["adjacency"],
            accounting=meta["accounting"],
        )
    except (KeyError, ValueError) as err:
        raise ConfigError(
            f"ledger {path}: its meta table is incomplete or invalid ({err})"
        ) from None
