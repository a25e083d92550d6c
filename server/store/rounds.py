"""The ``rounds`` and ``answers`` tables: every round attempt, and the
aggregated answer of every finished algorithm step.

A round's row is written (state ``started``) *before* the round's roster is
sent, while the sites handle its announcement, and completed when it ends
(``answered`` or ``aborted``): the sites' ledgers charge a round as soon as
they answer it, which they do only on its roster, so a coordinator that
crashes mid-round must still find on disk every round a site could have
charged. (A round announced but never recorded was charged nowhere; its
number is still above what the sites saw, since a resumed job starts above
the rounds they report.) When the job resumes, rounds
still ``started`` are marked ``interrupted`` (an abort) and so appear in the
job's status and privacy report like every other charged attempt.

An answer and the round record that produced it are written in the same
transaction: after a restart either both exist or neither.
"""

from __future__ import annotations

import math
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from privadapt.common.transactions import unsynced_transaction
from privadapt.common.validation import frozen_value
from privadapt.server.store.arrays import read_arrays, write_arrays
from privadapt.server.store.database import StoreDatabase, insert_row, select_rows
from privadapt.server.store.jobs import require_job

# A round attempt: written "started" before its roster, then "answered"
# or "aborted" when it ends; "interrupted" if the coordinator stopped in between.
ROUND_STATES = ("started", "answered", "aborted", "interrupted")
_ABORTED_ROUND_STATES = frozenset({"aborted", "interrupted"})
_ANSWER = "answer"  # the arrays' kind


@frozen_value
class RoundRecord:
    """One round attempt; ``round`` numbers every attempt of a job, ``step``
    the algorithm step it served (an aborted attempt is retried under a new
    round number with the same step). ``state`` is one of ROUND_STATES; left
    empty it follows ``aborted`` ("aborted" or "answered"). ``form`` is the
    query's release form (common/federation.py ``ReleaseForm``): in a
    ``per_site`` round the coordinator saw each participant's own answer."""

    job_id: str
    round: int
    step: int
    query_id: str
    participants: tuple[str, ...]
    started: float
    finished: float
    aborted: bool
    abort_reason: str
    epsilon_so_far: float
    state: str = ""
    form: str = "secure_sum"

    def __post_init__(self) -> None:
        if not self.state:
            self.state = "aborted" if self.aborted else "answered"
        if self.state not in ROUND_STATES:
            raise ValueError(f"round state must be one of {', '.join(ROUND_STATES)}, "
                             f"got {self.state!r}")
        if bool(self.aborted) != (self.state in _ABORTED_ROUND_STATES):
            raise ValueError(f"a round in state {self.state!r} cannot have aborted="
                             f"{self.aborted}")

    @classmethod
    def starting(cls, job_id: str, round: int, step: int, query_id: str,
                 participants: Sequence[str], started: float,
                 form: str = "secure_sum") -> RoundRecord:
        """The row of a round about to be announced (its end not yet known)."""
        return cls(job_id, round, step, query_id, tuple(participants), started, started,
                   False, "", math.nan, "started", form)


@dataclass(frozen=True)
class StoredAnswer:
    job_id: str
    step: int
    round: int
    query_id: str
    fingerprint: str
    blocks: tuple[np.ndarray, ...]
    participants: tuple[str, ...]


class RoundTable(StoreDatabase):
    """The store's methods on round attempts and step answers."""

    def start_round(self, rec: RoundRecord) -> None:
        """Record a round about to be announced (``RoundRecord.starting``);
        ``ValueError`` if (job, round) is already stored."""
        if rec.state != "started":
            raise ValueError(f"start_round takes a round in state 'started', got {rec.state!r}")
        with self._transaction() as conn:
            require_job(conn, rec.job_id, self.path)
            _refuse_taken(conn, rec)
            insert_row(conn, "rounds", rec)

    def record_round(self, rec: RoundRecord) -> None:
        """Store how a round attempt ended: completes its ``started`` row, or
        stores it anew; ``ValueError`` if (job, round) already ended."""
        with self._transaction() as conn:
            self._end_round(conn, rec)

    def _end_round(self, conn: sqlite3.Connection, rec: RoundRecord) -> None:
        require_job(conn, rec.job_id, self.path)
        if rec.state in ("started", "interrupted"):
            raise ValueError(f"round {rec.round} of job {rec.job_id!r}: a round ends "
                             f"answered or aborted, not {rec.state!r}")
        started = conn.execute(
            "SELECT step, query_id FROM rounds WHERE job_id = ? AND round = ? AND state = ?",
            (rec.job_id, rec.round, "started"),
        ).fetchone()
        if started is None:
            _refuse_taken(conn, rec)
        elif tuple(started) != (rec.step, rec.query_id):
            raise ValueError(
                f"round {rec.round} of job {rec.job_id!r} was started for step {started[0]} "
                f"query {started[1]!r}, not step {rec.step} query {rec.query_id!r}"
            )
        insert_row(conn, "rounds", rec, replace=started is not None)

    def interrupt_rounds(self, job_id: str, reason: str,
                         now: float | None = None) -> list[RoundRecord]:
        """Mark every round of ``job_id`` still ``started`` as ``interrupted``
        (aborted, with ``reason``) and return them. Only for a job that runs no
        round now: a resumed job, before its first round."""
        now = time.time() if now is None else now
        with self._transaction() as conn:
            rows = select_rows(conn, RoundRecord, "rounds",
                               "WHERE job_id = ? AND state = 'started' ORDER BY round", (job_id,))
            interrupted = [
                replace(RoundRecord(**row), state="interrupted", aborted=True,
                        abort_reason=reason, finished=max(row["started"], now))
                for row in rows
            ]
            for rec in interrupted:
                insert_row(conn, "rounds", rec, replace=True)
        return interrupted

    def rounds(self, job_id: str, include_started: bool = False) -> list[RoundRecord]:
        """Every round attempt of ``job_id`` that ended (answered, aborted or
        interrupted), in round order; with ``include_started``, also those in
        flight (or left ``started`` by a crash and not yet reconciled)."""
        where = "WHERE job_id = ?" + ("" if include_started else " AND state != 'started'")
        rows = select_rows(self._connection(), RoundRecord, "rounds", where + " ORDER BY round",
                           (job_id,))
        return [RoundRecord(**row) for row in rows]

    def last_round(self, job_id: str) -> int:
        """The highest round number recorded for ``job_id`` (aborted, interrupted
        and started attempts included, so the next attempt can take the next
        number); 0 if none."""
        row = self._connection().execute(
            "SELECT MAX(round) FROM rounds WHERE job_id = ?", (job_id,)
        ).fetchone()
        return 0 if row[0] is None else int(row[0])

    def save_answer(self, answer: StoredAnswer, round_record: RoundRecord) -> None:
        """Store a step's aggregated answer together with the round that
        produced it, in one transaction; ``ValueError`` if the step already
        has an answer or the two records disagree.

        Committed without its own fsync, off the round's critical path: the
        next round's ``start_round`` (or the job's end) commits with a sync,
        which makes this one durable too (the WAL is synced up to its end),
        and no site answers that round before it. A power cut in between
        loses this commit whole: the round is left ``started``, so it is
        marked interrupted on restart and the step is asked again in a new
        round, as after a crash during the round (each site charged each
        round it answered: the lost answer is paid for, never reused)."""
        for field in ("job_id", "round", "step", "query_id"):
            if getattr(answer, field) != getattr(round_record, field):
                raise ValueError(
                    f"answer and round record disagree on {field}: "
                    f"{getattr(answer, field)!r} != {getattr(round_record, field)!r}"
                )
        if round_record.aborted:
            raise ValueError(
                f"round {round_record.round} of job {answer.job_id!r} was aborted; "
                "an aborted round has no answer to store"
            )
        blocks = [("", np.asarray(block)) for block in answer.blocks]
        with unsynced_transaction(self._connection()) as conn:
            require_job(conn, answer.job_id, self.path)
            if conn.execute(
                "SELECT 1 FROM answers WHERE job_id = ? AND step = ?", (answer.job_id, answer.step)
            ).fetchone():
                raise ValueError(
                    f"step {answer.step} of job {answer.job_id!r} already has a stored answer; "
                    "a step is answered once"
                )
            self._end_round(conn, round_record)
            insert_row(conn, "answers", answer, skip=("blocks",))
            write_arrays(conn, _ANSWER, answer.job_id, answer.step, blocks)

    def answer(self, job_id: str, step: int) -> StoredAnswer | None:
        with self._transaction(write=False) as conn:
            rows = select_rows(conn, StoredAnswer, "answers", "WHERE job_id = ? AND step = ?",
                               (job_id, step), skip=("blocks",))
            if not rows:
                return None
            blocks = tuple(array for _, array in read_arrays(conn, _ANSWER, job_id, step))
        return StoredAnswer(**rows[0], blocks=blocks)


def _refuse_taken(conn: sqlite3.Connection, rec: RoundRecord) -> None:
    if conn.execute(
        "SELECT 1 FROM rounds WHERE job_id = ? AND round = ?", (rec.job_id, rec.round)
    ).fetchone():
        raise ValueError(
            f"round {rec.round} of job {rec.job_id!r} is already recorded; every round "
            "attempt needs a new round number"
        )
