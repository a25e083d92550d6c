"""The coordinator store's database file: schema, upgrades, connections, rows.

Durability: every write is one ``BEGIN IMMEDIATE`` transaction committed (with
``synchronous=FULL``) before the method returns, so a crash loses nothing a
caller was told is stored (common/transactions.py).

Threads: the gRPC server calls in from a thread pool; each thread gets its own
connection (``threading.local``) and writers serialise on SQLite's write lock.

The table modules beside this one (sites, jobs, rounds, models, audit) hold the
methods of :class:`~privadapt.server.store.CoordinatorStore`, one table or
group of tables each; the schema of all of them stays here, in one place, with
the upgrades of older files.
"""

from __future__ import annotations

import contextlib
import json
import math
import sqlite3
from dataclasses import fields
from pathlib import Path
from typing import Any, Self

import numpy as np

from privadapt.common.errors import ConfigError
from privadapt.common.transactions import ThreadConnections, transaction

# 2: rounds.state; 3: rounds.form (older stores are upgraded in place on open)
SCHEMA_VERSION = 3
# Written into ``meta`` so that a site ledger or any other SQLite file is refused.
_STORE_KIND = "privadapt-coordinator"
# How long a writer waits for another thread or process to commit.
_BUSY_TIMEOUT_S = 60.0

# A list, not a script split on ";": the trigger bodies contain semicolons.
# Columns carry the record fields' names; tuples of names are stored as JSON.
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS sites (name TEXT PRIMARY KEY, num_records INTEGER NOT NULL,
        num_features INTEGER NOT NULL, kernels TEXT NOT NULL, policy_version TEXT NOT NULL,
        certificate_expiry REAL, first_seen REAL NOT NULL, last_seen REAL NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS jobs (job_id TEXT PRIMARY KEY, algorithm TEXT NOT NULL,
        spec_json TEXT NOT NULL, seed INTEGER NOT NULL, state TEXT NOT NULL,
        message TEXT NOT NULL, created REAL NOT NULL, updated REAL NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS rounds (job_id TEXT NOT NULL REFERENCES jobs (job_id),
        round INTEGER NOT NULL, step INTEGER NOT NULL, query_id TEXT NOT NULL,
        participants TEXT NOT NULL, started REAL NOT NULL, finished REAL NOT NULL,
        aborted INTEGER NOT NULL, abort_reason TEXT NOT NULL, epsilon_so_far REAL,
        state TEXT NOT NULL, form TEXT NOT NULL DEFAULT 'secure_sum',
        PRIMARY KEY (job_id, round))""",
    """CREATE TABLE IF NOT EXISTS answers (job_id TEXT NOT NULL REFERENCES jobs (job_id),
        step INTEGER NOT NULL, round INTEGER NOT NULL, query_id TEXT NOT NULL,
        fingerprint TEXT NOT NULL, participants TEXT NOT NULL, PRIMARY KEY (job_id, step))""",
    # Checkpoints (kind 'checkpoint', one per step) and results (kind
    # 'result', step -1, with the privacy report).
    """CREATE TABLE IF NOT EXISTS models (kind TEXT NOT NULL,
        job_id TEXT NOT NULL REFERENCES jobs (job_id), step INTEGER NOT NULL,
        privacy_report_json TEXT, created REAL NOT NULL, PRIMARY KEY (kind, job_id, step))""",
    # The arrays of answers (name ''), checkpoints and results, in their order.
    """CREATE TABLE IF NOT EXISTS arrays (kind TEXT NOT NULL, job_id TEXT NOT NULL,
        step INTEGER NOT NULL, position INTEGER NOT NULL, name TEXT NOT NULL,
        npy BLOB NOT NULL, PRIMARY KEY (kind, job_id, step, position))""",
    """CREATE TABLE IF NOT EXISTS audit (id INTEGER PRIMARY KEY AUTOINCREMENT,
        timestamp REAL NOT NULL, event TEXT NOT NULL, job_id TEXT, site_name TEXT,
        detail TEXT NOT NULL)""",
    """CREATE TRIGGER IF NOT EXISTS audit_no_update BEFORE UPDATE ON audit
        BEGIN SELECT RAISE(ABORT, 'the audit log is append-only: rows cannot be updated'); END""",
    """CREATE TRIGGER IF NOT EXISTS audit_no_delete BEFORE DELETE ON audit
        BEGIN SELECT RAISE(ABORT, 'the audit log is append-only: rows cannot be deleted'); END""",
)
# Schema version 1 -> 2: rounds gained their state; a v1 row is a finished round.
_UPGRADE_TO_2 = (
    "ALTER TABLE rounds ADD COLUMN state TEXT NOT NULL DEFAULT 'answered'",
    "UPDATE rounds SET state = 'aborted' WHERE aborted = 1",
)
# Schema version 2 -> 3: rounds gained their release form; every older round
# was a secure sum.
_UPGRADE_TO_3 = ("ALTER TABLE rounds ADD COLUMN form TEXT NOT NULL DEFAULT 'secure_sum'",)
_JSON_TUPLE_FIELDS = frozenset({"kernels", "participants"})
# SQLite stores NaN as NULL; an aborted round may not know its epsilon.
_NAN_FIELDS = frozenset({"epsilon_so_far"})


class StoreDatabase:
    """The coordinator's database at ``path``, created if missing: the base
    every table's methods build on (``_transaction``, ``_connection``).

    Raises ``ConfigError`` for a file that is not a privadapt coordinator store
    or was written by a newer privadapt."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._connections = ThreadConnections(self._connect, f"coordinator store {self.path}")
        try:
            with self._transaction() as conn:
                version = self._check_existing(conn)
                for statement in _SCHEMA:
                    conn.execute(statement)
                upgrades = {1: _UPGRADE_TO_2 + _UPGRADE_TO_3, 2: _UPGRADE_TO_3}
                if version in upgrades:
                    for statement in upgrades[version]:
                        conn.execute(statement)
                    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'",
                                 (str(SCHEMA_VERSION),))
                conn.executemany(
                    "INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?)",
                    (("kind", _STORE_KIND), ("schema_version", str(SCHEMA_VERSION))),
                )
        except sqlite3.DatabaseError as err:
            self.close()
            raise ConfigError(
                f"coordinator store {self.path}: not a usable SQLite database ({err}); "
                "point state_db at the coordinator's own store or at a new file"
            ) from None
        except ConfigError:
            self.close()
            raise

    def _check_existing(self, conn: sqlite3.Connection) -> int | None:
        """The schema version of an existing store (None for a new file)."""
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        if not tables:
            return None  # a new (or empty) file: ours to initialise
        meta = dict(conn.execute("SELECT key, value FROM meta")) if "meta" in tables else {}
        if meta.get("kind") != _STORE_KIND:
            raise ConfigError(
                f"coordinator store {self.path}: this SQLite file is not a privadapt "
                "coordinator store (a site ledger or another program's database?); point "
                "state_db at the coordinator's own store or at a new file"
            )
        version = int(meta.get("schema_version", "0"))
        if version > SCHEMA_VERSION:
            raise ConfigError(
                f"coordinator store {self.path}: schema version {version} is newer than this "
                f"privadapt understands ({SCHEMA_VERSION}); upgrade privadapt on the coordinator"
            )
        return version

    def _connection(self) -> sqlite3.Connection:
        return self._connections.get()

    def _connect(self) -> sqlite3.Connection:
        try:
            # Each connection is used by its own thread only (ThreadConnections);
            # check_same_thread=False lets it be finalised from another.
            conn = sqlite3.connect(
                self.path, timeout=_BUSY_TIMEOUT_S, isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.Error as err:
            raise ConfigError(
                f"coordinator store {self.path}: cannot open ({err}); check that the "
                "directory exists and is writable"
            ) from None
        conn.execute("PRAGMA journal_mode=WAL")
        # A finished round must survive a power cut, not only a crash.
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
        return conn

    def _transaction(
        self, write: bool = True
    ) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        """A write transaction, or a read snapshot so that a record and its
        arrays are read from the same state (common/transactions.py)."""
        return transaction(self._connection(), write)

    def close(self) -> None:
        self._connections.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


# -- rows ----------------------------------------------------------------------


def insert_row(conn: sqlite3.Connection, table: str, record: object, *, replace: bool = False,
               skip: tuple[str, ...] = ()) -> None:
    """Insert a record into the table whose columns carry its field names."""
    names = [f.name for f in fields(record) if f.name not in skip]  # type: ignore[arg-type]
    values = [_to_sql(name, getattr(record, name)) for name in names]
    verb = "INSERT OR REPLACE" if replace else "INSERT"
    conn.execute(
        f"{verb} INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
        values,
    )


def select_rows(conn: sqlite3.Connection, cls: type, table: str, tail: str,
                args: tuple[object, ...] = (), skip: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Rows of ``table`` as keyword arguments for ``cls``."""
    names = [f.name for f in fields(cls) if f.name not in skip]
    rows = conn.execute(f"SELECT {', '.join(names)} FROM {table} {tail}", args)
    return [{n: _from_sql(n, v) for n, v in zip(names, row, strict=True)} for row in rows]


def _to_sql(name: str, value: object) -> object:
    if name in _JSON_TUPLE_FIELDS:
        return json.dumps(list(value))  # type: ignore[call-overload]
    # sqlite3 cannot bind numpy scalars (a seed or round from numpy code).
    value = value.item() if isinstance(value, np.generic) else value
    return None if isinstance(value, float) and math.isnan(value) else value


def _from_sql(name: str, value: Any) -> Any:
    if name in _JSON_TUPLE_FIELDS:
        return tuple(json.loads(value))
    if name in _NAN_FIELDS and value is None:
        return math.nan
    return bool(value) if name == "aborted" else value
