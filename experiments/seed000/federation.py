"""Sites for the seed 000 experiments: a private target sample split over
sites, each with its own policy and SQLite ledger.

In-process by default (``LocalFederation``, as experiments/demo.py); with
``networked=True`` every site is a real ``privadapt-site`` daemon on 127.0.0.1
behind mutual TLS and secure aggregation (api/simulation/process_federation.py), and the
algorithms run unchanged against a ``NetworkFederation``.

Simulation sites (``private=False``) have an infinite cap and
``allow_non_private``: they answer the noise-free CnvxAdap / NCnvxAdap and the
non-private target-only fits. Sites are replace-one by default; noisy minibatch
SGD's Poisson-sampled releases need add/remove-one sites. Private sites charge
their ledgers; their noise comes from the sites (``noise_seed`` seeds it for
reproducible in-process runs; site daemons always draw from the operating system's CSPRNG)."""

from __future__ import annotations

import math
import re
import uuid
from argparse import ArgumentParser
from pathlib import Path

import numpy as np

from privadapt import Dataset, LocalFederation
from privadapt.common.federation import Federation
from privadapt.common.mechanisms import Adjacency
from privadapt.simulation.process_federation import SitePolicyTerms, SiteProcesses

SITE_DELTA_CAP = 0.05


def add_networked_flag(parser: ArgumentParser) -> None:
    parser.add_argument("--networked", action="store_true",
                        help="run every federation as site daemons over mutual TLS "
                             "(slower; a smaller configuration is advised)")


class Federations:
    """Makes one experiment's federations; ``close`` stops any site daemons."""

    def __init__(self, workdir: Path, *, networked: bool = False) -> None:
        self.workdir = Path(workdir)
        self.networked = networked
        self._processes = SiteProcesses(self.workdir / "network") if networked else None

    def __enter__(self) -> Federations:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def description(self) -> str:
        return ("site daemons on 127.0.0.1 (mutual TLS, secure aggregation)" if self.networked
                else "in-process sites")

    def close(self) -> None:
        if self._processes is not None:
            self._processes.close()

    def make(
        self,
        features: np.ndarray,
        labels: np.ndarray,
        *,
        private: bool,
        epsilon_cap: float = 100.0,
        num_sites: int = 2,
        noise_seed: int | None = None,
        tag: str = "run",
        adjacency: Adjacency = Adjacency.REPLACE_ONE,
    ) -> Federation:
        """Split (features, labels) into ``num_sites`` consecutive sites."""
        names = tuple(f"x{i}" for i in range(features.shape[1]))
        parts = [Dataset(features[rows], labels[rows], names)
                 for rows in np.array_split(np.arange(len(labels)), num_sites)]
        tag = re.sub(r"[^A-Za-z0-9]+", "-", tag).strip("-").lower() or "run"
        if self._processes is not None:
            terms = (SitePolicyTerms(epsilon_cap, SITE_DELTA_CAP, adjacency) if private else
                     SitePolicyTerms(math.inf, SITE_DELTA_CAP, adjacency,
                                     allow_non_private=True))
            return self._processes.federation(parts, terms, tag=tag)
        run = f"{tag}-{uuid.uuid4().hex[:8]}"
        cap = {"epsilon_cap": epsilon_cap} if private else {"epsilon_cap": math.inf,
                                                             "allow_non_private": True}
        return LocalFederation.from_datasets(
            parts, delta_cap=SITE_DELTA_CAP, adjacency=adjacency, ledger_dir=self.workdir / run,
            noise_seed=noise_seed, job_id=run, **cap)
