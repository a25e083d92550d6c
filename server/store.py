"""The coordinator's state database: what a restarted coordinator resumes from.

DESIGN.md section 7. One SQLite file per deployment (WAL mode) holding the
registered sites, jobs, one row per round *attempt* (aborted ones included, so
the privacy report can say what the sites were charged for), the aggregated
answer of every finished algorithm step, model checkpoints, final results and
an append-only audit log.

A round's row is written *before* the round is announced (state ``started``)
and completed when it ends (``answered`` or ``aborted``): the sites' ledgers
charge a round as soon as they answer it, so a coordinator that crashes
mid-round must still find the round on disk. When the job resumes, rounds
still ``started`` are marked ``interrupted`` (an abort) and so appear in the
job's status and privacy report like every other charged attempt.

Durability: every write is one ``BEGIN IMMEDIATE`` transaction committed (with
``synchronous=FULL``) before the method returns, so a crash loses nothing a
caller was told is stored. An answer and the round record that produced it are
written in the same transaction: after a restart either both exist or neither.

Threads: the gRPC server calls in from a thread pool; each thread gets its own
connection (``threading.local``) and writers serialise on SQLite's write lock.

Arrays are stored one per row as ``.npy`` bytes written with
``allow_pickle=False``: dtype, byte order and shape round-trip exactly and no
pickle is ever read back from disk.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import sqlite3
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from privadapt.common.errors import ConfigError
from privadapt.common.transactions import ThreadConnections, transaction

SCHEMA_VERSION = 2  # 2: rounds.state (v1 stores are upgraded in place on open)
# Written into ``meta`` so that a site ledger or any other SQLite file is refused.
_STORE_KIND = "privadapt-coordinator"
# How long a writer waits for another thread or process to commit.
_BUSY_TIMEOUT_S = 60.0

JOB_STATES = ("pending", "running", "succeeded", "failed", "cancelled")
FINISHED_STATES = ("succeeded", "failed", "cancelled")
# A round attempt: written "started" before it is announced, then "answered"
# or "aborted" when it ends; "interrupted" if the coordinator stopped in between.
ROUND_STATES = ("started", "answered", "aborted", "interrupted")
_ABORTED_ROUND_STATES = frozenset({"aborted", "interrupted"})

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
        state TEXT NOT NULL, PRIMARY KEY (job_id, round))""",
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
_JSON_TUPLE_FIELDS = frozenset({"kernels", "participants"})
# SQLite stores NaN as NULL; an aborted round may not know its epsilon.
_NAN_FIELDS = frozenset({"epsilon_so_far"})
_CHECKPOINT, _RESULT, _RESULT_STEP = "checkpoint", "result", -1


@dataclass(frozen=True)
class SiteRecord:
    name: str
    num_records: int
    num_features: int
    kernels: tuple[str, ...]
    policy_version: str
    certificate_expiry: float | None
    first_seen: float
    last_seen: float


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


@dataclass(frozen=True)
class RoundRecord:
    """One round attempt; ``round`` numbers every attempt of a job, ``step``
    the algorithm step it served (an aborted attempt is retried under a new
    round number with the same step). ``state`` is one of ROUND_STATES; left
    empty it follows ``aborted`` ("aborted" or "answered")."""

    job_id: str
    round: int
    step: int
    query_id: str
    participants: tuple[str, ...]
    started: float
    finished: float
    aborted: bool
    abort_reason: str
    epsilon_so_far: float
    state: str = ""

    def __post_init__(self) -> None:
        if not self.state:
            object.__setattr__(self, "state", "aborted" if self.aborted else "answered")
        if self.state not in ROUND_STATES:
            raise ValueError(f"round state must be one of {', '.join(ROUND_STATES)}, "
                             f"got {self.state!r}")
        if bool(self.aborted) != (self.state in _ABORTED_ROUND_STATES):
            raise ValueError(f"a round in state {self.state!r} cannot have aborted="
                             f"{self.aborted}")

    @classmethod
    def starting(cls, job_id: str, round: int, step: int, query_id: str,
                 participants: Sequence[str], started: float) -> RoundRecord:
        """The row of a round about to be announced (its end not yet known)."""
        return cls(job_id, round, step, query_id, tuple(participants), started, started,
                   False, "", math.nan, "started")


@dataclass(frozen=True)
class StoredAnswer:
    job_id: str
    step: int
    round: int
    query_id: str
    fingerprint: str
    blocks: tuple[np.ndarray, ...]
    participants: tuple[str, ...]


@dataclass(frozen=True)
class AuditEntry:
    id: int
    timestamp: float
    event: str
    job_id: str | None
    site_name: str | None
    detail: str


class CoordinatorStore:
    """The coordinator's database at ``path``, created if missing.

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
                if version == 1:
                    for statement in _UPGRADE_TO_2:
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

    # -- connections ---------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        return self._connections.get()

    def _connect(self) -> sqlite3.Connection:
        try:
            # check_same_thread=False only so close() can close every
            # thread's connection; each is used by its own thread.
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

    def __enter__(self) -> CoordinatorStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- sites ---------------------------------------------------------------

    def upsert_site(
        self, name: str, *, num_records: int, num_features: int, kernels: Sequence[str],
        policy_version: str, certificate_expiry: float | None, now: float | None = None,
    ) -> None:
        """Register a site or update its registration (``first_seen`` is kept)."""
        now = time.time() if now is None else now
        with self._transaction() as conn:
            row = conn.execute("SELECT first_seen FROM sites WHERE name = ?", (name,)).fetchone()
            site = SiteRecord(name, int(num_records), int(num_features), tuple(kernels),
                              policy_version, certificate_expiry, now if row is None else row[0],
                              now)
            _insert(conn, "sites", site, replace=True)

    def touch_site(self, name: str, now: float | None = None) -> None:
        """Record that ``name`` was heard from; ``KeyError`` if never registered."""
        now = time.time() if now is None else now
        with self._transaction() as conn:
            cur = conn.execute("UPDATE sites SET last_seen = ? WHERE name = ?", (now, name))
            if cur.rowcount == 0:
                raise KeyError(f"site {name!r} is not registered; it must register first")

    def sites(self) -> list[SiteRecord]:
        """Every registered site, by name."""
        return [SiteRecord(**row) for row in _select(self._connection(), SiteRecord, "sites",
                                                     "ORDER BY name")]

    # -- jobs ----------------------------------------------------------------

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
            _insert(conn, "jobs", record)
        return record

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
        rows = _select(self._connection(), JobRecord, "jobs", where + " ORDER BY created, rowid",
                       args)
        return [JobRecord(**row) for row in rows]

    def set_job_state(self, job_id: str, state: str, message: str = "") -> None:
        """Move a job to ``state``. A finished job's state is final (``ValueError``)."""
        if state not in JOB_STATES:
            raise ValueError(f"job state must be one of {', '.join(JOB_STATES)}, got {state!r}")
        with self._transaction() as conn:
            current = self._require_job(conn, job_id)
            if current in FINISHED_STATES:
                raise ValueError(
                    f"job {job_id!r} is already {current}; a finished job cannot become {state}"
                )
            conn.execute(
                "UPDATE jobs SET state = ?, message = ?, updated = ? WHERE job_id = ?",
                (state, message, time.time(), job_id),
            )

    def _require_job(self, conn: sqlite3.Connection, job_id: str) -> str:
        state = _job_state(conn, job_id)
        if state is None:
            raise KeyError(f"no job {job_id!r} in coordinator store {self.path}")
        return state

    # -- rounds --------------------------------------------------------------

    def start_round(self, rec: RoundRecord) -> None:
        """Record a round about to be announced (``RoundRecord.starting``);
        ``ValueError`` if (job, round) is already stored."""
        if rec.state != "started":
            raise ValueError(f"start_round takes a round in state 'started', got {rec.state!r}")
        with self._transaction() as conn:
            self._require_job(conn, rec.job_id)
            self._refuse_taken(conn, rec)
            _insert(conn, "rounds", rec)

    def record_round(self, rec: RoundRecord) -> None:
        """Store how a round attempt ended: completes its ``started`` row, or
        stores it anew; ``ValueError`` if (job, round) already ended."""
        with self._transaction() as conn:
            self._end_round(conn, rec)

    def _end_round(self, conn: sqlite3.Connection, rec: RoundRecord) -> None:
        self._require_job(conn, rec.job_id)
        if rec.state in ("started", "interrupted"):
            raise ValueError(f"round {rec.round} of job {rec.job_id!r}: a round ends "
                             f"answered or aborted, not {rec.state!r}")
        started = conn.execute(
            "SELECT step, query_id FROM rounds WHERE job_id = ? AND round = ? AND state = ?",
            (rec.job_id, rec.round, "started"),
        ).fetchone()
        if started is None:
            self._refuse_taken(conn, rec)
        elif tuple(started) != (rec.step, rec.query_id):
            raise ValueError(
                f"round {rec.round} of job {rec.job_id!r} was started for step {started[0]} "
                f"query {started[1]!r}, not step {rec.step} query {rec.query_id!r}"
            )
        _insert(conn, "rounds", rec, replace=started is not None)

    @staticmethod
    def _refuse_taken(conn: sqlite3.Connection, rec: RoundRecord) -> None:
        if conn.execute(
            "SELECT 1 FROM rounds WHERE job_id = ? AND round = ?", (rec.job_id, rec.round)
        ).fetchone():
            raise ValueError(
                f"round {rec.round} of job {rec.job_id!r} is already recorded; every round "
                "attempt needs a new round number"
            )

    def interrupt_rounds(self, job_id: str, reason: str,
                         now: float | None = None) -> list[RoundRecord]:
        """Mark every round of ``job_id`` still ``started`` as ``interrupted``
        (aborted, with ``reason``) and return them. Only for a job that runs no
        round now: a resumed job, before its first round."""
        now = time.time() if now is None else now
        with self._transaction() as conn:
            rows = _select(conn, RoundRecord, "rounds",
                           "WHERE job_id = ? AND state = 'started' ORDER BY round", (job_id,))
            interrupted = [
                replace(RoundRecord(**row), state="interrupted", aborted=True,
                        abort_reason=reason, finished=max(row["started"], now))
                for row in rows
            ]
            for rec in interrupted:
                _insert(conn, "rounds", rec, replace=True)
        return interrupted

    def rounds(self, job_id: str, include_started: bool = False) -> list[RoundRecord]:
        """Every round attempt of ``job_id`` that ended (answered, aborted or
        interrupted), in round order; with ``include_started``, also those in
        flight (or left ``started`` by a crash and not yet reconciled)."""
        where = "WHERE job_id = ?" + ("" if include_started else " AND state != 'started'")
        rows = _select(self._connection(), RoundRecord, "rounds", where + " ORDER BY round",
                       (job_id,))
        return [RoundRecord(**row) for row in rows]

    def last_round(self, job_id: str) -> int:
        """The highest round number recorded for ``job_id`` (aborted, interrupted
        and started attempts included, so the next attempt can take the next
        number); 0 if none."""
        row = self._connection().execute(
            "SELECT MAX(round) FROM rounds WHERE job_id = ?", (job_id,)
        ).fetchone()
        return 0 if row[0] is None else int(row[0])

    # -- answers -------------------------------------------------------------

    def save_answer(self, answer: StoredAnswer, round_record: RoundRecord) -> None:
        """Store a step's aggregated answer together with the round that
        produced it, in one transaction; ``ValueError`` if the step already
        has an answer or the two records disagree."""
        for field in ("job_id", "round", "step", "query_id"):
            if getattr(answer, field) != getattr(round_record, field):
                raise ValueError(
                    f"answer and round record disagree on {field}: "
                    f"{getattr(answer, field)!r} != {getattr(round_record, field)!r}"
                )
        if round_record.aborted:
            raise ValueError(
                f"round {round_record.round} of job {answer.job_id!r} was aborted; "
                "an aborted round has no answer to store"
            )
        blocks = [("", np.asarray(block)) for block in answer.blocks]
        with self._transaction() as conn:
            self._require_job(conn, answer.job_id)
            if conn.execute(
                "SELECT 1 FROM answers WHERE job_id = ? AND step = ?", (answer.job_id, answer.step)
            ).fetchone():
                raise ValueError(
                    f"step {answer.step} of job {answer.job_id!r} already has a stored answer; "
                    "a step is answered once"
                )
            self._end_round(conn, round_record)
            _insert(conn, "answers", answer, skip=("blocks",))
            _write_arrays(conn, "answer", answer.job_id, answer.step, blocks)

    def answer(self, job_id: str, step: int) -> StoredAnswer | None:
        with self._transaction(write=False) as conn:
            rows = _select(conn, StoredAnswer, "answers", "WHERE job_id = ? AND step = ?",
                           (job_id, step), skip=("blocks",))
            if not rows:
                return None
            blocks = tuple(array for _, array in _read_arrays(conn, "answer", job_id, step))
        return StoredAnswer(**rows[0], blocks=blocks)

    # -- checkpoints and results ---------------------------------------------

    def save_checkpoint(
        self, job_id: str, step: int, model: Mapping[str, np.ndarray | float | int]
    ) -> None:
        """Store the model after ``step``. Saving a step again replaces it: a
        coordinator that crashed between answer and checkpoint recomputes it."""
        named = _model_items(model)
        with self._transaction() as conn:
            self._require_job(conn, job_id)
            _write_model(conn, _CHECKPOINT, job_id, int(step), named, None)

    def latest_checkpoint(self, job_id: str) -> tuple[int, dict[str, np.ndarray]] | None:
        """The highest-step checkpoint of ``job_id`` as (step, model), or None."""
        with self._transaction(write=False) as conn:
            (step,) = conn.execute(
                "SELECT MAX(step) FROM models WHERE kind = ? AND job_id = ?", (_CHECKPOINT, job_id)
            ).fetchone()
            if step is None:
                return None
            return step, dict(_read_arrays(conn, _CHECKPOINT, job_id, step))

    def save_result(
        self, job_id: str, model: Mapping[str, np.ndarray | float | int], privacy_report_json: str
    ) -> None:
        """Store a job's final model and privacy report. It may be rewritten
        while the job is unfinished (a resumed job recomputes it), not after."""
        named = _model_items(model)
        with self._transaction() as conn:
            state = self._require_job(conn, job_id)
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
            return dict(_read_arrays(conn, _RESULT, job_id, _RESULT_STEP)), row[0]

    # -- audit log -----------------------------------------------------------

    def audit(
        self, event: str, *, job_id: str | None = None, site_name: str | None = None,
        detail: str = "",
    ) -> None:
        """Append one entry to the audit log (which triggers keep append-only)."""
        with self._transaction() as conn:
            conn.execute(
                "INSERT INTO audit (timestamp, event, job_id, site_name, detail) "
                "VALUES (?, ?, ?, ?, ?)", (time.time(), event, job_id, site_name, detail),
            )

    def audit_log(self, job_id: str | None = None) -> list[AuditEntry]:
        """Audit entries (of ``job_id`` if given), oldest first."""
        where, args = ("", ()) if job_id is None else ("WHERE job_id = ?", (job_id,))
        rows = _select(self._connection(), AuditEntry, "audit", where + " ORDER BY id", args)
        return [AuditEntry(**row) for row in rows]


# -- rows ----------------------------------------------------------------------


def _insert(conn: sqlite3.Connection, table: str, record: object, *, replace: bool = False,
            skip: tuple[str, ...] = ()) -> None:
    """Insert a record into the table whose columns carry its field names."""
    names = [f.name for f in fields(record) if f.name not in skip]  # type: ignore[arg-type]
    values = [_to_sql(name, getattr(record, name)) for name in names]
    verb = "INSERT OR REPLACE" if replace else "INSERT"
    conn.execute(
        f"{verb} INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
        values,
    )


def _select(conn: sqlite3.Connection, cls: type, table: str, tail: str,
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


def _job_state(conn: sqlite3.Connection, job_id: str) -> str | None:
    row = conn.execute("SELECT state FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
    return None if row is None else row[0]


# -- arrays --------------------------------------------------------------------


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
    conn.execute(
        "DELETE FROM arrays WHERE kind = ? AND job_id = ? AND step = ?", (kind, job_id, step)
    )
    _write_arrays(conn, kind, job_id, step, named)


def _write_arrays(conn: sqlite3.Connection, kind: str, job_id: str, step: int,
                  named: Sequence[tuple[str, np.ndarray]]) -> None:
    rows = []
    for position, (name, array) in enumerate(named):
        buffer = io.BytesIO()
        try:  # refuses object arrays: nothing stored here is ever unpickled
            np.save(buffer, array, allow_pickle=False)
        except ValueError as err:
            raise ValueError(f"cannot store array {name or position!r} of job {job_id!r}: "
                             f"{err}") from None
        rows.append((kind, job_id, int(step), position, name, buffer.getvalue()))
    conn.executemany("INSERT INTO arrays VALUES (?, ?, ?, ?, ?, ?)", rows)


def _read_arrays(conn: sqlite3.Connection, kind: str, job_id: str,
                 step: int) -> list[tuple[str, np.ndarray]]:
    rows = conn.execute(
        "SELECT name, npy FROM arrays WHERE kind = ? AND job_id = ? AND step = ? "
        "ORDER BY position", (kind, job_id, step),
    )
    return [(name, np.load(io.BytesIO(blob), allow_pickle=False)) for name, blob in rows]
