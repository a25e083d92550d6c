"""Opening a ledger: refuse what is missing, empty, foreign or altered, and
rebuild what the ledger keeps about its history from its rows.

The derived tables (``groups``, ``ledger_state``) are a cache written with
every charge; the rows, their hash chain and the checkpoints linked into it
(:mod:`privadapt.client.ledger.checkpoints`) are the record. At open the
ledger recomputes the chain, the groups and the sums from its newest
checkpoint and the rows after it, and refuses to start when any stored copy
disagrees (beyond float rounding for the sums): a corrupted or hand-edited
database is never charged against.
"""

from __future__ import annotations

import math
import sqlite3
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from privadapt.client.ledger import checkpoints as checkpoints
from privadapt.client.ledger.accounting import parse_mechanism
from privadapt.client.ledger.chain import (
    ChainHead,
    check_head_file,
    extend,
    genesis,
    head_file,
    read_head_file,
    row_bytes,
    write_head_file,
)
from privadapt.client.ledger.schema import (
    SCHEMA_VERSION,
    create_tables,
    row_columns,
    write_meta,
)
from privadapt.client.ledger.totals import LedgerTotals
from privadapt.client.policy import SitePolicy
from privadapt.common.errors import ConfigError

# Stored derived sums must equal their recomputation from the rows to this.
DERIVED_TOLERANCE = 1e-9


def init_hint(path: Path) -> str:
    return (f"create a site's ledger once, on purpose, with `privadapt ledger init --site-db "
            f"{path} --policy POLICY.toml` (a lost or emptied ledger must never look like a "
            "new one)")


def refuse_missing(path: Path, create: bool) -> None:
    """Refuse a ledger file that is missing or empty unless ``create``; with
    ``create``, still refuse one whose head file survives it (a ledger that
    was deleted or truncated, not a new one)."""
    if path.is_dir():
        raise ConfigError(f"ledger {path} is a directory; pass the ledger database file")
    state = None
    if not path.exists():
        state = "no such file"
    elif path.stat().st_size == 0:
        state = "the file is empty (0 bytes)"
    if state is None:
        return
    if not create:
        raise ConfigError(f"ledger {path}: {state}; {init_hint(path)}")
    previous = read_head_file(head_file(path))
    if previous is not None:
        raise ConfigError(
            f"ledger {path}: {state}, but its head file {head_file(path)} records "
            f"{previous.count} charges: the ledger was deleted or truncated, not new. Restore "
            "the ledger from a backup; a site must not start over with an empty ledger."
        )


def open_tables(conn: sqlite3.Connection, path: Path, policy: SitePolicy,
                totals: LedgerTotals, create: bool, durable: bool = True) -> Rebuilt:
    """Inside the opening write transaction: create or upgrade the tables,
    refuse a ledger of another site, schema or adjacency, or one that was
    altered; rebuild the chain and ``totals`` from the rows, repair only the
    legitimate crash case, and record the policy's cap in ``meta``."""
    tables = {name for (name,) in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "charges" not in tables and not create:
        raise ConfigError(f"ledger {path}: not a privadapt ledger (no charges "
                          f"table); {init_hint(path)}")
    create_tables(conn)
    version = _check_existing(conn, path, policy)
    # Schema 1 never had the derived tables: a file that claims
    # version 1 but has them was edited (its chain must not restart).
    genuine_v1 = version < 2 and not tables & {"ledger_state", "groups"}
    if version < 2 and not genuine_v1:
        raise ConfigError(
            f"ledger {path}: it says it was written by schema 1 but holds "
            "tables schema 1 never had: it was altered; restore the site's "
            "ledger and its head file from backup")
    rebuilt = _rebuild_and_verify(conn, path, policy, totals, genuine_v1, durable)
    write_meta(conn, policy)
    return rebuilt


def _rebuild_and_verify(conn: sqlite3.Connection, path: Path, policy: SitePolicy,
                        totals: LedgerTotals, upgrading: bool, durable: bool) -> Rebuilt:
    """Re-derive chain and totals from the newest checkpoint and the rows
    after it, check every stored copy (derived tables, head file), repair
    only the legitimate crash case, and checkpoint what was re-derived if
    it is as long as a charge lets the rows after a checkpoint grow.
    ``upgrading``: a schema-1 ledger, whose chain starts now."""
    adjacency = policy.adjacency.value
    try:
        rebuilt = rebuild(conn, policy.site_name, totals, from_checkpoint=True)
    except ValueError as err:  # a row's mechanism the groups table did not name
        raise _altered(path, f"a charge cannot be accounted under its adjacency ({err})") from None
    stored_head = read_head_file(head_file(path))
    had_state = verify_derived(conn, path, rebuilt, adjacency)
    if not had_state and stored_head is None and (upgrading or rebuilt.head.count == 0):
        rewrite = True  # a new ledger, or a schema-1 one: its chain starts now
    else:
        rewrite = check_head_file(path, stored_head, rebuilt.head, rebuilt.behind(stored_head))
    if rebuilt.head.count - rebuilt.checkpointed >= checkpoints.CHECKPOINT_INTERVAL:
        # Only a ledger from before checkpoints gets here (a charge writes
        # one at this many rows): its first.
        rebuilt.head = checkpoints.write(conn, checkpoints.Checkpoint(
            rebuilt.head, rebuilt.last_id, dict(rebuilt.totals.groups)))
        rebuilt.checkpointed, rewrite = rebuilt.head.count, True
    write_derived(conn, rebuilt, adjacency)
    if rewrite:
        # Under the write lock, with the committed head: no charge is added here.
        write_head_file(head_file(path), rebuilt.head, durable)
    return rebuilt


def _check_existing(conn: sqlite3.Connection, path: Path, policy: SitePolicy) -> int:
    """Refuse a ledger of another site, schema or adjacency; its schema version."""
    meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    version = int(meta.get("schema_version", SCHEMA_VERSION))
    if version > SCHEMA_VERSION:
        raise ConfigError(
            f"ledger {path}: schema version {version} is newer than this privadapt "
            f"understands ({SCHEMA_VERSION}); upgrade privadapt on this site"
        )
    owner = meta.get("site_name", policy.site_name)
    if owner != policy.site_name:
        raise ConfigError(
            f"ledger {path} belongs to site {owner!r} but the policy is for site "
            f"{policy.site_name!r}; point each site at its own ledger database"
        )
    # The groups table names every mechanism charged (the open checks it
    # against the rows it re-derives); only a ledger without one is scanned.
    texts = conn.execute("SELECT mechanism_json FROM groups").fetchall() or conn.execute(
        "SELECT DISTINCT mechanism_json FROM charges").fetchall()
    for (text,) in texts:
        try:
            parse_mechanism(text).in_adjacency(policy.adjacency)
        except ValueError as err:
            raise ConfigError(
                f"ledger {path}: a stored charge cannot be accounted under the "
                f"policy's adjacency {policy.adjacency.value!r} ({err}); keep the "
                "adjacency the ledger was charged in"
            ) from None
    return version


@dataclass
class Rebuilt:
    """What the rows of a ledger say, re-derived from them (from its newest
    checkpoint on, or from its first row), and kept up to date row by row."""

    head: ChainHead
    totals: LedgerTotals
    last_id: int = 0
    last_epsilon: float | None = None
    last_method: str | None = None
    #: Charges at the newest checkpoint linked into ``head`` (0: none).
    checkpointed: int = 0
    #: The head one row earlier, when that row was re-derived.
    before: ChainHead | None = None
    #: The head before a checkpoint link at ``head.count``, if the chain ends in one.
    prelink: ChainHead | None = None
    #: The canonical bytes of the row at ``last_id``, when the open started
    #: at a checkpoint and re-derived no row.
    last_row: bytes | None = None
    #: Rows re-derived.
    rows: int = 0
    #: The groups re-derived, when they are added to ``totals`` only at the
    #: end (:func:`rebuild`); None: each row goes into ``totals`` as it comes.
    groups: Counter[str] | None = None

    def advance(self, conn: sqlite3.Connection, columns: str,
                on_row: Callable[[str, str], None] | None = None) -> None:
        """Add the rows after ``last_id`` and link the checkpoints among them,
        each checked against what the rows say; ``on_row(job, mechanism
        JSON)`` for each row."""
        rows = conn.execute(f"SELECT id, {columns} FROM charges WHERE id > ? ORDER BY id",
                            (self.last_id,)).fetchall()
        if not rows:
            return
        pending = {each.head.count: each for each in checkpoints.after(conn, self.checkpointed)}
        for row_id, job, query, text, epsilon, method, created, kernel in rows:
            self.before, self.prelink, self.last_row = self.head, None, None
            self.head = extend(self.head, row_bytes(job, query, text, epsilon, method, created,
                                                    kernel))
            if self.groups is None:
                self.totals.add(text)
            else:
                self.groups[text] += 1
            self.last_id, self.last_epsilon, self.last_method = row_id, epsilon, method
            self.rows += 1
            if on_row is not None:
                on_row(job, text)
            checkpoint = pending.get(self.head.count)
            if checkpoint is not None:
                self._link(checkpoint)

    def _link(self, checkpoint: checkpoints.Checkpoint) -> None:
        groups = self.totals.groups if self.groups is None else self.groups
        if (checkpoint.head != self.head or checkpoint.last_id != self.last_id
                or dict(checkpoint.groups) != dict(groups)):
            raise ConfigError(
                f"ledger checkpoint at {checkpoint.head.count} charges is not what its rows "
                "say: the database was corrupted or edited. The site refuses to charge "
                "against it. Restore the ledger and its head file together from a backup.")
        self.prelink, self.head = self.head, checkpoint.linked()
        self.checkpointed = checkpoint.head.count

    def behind(self, stored: ChainHead | None) -> tuple[ChainHead, ...]:
        """The heads a head file may legitimately hold one write behind this
        chain: before its last row, or before its last checkpoint link, or
        (re-derived from a checkpoint) the head the checkpoint's row extends,
        recognised by extending ``stored`` by that row."""
        heads = tuple(each for each in (self.before, self.prelink) if each is not None)
        if (self.last_row is not None and stored is not None and self.prelink is not None
                and stored.count == self.prelink.count - 1
                and extend(stored, self.last_row) == self.prelink):
            heads += (stored,)
        return heads


def rebuild(conn: sqlite3.Connection, site_name: str, totals: LedgerTotals,
            from_checkpoint: bool = False) -> Rebuilt:
    """Chain and totals over the rows, oldest first: from the newest
    checkpoint with ``from_checkpoint`` (at most CHECKPOINT_INTERVAL rows
    after it, where a site opens a ledger), else from the first row,
    checking every checkpoint on the way (a full verification)."""
    columns = row_columns(conn)
    start = checkpoints.latest(conn) if from_checkpoint else None
    if start is None:
        rebuilt = Rebuilt(genesis(site_name), totals, groups=Counter())
    else:
        row = conn.execute(f"SELECT {columns} FROM charges WHERE id = ?",
                           (start.last_id,)).fetchone()
        if row is None:
            raise _altered(conn_path(conn), f"the row its checkpoint at {start.head.count} "
                           "charges names is missing")
        job, query, text, epsilon, method, created, kernel = row
        rebuilt = Rebuilt(start.linked(), totals, start.last_id, epsilon, method,
                          start.head.count, prelink=start.head,
                          last_row=row_bytes(job, query, text, epsilon, method, created,
                                             kernel),
                          groups=Counter(start.groups))
    rebuilt.advance(conn, columns)
    # Each group once, in sorted order: the sums come out the same, to the
    # last bit, from a checkpoint or from every row.
    for text, count in sorted(rebuilt.groups.items()):
        totals.add(text, count)
    beyond = checkpoints.latest(conn)
    if beyond is not None and beyond.head.count > rebuilt.checkpointed:
        raise _altered(conn_path(conn), f"it holds a checkpoint at {beyond.head.count} "
                       f"charges that its {rebuilt.head.count} rows never reach")
    return rebuilt


def conn_path(conn: sqlite3.Connection) -> Path:
    """The main database file of ``conn`` (for messages)."""
    return Path(conn.execute("PRAGMA database_list").fetchone()[2])


def verify_derived(conn: sqlite3.Connection, path: Path, rebuilt: Rebuilt, adjacency: str) -> bool:
    """Check the stored chain head, groups and sums against ``rebuilt``.
    Returns False when there is no stored state yet (a new ledger, or one
    written by schema 1); raises ``ConfigError`` on any disagreement."""
    state = conn.execute(
        "SELECT charges, head, pure_epsilon, rdp, adjacency FROM ledger_state").fetchone()
    if state is None:
        if rebuilt.head.count and conn.execute("SELECT COUNT(*) FROM groups").fetchone()[0]:
            raise _altered(path, "its groups table exists without its chain state")
        return False
    count, digest, pure, rdp_blob, stored_adjacency = state
    if ChainHead(count, digest) != rebuilt.head:
        raise _altered(path, f"its stored chain head ({count} charges, {digest[:16]}) is not "
                       f"the chain of its rows ({rebuilt.head.count}, "
                       f"{rebuilt.head.digest[:16]})")
    stored_groups = dict(conn.execute("SELECT mechanism_json, count FROM groups").fetchall())
    if stored_groups != dict(rebuilt.totals.groups):
        raise _altered(path, "its groups table is not the count of its rows' mechanisms")
    if stored_adjacency == adjacency:
        sums = rebuilt.totals.stored_sums()
        rdp = np.frombuffer(rdp_blob, dtype="<f8")
        if not (_close(pure, sums[0]) and rdp.shape == sums[1].shape
                and all(_close(a, b) for a, b in zip(rdp, sums[1], strict=True))):
            raise _altered(path, "its stored pure-epsilon sum or RDP curve is not the sum over "
                           "its rows")
    return True


def write_derived(conn: sqlite3.Connection, rebuilt: Rebuilt, adjacency: str) -> None:
    """Store the groups and the state recomputed from the rows."""
    conn.execute("DELETE FROM groups")
    conn.executemany("INSERT INTO groups (mechanism_json, count) VALUES (?, ?)",
                     sorted(rebuilt.totals.groups.items()))
    write_state(conn, rebuilt.totals, rebuilt.head, adjacency)


def write_state(conn: sqlite3.Connection, totals: LedgerTotals, head: ChainHead,
                adjacency: str) -> None:
    pure, rdp = totals.stored_sums()
    conn.execute(
        "INSERT INTO ledger_state (id, charges, head, pure_epsilon, rdp, adjacency) "
        "VALUES (1, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET charges = excluded.charges, "
        "head = excluded.head, pure_epsilon = excluded.pure_epsilon, rdp = excluded.rdp, "
        "adjacency = excluded.adjacency",
        (head.count, head.digest, pure, np.asarray(rdp, dtype="<f8").tobytes(), adjacency),
    )


def _close(stored: float, recomputed: float) -> bool:
    if math.isinf(stored) or math.isinf(recomputed):
        return stored == recomputed
    return math.isclose(stored, recomputed, rel_tol=DERIVED_TOLERANCE, abs_tol=1e-300)


def _altered(path: Path, what: str) -> ConfigError:
    return ConfigError(
        f"ledger {path}: {what}: the database was corrupted or edited. The site refuses to "
        "charge against it. Restore the ledger and its head file together from a backup."
    )
