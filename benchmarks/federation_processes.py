"""A networked federation for benchmarks: the coordinator in this process, each
site a ``privadapt-site`` process on 127.0.0.1 over mutual TLS, and a
``NetworkFederation`` to query them directly (no operator API in the way).

Import this module before numpy: it makes every process run single-threaded
BLAS, since the coordinator and the sites share the machine's cores and
OpenBLAS's busy-waiting threads would oversubscribe them (common/blas_threads.py).
"""

from __future__ import annotations

import os

from privadapt.common.blas_threads import SINGLE_THREADED_BLAS

os.environ.update(SINGLE_THREADED_BLAS)

import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from privadapt.common.data import Dataset
from privadapt.server.coordinator import Coordinator, CoordinatorConfig
from privadapt.server.network_federation import NetworkFederation, NetworkJob
from privadapt.server.simulate import free_port, write_pki


def make_pki(directory: Path, num_sites: int) -> Path:
    return write_pki(directory, [f"site-{k}" for k in range(num_sites)])


def peak_mib(pid: int) -> float:
    """Peak resident memory (VmHWM) of a live process, in MiB (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _write_site(directory: Path, pki: Path, name: str, data: Dataset, port: int,
                epsilon_cap: float) -> Path:
    site = directory / name
    site.mkdir(parents=True)
    np.savez(site / "data.npz", features=data.features, labels=data.labels)
    (site / "policy.toml").write_text(
        f'[site]\nname = "{name}"\n[privacy]\nepsilon_cap = {epsilon_cap!r}\n'
        "delta_cap = 1e-5\n")
    config = site / "site.toml"
    config.write_text(
        f'[site]\ncoordinator = "127.0.0.1:{port}"\ndata = "data.npz"\npolicy = "policy.toml"\n'
        f'database = "site.db"\n[tls]\ncert = "{pki / (name + ".crt")}"\n'
        f'key = "{pki / (name + ".key")}"\nca = "{pki / "ca.crt"}"\n')
    return config


@contextlib.contextmanager
def networked_federation(
    workdir: Path, pki: Path, datasets: Sequence[Dataset], epsilon_cap: float = 1e6,
    round_timeout: float = 120.0,
) -> Iterator[tuple[NetworkFederation, list[subprocess.Popen]]]:
    """Sites ``site-0`` ... over ``datasets``, started and awaited; everything is
    stopped on exit."""
    port = free_port()
    config = workdir / "coordinator.toml"
    config.write_text(
        f'[coordinator]\nlisten = "127.0.0.1:{port}"\ndatabase = "coordinator.db"\n'
        f'[tls]\ncert = "{pki / "coordinator.crt"}"\nkey = "{pki / "coordinator.key"}"\n'
        f'ca = "{pki / "ca.crt"}"\n')
    coordinator = Coordinator(CoordinatorConfig.from_toml(config))
    coordinator.start()
    names = [f"site-{k}" for k in range(len(datasets))]
    processes: list[subprocess.Popen] = []
    try:
        for name, data in zip(names, datasets, strict=True):
            site_config = _write_site(workdir, pki, name, data, port, epsilon_cap)
            with open(workdir / f"{name}.log", "wb") as log:
                processes.append(subprocess.Popen(
                    [sys.executable, "-m", "privadapt.client.daemon", "--config",
                     str(site_config), "--log-level", "WARNING"], stderr=log))
        coordinator.store.create_job("bench", "benchmark", "{}", 0)
        federation = NetworkFederation(
            NetworkJob("bench", tuple(names), round_timeout=round_timeout),
            coordinator.registry, coordinator.hub, coordinator.store, coordinator.reports)
        federation.wait_for_sites()
        yield federation, processes
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            process.wait(timeout=30)
        coordinator.stop(grace=0.5)
