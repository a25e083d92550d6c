"""Jobs at the coordinator: launch, run, cancel, resume.

Each running job has one thread that runs its algorithm against a
:class:`~privadapt.server.federation.network.NetworkFederation`. The job's
state lives in the store: ``pending`` when launched, ``running`` while its
thread runs, then ``succeeded`` (model and privacy report stored), ``failed``
(with the reason: a site's refusal names the site and its cap) or
``cancelled``. A coordinator that stops, cleanly or not, leaves its jobs
``running``; the next start resumes each of them by replay (see
network_federation), so no finished round is lost and no site answers a query
twice.
"""

from __future__ import annotations

import concurrent.futures
import logging
import secrets
import threading
import traceback
import uuid
from collections.abc import Mapping

from privadapt.common.data.dataset import Dataset
from privadapt.common.data.schema_digest import SchemaDigest
from privadapt.common.errors import ConfigError, PrivadaptError
from privadapt.common.privacy_figures import running_spend_text
from privadapt.common.proto import federation_pb2 as pb
from privadapt.server.algorithms.base import PrivateEstimator
from privadapt.server.coordinator.site_registry import SiteRegistry
from privadapt.server.federation.network import (
    JobCancelledError,
    NetworkFederation,
    NetworkJob,
    PrivacyReports,
)
from privadapt.server.federation.rounds import RoundHub
from privadapt.server.jobs.catalog import JobContext, run_job, validate_hyperparameters
from privadapt.server.jobs.launch_checks import (
    JobPlan,
    check_delta_against_sizes,
    check_estimator,
    check_schema_agreement,
    check_site_policies,
    dry_run_plan,
    plan_job,
    registered_digest,
)
from privadapt.server.jobs.launch_plans import LaunchPlans
from privadapt.server.jobs.privacy_plan import refuse_over_budget
from privadapt.server.jobs.privacy_report import (
    cap_delta,
    keep_privacy_report,
    log_spend,
    privacy_report_json,
    report_delta,
    site_accounting,
)
from privadapt.server.jobs.result_files import ModelFeatures, model_features
from privadapt.server.jobs.spec import (
    hyperparameters,
    job_state_to_proto,
    spec_from_json,
    spec_to_json,
    validate_spec,
)
from privadapt.server.jobs.unknown_sites import refuse_unknown_sites
from privadapt.server.store import CoordinatorStore, JobRecord, RoundRecord

logger = logging.getLogger(__name__)


class JobManager:
    """Starts a thread per job and keeps the store's job states true."""

    def __init__(
        self,
        store: CoordinatorStore,
        registry: SiteRegistry,
        hub: RoundHub,
        reports: PrivacyReports,
        *,
        round_timeout: float,
        site_wait_timeout: float,
        min_sites: int,
        public_source: Dataset | None = None,
        public_schema: SchemaDigest | None = None,
        public_sources: tuple[Dataset, ...] = (),
        schema_names: Mapping[str, tuple[str, ...]] | None = None,
    ) -> None:
        self._store = store
        self._registry = registry
        self._hub = hub
        self._reports = reports
        self._round_timeout = round_timeout
        self._site_wait_timeout = site_wait_timeout
        self._min_sites = min_sites
        self._public_source = public_source
        self._public_schema = public_schema
        self._public_sources = public_sources
        self._lock = threading.Lock()
        self._threads: dict[str, threading.Thread] = {}
        self._cancel: dict[str, threading.Event] = {}
        self._stopping = threading.Event()
        # Watchers (OperatorService.Watch) wait on this for a job's next change.
        self._changed = threading.Condition()
        self._versions: dict[str, int] = {}
        self._plans = LaunchPlans(self._plan_and_refuse)
        # Digest -> feature names of each schema this coordinator holds.
        self._schema_names = dict(schema_names or {})
        # Each launched job's privacy plan (this run), for its planned round count.
        self._job_plans: dict[str, concurrent.futures.Future] = {}
        # Each launched job's checked estimator, until its thread fits it.
        self._estimators: dict[str, PrivateEstimator] = {}
        # The operator's reason, for the job's message and its job_cancelled event.
        self._cancel_reasons: dict[str, str] = {}

    def launch(self, spec: pb.JobSpec, job_id: str = "") -> str:
        """Check ``spec`` and start it; ``ConfigError`` (nothing stored, the id
        still free) for anything the checks refuse. A job id whose job failed
        before its first round is free again (nothing was spent under it)."""
        # The seed first: the estimator checked now is the one the plan
        # previews (a clone) and the run fits.
        if not spec.HasField("seed"):
            spec.seed = secrets.randbits(63)
        estimator = self._check_launch(spec)
        # The budget check: at once when the plan is quick, else before round 1.
        pending_plan = self._plans.check(spec, estimator)
        if job_id and self._store.discard_unstarted_failure(job_id):
            self._store.audit("job_id_reused", job_id=job_id,
                              detail="the earlier job of this id failed before its first round")
        job_id = job_id or f"job-{uuid.uuid4().hex[:12]}"
        record = self._store.create_job(job_id, spec.algorithm, spec_to_json(spec), spec.seed)
        detail = f"{spec.algorithm} epsilon={spec.epsilon:g} sites={list(spec.sites)}"
        self._store.audit("job_launched", job_id=job_id, detail=detail)
        self._plans.adopt(job_id, pending_plan)
        with self._lock:
            self._job_plans[job_id] = pending_plan
            self._estimators[job_id] = estimator
        self._start(record)
        return job_id

    def dry_run(self, spec: pb.JobSpec, job_id: str = "") -> str:
        """Every check :meth:`launch` makes, and what was checked, as text;
        nothing is stored or started. ``ConfigError`` for what launch refuses."""
        estimator = self._check_launch(spec)
        plan = self._plan_and_refuse(spec, estimator)
        record = self._store.job(job_id) if job_id else None
        if record is not None and record.state != "failed":
            raise ConfigError(f"job {job_id!r} already exists ({record.state}); choose another "
                              "job id (--id NAME)")
        return dry_run_plan(spec, job_id, self._store.sites(), self._registry.connected_names(),
                            self._public_schema, plan)

    def _check_launch(self, spec: pb.JobSpec) -> PrivateEstimator:
        """Refuse ``spec`` for anything known before it starts; fills in its
        sites (every registered one if it names none) and min_participants.
        Each value is checked once: the spec's, the hyperparameters', then
        what only the built estimator can check; it is returned, for the
        plan and the run. The budget check is :meth:`_plan_and_refuse`."""
        validate_spec(spec)
        values = hyperparameters(spec)
        validate_hyperparameters(spec.algorithm, values)
        estimator = check_estimator(spec, values, self._public_source is not None)
        if not spec.sites:
            registered = sorted(site.name for site in self._store.sites())
            if not registered:
                raise ConfigError("no site has registered yet; start the site daemons first")
            spec.sites.extend(registered)
        # Sites named explicitly may still be starting: the job waits for them
        # (site_wait_timeout) and then fails naming the ones that never came.
        # Those registered are checked now, every one again at the job's start.
        self._check_sites(spec)
        if not spec.min_participants:
            spec.min_participants = min(max(self._min_sites, 1), len(spec.sites))
        return estimator

    def _plan_and_refuse(self, spec: pb.JobSpec, estimator: PrivateEstimator) -> JobPlan:
        """The job's privacy plan over its registered sites, from its checked
        ``estimator``; ConfigError if it would exceed a site's reported
        remaining budget (server/jobs/privacy_plan.py)."""
        plan = plan_job(spec, hyperparameters(spec), self._registry.sessions(),
                        self._public_source, self._public_sources, estimator)
        refuse_over_budget(plan.previews)
        return plan

    def planned_rounds(self, job_id: str) -> int:
        """Releases in the job's privacy plan (rounds without aborts); 0 if
        this run made no plan for it (resumed) or has none yet."""
        with self._lock:
            future = self._job_plans.get(job_id)
        if future is None or not future.done() or future.exception() is not None:
            return 0
        return len(future.result().releases)

    def model_features(self, agreed: SchemaDigest | None, dim: int) -> ModelFeatures:
        """What a job's model weights mean (server/jobs/result_files.py): the
        names of the schema the parties agreed on, when this coordinator
        holds it (the sites' schemas travel only as digests), else placeholders."""
        return model_features(agreed, dim, self._schema_names)

    def _check_sites(self, spec: pb.JobSpec) -> SchemaDigest | None:
        """The checks of ``spec`` against its sites that are known now: the
        delta against each public size (the store's registrations), the
        schemas against each other and the public sample (this run's)."""
        named = set(spec.sites)
        check_delta_against_sizes(spec, {site.name: site.num_records
                                         for site in self._store.sites() if site.name in named})
        sessions = [s for s in self._registry.sessions() if s.name in named]
        refuse_unknown_sites(named, [site.name for site in self._store.sites()],
                             {s.name: s.registration for s in sessions})
        check_site_policies(spec, {s.name: s.registration for s in sessions})
        return check_schema_agreement(self._public_schema, {
            s.name: registered_digest(s.registration) for s in sessions})

    def resume_unfinished(self) -> list[str]:
        """Start a thread for every job a previous run left pending or running."""
        resumed = []
        for record in self._store.unfinished_jobs():
            self._store.audit("job_resumed", job_id=record.job_id,
                              detail=f"from round {self._store.last_round(record.job_id)}")
            self._start(record)
            resumed.append(record.job_id)
        return resumed

    def cancel(self, job_id: str, reason: str) -> str:
        record = self._store.job(job_id)
        if record is None:
            raise KeyError(job_id)
        with self._lock:
            event = self._cancel.get(job_id)
        reason = reason or "cancelled by the operator"
        if event is None:
            if record.state not in ("succeeded", "failed", "cancelled"):
                self._store.audit("job_cancelled", job_id=job_id, detail=reason)
                self._set_state(job_id, "cancelled", reason)
            return self._store.job(job_id).state
        with self._lock:
            self._cancel_reasons[job_id] = reason
        event.set()
        self._hub.cancel(job_id, reason)
        self._registry.wake()
        with self._lock:
            thread = self._threads.get(job_id)
        if thread is not None:
            thread.join(timeout=self._round_timeout)
        return self._store.job(job_id).state

    def stop(self) -> None:
        """The coordinator is shutting down: leave running jobs 'running' so
        the next start resumes them."""
        self._stopping.set()
        self._plans.close()
        with self._lock:
            jobs = list(self._threads)
        for job_id in jobs:
            self._hub.cancel(job_id, "the coordinator is shutting down")
        self._registry.wake()

    def wait(self, job_id: str, timeout: float | None = None) -> None:
        with self._lock:
            thread = self._threads.get(job_id)
        if thread is not None:
            thread.join(timeout)

    def wait_for_change(self, job_id: str, seen: int, stop: threading.Event) -> int:
        """Block until ``job_id`` changes after version ``seen`` (a round ended,
        its state changed) or ``stop`` is set; return the new version."""
        with self._changed:
            self._changed.wait_for(lambda: self._versions.get(job_id, 0) != seen
                                   or stop.is_set())
            return self._versions.get(job_id, 0)

    def wake_watchers(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def _mark_changed(self, job_id: str) -> None:
        with self._changed:
            self._versions[job_id] = self._versions.get(job_id, 0) + 1
            self._changed.notify_all()

    def _set_state(self, job_id: str, state: str, message: str = "") -> None:
        self._store.set_job_state(job_id, state, message)
        self._mark_changed(job_id)

    def _start(self, record: JobRecord) -> None:
        thread = threading.Thread(target=self._run, args=(record,), name=f"job-{record.job_id}",
                                  daemon=True)
        with self._lock:
            self._cancel[record.job_id] = threading.Event()
            self._threads[record.job_id] = thread
        thread.start()

    def _run(self, record: JobRecord) -> None:
        job_id = record.job_id
        spec = spec_from_json(record.spec_json)
        cancelled = self._cancel[job_id]
        state, message = "failed", ""
        federation: NetworkFederation | None = None
        try:
            self._set_state(job_id, "running")
            federation = NetworkFederation(
                NetworkJob(job_id, tuple(spec.sites), spec.collusion_tolerance,
                           spec.min_participants, self._round_timeout, self._site_wait_timeout),
                self._registry, self._hub, self._store, self._reports,
                cancelled=cancelled, on_round=self._on_round,
                on_wait=lambda line: self._on_wait(job_id, line),
            )
            federation.wait_for_sites()
            # Before any key is published: every site that came must agree,
            # and a plan that outlasted the launch call must fit every budget.
            agreed = self._check_sites(spec)
            self._plans.wait_before_first_round(job_id, cancelled)
            self._broadcast(spec, job_start=pb.JobStart(
                job_id=job_id, algorithm=spec.algorithm,
                collusion_tolerance=spec.collusion_tolerance,
                min_participants=spec.min_participants, participants=spec.sites))
            with self._lock:  # none for a resumed job: its fit checks the stored spec
                estimator = self._estimators.pop(job_id, None)
            context = JobContext(
                federation, spec, hyperparameters(spec), record.seed,
                lambda step, model: self._store.save_checkpoint(job_id, step, model),
                self._public_source, self._public_sources, estimator,
            )
            model = run_job(context)
            privacy = federation.privacy_spent(report_delta(spec))
            dims = [s.num_features for s in self._store.sites() if s.name in set(spec.sites)]
            self._store.save_result(job_id, model, privacy_report_json(
                job_id, spec, privacy, self._store.rounds(job_id),
                self.model_features(agreed, max(dims, default=0)),
                site_accounting(self._registry, spec.sites)))
            log_spend(job_id, privacy)
            state, message = "succeeded", ""
        except JobCancelledError as err:
            state, message = "cancelled", str(err)
        except PrivadaptError as err:
            state, message = "failed", str(err)
        except Exception as err:  # a bug: fail the job loudly, keep the coordinator up
            logger.error("job=%s crashed:\n%s", job_id, traceback.format_exc())
            state, message = "failed", f"internal error: {type(err).__name__}: {err}"
        finally:
            self._hub.close_job(job_id)
            with self._lock:
                self._threads.pop(job_id, None)
                self._cancel.pop(job_id, None)
        if self._stopping.is_set() and state != "succeeded":
            logger.info("job=%s interrupted by shutdown; it resumes at the next start", job_id)
            return
        if cancelled.is_set() and state == "failed":
            state = "cancelled"
        if state == "cancelled":
            with self._lock:
                message = self._cancel_reasons.pop(job_id, message)
        if state != "succeeded" and federation is not None:
            keep_privacy_report(self._store, self._registry, spec, federation, state)
        # The event first: a watcher told the job ended then finds it in the log.
        self._store.audit(f"job_{state}", job_id=job_id, detail=message)
        self._set_state(job_id, state, message)
        self._broadcast(spec, job_end=pb.JobEnd(job_id=job_id, state=job_state_to_proto(state),
                                                message=message))
        log = logger.info if state == "succeeded" else logger.warning
        log("job=%s %s%s", job_id, state, f": {message}" if message else "")

    def _broadcast(self, spec: pb.JobSpec, **item: object) -> None:
        for name in spec.sites:
            session = self._registry.session(name)
            if session is not None:
                session.send(**item)

    def _on_wait(self, job_id: str, line: str) -> None:
        """The job waits for sites (``line``, every few seconds) or stopped
        waiting (""): its message says so, and watchers are told."""
        if line and not self._store.job(job_id).message:
            self._store.audit("waiting_for_sites", job_id=job_id, detail=line)
            logger.warning("job=%s %s", job_id, line)
        self._store.set_job_state(job_id, "running", line)
        self._mark_changed(job_id)

    def _on_round(self, record: RoundRecord) -> None:
        self._mark_changed(record.job_id)
        if record.aborted:
            logger.warning("job=%s round=%d step=%d aborted: %s", record.job_id, record.round,
                           record.step, record.abort_reason)
        else:
            logger.info("job=%s round=%d step=%d sites=%d %.1f ms %s", record.job_id,
                        record.round, record.step, len(record.participants),
                        1e3 * (record.finished - record.started),
                        running_spend_text(record.epsilon_so_far,
                                           cap_delta(self._registry, record.participants)))
