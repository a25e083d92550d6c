"""Kernels a site has latched off, kept in its ledger database.

A kernel that certifies its own floating-point error a posteriori
(``exact_discrepancy``, ``smoothed_discrepancy_gradient``) refuses when its
certificate fails, and whether it fails can depend on the private data: that
refusal is a one-bit release that nothing charges. The site bounds it to one
bit by refusing the kernel for every later query, in the same fixed words
(client/site.py). Kept in memory only, a restart re-armed the kernel, and a
coordinator that could make the site restart (or waited for one) learnt the
bit again every time; so the latch is a row of the ledger, committed
(``synchronous=FULL``) before the refusal is returned, and only an operator
clears it (``privadapt ledger clear-latch``), which re-opens one more bit.

Rows are never deleted: clearing stamps ``cleared_at``, so ``ledger show``
and ``ledger report`` list every latch the site ever set (each one bit
released) and which are still active. At most one active row per kernel (a
partial unique index); the site looks a kernel up by that index on every
query, whose cost depends on the number of kernels latched, never on the
ledger's history of charges. A ledger from before schema 4 has no table: a
site opening it for charging adds it empty (client/ledger/schema.py), and a
read-only open reads no latches.

Armed before the certificate runs. A latch written only after a
failed certificate lets more than one data-dependent outcome out: two queries
in flight together (two processes on one ledger) both ran their certificate,
and a latch that could not be written still let the failure leave as an
error reply, with nothing stored to stop the next one. So a kernel that
certifies its own error is *armed* first: a row with outcome ``running`` is
committed before any record reaches the kernel; a second query finds the
active row and is refused in the latch's words before it computes anything;
a certificate that fails marks the row ``failed`` (it already latches); one
that passes deletes the row (nothing was released beyond the charged answer).
A crash, or any other exception, during the certificate leaves the row
``running``, and the kernel stays off until the operator clears it. If the
row cannot be written, the query fails before the kernel runs: the failure
depends on the storage, not on the data.

What the latch bounds. The outcomes a coordinator sees for one kernel are a
run of answers (each charged) and then refusals; the uncharged information is
the position of the first failure among the kernel's certificates -- at most
log2(Q + 1) bits over Q certificates between two clearings, and in practice
none: a certificate fails only if a numerical library breaks its documented
accuracy. Q is bounded by a public number, the policy's ``max_certificates``:
arming counts each certificate of a kernel since its latch was last cleared
(``certificate_counts``, written in the arming transaction, so a certificate
is counted whether it passes, fails or is interrupted); the certificate that
reaches the count keeps its row as an ``exhausted`` latch when it passes, and
the kernel is refused from then on, in words that name the policy's number,
until the operator clears it, which sets the count back to 0. Whether a
query reaches a certificate, and so the count, depends only on the queries
and the refusals before it, which the coordinator saw: the channel is at most
log2(max_certificates + 1) bits per clearing. The certificates' work is fixed
by public things whatever the data (common/numerics/certified_quadratic.py,
"Fixed work"; tests/client/test_certificate_fixed_work.py), so their timing
adds no channel of its own beyond what the numerical libraries' own kernels
vary (benchmarks/certificate_timing.py measures it).

Not covered by the hash chain: deleting a row is the same act as clearing it,
which the operator may do anyway; keep the ledger where only the site daemon
and its operator can write.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass


@dataclass(frozen=True)
class KernelLatch:
    """One latch: the kernel, when it was set and by which query (ids the
    coordinator chose, for the operator's investigation), and when an
    operator cleared it (None while it holds)."""

    kernel: str
    latched_at: float
    job_id: str
    query_id: str
    cleared_at: float | None = None
    #: ``failed`` (its certificate failed), ``running`` (armed: a certificate
    #: in flight, or interrupted by a crash or an unexpected error) or
    #: ``exhausted`` (the policy's ``max_certificates`` ran since the last clearing).
    outcome: str = "failed"

    @property
    def active(self) -> bool:
        return self.cleared_at is None


_COLUMNS = "kernel, latched_at, job_id, query_id, cleared_at, outcome"
_NO_TABLE = "no such table: kernel_latches"
_NO_COUNTS = "no such table: certificate_counts"
#: The outcome of a latch set because the kernel ran its policy's certificates.
EXHAUSTED = "exhausted"


def active(conn: sqlite3.Connection, kernel: str) -> KernelLatch | None:
    """``kernel``'s active latch, by the partial index (no scan)."""
    try:
        row = conn.execute(f"SELECT {_COLUMNS} FROM kernel_latches "
                           "WHERE kernel = ? AND cleared_at IS NULL", (kernel,)).fetchone()
    except sqlite3.OperationalError as err:
        # A read-only ledger from before schema 4; any other failure (an I/O
        # error) fails closed: it escapes before a record is read.
        if _NO_TABLE not in str(err):
            raise
        return None
    return None if row is None else KernelLatch(*row)


def every(conn: sqlite3.Connection) -> list[KernelLatch]:
    """Every latch ever set, oldest first (for the operator's reports)."""
    try:
        rows = conn.execute(f"SELECT {_COLUMNS} FROM kernel_latches ORDER BY id").fetchall()
    except sqlite3.OperationalError as err:  # a read-only ledger from before schema 4
        if _NO_TABLE not in str(err):
            raise
        return []
    return [KernelLatch(*row) for row in rows]


def insert(conn: sqlite3.Connection, kernel: str, job_id: str, query_id: str,
           now: float) -> KernelLatch:
    """Inside a write transaction: latch ``kernel`` (the existing latch if it
    is latched already, e.g. by a concurrent query)."""
    existing = active(conn, kernel)
    if existing is not None:
        return existing
    conn.execute("INSERT INTO kernel_latches (kernel, latched_at, job_id, query_id) "
                 "VALUES (?, ?, ?, ?)", (kernel, now, job_id, query_id))
    return KernelLatch(kernel, now, job_id, query_id)


def certificates_run(conn: sqlite3.Connection, kernel: str) -> int:
    """How many certificates of ``kernel`` were armed since its latch was
    last cleared (0 on a read-only ledger from before schema 6)."""
    try:
        row = conn.execute("SELECT since_clearing FROM certificate_counts WHERE kernel = ?",
                           (kernel,)).fetchone()
    except sqlite3.OperationalError as err:
        if _NO_COUNTS not in str(err):
            raise
        return 0
    return 0 if row is None else int(row[0])


def arm(conn: sqlite3.Connection, kernel: str, job_id: str, query_id: str,
        now: float, limit: int | None = None) -> bool:
    """Inside a write transaction: arm ``kernel`` for one certificate (a
    ``running`` row) and count it; False, writing nothing, when it is latched
    already or another certificate of it is in flight, and False with an
    ``exhausted`` latch when ``limit`` certificates ran since the last
    clearing (a policy lowered since; module docstring)."""
    if active(conn, kernel) is not None:
        return False
    count = certificates_run(conn, kernel)
    if limit is not None and count >= limit:
        conn.execute("INSERT INTO kernel_latches (kernel, latched_at, job_id, query_id, "
                     "outcome) VALUES (?, ?, ?, ?, ?)", (kernel, now, job_id, query_id, EXHAUSTED))
        return False
    conn.execute("INSERT INTO kernel_latches (kernel, latched_at, job_id, query_id, outcome) "
                 "VALUES (?, ?, ?, ?, 'running')", (kernel, now, job_id, query_id))
    conn.execute("INSERT INTO certificate_counts (kernel, since_clearing) VALUES (?, 1) "
                 "ON CONFLICT (kernel) DO UPDATE SET since_clearing = since_clearing + 1",
                 (kernel,))
    return True


def end(conn: sqlite3.Connection, kernel: str, job_id: str, query_id: str,
        failed: bool, limit: int | None = None) -> None:
    """Inside a write transaction: the armed certificate of (``job_id``,
    ``query_id``) ended: ``failed`` keeps its row as the latch; a pass that
    reached ``limit`` certificates keeps it as an ``exhausted`` latch; else
    the row goes."""
    where = ("WHERE kernel = ? AND job_id = ? AND query_id = ? AND cleared_at IS NULL "
             "AND outcome = 'running'")
    if failed:
        conn.execute(f"UPDATE kernel_latches SET outcome = 'failed' {where}",
                     (kernel, job_id, query_id))
    elif limit is not None and certificates_run(conn, kernel) >= limit:
        conn.execute(f"UPDATE kernel_latches SET outcome = '{EXHAUSTED}' {where}",
                     (kernel, job_id, query_id))
    else:
        conn.execute(f"DELETE FROM kernel_latches {where}", (kernel, job_id, query_id))


def clear(conn: sqlite3.Connection, kernel: str, now: float) -> KernelLatch | None:
    """Inside a write transaction: stamp ``kernel``'s active latch cleared and
    set its count of certificates back to 0; the cleared latch, or None (and
    nothing changed) when the kernel is not latched."""
    existing = active(conn, kernel)
    if existing is None:
        return None
    conn.execute("UPDATE kernel_latches SET cleared_at = ? "
                 "WHERE kernel = ? AND cleared_at IS NULL", (now, kernel))
    conn.execute("DELETE FROM certificate_counts WHERE kernel = ?", (kernel,))
    return KernelLatch(existing.kernel, existing.latched_at, existing.job_id,
                       existing.query_id, now, existing.outcome)
