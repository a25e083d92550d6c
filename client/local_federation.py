"""A federation of simulated sites, for experiments, benchmarks and tests.

The sites live in this process (the default) or, for simulations past one
machine, in Ray actors (``from_datasets(..., backend="ray")``,
:mod:`privadapt.client.ray_sites`); either way they are the same ``Site``
objects, built the same way, behind one ``SiteGroup``
(:mod:`privadapt.client.site_group`).

Each query goes through the wire encoding and back before the sites see it,
and sites return shares already encoded on the fixed-point grid; the federation
sums them modulo 2^64 and decodes, as the networked federation does (without
the pairwise masks, which cancel there), so both see the same parameters and
round identically (DESIGN.md section 3). ``query_per_site`` and ``select``
are the other two release forms (common/federation.py): each site's own
answer with its full noise, and one site's selected index.

``LocalFederation.from_datasets`` builds the sites from datasets: one policy
and one ledger per site, the policy stated once for all of them. One
federation is one job: every query is charged to its ``job_id``, and an
estimator's ``fit`` reports the job's spend, so fit a second model on
``federation.new_job()`` (the same sites and ledgers under a new job id).
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
import uuid
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from privadapt.client.ray_sites import RaySites
from privadapt.client.site import Site
from privadapt.client.site_group import (
    NOISE_SEED_STRIDE,
    InProcessSites,
    SiteFacts,
    SiteGroup,
    SiteSpec,
    build_sites,
)
from privadapt.common.data.dataset import Dataset
from privadapt.common.data.record_parts import RecordPart
from privadapt.common.errors import DataError, QueryRefusedError
from privadapt.common.federation import (
    AggregateAnswer,
    PerSiteAnswer,
    Query,
    RecordPartView,
    ReleaseForm,
    SelectionAnswer,
    SiteBudgetStatement,
    SitePrivacy,
    SiteShare,
)
from privadapt.common.mechanisms import Adjacency, Mechanism
from privadapt.common.numerics.fixed_point import FixedPointCodec
from privadapt.common.wire.messages import query_from_proto, query_to_proto

BACKENDS = ("in-process", "ray")


class _SharedSites:
    """The sites of a federation and its views (``new_job``). If the
    federation made them (``owned``), closing closes their ledgers and removes
    the ledger directory it made, as does garbage collection of the last
    federation using them."""

    def __init__(
        self, group: SiteGroup, *, owned: bool, temporary_dir: Path | None = None
    ) -> None:
        self.group = group
        self._finalizer = weakref.finalize(self, _release, group if owned else None,
                                           temporary_dir)

    def close(self) -> None:
        self._finalizer()


def _release(group: SiteGroup | None, temporary_dir: Path | None) -> None:
    if group is not None:
        group.close()
    if temporary_dir is not None:
        shutil.rmtree(temporary_dir, ignore_errors=True)


class LocalFederation:
    """Every site answers every query; the answer is the decoded fixed-point sum."""

    def __init__(
        self,
        sites: Sequence[Site],
        job_id: str | None = None,
        collusion_tolerance: int = 0,
        codec: FixedPointCodec | None = None,
    ) -> None:
        if not sites:
            raise ValueError("a federation needs at least one site")
        names = [site.name for site in sites]
        if len(set(names)) != len(names):
            raise ValueError(f"site names must be unique, got {names}")
        # Sites given here belong to the caller; from_datasets replaces this
        # with sites the federation owns (and closes).
        self._start(_SharedSites(InProcessSites(sites), owned=False), job_id,
                    collusion_tolerance, codec)

    def _start(self, shared: _SharedSites, job_id: str | None, collusion_tolerance: int,
               codec: FixedPointCodec | None) -> None:
        self._shared = shared
        self._facts: tuple[SiteFacts, ...] = shared.group.facts()
        self._job_id = job_id or f"job-{uuid.uuid4().hex[:12]}"
        self.collusion_tolerance = collusion_tolerance
        self.codec = codec or FixedPointCodec()
        self._query_numbers = itertools.count(1)

    @classmethod
    def _over(cls, shared: _SharedSites, job_id: str | None, collusion_tolerance: int,
              codec: FixedPointCodec | None) -> LocalFederation:
        federation = cls.__new__(cls)
        federation._start(shared, job_id, collusion_tolerance, codec)
        return federation

    @classmethod
    def from_datasets(
        cls,
        datasets: Sequence[Dataset],
        *,
        epsilon_cap: float,
        delta_cap: float,
        ledger_dir: str | Path | None = None,
        noise_seed: int | None = None,
        names: Sequence[str] | None = None,
        job_id: str | None = None,
        collusion_tolerance: int = 0,
        backend: str = "in-process",
        actors: int | None = None,
        **policy_options: Any,
    ) -> LocalFederation:
        """One site per dataset, named ``names`` (default site-1 .. site-K),
        each with its own ``SitePolicy(name, epsilon_cap, delta_cap,
        **policy_options)`` and its own ledger ``<ledger_dir>/<name>.ledger.db``
        (opened, and so composed with, if it exists).

        ``ledger_dir=None``: a new temporary directory, removed by ``close()``
        or when the federation (and every ``new_job`` view of it) is garbage
        collected; give a directory to keep the ledgers (a simulation site's,
        the default, is not synced to disk: durable against a crash of the
        process, not of the machine). Noise comes from the
        operating system's CSPRNG; ``noise_seed`` gives every site its own
        seeded stream instead (reproducible experiments and tests only).

        ``backend="ray"`` places the sites in Ray actors (``actors`` of them,
        default one per CPU of the Ray cluster, each holding a contiguous share
        of the sites; :mod:`privadapt.client.ray_sites`), built there exactly
        as here: each site's ledger lives on its actor's node, under
        ``ledger_dir`` (a path on that node) or an actor's own temporary
        directory. The answers equal the in-process ones at a fixed
        ``noise_seed``."""
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if actors is not None and backend != "ray":
            raise ValueError(f"actors= places sites in Ray actors: it needs backend='ray', "
                             f"got backend={backend!r}")
        names = [f"site-{k + 1}" for k in range(len(datasets))] if names is None else list(names)
        if len(names) != len(datasets):
            raise ValueError(f"{len(names)} names for {len(datasets)} datasets")
        if len(set(names)) != len(names):
            raise ValueError(f"site names must be unique, got {names}")
        if noise_seed is not None and len(datasets) > NOISE_SEED_STRIDE:
            raise ValueError(f"noise_seed supports at most {NOISE_SEED_STRIDE} sites, "
                             f"got {len(datasets)}")
        if not datasets:
            raise ValueError("a federation needs at least one site")
        specs = [SiteSpec(k, name, data) for k, (name, data) in
                 enumerate(zip(names, datasets, strict=True))]
        options = dict(epsilon_cap=epsilon_cap, delta_cap=delta_cap, noise_seed=noise_seed,
                       policy_options=policy_options)
        if backend == "ray":
            group = RaySites(specs, None if ledger_dir is None else Path(ledger_dir),
                             actors=actors, **options)
            shared = _SharedSites(group, owned=True)
        else:
            temporary = None
            if ledger_dir is None:
                temporary = Path(tempfile.mkdtemp(prefix="privadapt-ledgers-"))
            directory = Path(ledger_dir) if ledger_dir is not None else temporary
            group = InProcessSites(build_sites(specs, directory, **options))
            shared = _SharedSites(group, owned=True, temporary_dir=temporary)
        return cls._over(shared, job_id, collusion_tolerance, None)

    def new_job(self, job_id: str | None = None) -> LocalFederation:
        """The same sites (policies, ledgers, noise) under a new job id, for
        the next fit: each job's spend is reported on its own and every
        ledger composes all of them against its cap."""
        # The sites live as long as any job over them.
        return LocalFederation._over(self._shared, job_id, self.collusion_tolerance, self.codec)

    def close(self) -> None:
        """Close the ledgers of sites this federation made (from_datasets) and
        remove its temporary ledger directory; sites given to the constructor
        stay open (they are the caller's)."""
        self._shared.close()

    def __enter__(self) -> LocalFederation:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def sites(self) -> tuple[Site, ...]:
        """The ``Site`` objects, when they live in this process."""
        group = self._shared.group
        if not isinstance(group, InProcessSites):
            raise AttributeError("the sites live in Ray actors, not in this process: ask the "
                                 "federation (site_budgets, privacy_spent) instead")
        return group.sites

    @property
    def job_id(self) -> str:
        return self._job_id

    @property
    def site_sizes(self) -> dict[str, int]:
        """Public only under replace-one adjacency (the trust model); a site
        accounting add/remove must be asked for a noisy ``record_count`` instead."""
        private = [s.name for s in self._facts if s.adjacency != Adjacency.REPLACE_ONE]
        if private:
            raise QueryRefusedError(
                f"sites {private} account under add/remove adjacency, where their sizes are "
                "private: query record_count with noise instead"
            )
        return {site.name: site.num_records for site in self._facts}

    @property
    def num_sites(self) -> int:
        return len(self._facts)

    @property
    def dim(self) -> int:
        """The sites' common number of features (DataError if they differ)."""
        dims = {site.dim for site in self._facts}
        if len(dims) != 1:
            raise DataError(f"the sites hold records of different dimensions "
                            f"{ {site.name: site.dim for site in self._facts} }; "
                            "they must share one schema")
        return dims.pop()

    def restricted_to(self, part: RecordPart) -> RecordPartView:
        """This job on ``part`` of every site's records (common/federation.py)."""
        return RecordPartView(self, part)

    def query(
        self, kernel: str, params: Mapping[str, Any], mechanism: Mechanism,
        *, records: RecordPart = RecordPart.ALL,
    ) -> AggregateAnswer:
        query, shares = self._ask(kernel, params, mechanism, ReleaseForm.SECURE_SUM, records)
        blocks = tuple(
            self.codec.decode(self.codec.add(s.blocks[b] for s in shares))
            for b in range(len(shares[0].blocks))
        )
        return AggregateAnswer(query.query_id, blocks, tuple(s.site_name for s in shares),
                               self.collusion_tolerance)

    def query_per_site(
        self, kernel: str, params: Mapping[str, Any], mechanism: Mechanism,
        *, records: RecordPart = RecordPart.ALL, sites: Sequence[str] | None = None,
    ) -> PerSiteAnswer:
        """``sites``: ask only these (the others are neither asked nor charged)."""
        query, shares = self._ask(kernel, params, mechanism, ReleaseForm.PER_SITE, records,
                                  sites)
        return PerSiteAnswer(query.query_id, {
            share.site_name: tuple(self.codec.decode(block) for block in share.blocks)
            for share in shares
        })

    def select(
        self, kernel: str, params: Mapping[str, Any], mechanism: Mechanism,
        *, records: RecordPart = RecordPart.ALL, sites: Sequence[str] | None = None,
    ) -> SelectionAnswer:
        query, shares = self._ask(kernel, params, mechanism, ReleaseForm.PER_SITE, records,
                                  sites)
        (share,) = shares  # a site answers a selection only as the job's only site
        return SelectionAnswer(query.query_id, int(share.blocks[0][0]), share.site_name)

    def _ask(
        self, kernel: str, params: Mapping[str, Any], mechanism: Mechanism, form: ReleaseForm,
        records: RecordPart, sites: Sequence[str] | None = None,
    ) -> tuple[Query, list[SiteShare]]:
        asked = self._sites_named(sites)
        query = Query(
            job_id=self._job_id,
            query_id=f"q{next(self._query_numbers):06d}",
            kernel=kernel,
            params=params,
            mechanism=mechanism,
            collusion_tolerance=self.collusion_tolerance,
            fractional_bits=self.codec.fractional_bits,
            form=form,
            records=records,
        )
        # Through the wire encoding and back, so a query that could not cross the
        # network (an unsupported parameter type, a non-finite value) fails here too.
        query, _ = query_from_proto(query_to_proto(query, round=0))
        return query, self._shared.group.answer(query, asked)

    def _sites_named(self, names: Sequence[str] | None) -> tuple[str, ...]:
        """The sites a query goes to: every one, or those ``names`` (ValueError
        for an unknown or repeated name, or none), in the federation's order."""
        known = [site.name for site in self._facts]
        if names is None:
            return tuple(known)
        unknown = sorted(set(names) - set(known))
        if not names or unknown or len(set(names)) != len(names):
            raise ValueError(f"sites must be distinct names among {known}, got {list(names)}")
        return tuple(name for name in known if name in names)

    def site_budgets(self) -> dict[str, SiteBudgetStatement]:
        """What each site states before a job, from its policy and its ledger
        (at the cap's delta): what an estimator's ``fit`` checks its plan
        against before the first release, as a networked launch does."""
        return self._shared.group.budgets()

    def privacy_spent(self, delta: float | None = None) -> dict[str, SitePrivacy]:
        return self._shared.group.privacy_spent(self._job_id, delta)

    def releases_charged(self) -> dict[str, int]:
        """How many releases of this federation's job each site's ledger
        holds (what a fit checks, before its first release, to refuse a job
        that was already charged)."""
        return self._shared.group.releases_charged(self._job_id)
