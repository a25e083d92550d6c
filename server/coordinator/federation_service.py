"""The coordinator's ``FederationService``: the gRPC handlers the site daemons call.

Identity: every call is over mutual TLS and the caller is the common name of
its certificate (``tls.require_role``: site certificates only). A message that
names a site (``site_name``) must name the caller, or the call fails with
PERMISSION_DENIED: a site cannot register, publish a key or submit a share for
another site. Bad, stale or replayed messages get the status codes of the
proto's header comment and change nothing; the handlers never raise anything
else, so the coordinator keeps serving.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import grpc
from google.protobuf.duration_pb2 import Duration

from privadapt.common.errors import WireError
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.proto import federation_pb2_grpc as rpc
from privadapt.common.secure import tls
from privadapt.common.secure.certcheck import Identity
from privadapt.common.wire.messages import MAX_MESSAGE_BYTES
from privadapt.server.coordinator.call_admission import caller_of
from privadapt.server.coordinator.rate_limit import RateLimit
from privadapt.server.coordinator.site_messages import (
    check_connect_request,
    check_heartbeat_request,
    check_register_request,
    check_round_message,
)
from privadapt.server.coordinator.site_registry import IdentityInUseError, SiteRegistry
from privadapt.server.federation.network import PrivacyReports
from privadapt.server.federation.rounds import DeliveryError, RoundHub
from privadapt.server.store import CoordinatorStore

logger = logging.getLogger(__name__)

HEARTBEAT_INTERVAL_S = 10
MAX_SITE_TEXT = 4000  # characters of a site's refusal message kept
# Registrations one site identity may make in any window (a daemon that
# reconnects with backoff needs a handful; a loop is refused).
REGISTER_BURST, REGISTER_WINDOW_S = 10, 60.0


class FederationServicer(rpc.FederationServiceServicer):
    """Site-facing handlers; state lives in the registry, hub and store."""

    def __init__(
        self,
        registry: SiteRegistry,
        hub: RoundHub,
        reports: PrivacyReports,
        store: CoordinatorStore,
        coordinator_name: str,
        insecure: bool = False,
    ) -> None:
        self._registry = registry
        self._hub = hub
        self._reports = reports
        self._store = store
        self._name = coordinator_name
        self._insecure = insecure
        # A daemon registers once per (re)connection, with backoff; a loop of
        # registrations is refused per identity (server/coordinator/rate_limit.py).
        self._registrations = RateLimit(REGISTER_BURST, REGISTER_WINDOW_S)

    def _caller(self, context: grpc.ServicerContext, claimed: str) -> Identity:
        if self._insecure:  # --insecure: nobody is authenticated (warned at start)
            return Identity(claimed, "site")
        # The identity the admission interceptor read from this call's
        # certificate, cached per certificate (call_admission.caller_of):
        # parsing the PEM again cost 0.27 ms a call, six calls a round. A call
        # without a usable site certificate goes to tls.require_role, which
        # aborts it with the reason.
        _, identity = caller_of(context)
        if identity is None or identity.role != "site":
            identity = tls.require_role(context, ["site"])
        if claimed != identity.name:
            context.abort(grpc.StatusCode.PERMISSION_DENIED,
                          f"certificate {identity.name!r} may not act for site {claimed!r}")
        return identity

    @staticmethod
    def _check(check, request, context: grpc.ServicerContext) -> None:
        """Run one of ``site_messages``' checks; INVALID_ARGUMENT if it fails."""
        try:
            check(request)
        except WireError as err:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))

    def Register(self, request: pb.RegisterRequest, context: grpc.ServicerContext):
        identity = self._caller(context, request.site_name)
        wait = self._registrations.allow(identity.name)
        if wait > 0:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"site {identity.name!r} registered {REGISTER_BURST} times in the "
                          f"last {REGISTER_WINDOW_S:g} s; retry in {wait:.0f} s")
        self._check(check_register_request, request, context)
        try:
            session = self._registry.register(identity.name, request)
        except IdentityInUseError as err:
            logger.warning("site=%s: registration from %s refused: %s", identity.name,
                           context.peer(), err)
            self._store.audit("site_identity_in_use", site_name=identity.name,
                              detail=f"refused a second registration from {context.peer()}")
            context.abort(grpc.StatusCode.ALREADY_EXISTS, str(err))
        self._store.upsert_site(
            identity.name, num_records=request.num_records, num_features=request.num_features,
            kernels=list(request.kernels), policy_version=request.policy_version,
            certificate_expiry=None,
        )
        self._store.audit("site_registered", site_name=identity.name,
                          detail=f"records={request.num_records} features={request.num_features}")
        return pb.RegisterResponse(
            session_id=session.session_id,
            heartbeat_interval=Duration(seconds=HEARTBEAT_INTERVAL_S),
            max_message_bytes=MAX_MESSAGE_BYTES,
            coordinator_name=self._name,
        )

    def Heartbeat(self, request: pb.HeartbeatRequest, context: grpc.ServicerContext):
        identity = self._caller(context, request.site_name)
        self._check(check_heartbeat_request, request, context)
        known = self._registry.touch(identity.name, request.session_id,
                                     request.budget if request.HasField("budget") else None)
        if known:
            self._store.touch_site(identity.name)
        return pb.HeartbeatResponse(next_interval=Duration(seconds=HEARTBEAT_INTERVAL_S),
                                    session_known=known)

    def Connect(self, request: pb.ConnectRequest,
                context: grpc.ServicerContext) -> Iterator[pb.WorkItem]:
        identity = self._caller(context, request.site_name)
        self._check(check_connect_request, request, context)
        try:
            session = self._registry.attach(identity.name, request.session_id, request.jobs)
        except KeyError:
            context.abort(grpc.StatusCode.NOT_FOUND,
                          f"session {request.session_id!r} of site {identity.name!r} is unknown "
                          "(the coordinator restarted?): register again")
        except ValueError as err:
            context.abort(grpc.StatusCode.ALREADY_EXISTS, str(err))
        context.add_callback(lambda: self._registry.detach(session))
        yield from session.stream()

    def _deliver(self, deliver, message, context: grpc.ServicerContext) -> pb.Ack:
        self._caller(context, message.site_name)
        self._check(check_round_message, message, context)
        try:
            deliver(message)
        except DeliveryError as err:
            logger.warning("site=%s job=%s round=%d: %s: %s", message.site_name, message.job_id,
                           message.round, err.code, err)
            context.abort(getattr(grpc.StatusCode, err.code), str(err))
        return pb.Ack(job_id=message.job_id, round=message.round, query_id=message.query_id)

    def PublishKey(self, request: pb.KeyAnnouncement, context: grpc.ServicerContext):
        return self._deliver(self._hub.deliver_key, request, context)

    def SubmitShare(self, request: pb.MaskedShare, context: grpc.ServicerContext):
        return self._deliver(self._hub.deliver_share, request, context)

    def Refuse(self, request: pb.Refusal, context: grpc.ServicerContext):
        if request.reason not in pb.Refusal.Reason.values():
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"unknown refusal reason {request.reason}")
        # Site-supplied text goes to logs and the audit table: bounded.
        request.message = request.message[:MAX_SITE_TEXT]
        ack = self._deliver(self._hub.deliver_refusal, request, context)
        self._store.audit("site_refused", job_id=request.job_id, site_name=request.site_name,
                          detail=f"{pb.Refusal.Reason.Name(request.reason)}: {request.message}")
        return ack

    def ReportPrivacy(self, request: pb.SitePrivacyReport, context: grpc.ServicerContext):
        self._caller(context, request.site_name)
        try:
            self._reports.deliver(request)
        except DeliveryError as err:
            context.abort(getattr(grpc.StatusCode, err.code), str(err))
        self._registry.note_spent(request)  # the dry run previews against it
        return pb.Ack(job_id=request.job_id)
