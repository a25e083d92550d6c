"""One round of secure aggregation, as the coordinator runs it.

A round (proto ``privadapt.v1``, header comment) is one key-agreement epoch of
one job carrying exactly one query:

1. ``RoundAnnouncement`` (the query) pushed to every participant's stream;
2. every participant publishes its signed X25519 key (``PublishKey``);
3. the coordinator pushes the ``Roster`` of all signed keys; each site checks
   every signature against the CA, takes K from the roster, answers the query
   through its own ``Site`` (policy, ledger, noise share) and masks its share;
4. every participant submits its masked share (``SubmitShare``): the query's
   blocks, then the masked integrity check (``secagg.mask_integrity_check``);
   the masks cancel in the sum modulo 2^64, which decodes to sum of kernel
   sums + noise. The checks must sum to K (``secagg.verify_integrity_check``),
   else the masks did not cancel and the round is aborted instead of
   returning garbage.

A failed integrity check is not blamed on "the sites" as a whole: every share
carries the private half of its site's check key (it masked the check alone),
so the hub recomputes each site's check and names the sites whose check was
wrong, or who refused a round as a replay after publishing their key, in
:attr:`RoundFailedError.blamed` (:mod:`privadapt.server.federation.round_blame`); the job
leaves them out, so such a participant costs the honest sites one charged
round, not one per retry.

The coordinator never sees an unmasked share of a secure sum. A ``per_site``
round (common/federation.py) runs the same steps, but each site adds the full
noise and sends its blocks unmasked (only its integrity check is masked, so
the roster is still checked): the result is every site's own answer,
flattened in participant order (:mod:`privadapt.server.federation.per_site_answers`).

If a participant refuses, leaves (its stream breaks), or misses the deadline,
the round is aborted: every participant is told (``RoundAbort``), the shares
already received are dropped, and :class:`RoundFailedError` says who was
missing and who refused -- the caller retries with the remaining sites, fresh
keys and a fresh query id (every ledger has already charged the aborted
attempt).

Threads: the round runs in its job's thread and waits on one condition
variable; gRPC handler threads deliver keys, shares and refusals into it and
notify. Nothing polls.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from privadapt.common.errors import WireError
from privadapt.common.federation import Query, ReleaseForm
from privadapt.common.numerics.fixed_point import FixedPointCodec
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.secure.query_digest import query_digest
from privadapt.common.secure.roster import PUBLIC_KEY_BYTES, RosterError, verify_roster
from privadapt.common.secure.secagg import (
    INTEGRITY_CHECK_SHAPE,
    MaskMismatchError,
    unmask_sum,
    verify_integrity_check,
)
from privadapt.common.wire.messages import (
    query_from_proto,
    query_to_proto,
    signed_key_from_proto,
    tensor_from_proto,
    timestamp_to_proto,
)
from privadapt.server.coordinator.site_registry import SiteRegistry
from privadapt.server.federation.per_site_answers import decode_per_site
from privadapt.server.federation.round_blame import blame_late_replays, blame_wrong_checks

logger = logging.getLogger(__name__)



class DeliveryError(Exception):
    """A site's message cannot be taken; ``code`` is the gRPC status name
    (proto header: NOT_FOUND, FAILED_PRECONDITION, ALREADY_EXISTS,
    INVALID_ARGUMENT, PERMISSION_DENIED)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class RoundFailedError(Exception):
    """A round ended without an answer."""

    reason: str
    missing: tuple[str, ...] = ()
    refusals: tuple[pb.Refusal, ...] = ()
    # Sites that provably broke the round (server/federation/round_blame.py): left out of
    # the rest of the job.
    blamed: tuple[str, ...] = ()
    # Sites that published their key but sent no share (after the others
    # answered and were charged): the job leaves out a site that does it twice.
    withheld: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.reason


@dataclass
class RoundResult:
    # The decoded sum's blocks; for a per-site round every site's own blocks,
    # in participant order (server/federation/per_site_answers.py).
    blocks: tuple[np.ndarray, ...]
    participants: tuple[str, ...]
    job_epsilon: float  # largest job spend reported by the participants' ledgers


@dataclass
class _ActiveRound:
    query: Query
    round: int
    participants: tuple[str, ...]
    condition: threading.Condition
    keys: dict[str, pb.KeyAnnouncement] = field(default_factory=dict)
    shares: dict[str, pb.MaskedShare] = field(default_factory=dict)
    share_blocks: dict[str, tuple[np.ndarray, ...]] = field(default_factory=dict)
    refusals: dict[str, pb.Refusal] = field(default_factory=dict)
    gone: set[str] = field(default_factory=set)
    roster_sites: tuple[str, ...] = ()
    cancelled: str = ""
    expected_shapes: tuple[tuple[int, ...], ...] | None = None
    # What every site's key must commit to: the digest of the query as the
    # sites decode it (after the wire round trip), not of the caller's object.
    query_digest: bytes = b""

    def failed(self) -> bool:
        return bool(self.refusals or self.gone or self.cancelled)


def _check_announced(query: Query, round: int, decoded: Query, decoded_round: int) -> None:
    """The announced encoding carries ``query`` at ``round``: every field the
    aggregation reads (bits, form, mechanism) and every id; the parameters'
    names (their values are the caller's encoding of them)."""
    fields = ("job_id", "query_id", "kernel", "mechanism", "collusion_tolerance",
              "fractional_bits", "form", "records")
    differ = [name for name in fields if getattr(decoded, name) != getattr(query, name)]
    if decoded_round != round:
        differ.append("round")
    if set(decoded.params) != set(query.params):
        differ.append("params")
    if differ:
        raise ValueError(f"query {query.query_id!r} round {round}: its encoding announces "
                         f"another {', '.join(differ)}")


class RoundHub:
    """Runs rounds and routes the sites' replies to the round they belong to."""

    def __init__(self, registry: SiteRegistry, ca_certificate_pem: bytes | None = None) -> None:
        self._registry = registry
        self._ca_pem = ca_certificate_pem
        self._lock = threading.Lock()
        self._active: dict[tuple[str, int], _ActiveRound] = {}
        self._jobs: set[str] = set()
        self._closed: dict[str, int] = {}
        registry.add_disconnect_listener(self.site_left)

    # -- the job thread's side ------------------------------------------------

    def open_job(self, job_id: str, last_round: int) -> None:
        """Accept messages for ``job_id``; rounds up to ``last_round`` are closed."""
        with self._lock:
            self._jobs.add(job_id)
            self._closed[job_id] = max(self._closed.get(job_id, 0), last_round)

    def close_job(self, job_id: str) -> None:
        with self._lock:
            self._jobs.discard(job_id)

    def run_round(
        self,
        query: Query,
        round: int,
        participants: Sequence[str],
        timeout: float,
        expected_shapes: Sequence[tuple[int, ...]] | None = None,
        encoded: pb.Query | None = None,
        announced: Callable[[], None] | None = None,
    ) -> RoundResult:
        """Run one round; return the decoded aggregate or raise :class:`RoundFailedError`.
        A share whose blocks do not have ``expected_shapes`` is refused on arrival.
        ``encoded``: ``query_to_proto(query, round)`` if the caller has it
        already (``ValueError`` if it announces another query or round).

        ``announced`` is called once the announcement is queued and before
        anything else (the caller records the round there: its commit overlaps
        the sites' key generation, and it has returned before the roster is
        sent, the first message a site answers and charges); if it raises, the
        round is aborted at the sites and its exception propagates."""
        names = tuple(sorted(participants))
        active = _ActiveRound(query, round, names, threading.Condition())
        active.expected_shapes = None if expected_shapes is None else tuple(
            tuple(shape) for shape in expected_shapes)
        # One encoding of the query serves the announcement and the digest,
        # which is of the query as the sites decode it from exactly these bytes.
        if encoded is None:
            encoded = query_to_proto(query, round)
        decoded, decoded_round = query_from_proto(encoded, writeable=False)  # only digested
        _check_announced(query, round, decoded, decoded_round)
        active.query_digest = query_digest(decoded, decoded_round)
        key = (query.job_id, round)
        with self._lock:
            if round <= self._closed.get(query.job_id, 0):
                raise ValueError(f"job {query.job_id!r}: round {round} is already closed")
            self._active[key] = active
        deadline = time.monotonic() + timeout
        try:
            self._announce(active, encoded, deadline_s=time.time() + timeout)
            if announced is not None:
                try:
                    announced()
                except Exception as error:
                    self._abort(active, RoundFailedError(
                        f"the coordinator could not record the round: {error}"))
                    raise
            self._wait(active, lambda: len(active.keys) == len(names), deadline, "keys")
            self._send_roster(active)
            self._wait(active, lambda: len(active.shares) == len(names), deadline, "shares")
            try:
                return self._aggregate(active)
            except MaskMismatchError as mismatch:
                raise self._blame(active, str(mismatch)) from None
        except RoundFailedError as failure:
            self._abort(active, failure)
            raise
        finally:
            with self._lock:
                self._active.pop(key, None)
                self._closed[query.job_id] = max(self._closed.get(query.job_id, 0), round)

    def cancel(self, job_id: str, reason: str) -> None:
        """Abort any round of ``job_id`` now (the job was cancelled)."""
        with self._lock:
            rounds = [r for (job, _), r in self._active.items() if job == job_id]
        for active in rounds:
            with active.condition:
                active.cancelled = reason
                active.condition.notify_all()

    def _announce(self, active: _ActiveRound, encoded: pb.Query, deadline_s: float) -> None:
        query = active.query
        announcement = pb.RoundAnnouncement(
            job_id=query.job_id,
            round=active.round,
            query_id=query.query_id,
            query=encoded,
            deadline=timestamp_to_proto(deadline_s),
            fractional_bits=query.fractional_bits,
        )
        for name in active.participants:
            self._send(active, name, round_announcement=announcement)

    def _send(self, active: _ActiveRound, name: str, **item: object) -> None:
        session = self._registry.session(name)
        if session is None or not session.send(**item):
            with active.condition:
                active.gone.add(name)
                active.condition.notify_all()

    def _wait(self, active: _ActiveRound, done, deadline: float, what: str) -> None:
        with active.condition:
            finished = active.condition.wait_for(
                lambda: done() or active.failed(), max(0.0, deadline - time.monotonic())
            )
            if done() and not active.cancelled and (what == "shares" or not active.gone):
                # Everything is in: a site leaving or refusing now changes nothing
                # (after the shares), so the round is not thrown away.
                return
            if active.cancelled:
                raise RoundFailedError(f"cancelled: {active.cancelled}")
            if active.refusals:
                refusals = tuple(active.refusals.values())
                raise RoundFailedError(
                    "; ".join(r.message or f"site {r.site_name!r} refused" for r in refusals),
                    refusals=refusals,
                    blamed=blame_late_replays(refusals, active.roster_sites),
                )
            shares_phase = what == "shares"
            if active.gone:
                missing = tuple(sorted(active.gone))
                withheld = tuple(n for n in missing if shares_phase and n not in active.shares)
                raise RoundFailedError(f"site(s) {', '.join(missing)} left during the round",
                                       missing=missing, withheld=withheld)
            if not finished:
                received = active.keys if what == "keys" else active.shares
                missing = tuple(n for n in active.participants if n not in received)
                raise RoundFailedError(
                    f"deadline passed waiting for {what} from {', '.join(missing)}",
                    missing=missing, withheld=missing if shares_phase else (),
                )

    def _send_roster(self, active: _ActiveRound) -> None:
        query = active.query
        roster = pb.Roster(job_id=query.job_id, round=active.round, query_id=query.query_id)
        with active.condition:
            roster.keys.extend(active.keys[name] for name in active.participants)
            active.roster_sites = active.participants
        for name in active.participants:
            self._send(active, name, roster=roster)

    def _aggregate(self, active: _ActiveRound) -> RoundResult:
        # Expected shapes, when known, were checked as each share arrived; what
        # is left to check is that the sites agree with one another, and that
        # their masks cancelled (the last block of each share is its check).
        with active.condition:
            shares = [active.share_blocks[name] for name in active.participants]
            epsilon = max(active.shares[name].job_epsilon for name in active.participants)
        verify_integrity_check([blocks[-1] for blocks in shares])  # MaskMismatchError
        per_site = [blocks[:-1] for blocks in shares]
        counts = {len(blocks) for blocks in per_site}
        if len(counts) != 1:
            raise RoundFailedError(f"sites sent different numbers of blocks: {sorted(counts)}")
        codec = FixedPointCodec(active.query.fractional_bits)
        if active.query.form == ReleaseForm.PER_SITE:
            decoded = decode_per_site(per_site, codec, active.query.mechanism.releases_index)
            return RoundResult(decoded, active.participants, epsilon)
        blocks = []
        for index in range(counts.pop()):
            shapes = {blocks_[index].shape for blocks_ in per_site}
            if len(shapes) != 1:
                raise RoundFailedError(
                    f"block {index}: sites sent different shapes {sorted(shapes)}")
            blocks.append(codec.decode(unmask_sum(b[index] for b in per_site)))
        return RoundResult(tuple(blocks), active.participants, epsilon)

    def _blame(self, active: _ActiveRound, reason: str) -> RoundFailedError:
        """The failure of a round whose integrity check failed, naming the
        sites whose check is provably wrong (server/federation/round_blame.py)."""
        with active.condition:
            keys, shares = dict(active.keys), dict(active.shares)
            checks = {name: active.share_blocks[name][-1] for name in active.participants}
        query = active.query
        blamed = blame_wrong_checks(keys, shares, checks, self._ca_pem, job_id=query.job_id,
                                    round=active.round, query_id=query.query_id,
                                    query_digest=active.query_digest)
        if blamed is None:
            return RoundFailedError(reason)
        if not blamed:
            return RoundFailedError(reason + "; every site's check matches the check key it "
                                    "signed, so the sites masked under different rosters")
        return RoundFailedError(
            f"the masks did not cancel, and the integrity check of site(s) "
            f"{', '.join(blamed)} is not what the check key each signed into the roster "
            "gives: left out of this job; every other site's check is exactly what its "
            "key gives", blamed=blamed)

    def _abort(self, active: _ActiveRound, failure: RoundFailedError) -> None:
        query = active.query
        abort = pb.RoundAbort(
            job_id=query.job_id, round=active.round, query_id=query.query_id,
            reason=failure.reason, missing_sites=failure.missing,
        )
        for name in active.participants:
            session = self._registry.session(name)
            if session is not None:
                session.send(round_abort=abort)
        logger.warning("job=%s round=%d query=%s aborted: %s", query.job_id, active.round,
                       query.query_id, failure.reason)

    # -- the gRPC handlers' side ----------------------------------------------

    def site_left(self, name: str) -> None:
        with self._lock:
            rounds = [r for r in self._active.values() if name in r.participants]
        for active in rounds:
            with active.condition:
                active.gone.add(name)
                active.condition.notify_all()

    def _find(self, job_id: str, round: int, query_id: str, site_name: str) -> _ActiveRound:
        with self._lock:
            if job_id not in self._jobs:
                raise DeliveryError("NOT_FOUND", f"unknown or finished job {job_id!r}")
            active = self._active.get((job_id, round))
            closed = self._closed.get(job_id, 0)
        if active is None:
            if round <= closed:
                raise DeliveryError(
                    "FAILED_PRECONDITION",
                    f"job {job_id!r} round {round} is closed (stale or replayed message)",
                )
            raise DeliveryError("NOT_FOUND", f"job {job_id!r} has no round {round} open")
        if active.query.query_id != query_id:
            raise DeliveryError(
                "FAILED_PRECONDITION",
                f"job {job_id!r} round {round} carries query {active.query.query_id!r}, "
                f"not {query_id!r}",
            )
        if site_name not in active.participants:
            raise DeliveryError(
                "PERMISSION_DENIED",
                f"site {site_name!r} is not a participant of job {job_id!r} round {round}",
            )
        return active

    def deliver_key(self, message: pb.KeyAnnouncement) -> None:
        active = self._find(message.job_id, message.round, message.query_id, message.site_name)
        if (len(message.public_key) != PUBLIC_KEY_BYTES or not message.signature
                or not message.certificate_pem):
            raise DeliveryError(
                "INVALID_ARGUMENT", f"a key announcement needs a {PUBLIC_KEY_BYTES}-byte public "
                "key, a signature and a certificate",
            )
        if self._ca_pem is not None:
            # The sites check every entry themselves; checking here too keeps one
            # bad entry from making every honest site refuse the roster.
            entry = signed_key_from_proto(message)
            try:
                verify_roster([entry], self._ca_pem, message.job_id, message.round, 1,
                              message.site_name, query_digest=active.query_digest)
            except RosterError as err:
                raise DeliveryError("INVALID_ARGUMENT", str(err)) from None
        with active.condition:
            if message.site_name in active.keys:
                raise DeliveryError("ALREADY_EXISTS", f"site {message.site_name!r} already "
                                    f"published its key for round {message.round}")
            if active.roster_sites:
                raise DeliveryError("FAILED_PRECONDITION", "the roster is already published")
            active.keys[message.site_name] = message
            active.condition.notify_all()

    def deliver_share(self, message: pb.MaskedShare) -> None:
        active = self._find(message.job_id, message.round, message.query_id, message.site_name)
        if message.fractional_bits != active.query.fractional_bits:
            raise DeliveryError(
                "INVALID_ARGUMENT",
                f"share encoded with {message.fractional_bits} fractional bits, the query "
                f"asked for {active.query.fractional_bits}",
            )
        if len(message.blocks) < 2:
            raise DeliveryError("INVALID_ARGUMENT", "a share needs at least one block and "
                                "its integrity check")
        try:
            blocks = tuple(
                # Read-only: only summed, checked and blamed, never changed.
                tensor_from_proto(t, expected_dtype=np.uint64, field=f"share block {i}",
                                  writeable=False)
                for i, t in enumerate(message.blocks)
            )
        except WireError as err:
            raise DeliveryError("INVALID_ARGUMENT", str(err)) from None
        if blocks[-1].shape != INTEGRITY_CHECK_SHAPE:
            raise DeliveryError("INVALID_ARGUMENT", f"a share's last block is its integrity "
                                f"check, of shape {INTEGRITY_CHECK_SHAPE}, not "
                                f"{blocks[-1].shape}")
        shapes = tuple(block.shape for block in blocks[:-1])
        if active.expected_shapes is not None and shapes != active.expected_shapes:
            raise DeliveryError("INVALID_ARGUMENT", f"share blocks have shapes {list(shapes)}, "
                                f"the kernel releases {list(active.expected_shapes)}")
        if math.isnan(message.job_epsilon) or message.job_epsilon < 0:
            raise DeliveryError("INVALID_ARGUMENT", "job_epsilon must be a number >= 0")
        with active.condition:
            if not active.roster_sites:
                raise DeliveryError("FAILED_PRECONDITION", "no roster was published yet")
            if tuple(message.roster_sites) != active.roster_sites:
                raise DeliveryError(
                    "INVALID_ARGUMENT",
                    f"share masked for roster {list(message.roster_sites)}, the round's roster "
                    f"is {list(active.roster_sites)}: the masks could not cancel",
                )
            if message.site_name in active.shares:
                raise DeliveryError("ALREADY_EXISTS", f"site {message.site_name!r} already "
                                    f"submitted its share for round {message.round}")
            active.shares[message.site_name] = message
            active.share_blocks[message.site_name] = blocks
            active.condition.notify_all()

    def deliver_refusal(self, message: pb.Refusal) -> None:
        if message.reason not in pb.Refusal.Reason.values():
            raise DeliveryError("INVALID_ARGUMENT", f"unknown refusal reason {message.reason}")
        active = self._find(message.job_id, message.round, message.query_id, message.site_name)
        with active.condition:
            active.refusals[message.site_name] = message
            active.condition.notify_all()
