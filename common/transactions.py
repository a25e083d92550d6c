"""One SQLite transaction, the durability contract of every privadapt database
(a site's ledger and round progress, the coordinator's store)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator


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
