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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from privadapt.client.policy import SitePolicy
from privadapt.common.data.dataset import Dataset
from privadapt.common.mechanisms import Adjacency
from privadapt.server.coordinator.main import Coordinator, CoordinatorConfig
from privadapt.server.federation.network import NetworkFederation, NetworkJob
from privadapt.simulation.forked_sites import fork_server
from privadapt.simulation.local_deployment import LOCALHOST, LocalDeployment, free_port, write_pki
from privadapt.simulation.local_processes import Processes, proportional_memory_mib, start_site

SITE_STOP_GRACE_S = 0.5


@dataclass(frozen=True)
class SitePolicyTerms:
    """The policy every site of one federation is started with (client/policy.py)."""

    epsilon_cap: float = 1e6
    delta_cap: float = 1e-5
    adjacency: Adjacency = Adjacency.REPLACE_ONE
    allow_non_private: bool = False
    min_participants: int = 1

    def policy(self, name: str) -> SitePolicy:
        """The policy of the site ``name`` (``ConfigError`` for terms no site
        may have, such as allow_non_private with a finite cap)."""
        return SitePolicy(name, self.epsilon_cap, self.delta_cap, adjacency=self.adjacency,
                          min_participants=self.min_participants,
                          allow_non_private=self.allow_non_private)


class SiteProcesses:
    """A coordinator in this process and, per ``federation`` call, a new set of
    site daemons; ``close`` (or the ``with`` block's end) stops everything."""

    def __init__(self, workdir: Path, *, round_timeout: float = 120.0) -> None:
        workdir = Path(workdir).resolve()
        fork_server()  # its one import of the site daemon runs while the PKI is written
        self._deployment = LocalDeployment(workdir, write_pki(workdir / "pki"))
        self._round_timeout = round_timeout
        self._runs = itertools.count()
        self._sites = Processes()
        self._address = f"{LOCALHOST}:{free_port()}"
        config = self._deployment.write_coordinator(self._address)
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
        self._sites.stop()
        run = next(self._runs)
        names = [f"{tag}{run}-site-{k}" for k in range(len(datasets))]
        for name, data in zip(names, datasets, strict=True):
            config = self._deployment.write_site(policy.policy(name), data, self._address)
            self._sites.add(name, start_site(config, self._deployment.workdir / f"{name}.log",
                                             "--log-level", "WARNING"))
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

    def proportional_memory_mib(self) -> dict[str, float]:
        """Proportional set size of the current site daemons and of the fork
        server they share pages with ("fork server"), in MiB: their sum is
        the memory the sites take together (local_processes.py)."""
        sizes = self._sites.proportional_memory_mib()
        server = proportional_memory_mib(fork_server().pid)
        if server is not None:
            sizes["fork server"] = server
        return sizes

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time the current site daemons have used so far, in seconds."""
        return self._sites.cpu_seconds()

    def close(self) -> None:
        self._sites.stop()
        self._coordinator.stop(grace=SITE_STOP_GRACE_S)
