"""The ledger database's tables, their upgrades, and the cap it records.

Schema versions: 1 had no hash chain and no derived tables; 2 added them
(client/ledger/opening.py); 3 records the kernel of each charge (``charges.kernel``,
NULL for a charge from before version 3 or made without one, shown as
"unknown") and holds the outstanding budget reservations
(client/ledger/reservations.py); 4 holds the kernels the site latched off
after a failed floating-point certificate (``kernel_latches``,
client/ledger/latches.py); 5 holds the checkpoints of the derived state
bound into the chain (``checkpoints``, client/ledger/checkpoints.py): a
ledger without any is re-derived from all its rows once, at its next open,
which writes its first; 6 counts the certificates each self-certifying kernel
ran since its latch was last cleared (``certificate_counts``,
client/ledger/latches.py). An older ledger is upgraded in place when a
site opens it for charging: each missing table is created empty, and the
kernel column is added with NULL in every existing row, which leaves each
row's chain bytes as they were
(:func:`~privadapt.client.ledger.chain.row_bytes`), so its chain still verifies.
A read-only open (``ledger show``, ``ledger report``) upgrades nothing and
reads an older ledger's kernels as unknown, its latches as none and its
certificate counts as 0.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from pathlib import Path

from privadapt.client.policy import SitePolicy
from privadapt.common.errors import ConfigError

SCHEMA_VERSION = 6
#: What a charge row with no recorded kernel shows.
UNKNOWN_KERNEL = "unknown"

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS charges (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    query_id TEXT NOT NULL,
    mechanism_json TEXT NOT NULL,
    epsilon_after REAL NOT NULL,
    method TEXT NOT NULL,
    created_at REAL NOT NULL,
    kernel TEXT,
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
CREATE TABLE IF NOT EXISTS reservations (
    token TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    job_id TEXT NOT NULL,
    query_id TEXT NOT NULL,
    mechanism_json TEXT NOT NULL,
    created_at REAL NOT NULL,
    UNIQUE (job_id, query_id)
);
CREATE TABLE IF NOT EXISTS kernel_latches (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kernel TEXT NOT NULL,
    latched_at REAL NOT NULL,
    job_id TEXT NOT NULL,
    query_id TEXT NOT NULL,
    cleared_at REAL,
    outcome TEXT NOT NULL DEFAULT 'failed'
);
CREATE TABLE IF NOT EXISTS checkpoints (
    charges INTEGER PRIMARY KEY,
    last_id INTEGER NOT NULL,
    head TEXT NOT NULL,
    groups_json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS certificate_counts (
    kernel TEXT PRIMARY KEY,
    since_clearing INTEGER NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS kernel_latches_active
    ON kernel_latches (kernel) WHERE cleared_at IS NULL;
"""

#: The columns of a charge row, in the order the chain hashes them.
ROW_COLUMNS = "job_id, query_id, mechanism_json, epsilon_after, method, created_at, kernel"
# The same from a ledger written before schema 3 (read-only: not upgraded).
_ROW_COLUMNS_V2 = "job_id, query_id, mechanism_json, epsilon_after, method, created_at, NULL"


def create_tables(conn: sqlite3.Connection) -> None:
    """Inside the opening transaction: create what is missing (the upgrade
    from any older schema), and add the kernel column to a ledger from before
    schema 3 (NULL in its rows)."""
    for statement in SCHEMA.split(";"):
        if statement.strip():
            conn.execute(statement)
    if not has_kernel_column(conn):
        conn.execute("ALTER TABLE charges ADD COLUMN kernel TEXT")


def has_kernel_column(conn: sqlite3.Connection) -> bool:
    return any(row[1] == "kernel" for row in conn.execute("PRAGMA table_info(charges)"))


def row_columns(conn: sqlite3.Connection) -> str:
    """What to SELECT for :data:`ROW_COLUMNS` from this ledger (an older one
    read without upgrading has no kernel column)."""
    return ROW_COLUMNS if has_kernel_column(conn) else _ROW_COLUMNS_V2


def write_meta(conn: sqlite3.Connection, policy: SitePolicy) -> None:
    """Record the cap, so that ``ledger show`` needs no policy file."""
    meta = {
        "site_name": policy.site_name,
        "epsilon_cap": repr(policy.epsilon_cap),
        "delta_cap": repr(policy.delta_cap),
        "adjacency": policy.adjacency.value,
        "accounting": policy.accounting.value,
        "schema_version": str(SCHEMA_VERSION),
    }
    conn.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", meta.items())


def read_meta(path: Path) -> dict[str, str]:
    conn = None
    try:
        conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
        return dict(conn.execute("SELECT key, value FROM meta").fetchall())
    except sqlite3.DatabaseError as err:
        raise ConfigError(f"ledger {path}: not a privadapt ledger database ({err})") from None
    finally:
        if conn is not None:
            conn.close()


def policy_from_meta(path: Path, meta: Mapping[str, str]) -> SitePolicy:
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
