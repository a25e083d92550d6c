"""``privadapt-site``: the site daemon.

    privadapt-site --config site.toml [--insecure]

Loads the site's data, policy and ledger (:class:`~privadapt.client.site.Site`);
it never creates a ledger, and refuses to start (exit 2, saying how to
recover) on a missing, empty, unreadable or altered one, or one whose head
file disagrees (``privadapt ledger init``, client/ledger/chain.py). Then it
dials the coordinator over mutual TLS (the site is always the gRPC client: it
sits behind a firewall that allows outbound connections only), registers, opens
the Connect stream and answers every work item on it (client/daemon/worker.py).
When the coordinator is unreachable or the stream breaks it reconnects with
capped exponential backoff (0.2 s doubling to 30 s, with jitter, starting
again after a session that lasted 10 s), waiting on an
event rather than sleeping, so SIGTERM or SIGINT stops it at once: the stream
is cancelled, the round in hand (if any) is finished or refused, the databases
are closed, and the daemon exits 0.

One log line per answered query names the job, the query and the job's
epsilon so far at the cap's delta (from the ledger, committed before the
share leaves); at a job's end the privacy report line gives the job's spend
at the job's delta beside the site's total at the cap's delta
(common/privacy_figures.py).
"""

from __future__ import annotations

import argparse
import logging
import random
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc

from privadapt.client.daemon.config import SiteConfig
from privadapt.client.daemon.coordinator_replies import check_register_response
from privadapt.client.daemon.heap import use_one_malloc_arena
from privadapt.client.daemon.job_lanes import JobLanes
from privadapt.client.daemon.round_progress import RoundProgress
from privadapt.client.daemon.worker import SiteIdentity, SiteWorker
from privadapt.client.policy import SitePolicy
from privadapt.client.site import Site
from privadapt.common.daemon_cli import daemon_arguments
from privadapt.common.data.schema import Schema
from privadapt.common.data.schema_digest import SchemaDigest
from privadapt.common.errors import ConfigError, PrivadaptError, WireError
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.proto import federation_pb2_grpc as rpc
from privadapt.common.secure import tls
from privadapt.common.secure.certcheck import certificate_identity
from privadapt.common.secure.certs import load_certificate, load_private_key
from privadapt.common.secure.dial_diagnosis import explain_unreachable
from privadapt.common.wire.bounded_parse import parse_bounded
from privadapt.common.wire.messages import channel_options

logger = logging.getLogger("privadapt.site")

SOFTWARE_VERSION = "privadapt-site/0.1"
REGISTER_TIMEOUT_S = 10.0
BACKOFF_INITIAL_S, BACKOFF_CAP_S = 0.2, 30.0
#: A session this long restarts the backoff schedule when it ends.
STABLE_SESSION_S = 10.0
# Keepalive pings notice a coordinator that vanished without closing the TCP
# connection (a power cut) within about 30 s.
KEEPALIVE_OPTIONS = [("grpc.keepalive_time_ms", 20_000), ("grpc.keepalive_timeout_ms", 10_000),
                     # gRPC's own reconnect backoff starts at 1 s; a coordinator
                     # that is starting up is found within 0.1 s instead.
                     ("grpc.initial_reconnect_backoff_ms", 100),
                     ("grpc.min_reconnect_backoff_ms", 100)]
# A site usually starts beside or before its coordinator: until the first
# registration, and for this long, "not up yet" is news, not a warning.
STARTUP_GRACE_S = 30.0
CONNECT_METHOD = "/privadapt.v1.FederationService/Connect"
# Failures to reach the coordinator, explained by dialling it (dial_diagnosis).
_UNREACHABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


def read_work_item(data: bytes) -> pb.WorkItem:
    """A work item parsed only if it cannot take many times its size in
    memory (common/wire/bounded_parse.py); otherwise ``WireError``: the
    stream fails and the daemon reconnects, holding nothing of it."""
    return parse_bounded(pb.WorkItem, data)


@dataclass(frozen=True)
class UnreadWorkItem:
    """Stands in for a work item :func:`read_work_item` refused. gRPC would
    turn the reader's error into INTERNAL "Exception deserializing
    response!" and a traceback, and the daemon's log would point at the
    coordinator's; :func:`_work_items` ends the stream with the reason."""

    reason: str


def _read_or_mark(data: bytes) -> tuple[pb.WorkItem, int] | UnreadWorkItem:
    """The work item and its wire size (what the lanes and the open rounds
    are bounded by: counted here, where the bytes are in hand, rather than
    by serialising the parsed item again, 0.2 ms for a 1e5-float query)."""
    try:
        return read_work_item(data), len(data)
    except WireError as err:
        return UnreadWorkItem(str(err))


def _connect(channel: grpc.Channel) -> grpc.UnaryStreamMultiCallable:
    """The Connect call of the generated stub, with :func:`read_work_item` as
    its reader instead of ``WorkItem.FromString`` (read through
    :func:`_work_items`)."""
    return channel.unary_stream(CONNECT_METHOD,
                                request_serializer=pb.ConnectRequest.SerializeToString,
                                response_deserializer=_read_or_mark)


def _work_items(
    stream: Iterable[tuple[pb.WorkItem, int] | UnreadWorkItem],
) -> Iterator[tuple[pb.WorkItem, int]]:
    """The work items of a :func:`_connect` stream with their wire sizes,
    ending with ``WireError`` at the first one refused unread."""
    for item in stream:
        if isinstance(item, UnreadWorkItem):
            raise WireError(f"a work item refused unread: {item.reason}")
        yield item


class Backoff:
    """Capped exponential backoff with jitter: the k-th delay since the last
    :meth:`reset` is uniform between ``initial`` and min(``cap``, ``initial``
    2^(k-1)) (the floor keeps a starting coordinator's first retries short).

    Hand-written rather than tenacity's ``wait_random_exponential`` (the same
    law): tenacity retries a call until it succeeds, while this loop never
    stops, restarts its schedule after a session that held
    (:data:`STABLE_SESSION_S`) and must not dial again once stopped during a
    wait; tenacity needed its attempt counter reset by hand and a guard for
    the attempt it starts after its sleep, in as many lines."""

    def __init__(self, initial: float = BACKOFF_INITIAL_S, cap: float = BACKOFF_CAP_S) -> None:
        self.initial, self.cap = initial, cap
        self._next = initial

    def reset(self) -> None:
        self._next = self.initial

    def delay(self) -> float:
        delay = random.uniform(self.initial, self._next)
        self._next = min(self.cap, self._next * 2)
        return delay


class SiteDaemon:
    """A site's connection to its coordinator; :meth:`run` until :meth:`stop`."""

    def __init__(self, config: SiteConfig, insecure: bool = False) -> None:
        policy = SitePolicy.from_toml(config.policy)
        # Checked against the configured CA at start (not only by the
        # coordinator's handshake, whose refusal the site never sees explained).
        identity = (certificate_identity(load_certificate(config.cert)) if insecure
                    else tls.check_own_certificate(config.cert, config.ca, "site"))
        if identity.role != "site" or identity.name != policy.site_name:
            raise ConfigError(
                f"{config.cert} is a {identity.role} certificate for {identity.name!r}, but the "
                f"policy {config.policy} is for site {policy.site_name!r}: issue a site "
                f"certificate with --name {policy.site_name}"
            )
        schema = Schema.from_toml(config.schema) if config.schema else None
        # The ledger first: round progress shares its database file and would create it.
        self.site = Site.open(config.data, policy, config.database, schema)
        self.schema_digest = SchemaDigest.of(schema, self.site.dim)
        self.progress = RoundProgress(config.database)
        self.worker = SiteWorker(self.site, SiteIdentity(
            name=identity.name,
            certificate_pem=Path(config.cert).read_bytes(),
            signing_key=load_private_key(config.key),
            ca_certificate_pem=Path(config.ca).read_bytes(),
        ), self.progress)
        self.config = config
        self._insecure = insecure
        self._credentials = (None if insecure else
                             tls.channel_credentials(config.cert, config.key, config.ca))
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._stream: grpc.Future | None = None
        self._registered_once = False

    def stop(self) -> None:
        """Ask :meth:`run` to return (safe from a signal handler)."""
        self._stop.set()
        with self._lock:
            stream = self._stream
        if stream is not None:
            stream.cancel()

    def run(self) -> int:
        backoff = Backoff()
        started = time.monotonic()
        while not self._stop.is_set():
            try:
                self._session(backoff)
            except grpc.RpcError as err:
                if self._stop.is_set():
                    break
                reason = (explain_unreachable(self.config.coordinator, self.config.ca)
                          if err.code() in _UNREACHABLE else None)
                # Only "nothing listens there" is news at start-up: a TLS or
                # address mistake is a warning at once.
                if (not self._registered_once and time.monotonic() - started < STARTUP_GRACE_S
                        and reason is not None and reason.startswith("connection refused")):
                    logger.info("site=%s waiting for its coordinator to start (%s); retrying",
                                self.site.name, reason)
                else:
                    logger.warning(
                        "site=%s coordinator %s: %s (%s); reconnecting. %s",
                        self.site.name, self.config.coordinator, err.code().name,
                        err.details(), reason or "If this persists, read the coordinator's log: "
                        "a refused TLS handshake is explained only there.",
                    )
            except WireError as err:
                logger.warning("site=%s coordinator %s sent an invalid reply (%s); "
                               "reconnecting", self.site.name, self.config.coordinator, err)
            except Exception:
                # No reply of a coordinator may end the daemon: log it, back off, reconnect.
                if self._stop.is_set():
                    break
                logger.exception("site=%s: session with coordinator %s failed; reconnecting",
                                 self.site.name, self.config.coordinator)
            self._stop.wait(backoff.delay())
        self.progress.close()
        self.site.ledger.close()
        logger.info("site=%s stopped", self.site.name)
        return 0

    def _channel(self) -> grpc.Channel:
        options = channel_options() + KEEPALIVE_OPTIONS
        if self._insecure:
            return grpc.insecure_channel(self.config.coordinator, options=options)
        return grpc.secure_channel(self.config.coordinator, self._credentials, options=options)

    def _session(self, backoff: Backoff) -> None:
        with self._channel() as channel:
            stub = rpc.FederationServiceStub(channel)
            # Not wait_for_ready: a coordinator that is down is reported at once
            # ("connection refused"), not as DEADLINE_EXCEEDED after the timeout;
            # one still starting is found by the backoff's first short retries.
            registered = stub.Register(self._registration(), timeout=REGISTER_TIMEOUT_S)
            interval = check_register_response(registered)
            self._registered_once = True
            registered_at = time.monotonic()
            jobs = [pb.JobProgress(job_id=job, last_closed_round=last)
                    for job, last in self.progress.unfinished().items()]
            stream = _connect(channel)(pb.ConnectRequest(
                site_name=self.site.name, session_id=registered.session_id, jobs=jobs))
            with self._lock:
                self._stream = stream
            if self._stop.is_set():
                stream.cancel()
            logger.info("site=%s connected to %s (coordinator %r)", self.site.name,
                        self.config.coordinator, registered.coordinator_name)
            done = threading.Event()
            beat = threading.Thread(target=self._heartbeat, name="heartbeat", daemon=True,
                                    args=(stub, registered.session_id, interval, stream, done))
            beat.start()
            lanes = JobLanes(lambda item, size: self.worker.handle(item, stub, size))
            try:
                for item, size in _work_items(stream):
                    lanes.submit(item, size)
            finally:
                # Only a session that held starts the schedule again: one the
                # coordinator ends at once, session after session, would
                # otherwise have the site dial it every 0.2 s.
                if time.monotonic() - registered_at >= STABLE_SESSION_S:
                    backoff.reset()
                # The items in hand finish on this channel before it closes.
                lanes.close()
                self.worker.session_ended()
                done.set()
                with self._lock:
                    self._stream = None

    def _registration(self) -> pb.RegisterRequest:
        policy = self.site.policy
        public_size = policy.adjacency.value == "replace_one"
        return pb.RegisterRequest(
            site_name=self.site.name, software_version=SOFTWARE_VERSION,
            num_records=self.site.num_records if public_size else 0,
            num_features=self.site.dim,
            kernels=sorted(policy.allowed_kernels or ()),
            policy_version=f"cap={policy.epsilon_cap:g}@{policy.delta_cap:g}",
            adjacency=policy.adjacency.value, schema=self.schema_digest.to_proto(),
            budget=self.budget(),
            terms=pb.SitePolicyTerms(peers_listed=policy.peers is not None,
                                     peers=sorted(policy.peers or ()),
                                     min_participants=policy.min_participants,
                                     collusion_tolerance=policy.collusion_tolerance,
                                     max_query_work=policy.max_query_work or 0.0,
                                     max_job_work=policy.max_job_work or 0.0),
        )

    def budget(self) -> pb.SiteBudget:
        """The cap and the epsilon spent over every job at the cap's delta, as
        this site's ledger reads now: public (a ledger's epsilon depends on the
        mechanisms charged only), sent so an operator sees what is left before
        launching. The ledger still checks every release against the cap."""
        policy = self.site.policy
        spent = self.site.ledger.spent()
        return pb.SiteBudget(epsilon_cap=policy.epsilon_cap, delta_cap=policy.delta_cap,
                             epsilon_spent=spent.epsilon, accounting=policy.accounting.value)

    def _heartbeat(self, stub: rpc.FederationServiceStub, session_id: str, interval: float,
                   stream: grpc.Future, done: threading.Event) -> None:
        # The interval was validated at Register (coordinator_replies); the
        # reply's next_interval is not read. Any failure ends the session (the
        # stream is cancelled, so run() reconnects), never silently the thread.
        try:
            while not done.wait(interval):
                try:
                    reply = stub.Heartbeat(pb.HeartbeatRequest(
                        site_name=self.site.name, session_id=session_id,
                        budget=self.budget()), timeout=interval)
                except grpc.RpcError:
                    return  # the stream's own error drives the reconnect
                if not reply.session_known:
                    stream.cancel()  # the coordinator restarted: register again
                    return
        except Exception:
            logger.exception("site=%s: heartbeat failed; reconnecting", self.site.name)
            stream.cancel()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="privadapt-site",
        description="Site daemon: answers a coordinator's private aggregate queries "
        "from local data under the site's own privacy policy and ledger.",
    )
    args = daemon_arguments(parser, "site configuration (TOML)", argv)
    use_one_malloc_arena()  # before the daemon's threads start
    try:
        daemon = SiteDaemon(SiteConfig.from_toml(args.config), insecure=args.insecure)
    except PrivadaptError as err:
        print(f"privadapt-site: {err}", file=sys.stderr)
        return 2
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: daemon.stop())
    return daemon.run()


if __name__ == "__main__":
    sys.exit(main())
