"""A coordinator and site daemons on 127.0.0.1 for tests: certificates made at
test time, real gRPC over mutual TLS, in this process (threads) or as
separate processes."""

from __future__ import annotations

import contextlib
import math
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from privadapt.client.daemon.config import SiteConfig
from privadapt.client.daemon.main import SiteDaemon
from privadapt.client.policy import SitePolicy
from privadapt.common.data.dataset import Dataset
from privadapt.common.errors import ConfigError
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.proto import federation_pb2_grpc as rpc
from privadapt.common.secure import tls
from privadapt.common.wire.messages import channel_options
from privadapt.server.coordinator.main import Coordinator, CoordinatorConfig
from privadapt.simulation.local_deployment import LOCALHOST, LocalDeployment
from privadapt.simulation.local_deployment import write_pki as make_pki
from privadapt.simulation.local_processes import (
    await_coordinator,
    start_coordinator,
    start_site,
    terminate,
)

PROCESS_TIMEOUT_S = 60.0


def write_coordinator_config(workdir: Path, pki: Path, round_timeout_s: float = 10.0,
                             site_wait_timeout_s: float = 20.0, min_sites: int = 1,
                             listen: str = "127.0.0.1:0", public_source: Path | None = None
                             ) -> Path:
    """The coordinator configuration of a test, with short timeouts."""
    return LocalDeployment(workdir, pki).write_coordinator(
        listen, public_source=public_source, round_timeout_s=round_timeout_s,
        site_wait_timeout_s=site_wait_timeout_s, min_sites=min_sites)


def write_site(workdir: Path, pki: Path, name: str, data: Dataset, port: int,
               epsilon_cap: float = 10.0, min_participants: int = 1,
               **policy_options: Any) -> Path:
    """Data (.npz), policy and site config for ``name``; returns the config
    path. An infinite cap makes a simulation site (exact sums allowed)."""
    policy = SitePolicy(name, epsilon_cap, 1e-5, min_participants=min_participants,
                        allow_non_private=math.isinf(epsilon_cap), **policy_options)
    return LocalDeployment(workdir, pki).write_site(policy, data, f"{LOCALHOST}:{port}")


def operator_stub(pki: Path, port: int, name: str = "operator") -> rpc.OperatorServiceStub:
    credentials = tls.channel_credentials(pki / f"{name}.crt", pki / f"{name}.key",
                                          pki / "ca.crt")
    channel = grpc.secure_channel(f"127.0.0.1:{port}", credentials, options=channel_options())
    return rpc.OperatorServiceStub(channel)


def watch_until_done(stub: rpc.OperatorServiceStub, job_id: str,
                     timeout: float = PROCESS_TIMEOUT_S) -> pb.JobStatus:
    last = None
    for status in stub.Watch(pb.StatusRequest(job_id=job_id), timeout=timeout):
        last = status
    assert last is not None
    return last


@dataclass
class ThreadSites:
    daemons: list[SiteDaemon] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self, config_path: Path) -> SiteDaemon:
        daemon = SiteDaemon(SiteConfig.from_toml(config_path))
        thread = threading.Thread(target=daemon.run, daemon=True, name=f"site-{daemon.site.name}")
        thread.start()
        self.daemons.append(daemon)
        self.threads.append(thread)
        return daemon

    def stop(self) -> None:
        for daemon in self.daemons:
            daemon.stop()
        for thread in self.threads:
            thread.join(timeout=10)


@contextlib.contextmanager
def in_process_coordinator(config_path: Path) -> Iterator[Coordinator]:
    coordinator = Coordinator(CoordinatorConfig.from_toml(config_path))
    coordinator.start()
    try:
        yield coordinator
    finally:
        coordinator.stop(grace=0.5)


def start_coordinator_process(config: Path, log: Path) -> tuple[subprocess.Popen, int]:
    process = start_coordinator(config, log)
    try:
        return process, await_coordinator(process, log)
    except ConfigError:
        stop_process(process)
        raise


def stop_process(process: subprocess.Popen) -> None:
    terminate([process])


def start_site_processes(configs: Sequence[Path], logs: Path) -> list[subprocess.Popen]:
    return [start_site(c, logs / f"{c.parent.name}.log") for c in configs]


def direct_federation(coordinator: Coordinator, job_id: str, sites: Sequence[str],
                      **job_fields):
    """A NetworkFederation on an in-process coordinator, for tests that drive
    queries themselves (the job is registered in the store first)."""
    from privadapt.server.federation.network import NetworkFederation, NetworkJob

    coordinator.store.create_job(job_id, "test", "{}", 0)
    job = NetworkJob(job_id, tuple(sites), **job_fields)
    return NetworkFederation(job, coordinator.registry, coordinator.hub, coordinator.store,
                             coordinator.reports)


def wait_for_sites(stub, sites: Sequence[str], timeout_s: float = 60.0) -> None:
    """Until every one of ``sites`` is connected and has reported its budget:
    a dry run before that plans without their sizes (a loaded machine starts
    the daemons' threads late)."""
    deadline = time.monotonic() + timeout_s
    while True:
        listed = stub.ListSites(pb.ListSitesRequest(), timeout=10).sites
        ready = {s.site_name for s in listed if s.connected and s.HasField("budget")}
        if set(sites) <= ready:
            return
        assert time.monotonic() < deadline, f"sites not registered: {set(sites) - ready}"
        time.sleep(0.05)


def run_job(workdir: Path, spec: pb.JobSpec, job_id: str, sites: Sequence[str],
            datasets: Sequence[Dataset], public_source: Path | None = None,
            epsilon_cap: float = 10.0) -> tuple[str, pb.ResultResponse, list[Path]]:
    """(the dry run's plan, the result, the site configs) of ``spec`` launched
    as ``job_id`` through an in-process coordinator and one thread daemon per
    site, after a dry run; the job must succeed."""
    pki = make_pki(workdir / "pki", sites)
    daemons = ThreadSites()
    config = (write_coordinator_config(workdir, pki) if public_source is None
              else write_coordinator_config(workdir, pki, public_source=public_source))
    with in_process_coordinator(config) as coordinator:
        try:
            configs = [write_site(workdir, pki, name, data, coordinator.port,
                                  epsilon_cap=epsilon_cap)
                       for name, data in zip(sites, datasets, strict=True)]
            for path in configs:
                daemons.start(path)
            stub = operator_stub(pki, coordinator.port)
            wait_for_sites(stub, sites)
            plan = stub.Launch(pb.LaunchRequest(spec=spec, dry_run=True), timeout=60).plan
            launched = stub.Launch(pb.LaunchRequest(spec=spec, job_id=job_id), timeout=60).job_id
            status = watch_until_done(stub, launched)
            assert status.state == pb.JOB_STATE_SUCCEEDED, status.message
            result = stub.Result(pb.ResultRequest(job_id=launched), timeout=10)
        finally:
            daemons.stop()
    return plan, result, configs
