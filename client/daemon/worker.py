"""What a site daemon does with each work item its coordinator pushes.

The site side of a secure-aggregation round (server/federation/rounds.py has the other):

* ``RoundAnnouncement``: decode and validate the query at the edge, refuse a
  round at or below the last one this site saw for the job (a stale or replayed
  announcement), make a fresh X25519 key pair, sign it together with the digest
  of the decoded query (``query_digest.query_digest``: the query this site will
  answer) with the site's certificate key and publish it;
* ``Roster``: verify every entry against the federation CA, refuse unless every
  entry commits to this site's query digest (a coordinator sending different
  queries under one query id), and take K from the verified roster
  (``roster.verify_roster``; never from a number the coordinator states);
  answer the query through :class:`~privadapt.client.site.Site` with that K --
  policy checks, kernel, noise share sized by K and t, ledger charge committed --
  then mask each block (a ``per_site`` query: the full noise, unmasked), add
  the masked integrity check and the private half of the round's check key
  (it masked the check alone, so the coordinator can verify this site's check
  and learns nothing about its blocks)
  (``secagg.mask_integrity_check``, which tells the coordinator whether the
  masks cancelled) and submit;
* ``RoundAbort``: forget the round's keys (the ledger keeps its charge);
* ``PrivacyReportRequest``: report this job's spend from the site's own ledger.

A round is *open* from its announcement until its roster, abort or job end,
or the end of the session it was announced on (the coordinator fails every
round of a site whose session ended, and the abort goes to the dead
stream), holding its decoded query. A coordinator announcing rounds and
never sending their rosters, in job after job (new jobs are free), once
made the site keep every one; now at most :data:`MAX_OPEN_ROUNDS` rounds
with at most :data:`MAX_OPEN_ROUND_BYTES` of announcements are open at
once, over every job, and an announcement beyond them is refused in words
that read only the coordinator's own messages. A round opened costs a key
pair and a signature (about 0.3 ms): at most the policy's
``max_unpaid_rounds`` rounds may end without a paid answer (one charged at
``min_query_epsilon`` or more) in a daemon run; past it the site refuses
once, saying so, and ignores later announcements, so that refusing costs it
nothing either.

A refusal (policy, budget, bad roster, replay) goes back as a ``Refusal`` with
the site's own message, so the coordinator's operator reads what the site said.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from dataclasses import dataclass
from typing import Protocol

import grpc

from privadapt.client.daemon.coordinator_replies import check_work_item
from privadapt.client.daemon.round_progress import RoundProgress
from privadapt.client.site import Site
from privadapt.common.errors import BudgetExceededError, QueryRefusedError, ReplayError, WireError
from privadapt.common.federation import Query, ReleaseForm
from privadapt.common.privacy_figures import (
    job_spend_text,
    running_spend_text,
    site_total_text,
)
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.secure.query_digest import query_digest
from privadapt.common.secure.roster import RosterError, SigningKey, verify_roster
from privadapt.common.secure.secagg import RoundKeys, mask_integrity_check, mask_share
from privadapt.common.wire.messages import (
    fill_tensor,
    query_from_proto,
    signed_key_from_proto,
    signed_key_to_proto,
    site_privacy_to_proto,
)

logger = logging.getLogger(__name__)

# Unary replies to the coordinator; a round never waits longer than its deadline.
CALL_TIMEOUT_S = 30.0
#: Rounds open at once over every job (module docstring): eight lanes' worth
#: of jobs several times over.
MAX_OPEN_ROUNDS = 64
#: Their announcements' wire size together (the work items that carried them):
#: four of the largest messages.
MAX_OPEN_ROUND_BYTES = 256 * 2**20


class CoordinatorCalls(Protocol):
    """The unary calls a site makes (``FederationServiceStub`` satisfies it)."""

    def PublishKey(self, request: pb.KeyAnnouncement, timeout: float) -> pb.Ack: ...
    def SubmitShare(self, request: pb.MaskedShare, timeout: float) -> pb.Ack: ...
    def Refuse(self, request: pb.Refusal, timeout: float) -> pb.Ack: ...
    def ReportPrivacy(self, request: pb.SitePrivacyReport, timeout: float) -> pb.Ack: ...


@dataclass(frozen=True)
class SiteIdentity:
    """The site's certificate, its key, and the federation CA."""

    name: str
    certificate_pem: bytes
    signing_key: SigningKey
    ca_certificate_pem: bytes


@dataclass
class _OpenRound:
    query: Query
    round: int
    keys: RoundKeys
    query_digest: bytes
    size: int = 0  # the wire size of the work item that announced it


class SiteWorker:
    """Handles the work items of one site: one at a time per job, those of
    different jobs at once from several threads (client/daemon/job_lanes.py);
    the open rounds, the only state it shares between jobs, under a lock."""

    def __init__(self, site: Site, identity: SiteIdentity, progress: RoundProgress) -> None:
        if identity.name != site.name:
            raise ValueError(f"certificate is for {identity.name!r} but the policy for "
                             f"{site.name!r}")
        if progress.path.resolve() != site.ledger.path.resolve():
            # Round progress is synced by the ledger's commits (client/daemon/round_progress.py).
            raise ValueError(f"round progress must be kept in the ledger's database "
                             f"{site.ledger.path}, not {progress.path}")
        self.site = site
        self.identity = identity
        self.progress = progress
        self._open: dict[tuple[str, int], _OpenRound] = {}
        self._open_lock = threading.Lock()
        # Rounds opened and rounds answered at a price, over every job of this
        # daemon run: their difference is bounded by max_unpaid_rounds.
        self._rounds_opened = 0
        self._rounds_paid = 0
        self._unpaid_refused = False

    def handle(self, item: pb.WorkItem, calls: CoordinatorCalls,
               wire_size: int | None = None) -> None:
        """Act on one work item. Never raises: the daemon keeps serving.
        ``wire_size``: the bytes the item was read from, if known (else its
        serialised size is taken where a bound needs it)."""
        try:
            check_work_item(item)
        except WireError as err:
            # Out of range (a round of 2^64 - 1, a 1 MB job id): logged and
            # dropped; refusing would echo the bad fields back.
            logger.warning("site=%s: work item %d ignored: %s", self.site.name, item.sequence, err)
            return
        try:
            self._dispatch(item, calls, wire_size)
        except grpc.RpcError as err:
            # E.g. the round was aborted while this site computed its share.
            logger.warning("site=%s: the coordinator answered %s: %s", self.site.name,
                           err.code().name, err.details())
        except Exception:
            logger.exception("site=%s: internal error handling work item %d", self.site.name,
                             item.sequence)
            self._refuse_internal(item, calls)

    def _refuse_internal(self, item: pb.WorkItem, calls: CoordinatorCalls) -> None:
        kind = item.WhichOneof("item")
        if kind not in ("round_announcement", "roster"):
            return
        message = getattr(item, kind)
        self._close_round(message.job_id, message.round)
        with contextlib.suppress(grpc.RpcError):
            self._refuse(calls, message.job_id, message.round, message.query_id,
                         pb.Refusal.INTERNAL, f"site {self.site.name!r}: internal error; see "
                         "the site daemon's log")

    def session_ended(self) -> None:
        """Forget every open round (and its keys): the coordinator fails each
        round of a site whose session ended -- registering again closes the
        old session -- and its abort went to the dead stream, so none of them
        can get a roster, and kept they would hold the open-round bound for
        ever."""
        with self._open_lock:
            self._open.clear()

    def _close_round(self, job_id: str, round: int) -> _OpenRound | None:
        with self._open_lock:
            return self._open.pop((job_id, round), None)

    def _dispatch(self, item: pb.WorkItem, calls: CoordinatorCalls,
                  wire_size: int | None) -> None:
        kind = item.WhichOneof("item")
        if kind == "round_announcement":
            size = item.ByteSize() if wire_size is None else wire_size
            self._on_announcement(item.round_announcement, calls, size)
        elif kind == "roster":
            self._on_roster(item.roster, calls)
        elif kind == "round_abort":
            abort = item.round_abort
            self._close_round(abort.job_id, abort.round)
            logger.info("site=%s job=%s round=%d aborted by the coordinator: %s",
                        self.site.name, abort.job_id, abort.round, abort.reason)
        elif kind == "privacy_report_request":
            self._on_privacy_request(item.privacy_report_request, calls)
        elif kind == "job_end":
            self.progress.finish(item.job_end.job_id)
            with self._open_lock:
                for key in [k for k in self._open if k[0] == item.job_end.job_id]:
                    del self._open[key]
            logger.info("site=%s job=%s ended: %s", self.site.name, item.job_end.job_id,
                        pb.JobState.Name(item.job_end.state))
        elif kind == "job_start":
            logger.info("site=%s job=%s started (%s)", self.site.name, item.job_start.job_id,
                        item.job_start.algorithm)

    # -- rounds ---------------------------------------------------------------

    def _on_announcement(self, message: pb.RoundAnnouncement, calls: CoordinatorCalls,
                         size: int) -> None:
        """``size``: the wire size of the work item that carried ``message``."""
        job_id, round, query_id = message.job_id, message.round, message.query_id
        with self._open_lock:
            if (job_id, round) in self._open:
                return  # at-least-once delivery: the same announcement again
            unpaid = self._rounds_opened - self._rounds_paid
            limit = self.site.policy.max_unpaid_rounds
            # Once past, for the rest of the run, as the refusal says: rounds
            # paid later (rosters of rounds opened before) do not reopen it.
            over = self._unpaid_refused or (limit is not None and unpaid >= limit)
            say_so = over and not self._unpaid_refused
            self._unpaid_refused = self._unpaid_refused or over
        if over:
            # Refused once in words; later announcements are ignored, so that
            # refusing costs nothing either (restart the daemon to reset).
            if say_so:
                self._refuse(calls, job_id, round, query_id, pb.Refusal.POLICY,
                             f"site {self.site.name!r} opened {unpaid} rounds that ended "
                             f"without a paid answer, its policy's max_unpaid_rounds "
                             f"({limit}); it ignores further rounds until its operator "
                             "restarts it")
            return
        try:
            # Read-only arrays: digested here, then copied by the admission.
            query, query_round = query_from_proto(message.query, writeable=False)
        except WireError as err:
            self._refuse(calls, job_id, round, query_id, pb.Refusal.POLICY, str(err))
            return
        if (query.job_id, query_round, query.query_id) != (job_id, round, query_id):
            self._refuse(calls, job_id, round, query_id, pb.Refusal.POLICY,
                         "the announced query's job, round or id differ from the round's")
            return
        if not self.progress.enter_round(job_id, round):
            last_round = self.progress.last_round(job_id)
            # last_round lets a coordinator that lost count (its database) go
            # straight above it rather than one refused round at a time.
            self._refuse(calls, job_id, round, query_id, pb.Refusal.REPLAY,
                         f"site {self.site.name!r}: round {round} of job {job_id!r} is not "
                         f"above round {last_round} already seen", last_round=last_round)
            return
        keys = RoundKeys.generate()
        digest = query_digest(query, round)
        signed = keys.sign(
            site_name=self.identity.name, job_id=job_id, round=round, query_digest=digest,
            certificate_pem=self.identity.certificate_pem,
            signing_key=self.identity.signing_key,
            ca_certificate_pem=self.identity.ca_certificate_pem,
        )
        with self._open_lock:
            count, held = len(self._open), sum(opened.size for opened in self._open.values())
            full = (count >= MAX_OPEN_ROUNDS
                    or held + size > MAX_OPEN_ROUND_BYTES)
            if not full:
                self._open[(job_id, round)] = _OpenRound(query, round, keys, digest, size)
            # The keys are made either way: a round refused for want of room
            # counts as unpaid, or announcements past the open-round bound
            # would make keys without end.
            self._rounds_opened += 1
        if full:
            self._refuse(calls, job_id, round, query_id, pb.Refusal.POLICY,
                         f"site {self.site.name!r} holds {count} rounds open "
                         f"({held} bytes of announcements) awaiting their rosters; with this "
                         f"one ({size} bytes) that is over the most it keeps open, "
                         f"{MAX_OPEN_ROUNDS} rounds and {MAX_OPEN_ROUND_BYTES} bytes over "
                         "every job: send the open rounds' rosters or aborts first")
            return
        calls.PublishKey(signed_key_to_proto(signed, query_id), timeout=CALL_TIMEOUT_S)

    def _on_roster(self, message: pb.Roster, calls: CoordinatorCalls) -> None:
        job_id, round, query_id = message.job_id, message.round, message.query_id
        # One roster per round's keys: popping makes a second roster a no-op.
        opened = self._close_round(job_id, round)
        if opened is None or opened.query.query_id != query_id:
            logger.warning("site=%s job=%s round=%d: roster for a round this site has no "
                           "keys for; ignored", self.site.name, job_id, round)
            return
        entries = [signed_key_from_proto(k) for k in message.keys]
        try:
            roster = verify_roster(entries, self.identity.ca_certificate_pem, job_id, round,
                                   self.site.policy.min_participants, self.identity.name,
                                   allowed_names=self.site.policy.allowed_roster_names(),
                                   query_digest=opened.query_digest)
            share = self.site.answer(opened.query, roster.size)
            if opened.query.form == ReleaseForm.PER_SITE:
                # Full noise, seen by the coordinator as it is (the query said so,
                # and every roster entry signed the same form).
                masked = list(share.blocks)
            else:
                masked = [
                    mask_share(block, opened.keys, roster, job_id, round, query_id, index)
                    for index, block in enumerate(share.blocks)
                ]
            masked.append(mask_integrity_check(opened.keys, roster, job_id, round, query_id))
        except RosterError as err:
            self._refuse(calls, job_id, round, query_id, pb.Refusal.ROSTER_INVALID, str(err))
            return
        except BudgetExceededError as err:
            self._refuse(calls, job_id, round, query_id, pb.Refusal.BUDGET_EXHAUSTED, str(err))
            return
        except ReplayError as err:
            self._refuse(calls, job_id, round, query_id, pb.Refusal.REPLAY, str(err))
            return
        except QueryRefusedError as err:
            self._refuse(calls, job_id, round, query_id, pb.Refusal.POLICY, str(err))
            return
        job_epsilon = self.site.ledger.spent_by_job(job_id).epsilon
        logger.info("site=%s job=%s round=%d query=%s answered; %s", self.site.name, job_id,
                    round, query_id,
                    running_spend_text(job_epsilon, self.site.policy.delta_cap))
        submitted = pb.MaskedShare(
            job_id=job_id, round=round, query_id=query_id, site_name=self.site.name,
            fractional_bits=opened.query.fractional_bits, roster_sites=roster.names,
            job_epsilon=job_epsilon,
            # Masked the check only: lets the coordinator verify this site's check.
            check_private_key=opened.keys.check_private_bytes(),
        )
        # Paid once the ledger's charge is committed (by site.answer), whatever
        # the coordinator replies to the share: a round aborted meanwhile was paid.
        if not self.site.compute.is_unpaid(opened.query.mechanism):
            with self._open_lock:
                self._rounds_paid += 1
        for index, block in enumerate(masked):
            fill_tensor(submitted.blocks.add(), block, f"share block {index}")
        calls.SubmitShare(submitted, timeout=CALL_TIMEOUT_S)

    def _refuse(self, calls: CoordinatorCalls, job_id: str, round: int, query_id: str,
                reason: int, message: str, last_round: int = 0) -> None:
        logger.warning("site=%s job=%s round=%d refused (%s): %s", self.site.name, job_id, round,
                       pb.Refusal.Reason.Name(reason), message)
        calls.Refuse(pb.Refusal(job_id=job_id, round=round, query_id=query_id,
                                site_name=self.site.name, reason=reason, message=message,
                                last_round=last_round),
                     timeout=CALL_TIMEOUT_S)

    def _on_privacy_request(self, message: pb.PrivacyReportRequest,
                            calls: CoordinatorCalls) -> None:
        delta = message.delta if 0 < message.delta < 1 else None
        privacy = self.site.privacy_spent(message.job_id, delta)
        logger.info("site=%s job=%s privacy report: %s; %s", self.site.name, message.job_id,
                    job_spend_text(privacy.job.epsilon, privacy.job.delta),
                    site_total_text(privacy.total.epsilon, privacy.total.delta,
                                    privacy.cap_epsilon))
        calls.ReportPrivacy(site_privacy_to_proto(privacy, message.job_id),
                            timeout=CALL_TIMEOUT_S)
