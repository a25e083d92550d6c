"""One SQLite transaction, the durability contract of every privadapt database
(a site's ledger and round progress, the coordinator's store)."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection, write: bool = True) -> Iterator[sqlite3.Connection]:
    """A write transaction, or a read snapshot with ``write=False``.

    Writes begin IMMEDIATE: the write lock is taken before the first read, so
    no other thread or process can change what was read before the write
    (check-then-write cannot race). Committed on exit, rolled back on any
    exception. ``conn`` must be in autocommit mode (``isolation_level=None``).
    """
    conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


@contextlib.contextmanager
def unsynced_transaction(conn: sqlite3.Connection,
                         syncs: bool = True) -> Iterator[sqlite3.Connection]:
    """A write transaction committed without its own fsync (WAL, NORMAL): for
    rows whose loss in a power cut is a state the reader already recovers
    from. The next ``FULL`` commit on the same database syncs them with it
    (the WAL is one file, synced up to its end). ``conn`` commits with
    ``synchronous=FULL``, and is left so; ``syncs=False``: a connection that
    never syncs (``synchronous=OFF``), left as it is."""
    if not syncs:
        with transaction(conn) as inside:
            yield inside
        return
    conn.execute("PRAGMA synchronous=NORMAL")
    try:
        with transaction(conn) as inside:
            yield inside
    finally:
        conn.execute("PRAGMA synchronous=FULL")


class ThreadConnections:
    """One SQLite connection per thread, made by ``connect`` on first use (gRPC
    handlers run on a thread pool, and a sqlite3 connection belongs to the
    thread that uses it).

    :meth:`close` closes the calling thread's connection and refuses every
    later use; each other thread's connection is closed by that thread itself
    on its next use, or when the thread ends. Never across threads: closing a
    connection another thread is still stepping through a statement frees
    memory SQLite is using (a segmentation fault, seen when a coordinator
    stopped while a job thread was writing its audit log)."""

    def __init__(self, connect: Callable[[], sqlite3.Connection], what: str) -> None:
        self._connect = connect
        self._what = what
        self._local = threading.local()
        self._closed = False

    def get(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if self._closed:
            self._close_own()
            raise RuntimeError(f"{self._what} is closed")
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
        return conn

    def close(self) -> None:
        self._closed = True
        self._close_own()

    def _close_own(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            self._local.conn = None
            conn.close()
