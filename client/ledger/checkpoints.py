"""Checkpoints of a ledger's derived state, bound into its hash chain, so
that opening a ledger costs the same after a hundred charges or a hundred
thousand.

A checkpoint at ``n`` charges records what the rows up to it say: the id of
the n-th row, the chain head over them and the groups (mechanism JSON ->
count). It is a link of the chain itself:

    head'_n = sha256(head_n || checkpoint bytes)

and every later row extends ``head'_n``, not ``head_n``. So the head file,
which every open checks, attests every checkpoint before it: a checkpoint
whose groups, row id or head were edited, or that was deleted, gives
another chain than the head file's and the ledger is refused, as for an
edited row. An open starts from the newest checkpoint and re-derives only
the rows after it (fewer than :data:`CHECKPOINT_INTERVAL`: a charge writes
one at that many rows, and so does the first open of a longer ledger from
before checkpoints); a full verification (``privadapt ledger show`` and
``ledger report``) re-derives every row and checks every checkpoint
against them.

A checkpoint is written inside the transaction that charges its n-th row or
that opens the ledger, with the ledger state it links; the head file then
follows as after any charge, so a crash leaves it at most one write behind
(:func:`~privadapt.client.ledger.chain.check_head_file`). What an open does
not see: an edit of a row *before* the newest checkpoint, which changes no
figure the site composes (those come from the checkpoint) but would show in
a job's listed charges; ``privadapt ledger show`` refuses it.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass

from privadapt.client.ledger.chain import ChainHead
from privadapt.common.errors import ConfigError

#: Rows a charge lets pass before it writes a checkpoint: the most rows an
#: open re-derives.
CHECKPOINT_INTERVAL = 256

_LINK_TAG = b"privadapt ledger checkpoint v1\x00"


@dataclass(frozen=True)
class Checkpoint:
    """The state of the chain after its ``head.count``-th row (id ``last_id``):
    ``head`` is the chain before this checkpoint's link."""

    head: ChainHead
    last_id: int
    groups: Mapping[str, int]

    def payload(self) -> bytes:
        """Canonical bytes of what the checkpoint asserts."""
        return json.dumps([self.head.count, self.last_id, sorted(self.groups.items())],
                          ensure_ascii=True, separators=(",", ":")).encode()

    def linked(self) -> ChainHead:
        """The chain head after this checkpoint's link (same count)."""
        digest = hashlib.sha256(bytes.fromhex(self.head.digest) + _LINK_TAG
                                + self.payload()).hexdigest()
        return ChainHead(self.head.count, digest)


def write(conn: sqlite3.Connection, checkpoint: Checkpoint) -> ChainHead:
    """Store ``checkpoint`` (inside the caller's write transaction); the
    chain head after its link."""
    conn.execute(
        "INSERT INTO checkpoints (charges, last_id, head, groups_json) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (charges) DO UPDATE SET last_id = excluded.last_id, head = excluded.head, "
        "groups_json = excluded.groups_json",
        (checkpoint.head.count, checkpoint.last_id, checkpoint.head.digest,
         json.dumps(sorted(checkpoint.groups.items()))))
    return checkpoint.linked()


def latest(conn: sqlite3.Connection) -> Checkpoint | None:
    """The newest checkpoint, or None (a ledger from before checkpoints, or
    one that never had a charge)."""
    found = after(conn, -1, newest_only=True)
    return found[-1] if found else None


def after(conn: sqlite3.Connection, count: int, newest_only: bool = False) -> list[Checkpoint]:
    """The checkpoints at more than ``count`` charges, oldest first."""
    sql = ("SELECT charges, last_id, head, groups_json FROM checkpoints WHERE charges > ? "
           + ("ORDER BY charges DESC LIMIT 1" if newest_only else "ORDER BY charges"))
    try:
        rows = conn.execute(sql, (count,)).fetchall()
    except sqlite3.OperationalError:  # a ledger from before checkpoints, read without upgrade
        return []
    return [_parse(row) for row in rows]


def _parse(row: tuple) -> Checkpoint:
    charges, last_id, digest, groups_json = row
    try:
        groups = {str(text): int(n) for text, n in json.loads(groups_json)}
        return Checkpoint(ChainHead(int(charges), str(digest)), int(last_id), groups)
    except (TypeError, ValueError):
        raise ConfigError("a ledger checkpoint is unreadable: the database was corrupted or "
                          "edited; restore the ledger and its head file from a backup") from None
