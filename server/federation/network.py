"""The networked ``Federation``: an algorithm's queries become secure-aggregation
rounds with the site daemons (DESIGN.md sections 3, 6 and 7).

An algorithm is written against :class:`privadapt.common.federation.Federation`
and cannot tell this class from ``LocalFederation``: ``query`` returns the
decoded sum of the sites' noised, fixed-point shares; ``query_per_site`` and
``select`` run the same rounds in the ``per_site`` form (each site's own
answer, unmasked, :mod:`privadapt.server.federation.per_site_answers`).

Resuming after a coordinator restart is replay, not checkpoint restore. Every
aggregated answer is stored under its algorithm *step* (the n-th query of the
job) with a fingerprint of (kernel, params, mechanism). A resumed job runs its
algorithm again from the start; a step whose answer is stored is answered from
the store without contacting any site, so the algorithm retraces exactly the
same states (coordinator randomness is seeded per job) and carries on with new
rounds where it stopped. A stored answer whose fingerprint differs from the
re-asked query means the algorithm did not replay deterministically: the job
fails loudly rather than mix two runs.

Query ids are ``s<step>-r<round>``: a retried step gets a new round and so a
new id, which every ledger requires (a query id is answered at most once), and
round numbers only grow, also across restarts (above every round the store or
any connected site has seen).

Every round is in the store (``started``) before its roster is sent, because
sites charge it as soon as they answer it, on its roster; the row is committed
while the sites handle the announcement, so its fsync is off the round's
critical path. A round still ``started`` when its job resumes was cut short by
a crash and is recorded as interrupted, so the job's status and privacy report
list it with the other charged attempts.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from privadapt.common.data.record_parts import RecordPart
from privadapt.common.errors import BudgetExceededError, PrivadaptError, QueryRefusedError
from privadapt.common.federation import (
    AggregateAnswer,
    PerSiteAnswer,
    Query,
    RecordPartView,
    ReleaseForm,
    SelectionAnswer,
    SitePrivacy,
)
from privadapt.common.kernels import get_kernel
from privadapt.common.mechanisms import Adjacency, Mechanism
from privadapt.common.numerics.fixed_point import FixedPointCodec
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.wire.messages import query_to_proto, site_privacy_from_proto
from privadapt.server.coordinator.site_registry import SiteRegistry
from privadapt.server.federation.per_site_answers import per_site_answer, selection_answer
from privadapt.server.federation.rounds import DeliveryError, RoundFailedError, RoundHub
from privadapt.server.federation.site_wait import WaitListener, wait_saying_so
from privadapt.server.store import CoordinatorStore, RoundRecord, StoredAnswer

logger = logging.getLogger(__name__)

# Aborted attempts of one step before the job gives up (each one was charged).
MAX_ATTEMPTS_PER_STEP = 5
# Rounds in which a site may publish its key and then send no share before
# the job leaves it out for good (once can be a crash; twice costs every
# honest site a second charged round).
WITHHELD_SHARES_LIMIT = 2
INTERRUPTED_REASON = ("interrupted: the coordinator stopped during this round; sites that "
                      "answered it before then were charged for it")


class JobCancelledError(PrivadaptError):
    """The operator cancelled the job."""


class JobFailedError(PrivadaptError):
    """The job cannot go on (too few sites, a refusal, a divergent replay)."""


@dataclass(frozen=True)
class NetworkJob:
    """What a job's federation needs to know about the job."""

    job_id: str
    sites: tuple[str, ...]
    collusion_tolerance: int = 0
    min_participants: int = 1
    round_timeout: float = 30.0
    site_wait_timeout: float = 60.0


RoundListener = Callable[[RoundRecord], None]


class NetworkFederation:
    """A job's sites across the network; see the module docstring."""

    def __init__(
        self,
        job: NetworkJob,
        registry: SiteRegistry,
        hub: RoundHub,
        store: CoordinatorStore,
        privacy_reports: PrivacyReports,
        *,
        codec: FixedPointCodec | None = None,
        cancelled: threading.Event | None = None,
        on_round: RoundListener | None = None,
        on_wait: WaitListener | None = None,
    ) -> None:
        if job.min_participants < 1 or job.min_participants > len(job.sites):
            raise ValueError(
                f"min_participants must be in [1, {len(job.sites)}], got {job.min_participants}"
            )
        self._job = job
        self._registry = registry
        self._hub = hub
        self._store = store
        self._reports = privacy_reports
        self.codec = codec or FixedPointCodec()
        self._cancelled = cancelled or threading.Event()
        self._on_round = on_round
        self._on_wait = on_wait
        self._steps = itertools.count(1)
        # Sessions that missed a round's deadline (or sent a share that was
        # refused): left out of the job's next rounds so the honest sites are
        # not charged for one aborted attempt after another. A site that
        # reconnects has a new session and takes part again.
        self._excluded_sessions: set[str] = set()
        # Sites that provably broke one of this job's rounds (a wrong
        # integrity check, a replay refusal after the roster;
        # server/federation/round_blame.py), or withheld their share after the roster
        # in WITHHELD_SHARES_LIMIT rounds: left out for the rest of the job,
        # reconnected or not, so that no participant can abort every retry
        # at the honest sites' expense.
        self._blamed: set[str] = set()
        self._withheld: dict[str, int] = {}
        self._replaying = True
        # No round of this job runs now (one federation per job run), so any
        # round still "started" is one a crashed coordinator never finished.
        for record in store.interrupt_rounds(job.job_id, INTERRUPTED_REASON):
            logger.warning("job=%s round=%d step=%d was in flight when the coordinator "
                           "stopped; recorded as interrupted", job.job_id, record.round,
                           record.step)
            store.audit("round_interrupted", job_id=job.job_id,
                        detail=f"round {record.round} step {record.step}")
        self._last_round = store.last_round(job.job_id)
        hub.open_job(job.job_id, self._last_round)

    # -- Federation protocol --------------------------------------------------

    @property
    def job_id(self) -> str:
        return self._job.job_id

    @property
    def num_sites(self) -> int:
        return len(self._job.sites)

    @property
    def site_sizes(self) -> dict[str, int]:
        """n_k as each site declared at registration; refused for a site that
        accounts under add/remove adjacency, where n_k is private."""
        sizes: dict[str, int] = {}
        known = {s.name: s.registration for s in self._registry.sessions()}
        for name in self._job.sites:
            registration = known.get(name)
            if registration is None:
                raise JobFailedError(f"site {name!r} has never registered with this coordinator")
            if registration.adjacency == Adjacency.ADD_REMOVE_ONE.value:
                raise QueryRefusedError(
                    f"site {name!r} accounts under add/remove adjacency, where its size is "
                    "private: query record_count with noise instead"
                )
            sizes[name] = int(registration.num_records)
        return sizes

    def restricted_to(self, part: RecordPart) -> RecordPartView:
        """This job on ``part`` of every site's records (common/federation.py)."""
        return RecordPartView(self, part)

    def query(
        self, kernel: str, params: Mapping[str, Any], mechanism: Mechanism,
        *, records: RecordPart = RecordPart.ALL,
    ) -> AggregateAnswer:
        query_id, blocks, participants = self._step(kernel, params, mechanism,
                                                    ReleaseForm.SECURE_SUM, records)
        return AggregateAnswer(query_id, blocks, participants, self._job.collusion_tolerance)

    def query_per_site(
        self, kernel: str, params: Mapping[str, Any], mechanism: Mechanism,
        *, records: RecordPart = RecordPart.ALL, sites: Sequence[str] | None = None,
    ) -> PerSiteAnswer:
        """``sites``: a round of only these (the others are neither asked nor charged)."""
        return per_site_answer(*self._step(kernel, params, mechanism, ReleaseForm.PER_SITE,
                                           records, sites))

    def select(
        self, kernel: str, params: Mapping[str, Any], mechanism: Mechanism,
        *, records: RecordPart = RecordPart.ALL, sites: Sequence[str] | None = None,
    ) -> SelectionAnswer:
        asked = self._job.sites if sites is None else sites
        if len(asked) != 1:
            raise QueryRefusedError(
                f"job {self.job_id!r}: a selection is answered only when one site holds all of "
                f"the job's private data, and this job has {len(asked)} sites; ask "
                "for the secure-sum form of the same kernel and select on the noisy sum")
        step = self._step(kernel, params, mechanism, ReleaseForm.PER_SITE, records, sites)
        (shape,) = self._expected_shapes(kernel, params)
        try:
            return selection_answer(*step, num_candidates=shape[0])
        except ValueError as err:
            raise JobFailedError(f"job {self.job_id!r}: {err}") from None

    def _step(
        self, kernel: str, params: Mapping[str, Any], mechanism: Mechanism, form: ReleaseForm,
        records: RecordPart, sites: Sequence[str] | None = None,
    ) -> tuple[str, tuple[Any, ...], tuple[str, ...]]:
        """One algorithm step: its (query id, blocks, participants), from the
        store while a resumed job replays, else from a new round (of ``sites``
        only, when named)."""
        if sites is not None and (not sites or not set(sites) <= set(self._job.sites)
                                  or len(set(sites)) != len(sites)):
            raise ValueError(f"sites must be distinct names among {list(self._job.sites)}, "
                             f"got {list(sites)}")
        step = next(self._steps)
        # One encoding of the query per step: hashed for the fingerprint, then
        # announced (with each attempt's query id and round number).
        probe = self._probe(kernel, params, mechanism, form, records)
        fingerprint = _fingerprint(probe, sites)
        # Steps are answered in order, so once one is not stored none after it
        # is: the store is read only while a resumed job is replaying.
        stored = self._store.answer(self.job_id, step) if self._replaying else None
        self._replaying = stored is not None
        if stored is not None:
            if stored.fingerprint != fingerprint:
                raise JobFailedError(
                    f"job {self.job_id!r}: step {step} asks a different query than the one "
                    "answered before the restart; the algorithm did not replay "
                    "deterministically, so the job cannot resume"
                )
            return stored.query_id, stored.blocks, stored.participants
        for _attempt in range(MAX_ATTEMPTS_PER_STEP):
            answer = self._attempt(step, fingerprint, probe, kernel, params, mechanism, form,
                                   records, sites)
            if answer is not None:
                return answer
        raise JobFailedError(
            f"job {self.job_id!r}: step {step} was aborted {MAX_ATTEMPTS_PER_STEP} times; "
            "see `privadapt status` for why each round failed"
        )

    def privacy_spent(self, delta: float | None = None) -> dict[str, SitePrivacy]:
        """Each site's spend as its own ledger reports it (asked over the stream)."""
        return self._reports.collect(self.job_id, self._job.sites, delta,
                                     self._job.round_timeout)

    def wait_for_sites(self) -> None:
        """At the job's start: wait for every one of its sites (they may still
        be starting), at most site_wait_timeout; then go on if at least
        min_participants are connected, else JobFailedError naming the absent."""
        wanted = set(self._job.sites)
        came = wait_saying_so(
            self._registry,
            lambda: self._cancelled.is_set() or wanted <= self._registry.connected_names(),
            self._job.site_wait_timeout,
            lambda: wanted - self._registry.connected_names(), self._on_wait,
        )
        # After the whole wait, go on with min_participants or fail now.
        self._wait_for_participants(timeout=None if came else 0.0)

    # -- rounds ---------------------------------------------------------------

    def _attempt(
        self, step: int, fingerprint: str, probe: pb.Query, kernel: str,
        params: Mapping[str, Any], mechanism: Mechanism, form: ReleaseForm, records: RecordPart,
        sites: Sequence[str] | None = None,
    ) -> tuple[str, tuple[Any, ...], tuple[str, ...]] | None:
        participants = self._wait_for_participants(sites)
        round = self._next_round(participants)
        query = Query(
            job_id=self.job_id, query_id=f"s{step:06d}-r{round:06d}", kernel=kernel,
            params=params, mechanism=mechanism,
            collusion_tolerance=self._job.collusion_tolerance,
            fractional_bits=self.codec.fractional_bits, form=form, records=records,
        )
        expected_shapes = ([(1,)] if mechanism.releases_index
                           else self._expected_shapes(kernel, params))
        started = time.time()
        recorded: list[bool] = []

        def record_start() -> None:
            # Run by the hub once the announcement is queued, before it waits
            # for the keys: this commit's fsync overlaps the sites' key
            # generation, and it is durable before the roster, the first
            # message a site answers and charges (server/federation/rounds.py).
            self._store.start_round(RoundRecord.starting(self.job_id, round, step,
                                                         query.query_id, participants, started,
                                                         form))
            recorded.append(True)

        try:
            result = self._hub.run_round(query, round, participants, self._job.round_timeout,
                                         expected_shapes, _announced(probe, query, round),
                                         record_start)
        except RoundFailedError as failure:
            self._abort_round(round, step, query.query_id, participants, started,
                              failure.reason, form)
            self._raise_for_refusals(failure)
            self._skip_replayed_rounds(failure)
            self._exclude(failure.missing)
            self._blame(failure.blamed, "broke a round")
            for name in failure.withheld:
                self._withheld[name] = self._withheld.get(name, 0) + 1
            self._blame([n for n, count in self._withheld.items()
                         if count >= WITHHELD_SHARES_LIMIT],
                        f"withheld its share in {WITHHELD_SHARES_LIMIT} rounds after the roster")
            return None
        except Exception as error:  # a bug or a closed round: the job fails, the row ends
            if recorded:  # else its row could not be written (the hub aborted the round)
                self._abort_round(round, step, query.query_id, participants, started,
                                  f"coordinator error: {type(error).__name__}: {error}", form)
            raise
        record = RoundRecord(self.job_id, round, step, query.query_id, result.participants,
                             started, time.time(), False, "", result.job_epsilon, form=form)
        answer = StoredAnswer(self.job_id, step, round, query.query_id, fingerprint,
                              result.blocks, result.participants)
        self._store.save_answer(answer, record)
        self._notify(record)
        return query.query_id, result.blocks, result.participants

    def _abort_round(self, round: int, step: int, query_id: str, participants: Sequence[str],
                     started: float, reason: str, form: ReleaseForm) -> None:
        record = RoundRecord(self.job_id, round, step, query_id, tuple(participants), started,
                             time.time(), True, reason, math.nan, form=form)
        self._store.record_round(record)
        self._store.audit("round_aborted", job_id=self.job_id, detail=reason)
        self._notify(record)

    def _raise_for_refusals(self, failure: RoundFailedError) -> None:
        """A refusal ends the job, except a replay refusal (a site saw this round
        number before a restart): the next attempt simply takes a higher round."""
        for refusal in failure.refusals:
            if refusal.reason == pb.Refusal.BUDGET_EXHAUSTED:
                raise BudgetExceededError(refusal.message)
        for refusal in failure.refusals:
            if refusal.reason != pb.Refusal.REPLAY:
                # The operator's message names the site whose policy refused.
                reason = pb.Refusal.Reason.Name(refusal.reason).lower().replace("_", " ")
                raise QueryRefusedError(f"site {refusal.site_name!r} refused the round "
                                        f"({reason}): {refusal.message}")

    def _skip_replayed_rounds(self, failure: RoundFailedError) -> None:
        """A site that refused a round as a replay says the last round it saw
        (a job id reused after the coordinator's database was lost): the next
        attempt goes above it at once, not one refused round at a time."""
        replayed = [r.last_round for r in failure.refusals if r.reason == pb.Refusal.REPLAY]
        if replayed and max(replayed) > self._last_round:
            logger.warning("job=%s: sites have seen rounds up to %d; continuing above it",
                           self.job_id, max(replayed))
            self._last_round = max(replayed)

    def _exclude(self, names: Sequence[str]) -> None:
        for name in names:
            session = self._registry.session(name)
            if session is not None:  # still connected, yet it did not answer
                self._excluded_sessions.add(session.session_id)
                logger.warning("job=%s: site %s is left out of the next rounds until it "
                               "reconnects", self.job_id, name)

    def _blame(self, names: Sequence[str], why: str) -> None:
        for name in names:
            if name not in self._blamed:
                self._blamed.add(name)
                logger.warning("job=%s: site %s %s; it is left out of the rest of the job",
                               self.job_id, name, why)
                self._store.audit("site_blamed", job_id=self.job_id, site_name=name,
                                  detail=f"{why}: left out of the job")

    def _eligible(self) -> set[str]:
        """The job's sites that are connected and not left out."""
        eligible = set()
        for name in self._job.sites:
            if name in self._blamed:
                continue
            session = self._registry.session(name)
            if session is not None and session.session_id not in self._excluded_sessions:
                eligible.add(name)
        return eligible

    def _wait_for_participants(self, sites: Sequence[str] | None = None,
                               timeout: float | None = None) -> list[str]:
        """The eligible sites once min_participants of them are (every one of
        ``sites`` when a round is of those only), waiting at most ``timeout``
        (default: the job's site_wait_timeout)."""
        wanted = set(self._job.sites if sites is None else sites)

        def enough() -> bool:
            if sites is None:
                return len(self._eligible()) >= self._job.min_participants
            return wanted <= self._eligible()

        def ready() -> bool:
            return self._cancelled.is_set() or enough()

        timeout = self._job.site_wait_timeout if timeout is None else timeout
        if not wait_saying_so(self._registry, ready, timeout,
                              lambda: wanted - self._eligible(), self._on_wait):
            connected = sorted(self._eligible() & wanted)
            absent = sorted(wanted - set(connected))
            raise JobFailedError(
                f"job {self.job_id!r}: only {len(connected)} of its sites are connected "
                f"({', '.join(connected) or 'none'}), fewer than min_participants="
                f"{self._job.min_participants}, after waiting {self._job.site_wait_timeout:g} s; "
                f"not taking part: {', '.join(absent)} (not connected, or left out after missing "
                "a round's deadline: check those site daemons and their logs"
                + (f"; left out of this job for breaking its rounds: "
                   f"{', '.join(sorted(self._blamed))}" if self._blamed else "") + ")"
            )
        if self._cancelled.is_set():
            raise JobCancelledError(f"job {self.job_id!r} was cancelled")
        return sorted(self._eligible() & wanted)

    def _next_round(self, participants: Sequence[str]) -> int:
        seen = [self._last_round]
        for session in self._registry.sessions():
            if session.name in participants:
                seen.append(session.closed_rounds.get(self.job_id, 0))
        self._last_round = max(seen) + 1
        return self._last_round

    @property
    def dim(self) -> int:
        """The record dimension d the job's sites declared at registration
        (JobFailedError if they disagree: they must share one schema)."""
        dims = {s.registration.num_features for s in self._registry.sessions()
                if s.name in self._job.sites}
        if len(dims) != 1:
            raise JobFailedError(f"job {self.job_id!r}: its sites declare different feature "
                                 f"dimensions {sorted(dims)}; they must share one schema")
        return dims.pop()

    def _expected_shapes(self, kernel: str, params: Mapping[str, Any]) -> list[tuple[int, ...]]:
        """What every share must hold: the kernel's released blocks (local
        blocks, if any, never leave the site)."""
        found, dim = get_kernel(kernel), self.dim
        return [tuple(s) for s in found.output_shapes(found.Params.from_wire(params, dim), dim)]

    def _probe(self, kernel: str, params: Mapping[str, Any], mechanism: Mechanism,
               form: ReleaseForm, records: RecordPart) -> pb.Query:
        """The step's query encoded under query id "fingerprint" at round 0."""
        probe = Query(self.job_id, "fingerprint", kernel, params, mechanism,
                      self._job.collusion_tolerance, self.codec.fractional_bits, form, records)
        return query_to_proto(probe, round=0)

    def _notify(self, record: RoundRecord) -> None:
        if self._on_round is not None:
            self._on_round(record)


def _fingerprint(probe: pb.Query, sites: Sequence[str] | None = None) -> str:
    """What a step asks: SHA-256 of its probe's deterministic encoding (and of
    the sites asked, when only some are), compared when a resumed job replays."""
    encoded = probe.SerializeToString(deterministic=True)
    if sites is not None:  # a round of some sites only is another step than one of all
        encoded += ("\x00" + "\x00".join(sites)).encode()
    return hashlib.sha256(encoded).hexdigest()


def _announced(encoded: pb.Query, query: Query, round: int) -> pb.Query:
    """``query_to_proto(query, round)``, made from the step's encoding (the
    probe once its fingerprint is taken: the same fields but the query id and
    round, set here for each attempt) rather than encoding the parameters
    again: a 1e5-float query is 0.8 MB, checked and copied at each encoding.
    The announcement copies it, so the next attempt may set its own ids."""
    encoded.query_id, encoded.round = query.query_id, round
    return encoded


class PrivacyReports:
    """Asks sites for their ledgers' view of a job and waits for the replies."""

    def __init__(self, registry: SiteRegistry) -> None:
        self._registry = registry
        self._changed = threading.Condition()
        self._reports: dict[tuple[str, str], pb.SitePrivacyReport] = {}
        self._outstanding: set[tuple[str, str]] = set()

    def deliver(self, report: pb.SitePrivacyReport) -> None:
        """Take a site's reply; DeliveryError for a report nobody asked for (it
        would only grow memory) or one that cannot be read."""
        key = (report.job_id, report.site_name)
        try:
            site_privacy_from_proto(report)
        except (ValueError, PrivadaptError) as err:
            raise DeliveryError("INVALID_ARGUMENT", f"unreadable privacy report: {err}") from None
        with self._changed:
            if key not in self._outstanding:
                raise DeliveryError("FAILED_PRECONDITION", f"no privacy report of job "
                                    f"{report.job_id!r} was asked of site {report.site_name!r}")
            self._outstanding.discard(key)
            self._reports[key] = report
            self._changed.notify_all()

    def collect(
        self, job_id: str, sites: Sequence[str], delta: float | None, timeout: float
    ) -> dict[str, SitePrivacy]:
        with self._changed:
            for name in sites:
                self._reports.pop((job_id, name), None)
        asked = []
        request = pb.PrivacyReportRequest(job_id=job_id, delta=delta or 0.0)
        with self._changed:
            self._outstanding.update((job_id, name) for name in sites)
        for name in sites:
            session = self._registry.session(name)
            if session is not None and session.send(privacy_report_request=request):
                asked.append(name)
        with self._changed:
            self._changed.wait_for(
                lambda: all((job_id, n) in self._reports for n in asked), timeout
            )
            replies = {n: self._reports.pop((job_id, n)) for n in asked
                       if (job_id, n) in self._reports}
            self._outstanding.difference_update((job_id, name) for name in sites)
        return {name: site_privacy_from_proto(report) for name, report in replies.items()}
