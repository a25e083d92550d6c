"""The sites of a ``LocalFederation``, wherever they live, behind one small interface.

A federation asks its sites for shares, budgets and spends by name; a
``SiteGroup`` answers for all of them at once, so that sites in other
processes or on other machines (:mod:`privadapt.client.ray_sites`) are asked
in parallel rather than one round trip at a time. ``InProcessSites`` is the
default: ``Site`` objects in this process, asked in turn.

``build_sites`` makes the sites of ``LocalFederation.from_datasets`` with their
policies, ledgers and noise sources, in whichever process will hold them, so
that a site placed elsewhere is built, charged and seeded exactly as one here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.client.site import Site
from privadapt.common.accounting.delta_guard import LARGE_DELTA
from privadapt.common.data.dataset import Dataset
from privadapt.common.federation import Query, SiteBudgetStatement, SitePrivacy, SiteShare
from privadapt.common.mechanisms import Adjacency
from privadapt.common.noise.floating import SeededRandomBits

# Site k of a federation seeded with s draws from SeededRandomBits(s * stride + k):
# the streams the seed 000 results were produced with (experiments/seed000),
# distinct for every (seed, site) as long as a federation has at most `stride` sites.
NOISE_SEED_STRIDE = 100


@dataclass(frozen=True)
class SiteFacts:
    """What a federation knows of a site without asking it anything private:
    its name, its adjacency (which says whether its size is public), its size
    and its number of features."""

    name: str
    adjacency: Adjacency
    num_records: int
    dim: int


class SiteGroup(Protocol):
    """The sites of one federation, in the federation's order."""

    def facts(self) -> tuple[SiteFacts, ...]: ...

    def answer(self, query: Query, names: Sequence[str]) -> list[SiteShare]:
        """The shares of the sites ``names`` (in the federation's order), each
        told that ``len(names)`` sites take part."""
        ...

    def budgets(self) -> dict[str, SiteBudgetStatement]: ...

    def privacy_spent(self, job_id: str, delta: float | None) -> dict[str, SitePrivacy]: ...

    def releases_charged(self, job_id: str) -> dict[str, int]:
        """How many releases of ``job_id`` each site's ledger holds."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class SiteSpec:
    """One site to build: its index in the federation (which picks its seeded
    noise stream), its name and its records."""

    index: int
    name: str
    data: Dataset


def build_sites(specs: Sequence[SiteSpec], directory: Path, epsilon_cap: float,
                delta_cap: float, noise_seed: int | None,
                policy_options: dict[str, Any]) -> list[Site]:
    """One site per spec, each with its own ``SitePolicy`` and its own ledger
    ``<directory>/<name>.ledger.db`` (opened, and so composed with, if it
    exists); noise from the OS CSPRNG unless ``noise_seed`` is given."""
    directory.mkdir(parents=True, exist_ok=True)
    sites = []
    for spec in specs:
        policy = SitePolicy(spec.name, epsilon_cap, delta_cap, **policy_options)
        # A simulation site's ledger makes every check but never waits on the disk.
        ledger = PrivacyLedger(directory / f"{spec.name}.ledger.db", policy, create=True,
                               durable=not policy.simulation)
        noise = (None if noise_seed is None
                 else SeededRandomBits(noise_seed * NOISE_SEED_STRIDE + spec.index))
        sites.append(Site(spec.data, policy, ledger, noise))
    return sites


def budget_statement(site: Site) -> SiteBudgetStatement:
    """What ``site`` states before a job, from its policy and its ledger (at
    the cap's delta)."""
    policy = site.policy
    return SiteBudgetStatement(
        adjacency=policy.adjacency, accounting=policy.accounting.value,
        epsilon_cap=policy.epsilon_cap, delta_cap=policy.delta_cap,
        epsilon_spent=site.ledger.spent().epsilon,
        num_records=site.num_records if policy.adjacency == Adjacency.REPLACE_ONE else None,
        max_records=policy.max_records,
        history=tuple(Counter(c.mechanism for c in site.ledger.charges()).items()),
        large_delta_meant=policy.allow_large_delta or policy.delta_cap >= LARGE_DELTA)


class InProcessSites:
    """``Site`` objects in this process, asked in turn."""

    def __init__(self, sites: Sequence[Site]) -> None:
        self.sites = tuple(sites)
        self._by_name = {site.name: site for site in self.sites}

    def facts(self) -> tuple[SiteFacts, ...]:
        return tuple(SiteFacts(site.name, site.policy.adjacency, site.num_records, site.dim)
                     for site in self.sites)

    def answer(self, query: Query, names: Sequence[str]) -> list[SiteShare]:
        return self.answer_here(query, names, len(names))

    def answer_here(self, query: Query, names: Sequence[str], num_participants: int
                    ) -> list[SiteShare]:
        """The shares of those of ``names`` held here, among ``num_participants``
        sites in all (a shard of a larger group)."""
        return [self._by_name[name].answer(query, num_participants)
                for name in names if name in self._by_name]

    def budgets(self) -> dict[str, SiteBudgetStatement]:
        return {site.name: budget_statement(site) for site in self.sites}

    def privacy_spent(self, job_id: str, delta: float | None) -> dict[str, SitePrivacy]:
        return {site.name: site.privacy_spent(job_id, delta) for site in self.sites}

    def releases_charged(self, job_id: str) -> dict[str, int]:
        # The rows alone: no figure is composed (privacy_spent composes two).
        return {site.name: len(site.ledger.charges(job_id)) for site in self.sites}

    def close(self) -> None:
        """Close every site's ledger."""
        for site in self.sites:
            site.ledger.close()
