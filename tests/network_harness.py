"""A coordinator and site daemons on 127.0.0.1 for tests: certificates made at
test time, real gRPC over mutual TLS, in this process (threads) or as
separate processes."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import numpy as np

from privadapt.client.daemon import SiteDaemon
from privadapt.client.site_config import SiteConfig
from privadapt.common import tls
from privadapt.common.blas_threads import SINGLE_THREADED_BLAS
from privadapt.common.data import Dataset
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.proto import federation_pb2_grpc as rpc
from privadapt.common.wire import channel_options
from privadapt.server.coordinator import Coordinator, CoordinatorConfig
from privadapt.server.simulate import write_pki as make_pki  # noqa: F401 -- for the tests

PROCESS_TIMEOUT_S = 60.0


def write_coordinator_config(workdir: Path, pki: Path, round_timeout_s: float = 10.0,
                             site_wait_timeout_s: float = 20.0, min_sites: int = 1,
                             listen: str = "127.0.0.1:0", public_source: Path | None = None
                             ) -> Path:
    path = workdir / "coordinator.toml"
    path.write_text(
        "[coordinator]\n"
        f'listen = "{listen}"\n'
        f'database = "{workdir / "coordinator.db"}"\n'
        f"round_timeout_s = {round_timeout_s}\n"
        f"site_wait_timeout_s = {site_wait_timeout_s}\n"
        f"min_sites = {min_sites}\n"
        + (f'public_source = "{public_source}"\n' if public_source else "")
        + "[tls]\n"
        f'cert = "{pki / "coordinator.crt"}"\nkey = "{pki / "coordinator.key"}"\n'
        f'ca = "{pki / "ca.crt"}"\n'
    )
    return path


def write_site(workdir: Path, pki: Path, name: str, data: Dataset, port: int,
               epsilon_cap: float = 10.0, min_participants: int = 1,
               extra_privacy: str = "") -> Path:
    """Data (.npz), policy and site config for ``name``; returns the config path."""
    site_dir = workdir / name
    site_dir.mkdir(parents=True, exist_ok=True)
    np.savez(site_dir / "data.npz", features=data.features, labels=data.labels)
    cap = "inf" if math.isinf(epsilon_cap) else repr(epsilon_cap)
    non_private = "allow_non_private = true\n" if math.isinf(epsilon_cap) else ""
    (site_dir / "policy.toml").write_text(
        f'[site]\nname = "{name}"\n[privacy]\nepsilon_cap = {cap}\ndelta_cap = 1e-5\n'
        f"min_participants = {min_participants}\n{non_private}{extra_privacy}"
    )
    config = site_dir / "site.toml"
    config.write_text(
        f'[site]\ncoordinator = "127.0.0.1:{port}"\ndata = "data.npz"\npolicy = "policy.toml"\n'
        f'database = "site.db"\n[tls]\ncert = "{pki / (name + ".crt")}"\n'
        f'key = "{pki / (name + ".key")}"\nca = "{pki / "ca.crt"}"\n'
    )
    return config


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


def start_process(args: Sequence[str], log: Path) -> subprocess.Popen:
    handle = open(log, "ab")  # noqa: SIM115 -- closed with the process
    return subprocess.Popen([sys.executable, "-m", *args], stdout=subprocess.PIPE,
                            stderr=handle,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", **SINGLE_THREADED_BLAS})


def start_coordinator_process(config: Path, log: Path) -> tuple[subprocess.Popen, int]:
    process = start_process(["privadapt.server.coordinator", "--config", str(config)], log)
    line = process.stdout.readline().decode()
    if "serving on port" not in line:
        process.kill()
        raise RuntimeError(f"coordinator did not start: {line!r}; see {log}")
    return process, int(line.rsplit(" ", 1)[1])


def stop_process(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def start_site_processes(configs: Sequence[Path], logs: Path) -> list[subprocess.Popen]:
    return [start_process(["privadapt.client.daemon", "--config", str(c)],
                          logs / f"{c.parent.name}.log") for c in configs]


def direct_federation(coordinator: Coordinator, job_id: str, sites: Sequence[str],
                      **job_fields):
    """A NetworkFederation on an in-process coordinator, for tests that drive
    queries themselves (the job is registered in the store first)."""
    from privadapt.server.network_federation import NetworkFederation, NetworkJob

    coordinator.store.create_job(job_id, "test", "{}", 0)
    job = NetworkJob(job_id, tuple(sites), **job_fields)
    return NetworkFederation(job, coordinator.registry, coordinator.hub, coordinator.store,
                             coordinator.reports)
