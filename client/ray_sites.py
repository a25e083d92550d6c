"""A ``LocalFederation``'s sites placed in Ray actors, for simulations past one machine.

Each actor (a ``SiteShard``) builds and holds a contiguous share of the
federation's sites with ``build_sites``, exactly as an in-process federation
builds them: its own policy per site, its own ledger on the actor's node, and
the same noise source (the OS CSPRNG, or at a fixed ``noise_seed`` the same
seeded stream for site k as in-process). The data goes to the actor once and
stays there; only queries go in and encoded shares, budget statements and
spends come back, so a site in an actor computes and charges what it would in
this process, and the federation's fixed-point sum is the same.

The module lives in the client because what it places are sites; it needs
nothing of the coordinator. Ray is an optional extra (``pip install
'privadapt[ray]'``): it is imported only when a federation is built with
``backend="ray"``, never by a site daemon or at import time of privadapt.
Ray starts a local instance unless one is running or ``RAY_ADDRESS`` names a
cluster (docs/how-to/simulate.md).
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from privadapt.client.site_group import InProcessSites, SiteFacts, SiteSpec, build_sites
from privadapt.common.federation import Query, SiteBudgetStatement, SitePrivacy, SiteShare


class SiteShard:
    """The body of one actor: some of a federation's sites, in the actor's process."""

    def __init__(self, specs: Sequence[SiteSpec], ledger_dir: Path | None, epsilon_cap: float,
                 delta_cap: float, noise_seed: int | None, policy_options: dict[str, Any]
                 ) -> None:
        # A ledger directory on this actor's node: the one named, or its own
        # temporary one, removed when the shard closes.
        self._temporary = (Path(tempfile.mkdtemp(prefix="privadapt-ledgers-"))
                           if ledger_dir is None else None)
        directory = ledger_dir if ledger_dir is not None else self._temporary
        self._sites = InProcessSites(build_sites(specs, directory, epsilon_cap, delta_cap,
                                                 noise_seed, policy_options))

    def facts(self) -> tuple[SiteFacts, ...]:
        return self._sites.facts()

    def answer(self, query: Query, names: Sequence[str] | None, num_participants: int
               ) -> list[SiteShare]:
        """The shares of this shard's sites among ``names`` (None: all of them)."""
        asked = [site.name for site in self._sites.sites] if names is None else names
        return self._sites.answer_here(query, asked, num_participants)

    def budgets(self) -> dict[str, SiteBudgetStatement]:
        return self._sites.budgets()

    def privacy_spent(self, job_id: str, delta: float | None) -> dict[str, SitePrivacy]:
        return self._sites.privacy_spent(job_id, delta)

    def releases_charged(self, job_id: str) -> dict[str, int]:
        return self._sites.releases_charged(job_id)

    def close(self) -> None:
        self._sites.close()
        if self._temporary is not None:
            shutil.rmtree(self._temporary, ignore_errors=True)


class RaySites:
    """A federation's sites in ``actors`` Ray actors (default: one per CPU of
    the cluster, at most one per site), asked in parallel.

    One difference from in-process, when a site refuses: in-process, the
    sites after it are not asked; here the other actors' sites answer (and
    charge) as they would in a networked round, where every site decides on
    its own. A query no site refuses is charged identically."""

    def __init__(self, specs: Sequence[SiteSpec], ledger_dir: Path | None, *,
                 actors: int | None, epsilon_cap: float, delta_cap: float,
                 noise_seed: int | None, policy_options: dict[str, Any]) -> None:
        ray = _ray()
        if not ray.is_initialized():
            ray.init()
        cpus = max(1.0, float(ray.cluster_resources().get("CPU", 1.0)))
        count = min(len(specs), int(cpus) if actors is None else actors)
        if count < 1:
            raise ValueError(f"actors must be at least 1, got {actors}")
        # Fractional CPUs, so that more actors than CPUs are still all placed;
        # SPREAD puts them on as many nodes as the cluster has.
        shard = ray.remote(SiteShard).options(num_cpus=min(1.0, cpus / count),
                                              scheduling_strategy="SPREAD")
        bounds = [len(specs) * i // count for i in range(count + 1)]
        self._all_names = tuple(spec.name for spec in specs)
        self._actors = [shard.remote(specs[lo:hi], ledger_dir, epsilon_cap, delta_cap,
                                     noise_seed, policy_options)
                        for lo, hi in itertools.pairwise(bounds)]
        self._facts = tuple(fact for part in self._gather("facts") for fact in part)

    @property
    def num_actors(self) -> int:
        return len(self._actors)

    def facts(self) -> tuple[SiteFacts, ...]:
        return self._facts

    def answer(self, query: Query, names: Sequence[str]) -> list[SiteShare]:
        ray = _ray()
        query_ref = ray.put(query)  # serialised once for every actor
        asked = None if tuple(names) == self._all_names else list(names)
        parts = self._get([actor.answer.remote(query_ref, asked, len(names))
                           for actor in self._actors])
        return [share for part in parts for share in part]

    def budgets(self) -> dict[str, SiteBudgetStatement]:
        return {name: statement for part in self._gather("budgets")
                for name, statement in part.items()}

    def privacy_spent(self, job_id: str, delta: float | None) -> dict[str, SitePrivacy]:
        return {name: spent for part in self._gather("privacy_spent", job_id, delta)
                for name, spent in part.items()}

    def releases_charged(self, job_id: str) -> dict[str, int]:
        return {name: count for part in self._gather("releases_charged", job_id)
                for name, count in part.items()}

    def close(self) -> None:
        """Close every shard's ledgers, then end its actor."""
        if not self._actors:
            return
        ray = _ray()
        if not ray.is_initialized():  # Ray already shut down, and the actors with it
            self._actors = []
            return
        try:
            self._gather("close")
        finally:
            for actor in self._actors:
                ray.kill(actor)
            self._actors = []

    def _gather(self, method: str, *args: object) -> list:
        return self._get([getattr(actor, method).remote(*args) for actor in self._actors])

    @staticmethod
    def _get(refs: list) -> list:
        """The actors' results, or the exception a site raised (a refusal, a
        spent budget) as itself rather than wrapped in Ray's error."""
        ray = _ray()
        try:
            return ray.get(refs)
        except ray.exceptions.RayTaskError as err:
            if isinstance(err.cause, Exception):
                raise err.cause from None
            raise


def _ray():
    """The ``ray`` module, imported on first use (the optional extra)."""
    try:
        import ray
    except ImportError:
        raise ImportError("backend='ray' needs Ray: pip install 'privadapt[ray]'") from None
    return ray
