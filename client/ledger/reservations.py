"""Budget reserved by a check until its charge commits or it is released
(refusals before any private data is read, also under concurrency).

``PrivacyLedger.check_charge`` is made before a site reads its data, so that a
refusal takes data-independent time. A check that only read the ledger left
one gap: a second query charging the same ledger between a first query's
check and its charge made the first one's charge decide again *after* its
kernel ran, and a refusal decided then comes late. So a check reserves what it
admitted: while a reservation is outstanding, every other check and charge on
the ledger decides over the committed charges *plus every reserved release*,
composed as if each reservation had committed (the accountants compose a
multiset, so the order does not matter; the multiset is the committed groups
plus one more release per reservation). Every outstanding reservation was
admitted together with all the reservations before it, so the committed
charges plus all reservations always fit the cap, and a reserved release is
never refused at its charge for lack of budget.

Where they live. Several processes may charge one ledger (SQLite's write lock
serialises them), so reservations are rows of the ledger's ``reservations``
table, written in the same ``BEGIN IMMEDIATE`` discipline as charges: the
check that reads the budget inserts its reservation before it lets the write
lock go. The commit deletes it in the charge's own transaction; any other exit
(a refusal, an exception, a kernel error, an interrupt) deletes it in the
``finally`` of :meth:`~privadapt.client.ledger.privacy_ledger.PrivacyLedger.reservation`.
Nothing is ever released before the charge commits; a reservation only ever
makes a decision more conservative.

A crash releases them. Each ledger object opened for writing holds an
exclusive ``flock`` on its own owner file (``<ledger>.owners/<token>``) from
its open for as long as it lives; the kernel drops it when the process dies.
Before deciding, a check probes the owners of the reservations it sees: a
reservation whose owner's lock can be taken belongs to a dead process (or a
closed ledger) and is deleted. So a crash, a ``kill -9`` or a power cut never
leaves budget blocked. The reservation rows need no durability (a crash
releases them anyway), so their transactions commit with ``synchronous=NORMAL``
(one fsync fewer per query); a charge's own ``FULL`` commit syncs them along
with it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import sqlite3
from collections import Counter
from pathlib import Path

from privadapt.client.ledger.accounting import Multiset


def owners_directory(ledger_path: Path) -> Path:
    """Where the owner files of a ledger's reservations live: beside the
    database file itself, whatever path (a symlink to it, relative to a
    working directory) a process opened it by, so that every process probes
    the owners every other one holds."""
    real = ledger_path.resolve()
    return real.with_name(real.name + ".owners")


class ReservationOwner:
    """One ledger object's claim to its reservations: an exclusive ``flock``
    on its own owner file, taken when the ledger opens for writing (so that
    a site's first query pays no file creation) and held until :meth:`close`
    (or the process's death)."""

    def __init__(self, ledger_path: Path) -> None:
        self.token = secrets.token_hex(16)
        self._path = owners_directory(ledger_path) / self.token
        self._fd: int | None = None
        self._closed = False

    def hold(self) -> None:
        """Take the lock (once): before any reservation row names this owner,
        so a prober that sees such a row always finds the lock held. Never
        after :meth:`close`: the rows a closed owner left would live again."""
        if self._closed:
            raise RuntimeError(f"reservation owner {self._path} is closed")
        if self._fd is not None:
            return
        try:
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
        except FileNotFoundError:  # a new ledger's (or one whose directory went)
            self._path.parent.mkdir(mode=0o700, exist_ok=True)
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def close(self) -> None:
        """Drop the lock: every reservation still naming this owner is dead."""
        self._closed = True
        if self._fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            self._path.unlink()
        os.close(self._fd)
        self._fd = None


def owner_alive(ledger_path: Path, token: str) -> bool:
    """Whether the owner ``token`` of some reservations still holds its lock;
    a dead owner's file is removed."""
    if not all(c in "0123456789abcdef" for c in token):
        return False  # never a path: the table holds tokens this module wrote
    path = owners_directory(ledger_path) / token
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return False
    finally:
        os.close(fd)


def drop_dead(conn: sqlite3.Connection, ledger_path: Path, own_token: str) -> None:
    """Inside a write transaction: delete the reservations of owners that no
    longer hold their lock (a crashed process, a closed ledger)."""
    owners = [token for (token,) in conn.execute(
        "SELECT DISTINCT owner FROM reservations WHERE owner != ?", (own_token,))]
    for token in owners:
        if not owner_alive(ledger_path, token):
            conn.execute("DELETE FROM reservations WHERE owner = ?", (token,))


def reserved(conn: sqlite3.Connection, except_job: str, except_query: str) -> Multiset:
    """The outstanding reservations as a multiset, leaving out any of the
    release being decided (only one answer of a (job, query) can commit)."""
    # Counted here, not by GROUP BY: a few rows (one per query in flight).
    return dict(Counter(text for (text,) in conn.execute(
        "SELECT mechanism_json FROM reservations WHERE NOT (job_id = ? AND query_id = ?)",
        (except_job, except_query))))


def is_reserved(conn: sqlite3.Connection, job_id: str, query_id: str) -> bool:
    return conn.execute("SELECT 1 FROM reservations WHERE job_id = ? AND query_id = ?",
                        (job_id, query_id)).fetchone() is not None


def insert(conn: sqlite3.Connection, token: str, owner: str, job_id: str, query_id: str,
           text: str, now: float) -> None:
    conn.execute(
        "INSERT INTO reservations (token, owner, job_id, query_id, mechanism_json, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?)", (token, owner, job_id, query_id, text, now))


def delete(conn: sqlite3.Connection, token: str, owner: str) -> None:
    conn.execute("DELETE FROM reservations WHERE token = ? AND owner = ?", (token, owner))


def consume(conn: sqlite3.Connection, job_id: str, query_id: str) -> None:
    """In a charge's transaction: every reservation of this (job, query) is
    spent (this one) or moot (another answer of it could only be a replay)."""
    conn.execute("DELETE FROM reservations WHERE job_id = ? AND query_id = ?",
                 (job_id, query_id))


def count_owned(conn: sqlite3.Connection, owner: str) -> int:
    return conn.execute("SELECT COUNT(*) FROM reservations WHERE owner = ?",
                        (owner,)).fetchone()[0]
