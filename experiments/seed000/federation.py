"""In-process sites for the seed 000 experiments: a private target sample split
over sites, each with its own policy and SQLite ledger (as experiments/demo.py).

Simulation sites (``private=False``) have an infinite cap and
``allow_non_private``: they answer the noise-free CnvxAdap / NCnvxAdap and the
non-private target-only fits. Private sites charge their ledgers; their noise
comes from the sites (``noise_seed`` seeds it for reproducible runs)."""

from __future__ import annotations

import math
import uuid
from pathlib import Path

import numpy as np

from privadapt.client.ledger import PrivacyLedger
from privadapt.client.local_federation import LocalFederation
from privadapt.client.policy import SitePolicy
from privadapt.client.site import Site
from privadapt.common.data import Dataset
from privadapt.common.noise import SeededRandomBits

SITE_DELTA_CAP = 0.05


def make_federation(
    features: np.ndarray,
    labels: np.ndarray,
    workdir: Path,
    *,
    private: bool,
    epsilon_cap: float = 100.0,
    num_sites: int = 2,
    noise_seed: int | None = None,
    tag: str = "run",
) -> LocalFederation:
    """Split (features, labels) into ``num_sites`` consecutive sites."""
    run = f"{tag}-{uuid.uuid4().hex[:8]}"
    names = tuple(f"x{i}" for i in range(features.shape[1]))
    sites = []
    for k, rows in enumerate(np.array_split(np.arange(len(labels)), num_sites)):
        name = f"site-{k}"
        if private:
            policy = SitePolicy(name, epsilon_cap, SITE_DELTA_CAP)
        else:
            policy = SitePolicy(name, math.inf, SITE_DELTA_CAP, allow_non_private=True)
        source = None if noise_seed is None else SeededRandomBits(noise_seed * 100 + k)
        ledger = PrivacyLedger(workdir / f"{run}-{name}.db", policy)
        sites.append(Site(Dataset(features[rows], labels[rows], names), policy, ledger, source))
    return LocalFederation(sites, job_id=run)
