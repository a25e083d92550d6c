"""Federations of real site daemons on this machine, for experiments and
benchmarks: the coordinator runs in this process, every site is a
``privadapt-site`` process on 127.0.0.1, and they speak mutual TLS and secure
aggregation exactly as a deployment does. Algorithms get a ``NetworkFederation``
and cannot tell it from ``LocalFederation``.

One ``SiteProcesses`` keeps one coordinator (and one CA) for its whole life and
starts a new set of site daemons, with fresh names, data and ledgers, for each
federation asked for; the previous set is stopped first, so memory stays that
of one coordinator and one set of sites however many runs an experiment makes.

Site daemons draw their noise from the operating system's CSPRNG: unlike
in-process sites they take no seed, so networked runs are not bit-reproducible.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from privadapt.common import certs
from privadapt.common.data import Dataset
from privadapt.common.mechanisms import Adjacency
from privadapt.server.coordinator import Coordinator, CoordinatorConfig
from privadapt.server.network_federation import NetworkFederation, NetworkJob
from privadapt.server.simulate import Processes, free_port

SITE_STOP_GRACE_S = 0.5


@dataclass(frozen=True)
class SitePolicyTerms:
    """The policy every site of one federation is started with (client/policy.py)."""

    epsilon_cap: float = 1e6
    delta_cap: float = 1e-5
    adjacency: Adjacency = Adjacency.REPLACE_ONE
    allow_non_private: bool = False
    min_participants: int = 1

    def toml(self, name: str) -> str:
        if self.allow_non_private and not math.isinf(self.epsilon_cap):
            raise ValueError("allow_non_private needs epsilon_cap = inf (a simulation site)")
        cap = "inf" if math.isinf(self.epsilon_cap) else repr(float(self.epsilon_cap))
        return (
            f'[site]\nname = "{name}"\n[privacy]\nepsilon_cap = {cap}\n'
            f"delta_cap = {self.delta_cap!r}\nadjacency = \"{self.adjacency.value}\"\n"
            f"min_participants = {self.min_participants}\n"
            f"allow_non_private = {'true' if self.allow_non_private else 'false'}\n"
        )


class SiteProcesses:
    """A coordinator in this process and, per ``federation`` call, a new set of
    site daemons; ``close`` (or the ``with`` block's end) stops everything."""

    def __init__(self, workdir: Path, *, round_timeout: float = 120.0) -> None:
        self._workdir = Path(workdir).resolve()
        self._pki = self._workdir / "pki"
        self._round_timeout = round_timeout
        self._runs = itertools.count()
        self._sites = Processes()
        certs.init_ca(self._pki)
        certs.issue_certificate(self._pki, "coordinator", "coordinator")
        self._port = free_port()
        config = self._workdir / "coordinator.toml"
        config.write_text(
            f'[coordinator]\nlisten = "127.0.0.1:{self._port}"\n'
            'database = "coordinator.db"\n'
            f'[tls]\ncert = "{self._pki / "coordinator.crt"}"\n'
            f'key = "{self._pki / "coordinator.key"}"\nca = "{self._pki / "ca.crt"}"\n'
        )
        self._coordinator = Coordinator(CoordinatorConfig.from_toml(config))
        self._coordinator.start()

    def __enter__(self) -> SiteProcesses:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def federation(
        self, datasets: Sequence[Dataset], policy: SitePolicyTerms, *, tag: str = "run"
    ) -> NetworkFederation:
        """Start one site daemon per dataset (after stopping the previous set),
        wait until every one is connected, and return the job's federation."""
        self._stop_sites()
        run = next(self._runs)
        names = [f"{tag}{run}-site-{k}" for k in range(len(datasets))]
        for name, data in zip(names, datasets, strict=True):
            config = self._write_site(name, data, policy)
            self._sites.start(name, ["privadapt.client.daemon", "--config", str(config),
                                     "--log-level", "WARNING"],
                              self._workdir / f"{name}.log")
        job_id = f"{tag}{run}-job"
        self._coordinator.store.create_job(job_id, tag, "{}", 0)
        federation = NetworkFederation(
            NetworkJob(job_id, tuple(names), min_participants=min(policy.min_participants,
                                                                   len(names)),
                       round_timeout=self._round_timeout),
            self._coordinator.registry, self._coordinator.hub, self._coordinator.store,
            self._coordinator.reports)
        federation.wait_for_sites()
        return federation

    def peak_memory_mib(self) -> dict[str, float]:
        """Peak resident memory of the current site daemons, in MiB."""
        return self._sites.peak_memory_mib()

    def close(self) -> None:
        self._stop_sites()
        self._coordinator.stop(grace=SITE_STOP_GRACE_S)

    def _stop_sites(self) -> None:
        self._sites.stop()
        self._sites = Processes()

    def _write_site(self, name: str, data: Dataset, policy: SitePolicyTerms) -> Path:
        certs.issue_certificate(self._pki, "site", name)
        site = self._workdir / name
        site.mkdir(parents=True)
        np.savez(site / "data.npz", features=data.features, labels=data.labels)
        (site / "policy.toml").write_text(policy.toml(name))
        config = site / "site.toml"
        config.write_text(
            f'[site]\ncoordinator = "127.0.0.1:{self._port}"\ndata = "data.npz"\n'
            'policy = "policy.toml"\ndatabase = "site.db"\n'
            f'[tls]\ncert = "{self._pki / (name + ".crt")}"\n'
            f'key = "{self._pki / (name + ".key")}"\nca = "{self._pki / "ca.crt"}"\n'
        )
        return config
