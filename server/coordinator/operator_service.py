"""The coordinator's ``OperatorService``: launch, status, cancel, result, sites, logs.

Only operator certificates may call it (``tls.require_role``): a site
certificate can never launch a job or read a result. Expected errors (a bad
spec, an unknown job) come back as INVALID_ARGUMENT / NOT_FOUND with a message
the CLI prints as is.
"""

from __future__ import annotations

import json
import math
import threading

import grpc
from google.protobuf.duration_pb2 import Duration

from privadapt.common.errors import ConfigError
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.proto import federation_pb2_grpc as rpc
from privadapt.common.secure import tls
from privadapt.common.wire.messages import params_to_proto, timestamp_to_proto
from privadapt.server.coordinator.site_registry import SiteRegistry
from privadapt.server.jobs.manager import JobManager
from privadapt.server.jobs.spec import job_state_to_proto
from privadapt.server.store import FINISHED_STATES, CoordinatorStore, JobRecord


class OperatorServicer(rpc.OperatorServiceServicer):
    def __init__(self, jobs: JobManager, store: CoordinatorStore, registry: SiteRegistry,
                 insecure: bool = False) -> None:
        self._jobs = jobs
        self._store = store
        self._registry = registry
        self._insecure = insecure

    def _authorise(self, context: grpc.ServicerContext) -> None:
        if not self._insecure:
            tls.require_role(context, ["operator"])

    def _job(self, job_id: str, context: grpc.ServicerContext) -> JobRecord:
        record = self._store.job(job_id)
        if record is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no job {job_id!r} on this coordinator")
        return record

    def Launch(self, request: pb.LaunchRequest, context: grpc.ServicerContext):
        self._authorise(context)
        try:
            if request.dry_run:
                return pb.LaunchResponse(plan=self._jobs.dry_run(request.spec, request.job_id))
            job_id = self._jobs.launch(request.spec, request.job_id)
        except (ConfigError, ValueError) as err:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
        return pb.LaunchResponse(job_id=job_id)

    def _status(self, record: JobRecord) -> pb.JobStatus:
        status = pb.JobStatus(
            job_id=record.job_id, algorithm=record.algorithm,
            state=job_state_to_proto(record.state), message=record.message,
            created=timestamp_to_proto(record.created), updated=timestamp_to_proto(record.updated),
            planned_rounds=self._jobs.planned_rounds(record.job_id),
        )
        for r in self._store.rounds(record.job_id):
            duration = Duration()
            duration.FromNanoseconds(int(max(0.0, r.finished - r.started) * 1e9))
            status.rounds.add(
                round=r.round, query_id=r.query_id, participants=r.participants,
                duration=duration, aborted=r.aborted, abort_reason=r.abort_reason,
                epsilon_so_far=0.0 if math.isnan(r.epsilon_so_far) else r.epsilon_so_far,
            )
        return status

    def Status(self, request: pb.StatusRequest, context: grpc.ServicerContext):
        self._authorise(context)
        records = [self._job(request.job_id, context)] if request.job_id else self._store.jobs()
        return pb.StatusResponse(jobs=[self._status(record) for record in records])

    def Watch(self, request: pb.StatusRequest, context: grpc.ServicerContext):
        self._authorise(context)
        self._job(request.job_id, context)
        gone = threading.Event()
        context.add_callback(lambda: (gone.set(), self._jobs.wake_watchers()))
        seen = -1
        while not gone.is_set():
            seen = self._jobs.wait_for_change(request.job_id, seen, gone)
            if gone.is_set():
                return
            record = self._store.job(request.job_id)
            yield self._status(record)
            if record.state in FINISHED_STATES:
                return

    def Cancel(self, request: pb.CancelRequest, context: grpc.ServicerContext):
        self._authorise(context)
        self._job(request.job_id, context)
        state = self._jobs.cancel(request.job_id, request.reason)
        return pb.CancelResponse(state=job_state_to_proto(state))

    def Result(self, request: pb.ResultRequest, context: grpc.ServicerContext):
        self._authorise(context)
        record = self._job(request.job_id, context)
        response = pb.ResultResponse(job_id=record.job_id, state=job_state_to_proto(record.state))
        stored = self._store.result(record.job_id)
        if stored is None:
            return response
        model, report_json = stored
        params_to_proto(model, response.model, "model")
        response.privacy_report_json = report_json
        report = json.loads(report_json)
        response.schema_digest = report.get("schema_digest", "")
        response.feature_names.extend(report.get("feature_names", []))
        for name, site in report.get("sites", {}).items():
            response.privacy.add(
                job_id=record.job_id, site_name=name, job_epsilon=site["job_epsilon"],
                total_epsilon=site["total_epsilon"], delta=site["delta"],
                method=site["method"], cap_epsilon=site["cap_epsilon"],
                total_delta=site["total_delta"],
            )
        return response

    def Logs(self, request: pb.StatusRequest, context: grpc.ServicerContext):
        self._authorise(context)
        record = self._job(request.job_id, context)
        log = pb.JobLog(status=self._status(record))
        for entry in self._store.audit_log(record.job_id):
            log.events.add(time=timestamp_to_proto(entry.timestamp), event=entry.event,
                           site_name=entry.site_name or "", detail=entry.detail)
        return log

    def ListSites(self, request: pb.ListSitesRequest, context: grpc.ServicerContext):
        self._authorise(context)
        connected = self._registry.connected_names()
        sessions = {session.name: session for session in self._registry.sessions()}
        response = pb.ListSitesResponse()
        for site in self._store.sites():
            info = response.sites.add(
                site_name=site.name, connected=site.name in connected,
                last_seen=timestamp_to_proto(site.last_seen), num_records=site.num_records,
                kernels=site.kernels,
            )
            session = sessions.get(site.name)
            if session is not None:
                info.adjacency = session.registration.adjacency
                if session.budget is not None:
                    info.budget.CopyFrom(session.budget)
        return response
