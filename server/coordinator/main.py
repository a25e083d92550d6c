"""``privadapt-coordinator``: the coordinator daemon.

    privadapt-coordinator --config coordinator.toml [--insecure]

Serves the sites' ``FederationService``, the ``OperatorService`` and the
standard gRPC health service on one port, over mutual TLS; keeps its state in
one SQLite database; resumes every unfinished job at start. SIGTERM or SIGINT
stops it cleanly: jobs stay ``running`` in the store and resume at the next
start. Configuration::

    [coordinator]
    name = "coordinator"          # optional; default: the certificate's common name
    listen = "0.0.0.0:50051"      # port 0: a free port, printed on stdout once serving
    database = "coordinator.db"   # sites, jobs, rounds, answers, checkpoints, audit log
    round_timeout_s = 30          # a round's deadline (keys and shares), and how long
                                  # any caller may take to send a request
    site_wait_timeout_s = 120     # how long a job waits for enough sites
    min_sites = 1                 # default min_participants of a job
    max_sites = 200               # connected sites served at once (one thread each)
    public_source = "source.csv"  # optional: the public source sample (.csv needs a schema)
    public_source_schema = "source.schema.toml"
    public_sources = ["a.csv", "b.csv"]  # optional: several public source samples (same schema)
    [tls]
    cert = "coordinator.crt"
    key = "coordinator.key"
    ca = "ca.crt"
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from privadapt.common.config import Layout, read_sections, read_toml, render_layout
from privadapt.common.daemon_cli import daemon_arguments
from privadapt.common.data.dataset import load_dataset
from privadapt.common.data.schema import Schema
from privadapt.common.data.schema_digest import SchemaDigest
from privadapt.common.errors import ConfigError, PrivadaptError
from privadapt.common.proto import federation_pb2_grpc as rpc
from privadapt.common.secure import tls
from privadapt.common.secure.certcheck import Identity, certificate_identity
from privadapt.common.secure.certs import load_certificate
from privadapt.common.wire.messages import channel_options
from privadapt.server.coordinator.call_admission import AdmissionInterceptor
from privadapt.server.coordinator.call_limits import CallLimits
from privadapt.server.coordinator.event_loop_thread import EventLoopThread
from privadapt.server.coordinator.federation_service import FederationServicer
from privadapt.server.coordinator.operator_service import OperatorServicer
from privadapt.server.coordinator.site_registry import SiteRegistry
from privadapt.server.federation.network import PrivacyReports
from privadapt.server.federation.rounds import RoundHub
from privadapt.server.jobs.manager import JobManager
from privadapt.server.store import CoordinatorStore

logger = logging.getLogger("privadapt.coordinator")

SERVICE_NAMES = ("privadapt.v1.FederationService", "privadapt.v1.OperatorService")
# Threads for unary calls (keys, shares, operator calls) beside the streams.
_SPARE_WORKERS = 32
# Of the call slots (one per thread), those only operators and registered
# sites may take (server/coordinator/call_limits.py).
_RESERVED_SLOTS = 16
_SERVER_OPTIONS = [
    ("grpc.keepalive_time_ms", 20_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    # gRPC sets SO_REUSEPORT by default: a second coordinator on a port in use
    # then binds too and the two answer calls alternately. Refuse instead.
    ("grpc.so_reuseport", 0),
    # HTTP/2 streams one connection may open; a caller's own limits
    # (server/coordinator/call_limits.py) are lower, so this only bounds grpc's memory.
    ("grpc.max_concurrent_streams", 100),
]

_LAYOUT: Layout = {
    "coordinator": {
        "name": (str, False), "listen": (str, True), "database": (str, True),
        "round_timeout_s": ((int, float), False), "site_wait_timeout_s": ((int, float), False),
        "min_sites": (int, False), "public_source": (str, False),
        "public_source_schema": (str, False), "max_sites": (int, False),
        "public_sources": (list, False),
    },
    "tls": {"cert": (str, True), "key": (str, True), "ca": (str, True)},
}


@dataclass(frozen=True)
class CoordinatorConfig:
    listen: str
    database: Path
    cert: Path
    key: Path
    ca: Path
    name: str = ""
    round_timeout_s: float = 30.0
    site_wait_timeout_s: float = 120.0
    min_sites: int = 1
    public_source: Path | None = None
    public_source_schema: Path | None = None
    max_sites: int = 200
    public_sources: tuple[Path, ...] | None = None

    def __post_init__(self) -> None:
        check_listen_address(self.listen)

    @classmethod
    def from_toml(cls, path: str | Path) -> CoordinatorConfig:
        path = Path(path)
        source = f"coordinator configuration {path}"
        data = read_toml(path, "coordinator configuration",
                         "pass --config PATH (see deploy/coordinator.toml)")
        values = read_sections(data, _LAYOUT, source)
        for key in ("round_timeout_s", "site_wait_timeout_s", "min_sites", "max_sites"):
            if key in values and not values[key] > 0:
                raise ConfigError(f"{source}: [coordinator] {key} must be > 0")
        for key in ("database", "cert", "key", "ca", "public_source", "public_source_schema"):
            if key in values:
                values[key] = path.parent / values[key]
        if "public_sources" in values:
            files = values["public_sources"]
            if not files or not all(isinstance(f, str) and f for f in files):
                raise ConfigError(f"{source}: [coordinator] public_sources must be a non-empty "
                                  f"list of file names, got {files!r}")
            values["public_sources"] = tuple(path.parent / f for f in files)
        return cls(**values)

    def to_toml(self, relative_to: Path | None = None) -> str:
        """This configuration as TOML that :meth:`from_toml` reads back equal
        from a file in ``relative_to``; paths inside that directory are
        written relative to it."""
        return render_layout(_LAYOUT, self, relative_to)


def check_listen_address(listen: str) -> None:
    """``ConfigError`` unless ``listen`` is ``host:port`` (``[v6]:port`` for
    IPv6) with a port in 0..65535, or ``unix:path``: gRPC reads a bare host
    as port 443, which nobody means."""
    if listen.startswith("unix:"):
        return
    host, colon, port = listen.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    if (not colon or not port.isdigit() or not 0 <= int(port) <= 65535
            or (":" in host and not bracketed)):
        raise ConfigError(
            f"[coordinator] listen = {listen!r} has no port: write host:port, e.g. "
            "\"0.0.0.0:50051\" (port 0: any free port)")


def _schema_names(schema: Schema | None) -> dict[str, tuple[str, ...]]:
    """Digest -> feature names of the schema this coordinator holds, its
    ``public_source_schema`` (with or without a public sample, whose features
    it names), so a job's model is named whenever its parties agreed on it
    (server/jobs/result_files.py model_features)."""
    if schema is None:
        return {}
    names = schema.feature_names()
    return {SchemaDigest.of(schema, len(names)).digest: names}


class Coordinator:
    """The running coordinator: store, site registry, rounds, jobs, gRPC server."""

    def __init__(self, config: CoordinatorConfig, insecure: bool = False) -> None:
        self.config = config
        # Its own certificate is checked first: a site's or operator's, or one
        # the configured CA did not issue, would only fail every handshake.
        identity = (certificate_identity(load_certificate(config.cert)) if insecure
                    else tls.check_own_certificate(config.cert, config.ca, "coordinator"))
        name = config.name or identity.name
        # Loaded (and validated) at start, so a bad file stops the coordinator
        # before it accepts a job, with the loader's message naming row and column.
        schema = (Schema.from_toml(config.public_source_schema)
                  if config.public_source_schema else None)
        public_source = (load_dataset(config.public_source, schema)
                         if config.public_source else None)
        # Several public samples (seed 002's transfer), read with the same schema.
        public_sources = tuple(load_dataset(f, schema) for f in config.public_sources or ())
        described = public_source or (public_sources[0] if public_sources else None)
        self.store = CoordinatorStore(config.database)
        for site_name in self.store.trim_oversized_registrations():
            logger.warning("site %s: its stored registration was oversized (an older "
                           "coordinator stored it unbounded); trimmed until it registers again",
                           site_name)
            self.store.audit("registration_trimmed", site_name=site_name,
                             detail="oversized kernel list or policy version")
        self.registry = SiteRegistry()
        self.hub = RoundHub(self.registry, Path(config.ca).read_bytes())
        self.reports = reports = PrivacyReports(self.registry)
        self.jobs = JobManager(
            self.store, self.registry, self.hub, reports,
            round_timeout=config.round_timeout_s,
            site_wait_timeout=config.site_wait_timeout_s, min_sites=config.min_sites,
            public_source=public_source, public_sources=public_sources,
            public_schema=(None if described is None
                           else SchemaDigest.of(schema, described.dim)),
            schema_names=_schema_names(schema),
        )
        # Each connected site holds one thread (its Connect stream; one per
        # site, see SiteRegistry.attach). Calls are admitted per caller and
        # method group, up to one per thread, before they take one (the
        # server runs on grpc.aio: a call whose request is still in flight
        # costs no thread); see server/coordinator/call_admission.py.
        workers = config.max_sites + _SPARE_WORKERS
        self._executor = futures.ThreadPoolExecutor(max_workers=workers,
                                                    thread_name_prefix="coordinator-call")
        self.limits = CallLimits(capacity=workers, reserve=_RESERVED_SLOTS)
        self._loop = EventLoopThread("coordinator-grpc")
        try:
            self.port = self._loop.run(self._serve(name, insecure))
        except BaseException:
            self._loop.close()
            self._executor.shutdown(wait=False)
            self.store.close()
            raise
        if not self.port:
            self._loop.run(self.server.stop(None))
            self._loop.close()
            self._executor.shutdown(wait=False)
            self.store.close()
            raise ConfigError(
                f"cannot listen on {config.listen}: the address is in use (another "
                "coordinator?) or invalid; stop the other process or choose another port")
        self._stopped = threading.Event()

    async def _serve(self, name: str, insecure: bool) -> int:
        """Build the server on the loop (grpc.aio needs a running one); its port, or 0."""
        config = self.config
        admission = AdmissionInterceptor(self.limits, self._privileged, self._executor,
                                         arrival_timeout_s=config.round_timeout_s)
        self.server = grpc.aio.server(migration_thread_pool=self._executor,
                                      options=channel_options() + _SERVER_OPTIONS,
                                      interceptors=[admission])
        rpc.add_FederationServiceServicer_to_server(
            FederationServicer(self.registry, self.hub, self.reports, self.store, name,
                               insecure),
            self.server)
        rpc.add_OperatorServiceServicer_to_server(
            OperatorServicer(self.jobs, self.store, self.registry, insecure), self.server)
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        try:
            if insecure:
                return self.server.add_insecure_port(config.listen)
            credentials = tls.server_credentials(config.cert, config.key, config.ca)
            return self.server.add_secure_port(config.listen, credentials)
        except RuntimeError:  # newer grpcio raises where older ones return 0
            return 0

    def _privileged(self, identity: Identity | None) -> bool:
        """May use the reserved call slots: operators, and sites with a live
        registration (the sites that take part in jobs)."""
        if identity is None:
            return False
        return identity.role == "operator" or (
            identity.role == "site" and self.registry.is_registered(identity.name))

    async def _start_serving(self) -> None:
        await self.server.start()
        for service in (*SERVICE_NAMES, ""):
            await self.health.set(service, health_pb2.HealthCheckResponse.SERVING)

    def start(self) -> None:
        self._loop.run(self._start_serving())
        resumed = self.jobs.resume_unfinished()
        logger.info("listening on port %d; resumed %d unfinished job(s)%s", self.port,
                    len(resumed), f": {', '.join(resumed)}" if resumed else "")

    def stop(self, grace: float = 2.0) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        self._loop.run(self.health.enter_graceful_shutdown())
        self.jobs.stop()
        self.registry.close_all()
        self._loop.run(self.server.stop(grace))
        self._loop.close()
        self._executor.shutdown(wait=False, cancel_futures=True)
        self.store.close()
        logger.info("stopped")

    def wait(self) -> None:
        self._stopped.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="privadapt-coordinator",
        description="Coordinator daemon: holds the public source data and the model, "
        "runs algorithms through the sites' private aggregate queries.",
    )
    args = daemon_arguments(parser, "coordinator configuration (TOML)", argv)
    try:
        coordinator = Coordinator(CoordinatorConfig.from_toml(args.config), args.insecure)
    except PrivadaptError as err:
        print(f"privadapt-coordinator: {err}", file=sys.stderr)
        return 2
    coordinator.start()
    # One line on stdout once serving, which scripts (privadapt simulate) wait
    # for by reading the pipe: with listen port 0 it is how they learn the port.
    print(f"privadapt-coordinator: serving on port {coordinator.port}", flush=True)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    stop.wait()
    coordinator.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
