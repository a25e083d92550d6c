"""The site's privacy ledger: every release charged, in SQLite, before it leaves.

DESIGN.md sections 2 and 7; STYLE.md section 1. One database file per site
(WAL mode, ``synchronous=FULL``: a committed charge survives a power cut):

* ``meta``: site name, cap (epsilon, delta), adjacency, accounting method and
  schema version, rewritten from the policy on every open so that
  ``privadapt ledger show`` can read a ledger without the policy file;
* ``charges``: one row per release: job, query id, the *mechanism* as JSON
  (never an epsilon alone, so any accountant can replay the ledger), the
  running epsilon after it, and the kernel that computed it;
* ``groups`` (mechanism JSON -> count) and ``ledger_state`` (number of
  charges, hash-chain head, pure-epsilon sum, RDP curve): derived from the
  rows, written in each charge's own transaction, rebuilt from the rows and
  checked when the ledger opens (:mod:`privadapt.client.ledger.totals`);
* ``job_state``, ``reservations`` and ``kernel_latches`` (kernels refused
  since their floating-point certificate failed,
  :mod:`privadapt.client.ledger.latches`); the tables and their upgrades are in
  :mod:`privadapt.client.ledger.schema`, opening in
  :mod:`privadapt.client.ledger.opening`, reading in
  :mod:`privadapt.client.ledger.view`.

A charge is one ``BEGIN IMMEDIATE`` transaction: it takes SQLite's write lock
first, catches up with any charge another process made, then either inserts
the row and commits or rolls back and refuses. Two threads or two processes
charging the same file serialise on the database itself; neither can compose
a stale ledger. A budget check made before a query reads any data reserves
what it admitted until the query's charge commits or the check is released
(:mod:`privadapt.client.ledger.reservations`), so a concurrent query is
refused at its own check, never after its kernel ran.

Cost independent of the history: no charge reads the history. A release is
refused before any PLD by closed-form lower bounds when it is new or near the
cap (a composition costs at least its costliest release), and no PLD larger
than :data:`~privadapt.common.accounting.accountant.MAX_PLD_POINTS` is ever built.
It is admitted without any exact figure when an upper bound on the exact
figure, kept by addition (:meth:`~privadapt.client.ledger.totals.Sums.upper_bound`),
fits the cap; only a release whose bound does not fit pays for the policy's
exact figure, over the groups (cost in the number of distinct mechanisms).
So every decision is the one the exact figure would make.

Fail closed: a ledger is created only on purpose (``create=True``,
``privadapt ledger init``); a missing, empty or unreadable one is a
``ConfigError``. Every charge extends a hash chain whose head is also written
to a file beside the ledger before the charge returns, and synced in the
background (:mod:`privadapt.client.ledger.chain`); a ledger whose chain, head
file or derived tables disagree is refused at open; the open re-derives only
the rows after the newest checkpoint linked into the chain
(:mod:`privadapt.client.ledger.checkpoints`).

A simulation ledger (``durable=False``, only under a policy that says
``simulation = true``) makes every check and keeps the chain, but never
syncs: ``synchronous=OFF``, head file unsynced.
"""
from __future__ import annotations

import contextlib
import secrets
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

from privadapt.client.ledger import checkpoints as checkpoints
from privadapt.client.ledger import latches as latches
from privadapt.client.ledger import reservations as reservations
from privadapt.client.ledger.accounting import mechanism_json
from privadapt.client.ledger.admission import CheckedCharge, admit
from privadapt.client.ledger.chain import (
    HeadFileWriter,
    extend,
    head_file,
    read_head_file,
    row_bytes,
)
from privadapt.client.ledger.opening import open_tables, refuse_missing, write_state
from privadapt.client.ledger.schema import (
    ROW_COLUMNS,
    UNKNOWN_KERNEL,
    policy_from_meta,
    read_meta,
)
from privadapt.client.ledger.view import Charge, LedgerView
from privadapt.client.policy import SitePolicy
from privadapt.common.accounting.accountant import AccountingMethod
from privadapt.common.errors import ConfigError, QueryRefusedError, ReplayError
from privadapt.common.mechanisms import Mechanism
from privadapt.common.transactions import unsynced_transaction

#: Issued, unconsumed budget checks one ledger object holds at once (one per
#: query in flight); a further check is refused, before any data is read.
_MAX_ISSUED_CHECKS = 256


class PrivacyLedger(LedgerView):
    """A site's ledger database, charged under ``policy``'s cap.

    ``create=True`` makes a new ledger when the file is missing or empty
    (never when its head file says one existed); without it, a missing,
    empty or non-ledger file is a ``ConfigError`` that says to run
    ``privadapt ledger init``. Safe to share between threads (one SQLite
    connection per thread) and between processes (SQLite's write lock;
    reservations are rows of the database, each owned by a ledger object)."""

    def __init__(
        self, path: str | Path, policy: SitePolicy, *, create: bool = False,
        read_only: bool = False, durable: bool = True,
    ) -> None:
        if not durable and not policy.simulation:
            raise ConfigError(
                f"ledger {path}: a ledger that does not sync its charges to disk is for "
                f"simulation sites only, and site {policy.site_name!r} is deployed (its "
                "policy does not say simulation = true); open it durable")
        if not read_only:
            refuse_missing(Path(path), create)
        self.durable = durable
        super().__init__(path, policy, read_only)
        self._head_file = HeadFileWriter(head_file(self.path), durable)
        # The checks this ledger issued and has not consumed, by token; a
        # CheckedCharge is reused only if it is the very object issued (never
        # a copy or a forgery handed back by a caller).
        self._issued_checks: dict[str, CheckedCharge] = {}
        self._owner = reservations.ReservationOwner(self.path)
        if not read_only:
            self._initialise(create)
            try:
                self._owner.hold()
            except OSError as err:
                self.close()
                raise ConfigError(
                    f"ledger {self.path}: cannot hold its reservations' owner file in "
                    f"{reservations.owners_directory(self.path)} ({err.strerror}); the "
                    "site needs to write beside its ledger") from err

    @classmethod
    def open_readonly(cls, path: str | Path) -> PrivacyLedger:
        """Open an existing ledger for reading, with the cap recorded in it
        (no policy file needed); ``ConfigError`` if it is not a ledger."""
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"ledger {path}: no such file; pass the site's ledger database")
        return cls(path, policy_from_meta(path, read_meta(path)), read_only=True)

    @classmethod
    def open_for_operator(cls, path: str | Path) -> PrivacyLedger:
        """Open an existing ledger for an operator command that writes (e.g.
        clearing a latch), with the cap recorded in it: verified and upgraded
        like a site's open, never created."""
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"ledger {path}: no such file; pass the site's ledger database")
        return cls(path, policy_from_meta(path, read_meta(path)))

    def close(self) -> None:
        """Close the calling thread's connection; every reservation this
        object still holds is released (its owner lock is dropped)."""
        self._issued_checks.clear()
        self._owner.close()
        try:
            self._head_file.flush()
        finally:
            super().close()

    # -- opening -------------------------------------------------------------

    def _initialise(self, create: bool) -> None:
        try:
            with self._lock, self._transaction() as conn:
                rebuilt = open_tables(conn, self.path, self.policy, self._totals, create,
                                      self.durable)
        except sqlite3.DatabaseError as err:
            self.close()
            raise ConfigError(f"ledger {self.path}: not a usable ledger database: {err}") from None
        except ConfigError:
            self.close()
            raise
        self._head, self._last_id = rebuilt.head, rebuilt.last_id
        self._checkpointed = rebuilt.checkpointed
        # The open upgraded the table: its rows have every column, so the
        # first read or charge need not ask the schema again.
        self._columns = ROW_COLUMNS
        self._head_file.known = rebuilt.head  # checked or written by the open
        #: Rows this open re-derived (after the newest checkpoint): bounded
        #: by CHECKPOINT_INTERVAL whatever the ledger's history.
        self.rows_rederived = rebuilt.rows
        if rebuilt.last_epsilon is not None:
            self._last = (rebuilt.last_epsilon, AccountingMethod(rebuilt.last_method))

    def _publish_head(self) -> None:
        """Sync the head file to the database's head, under the write lock so
        that no writer moves it back; called after every commit."""
        with self._transaction() as conn:
            self._catch_up(conn)
            self._sync_head_file()

    def _sync_head_file(self) -> None:
        """Under the write lock: bring the head file up to the database's head.
        Before each charge too, so that with several processes charging, a
        crash leaves the head file at most one charge behind, never more."""
        if self._head_file.known == self._head:
            return  # a head file only moves forward, and this object saw it here
        stored = read_head_file(self._head_file.path)
        if stored is None or stored.count < self._head.count:
            self._head_file.write(self._head, stored)

    # -- charging ------------------------------------------------------------

    def check_charge(self, job_id: str, query_id: str, mechanism: Mechanism) -> CheckedCharge:
        """Refuse now, deciding from the ledger alone, what :meth:`charge` would
        refuse now (``ReplayError``, ``BudgetExceededError``, an oversized
        accounting); else reserve the release's budget and return what the
        charge would record, for ``charge`` to reuse.

        A site calls this before it touches any private data: a
        refusal is unpriced, so one decided after the kernel ran would leak
        the kernel's data-dependent running time for free. Every other
        release reserved on this ledger is composed as if charged, and this
        one stays reserved until ``charge`` commits it or :meth:`release`
        frees it (use :meth:`reservation`, which always does), so a release
        checked here is never refused later for want of budget."""
        text = self._checked_text(job_id, query_id, mechanism)
        with self._lock:
            # The owner lock was taken at the open and is never taken again:
            # a closed ledger is refused here, and its reservations stay dead.
            conn = self._connection()
            if len(self._issued_checks) >= _MAX_ISSUED_CHECKS:
                # Never evict: an outstanding check's query may be running its
                # kernel, and its charge must not be refused late.
                raise QueryRefusedError(
                    f"site {self.policy.site_name!r}: {_MAX_ISSUED_CHECKS} queries are being "
                    f"answered on this ledger now; query {query_id!r} of job {job_id!r} is "
                    "refused before reading any record (send it again later)")
            with unsynced_transaction(conn, self.durable):
                self._catch_up(conn)
                self._refuse_replay(conn, job_id, query_id)
                reservations.drop_dead(conn, self.path, self._owner.token)
                if reservations.is_reserved(conn, job_id, query_id):
                    raise ReplayError(
                        f"site {self.policy.site_name!r}: query {query_id!r} of job {job_id!r} "
                        "is being answered now; a query is answered at most once, so the "
                        "coordinator must send a fresh query id")
                others = reservations.reserved(conn, job_id, query_id)
                epsilon, method = admit(self.policy, self._totals, self._last, job_id,
                                        query_id, mechanism, text, others)
                checked = CheckedCharge(job_id, query_id, text, self._head.digest, self.policy,
                                        epsilon, method, secrets.token_hex(16), not others)
                reservations.insert(conn, checked.token, self._owner.token, job_id, query_id,
                                    text, time.time())
            self._issued_checks[checked.token] = checked
        return checked

    def release(self, checked: CheckedCharge) -> None:
        """Free ``checked``'s reservation unless its charge consumed it; a
        check this ledger did not issue (or no longer holds) is ignored."""
        with self._lock:
            if self._issued_checks.get(checked.token) is not checked:
                return  # consumed by its charge, or not ours
            with unsynced_transaction(self._connection(), self.durable) as conn:
                reservations.delete(conn, checked.token, self._owner.token)
            del self._issued_checks[checked.token]

    @contextlib.contextmanager
    def reservation(self, job_id: str, query_id: str,
                    mechanism: Mechanism) -> Iterator[CheckedCharge]:
        """:meth:`check_charge`, released on every exit that does not commit
        its charge (a refusal, an exception, an interrupt): a reservation
        lives no longer than the block that answers the query."""
        checked = self.check_charge(job_id, query_id, mechanism)
        try:
            yield checked
        finally:
            self.release(checked)

    def outstanding_reservations(self) -> int:
        """How many releases this ledger object holds reserved now."""
        with self._lock:
            return len(self._issued_checks)

    def charge(
        self, job_id: str, query_id: str, mechanism: Mechanism, state: bytes | None = None,
        checked: CheckedCharge | None = None, kernel: str | None = None,
    ) -> Charge:
        """Record one release, or refuse it. Returns only after the charge is
        committed and the head file written (synced in the background:
        :class:`~privadapt.client.ledger.chain.HeadFileWriter`); raises ``ReplayError`` for a
        (job, query) already charged and ``BudgetExceededError`` when the
        composed epsilon would pass the cap, in which case nothing is stored.
        ``state`` (the job's site-side state after this release,
        client/job_state.py) is stored in the same transaction, so a site that
        restarts has exactly the state its ledger paid for. ``checked``: this
        release's :meth:`check_charge`, whose reservation the charge consumes
        and whose figure it reuses if nothing was charged or reserved
        alongside (the cap is not composed twice per query); without one, the
        decision counts every outstanding reservation. ``kernel``: the name
        of the kernel that computed the release, recorded with it."""
        text = self._checked_text(job_id, query_id, mechanism)
        with self._lock:
            added = False
            try:
                with self._transaction() as conn:
                    self._catch_up(conn)
                    self._sync_head_file()
                    self._refuse_replay(conn, job_id, query_id)
                    epsilon, method = self._admit_charge(conn, job_id, query_id, mechanism,
                                                         text, checked)
                    now = time.time()
                    head = extend(self._head, row_bytes(job_id, query_id, text, epsilon,
                                                        method.value, now, kernel))
                    cursor = conn.execute(
                        f"INSERT INTO charges ({ROW_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (job_id, query_id, text, epsilon, method.value, now, kernel),
                    )
                    conn.execute(
                        "INSERT INTO groups (mechanism_json, count) VALUES (?, 1) "
                        "ON CONFLICT (mechanism_json) DO UPDATE SET count = count + 1", (text,))
                    reservations.consume(conn, job_id, query_id)
                    self._totals.add(text)
                    added = True
                    checkpointed = self._checkpointed
                    if head.count - checkpointed >= checkpoints.CHECKPOINT_INTERVAL:
                        head = checkpoints.write(conn, checkpoints.Checkpoint(
                            head, cursor.lastrowid, dict(self._totals.groups)))
                        checkpointed = head.count
                    write_state(conn, self._totals, head, self.policy.adjacency.value)
                    if state is not None:
                        conn.execute(
                            "INSERT INTO job_state (job_id, query_id, state, updated_at) "
                            "VALUES (?, ?, ?, ?) ON CONFLICT (job_id) DO UPDATE SET "
                            "query_id = excluded.query_id, state = excluded.state, "
                            "updated_at = excluded.updated_at",
                            (job_id, query_id, state, now),
                        )
            except BaseException:
                if added:  # not committed: the next use rebuilds from the rows
                    self._reload_totals()
                raise
            if checked is not None and self._issued_checks.get(checked.token) is checked:
                del self._issued_checks[checked.token]  # consumed: never reused again
            self._head, self._last_id, self._last = head, cursor.lastrowid, (epsilon, method)
            self._checkpointed = checkpointed
            self._count_for_job(job_id, text)
            self._publish_head()
        return Charge(job_id, query_id, mechanism, epsilon, method, now,
                      UNKNOWN_KERNEL if kernel is None else kernel)

    # -- kernel latches (client/ledger/latches.py) -----------------------------

    def latch_kernel(self, kernel: str, job_id: str, query_id: str) -> latches.KernelLatch:
        """Latch ``kernel`` off, committed (``synchronous=FULL``) before this
        returns: the site returns its refusal only after this, so a crash
        between the two keeps the latch."""
        self._refuse_read_only()
        with self._lock, self._transaction() as conn:
            return latches.insert(conn, kernel, job_id, query_id, time.time())

    def arm_certificate(self, kernel: str, job_id: str, query_id: str) -> bool:
        """Arm ``kernel`` for one certificate, committed before this returns
        (client/ledger/latches.py) and counted against the policy's
        ``max_certificates``; False when it is latched, another certificate
        of it is in flight, or the count is used up."""
        self._refuse_read_only()
        with self._lock, self._transaction() as conn:
            return latches.arm(conn, kernel, job_id, query_id, time.time(),
                               self.policy.max_certificates)

    def end_certificate(self, kernel: str, job_id: str, query_id: str, failed: bool) -> None:
        """The armed certificate ended: a failure stays latched, a pass unarms
        (or latches the kernel as exhausted if it was the policy's last)."""
        self._refuse_read_only()
        with self._lock, self._transaction() as conn:
            latches.end(conn, kernel, job_id, query_id, failed, self.policy.max_certificates)

    def clear_latch(self, kernel: str) -> latches.KernelLatch:
        """The operator's decision to enable ``kernel`` again (its next failed
        certificate releases one more bit); ``ConfigError`` if it is not latched."""
        self._refuse_read_only()
        with self._lock, self._transaction() as conn:
            cleared = latches.clear(conn, kernel, time.time())
            if cleared is None:
                held = sorted(each.kernel for each in latches.every(conn) if each.active)
                raise ConfigError(
                    f"ledger {self.path}: kernel {kernel!r} is not latched (latched: "
                    f"{', '.join(held) if held else 'none'}); nothing was changed")
        return cleared

    def _admit_charge(self, conn: sqlite3.Connection, job_id: str, query_id: str,
                      mechanism: Mechanism, text: str,
                      checked: CheckedCharge | None) -> tuple[float, AccountingMethod]:
        """Under the write lock: the figure to record, or a refusal. A check
        this ledger issued for this release already decided with every
        reservation counted, and the committed charges plus all reservations
        fit the cap (each was admitted on top of the others), so only the
        figure may need computing; any other charge decides counting every
        outstanding reservation but its own (job, query)'s."""
        if (checked is not None and self._issued_checks.get(checked.token) is checked
                and checked.applies(job_id, query_id, text, self.policy)):
            if checked.reusable(self._head.digest):
                return checked.epsilon, checked.method
            return admit(self.policy, self._totals, self._last, job_id, query_id, mechanism, text)
        reservations.drop_dead(conn, self.path, self._owner.token)
        others = reservations.reserved(conn, job_id, query_id)
        figure = admit(self.policy, self._totals, self._last, job_id, query_id, mechanism,
                       text, others)
        if not others:
            return figure
        return admit(self.policy, self._totals, self._last, job_id, query_id, mechanism, text)

    def _checked_text(self, job_id: str, query_id: str, mechanism: Mechanism) -> str:
        """The stored form of ``mechanism``, once the release's ids and
        adjacency are checked; refuses on a read-only ledger."""
        self._refuse_read_only()
        for name, value in (("job_id", job_id), ("query_id", query_id)):
            if not isinstance(value, str) or not value:
                raise ValueError(f"{name} must be a non-empty string, got {value!r}")
        try:
            mechanism.in_adjacency(self.policy.adjacency)
        except ValueError as err:
            raise QueryRefusedError(f"site {self.policy.site_name!r}: {err}") from None
        return mechanism_json(mechanism)

    def _refuse_read_only(self) -> None:
        if self.read_only:
            raise RuntimeError(f"ledger {self.path} was opened read-only; it cannot change")

    def _refuse_replay(self, conn: sqlite3.Connection, job_id: str, query_id: str) -> None:
        row = conn.execute(
            "SELECT created_at FROM charges WHERE job_id = ? AND query_id = ?", (job_id, query_id)
        ).fetchone()
        if row is not None:
            when = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(row[0]))
            raise ReplayError(
                f"site {self.policy.site_name!r}: query {query_id!r} of job {job_id!r} was "
                f"already charged (at {when}); a query is answered at most once, so the "
                "coordinator must send a fresh query id"
            )

