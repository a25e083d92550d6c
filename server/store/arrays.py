"""The ``arrays`` table: the arrays of answers, checkpoints and results.

Arrays are stored one per row as ``.npy`` bytes written with
``allow_pickle=False``: dtype, byte order and shape round-trip exactly and no
pickle is ever read back from disk.
"""

from __future__ import annotations

import io
import sqlite3
from collections.abc import Sequence

import numpy as np


def write_arrays(conn: sqlite3.Connection, kind: str, job_id: str, step: int,
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


def read_arrays(conn: sqlite3.Connection, kind: str, job_id: str,
                step: int) -> list[tuple[str, np.ndarray]]:
    rows = conn.execute(
        "SELECT name, npy FROM arrays WHERE kind = ? AND job_id = ? AND step = ? "
        "ORDER BY position", (kind, job_id, step),
    )
    return [(name, np.load(io.BytesIO(blob), allow_pickle=False)) for name, blob in rows]


def delete_arrays(conn: sqlite3.Connection, kind: str, job_id: str, step: int) -> None:
    conn.execute(
        "DELETE FROM arrays WHERE kind = ? AND job_id = ? AND step = ?", (kind, job_id, step)
    )
