"""The ledger's hash chain and its head file: a lost or replaced ledger never
looks like a new one.

Every charge extends a chain, ``head_n = sha256(head_{n-1} || row_n)``, where
``row_n`` is the charge row's canonical bytes (:func:`row_bytes`: every field
that determines the charge, the mechanism's JSON included, and the kernel
that made it where the row records one) and ``head_0``
names the site. The ledger stores ``(n, head_n)`` in its database, in the
charge's own transaction, and a small *head file* beside it
(``site.db.head``) holds the same pair, written after the transaction
commits and before the charge is returned, so before anything is released,
and synced off the charge's critical path (:class:`HeadFileWriter`: the
commit is a charge's one durable write; a power cut loses at most the
newest head, the one-behind case below). It has two checksummed slots
written alternately (:func:`write_head_file`): a torn write still leaves
the previous head.

What each disagreement means, at open (:func:`check_head_file`):

* head file equal to the database: the normal case;
* head file exactly one charge behind, and equal to the chain over all rows
  but the last (or at the same count, before the chain's last checkpoint
  link, :mod:`privadapt.client.ledger.checkpoints`): the site crashed between
  its commit and the head file write.
  That charge was never released (a release waits for the head file), but the
  database has it, so it stays charged and the head file is repaired;
* head file ahead of the database, or naming another chain (a database
  truncated, deleted and re-created, its WAL lost, an older copy or another
  site's file put in its place): refused, with how to recover.

Head file writes are made only while holding the database's write lock
(:class:`~privadapt.client.ledger.privacy_ledger.PrivacyLedger`), always with the database's
current head, so two processes charging one ledger never move the file back.
What a chain cannot catch: an attacker replacing *both* files with an older
consistent pair. Keep the head file where the site's operator can back it up
separately (or mirror it) if that matters.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import threading
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path

from privadapt.common.errors import ConfigError

_HEAD_FILE_TAG = "privadapt-ledger-head v1"
_GENESIS_TAG = b"privadapt ledger chain v1\x00"
# Two slots of this size: a head write never overwrites the previous head.
_SLOT_BYTES = 128


@dataclass(frozen=True)
class ChainHead:
    """``count`` charges whose chain ends at ``digest`` (hex sha256)."""

    count: int
    digest: str


def genesis(site_name: str) -> ChainHead:
    """The head of a site's empty ledger: tied to the site, so a fresh
    ledger of one site never matches another's head file."""
    return ChainHead(0, hashlib.sha256(_GENESIS_TAG + site_name.encode()).hexdigest())


def row_bytes(
    job_id: str, query_id: str, mechanism_json: str, epsilon_after: float, method: str,
    created_at: float, kernel: str | None = None,
) -> bytes:
    """The canonical bytes of one charge row (floats by repr: exact). The
    kernel (schema 3) is a seventh field when the row records one; a row
    without (written before schema 3, or charged without a kernel name) has
    the six-field bytes it always had, so an upgraded ledger's chain still
    verifies, and setting or clearing a row's kernel breaks the chain."""
    fields = [job_id, query_id, mechanism_json, repr(float(epsilon_after)), method,
              repr(float(created_at))]
    if kernel is not None:
        fields.append(kernel)
    return json.dumps(fields, ensure_ascii=True, separators=(",", ":")).encode()


def extend(head: ChainHead, row: bytes) -> ChainHead:
    """The head after one more charge."""
    digest = hashlib.sha256(bytes.fromhex(head.digest) + row).hexdigest()
    return ChainHead(head.count + 1, digest)


def chain(start: ChainHead, rows: Iterable[bytes]) -> tuple[ChainHead, ChainHead]:
    """The head over ``rows`` from ``start``, and the head one row before it
    (equal to ``start`` for no rows)."""
    head = before = start
    for row in rows:
        before, head = head, extend(head, row)
    return head, before


def head_file(ledger_path: Path) -> Path:
    """Where a ledger's head file lives: beside it, ``<name>.head``."""
    return ledger_path.with_name(ledger_path.name + ".head")


def _slot_bytes(head: ChainHead) -> bytes:
    body = f"{_HEAD_FILE_TAG} {head.count} {head.digest}"
    check = hashlib.sha256(body.encode("ascii")).hexdigest()[:16]
    return f"{body} {check}\n".encode("ascii").ljust(_SLOT_BYTES, b" ")


def _parse_slot(data: bytes) -> ChainHead | None:
    """The head a slot holds, or None for an empty or torn one."""
    try:
        tag, version, count, digest, check = data.decode("ascii").split()
        body = f"{tag} {version} {count} {digest}"
        if body.split(" ", 2)[:2] != _HEAD_FILE_TAG.split(" ") or (
                hashlib.sha256(body.encode("ascii")).hexdigest()[:16] != check):
            return None
        bytes.fromhex(digest)
        return ChainHead(int(count), digest)
    except (UnicodeDecodeError, ValueError):
        return None


def read_head_file(path: Path) -> ChainHead | None:
    """The newest head a head file holds; None if there is no head file.
    ``ConfigError`` if it is unreadable or holds no valid head."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise ConfigError(f"ledger head file {path}: unreadable ({err})") from None
    heads = [_parse_slot(data[k * _SLOT_BYTES:(k + 1) * _SLOT_BYTES]) for k in range(2)]
    valid = [head for head in heads if head is not None]
    if not valid:
        raise ConfigError(f"ledger head file {path}: holds no valid head (edited or corrupted)")
    return max(valid, key=lambda head: head.count)


def write_head_file(path: Path, head: ChainHead, durable: bool = True) -> None:
    """Write ``head`` durably: into slot ``count % 2`` of the file, then
    fdatasync. The other slot keeps the previous head, so a write torn by a
    crash leaves that one (one charge behind: the legitimate crash case), and
    a charge costs one sync, not the three of write-temp-rename-sync-dir. The
    directory is synced once, when the file is created. ``durable=False``
    (a simulation ledger): no sync at all."""
    created = not path.exists()
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.pwrite(fd, _slot_bytes(head), (head.count % 2) * _SLOT_BYTES)
        if durable:
            os.fdatasync(fd)
    finally:
        os.close(fd)
    if created and durable:
        _sync_directory(path.parent)


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# One thread syncs the head files of every ledger in the process, after the
# charge that wrote each has returned; it is joined at interpreter exit. Made
# per process: a forked child has none of its parent's threads.
_SYNCER: tuple[int, concurrent.futures.ThreadPoolExecutor] | None = None
_SYNCER_LOCK = threading.Lock()


def _syncer() -> concurrent.futures.ThreadPoolExecutor:
    global _SYNCER
    with _SYNCER_LOCK:
        if _SYNCER is None or _SYNCER[0] != os.getpid():
            _SYNCER = (os.getpid(), concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="ledger-head-sync"))
        return _SYNCER[1]


class HeadFileWriter:
    """One ledger object's writes of its head file, synced off the charge's
    critical path.

    A charge commits (SQLite's one fsync), writes its head into the file's
    slot and returns; the slot is fdatasync'd by a background thread. Before
    the next write, the previous one's sync is waited for (normally long
    done), and a head some other process wrote is synced first, so at most
    the newest slot is ever unsynced. A process killed at any point leaves
    the page cache, so the file is current; a power cut can lose only the
    newest slot, leaving the previous head: one charge behind the database,
    the crash case every open repairs (:func:`check_head_file`). What this
    gives up against a sync before release: a charge released in the
    milliseconds before a power cut, *and* then rolled back by restoring an
    older database one charge behind, would go unnoticed. A failed
    background sync is raised by the next write or :meth:`flush`.
    ``durable=False`` (a simulation ledger): never synced."""

    def __init__(self, path: Path, durable: bool = True) -> None:
        self.path = path
        self.durable = durable
        self._pending: concurrent.futures.Future[None] | None = None
        self._synced: ChainHead | None = None
        #: The newest head this object knows the file holds (written or read).
        self.known: ChainHead | None = None
        self._lock = threading.Lock()

    def write(self, head: ChainHead, stored: ChainHead | None) -> None:
        """Write ``head`` over ``stored`` (what the file holds now)."""
        with self._lock:
            self._wait()
            created = not self.path.exists()
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                if self.durable and stored is not None and stored != self._synced:
                    os.fdatasync(fd)  # another writer's head: durable before it is overwritten
                os.pwrite(fd, _slot_bytes(head), (head.count % 2) * _SLOT_BYTES)
            except BaseException:
                os.close(fd)
                raise
            self.known = head
            if not self.durable:
                os.close(fd)
                return
            if created:
                _sync_directory(self.path.parent)
            self._pending = _syncer().submit(self._sync, fd, head)

    def flush(self) -> None:
        """Wait until the last head written is durable."""
        with self._lock:
            self._wait()

    def _wait(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def _sync(self, fd: int, head: ChainHead) -> None:
        try:
            os.fdatasync(fd)
            self._synced = head
        finally:
            os.close(fd)


_RECOVER = (
    "Do not start the site on it: restore the ledger and its head file together from a backup "
    "(or, if the lost charges are known, account them by hand and create a new ledger with "
    "`privadapt ledger init` only after the site's data holders agree to a fresh budget)."
)


def check_head_file(
    ledger_path: Path, stored: ChainHead | None, head: ChainHead, behind: Collection[ChainHead]
) -> bool:
    """Check the head file against the database's chain (``head`` over all
    rows; ``behind``: the heads one write earlier, before its last row or
    its last checkpoint link; ``stored`` is what no database may disagree
    with). Returns True when the head file must be rewritten (missing on a
    ledger with no charges, or one write behind after a crash); raises
    ``ConfigError`` when the two disagree otherwise."""
    path = head_file(ledger_path)
    if stored == head:
        return False
    if stored is None:
        if head.count == 0:
            return True
        raise ConfigError(
            f"ledger {ledger_path}: its head file {path} is missing, but the ledger holds "
            f"{head.count} charges. The head file is what shows that the database was not "
            f"replaced or rolled back. {_RECOVER}"
        )
    if stored.count in (head.count - 1, head.count) and stored in behind:
        return True  # crash between the commit and the head file write
    if stored.count > head.count:
        raise ConfigError(
            f"ledger {ledger_path}: the database holds {head.count} charges but its head file "
            f"{path} records {stored.count}: charges were lost (the file truncated, deleted "
            f"and re-created, its WAL removed, or an older copy put in its place). "
            f"A site that started on it would answer again as if it had spent less. {_RECOVER}"
        )
    raise ConfigError(
        f"ledger {ledger_path}: the database's charge chain ({head.count} charges, head "
        f"{head.digest[:16]}) does not match its head file {path} ({stored.count} charges, "
        f"head {stored.digest[:16]}): the database or the head file was replaced (another "
        f"site's ledger, an older copy) or edited. {_RECOVER}"
    )
