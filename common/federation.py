"""The spine: algorithms talk to a Federation through private aggregate queries.

    answer = federation.query(kernel, params, mechanism)            # secure sum
    answers = federation.query_per_site(kernel, params, mechanism)  # one per site
    chosen = federation.select(kernel, params, selection_mechanism)  # an index

A *kernel* (``privadapt.common.kernels``) is the only code that reads private
records; a *mechanism* (``privadapt.common.mechanisms``) says how its sum is
privatised; a *Federation* turns the query into one privatised aggregate. An
algorithm is written against :class:`Federation` only and never knows whether
its sites are in-process objects or daemons across the network (DESIGN.md 3).

Three release forms, named by :class:`ReleaseForm` and bound into
every site's signed query digest, so a coordinator cannot show one site one
form and another site another:

* ``secure_sum`` (the default): each site adds a *share* of the noise and
  masks its answer; the coordinator sees only the noisy sum.
* ``per_site``: each site adds the *full* noise itself and its answer is not
  masked, so the coordinator sees every site's own release (seed 001's NAS,
  where every site sanitises its own points). Parallel composition: a site's
  release depends on its records only and is charged to its ledger alone.
  A site's policy may forbid it (``allow_per_site_releases``).
* a *selection* (``federation.select``): a per-site query whose mechanism
  releases an index (``Mechanism.releases_index``): the site computes one
  score per candidate, adds the noise itself and releases only which
  candidate wins (report-noisy-min, the exponential mechanism). Answered only
  when one site holds all of the job's private data: with several sites the
  scores would have to be summed first, which is the secure-sum form of the
  same kernel (a noisy score vector, accounted as the vector release it is).

:class:`OneSiteView` narrows a job to one of its sites (``sites=`` on
``query_per_site`` and ``select``): what one site's records alone can give,
such as one model per site, charged to that site only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

import numpy as np

from privadapt.common.accounting.accountant import EpsilonReport
from privadapt.common.data.record_parts import RecordPart
from privadapt.common.mechanisms import Adjacency, Mechanism
from privadapt.common.noise.floating import honest_share_count
from privadapt.common.numerics.fixed_point import DEFAULT_FRACTIONAL_BITS


class ReleaseForm(StrEnum):
    """How a query's answers leave the sites (module docstring)."""

    SECURE_SUM = "secure_sum"
    PER_SITE = "per_site"


@dataclass(frozen=True)
class Query:
    """One private aggregate query as a site receives it.

    ``params`` are public (model weights, clip bounds); ``collusion_tolerance``
    is the job's t, which sizes every site's noise share (sigma^2 / (K - t));
    ``fractional_bits`` fixes the aggregation grid 2^-f every share is rounded to;
    ``form`` says whether the answers are summed securely or seen one per site
    (:class:`ReleaseForm`); ``records`` which of its records each site runs
    the kernel on (:mod:`privadapt.common.data.record_parts`; default every one).
    """

    job_id: str
    query_id: str
    kernel: str
    params: Mapping[str, Any]
    mechanism: Mechanism
    collusion_tolerance: int = 0
    fractional_bits: int = DEFAULT_FRACTIONAL_BITS
    form: ReleaseForm = ReleaseForm.SECURE_SUM
    records: RecordPart = RecordPart.ALL


@dataclass(frozen=True)
class SiteShare:
    """A site's answer: its clipped sums plus its noise share (the full noise
    for a per-site release), each rounded onto the fixed-point grid and encoded
    modulo 2^64 (uint64), one array per block; for a selection, one block of
    shape (1,) holding the selected index."""

    site_name: str
    query_id: str
    blocks: tuple[np.ndarray, ...]


@dataclass(frozen=True)
class AggregateAnswer:
    """The privatised sum over the participating sites, one array per block."""

    query_id: str
    blocks: tuple[np.ndarray, ...]
    participants: tuple[str, ...]
    #: t of the job: each of the K participants added a share sized so that
    #: K - t of them carry the mechanism's whole noise.
    collusion_tolerance: int = 0

    @property
    def noise_std_factor(self) -> float:
        """The sum's noise std over the mechanism's calibrated one:
        sqrt(K / (K - t)), since K shares each carry a 1 / (K - t) part of
        its variance (Gaussian, Laplace and discrete shares alike). A
        decision that reads the noise's size (a certification margin) must
        use the larger value; privacy is the calibrated one's. Only the
        variance scales so: the sum of Laplace shares is a difference of
        Gamma(K / (K - t)) variables, not a wider Laplace, so a decision that
        reads a Laplace tail needs that law (source_target_clustering/nna.py)."""
        count = len(self.participants)
        if count == 0 or self.collusion_tolerance == 0:
            return 1.0
        return math.sqrt(count / honest_share_count(count, self.collusion_tolerance))

    def noise_std(self, mechanism: Mechanism) -> float:
        """The std of the noise this answer's first block carries, released
        under ``mechanism``: 0 without noise, else its calibrated scale times
        :attr:`noise_std_factor`."""
        if mechanism.is_non_private:
            return 0.0
        return float(mechanism.noise_scales[0]) * self.noise_std_factor

    @property
    def value(self) -> np.ndarray:
        """The single block of a one-block answer."""
        if len(self.blocks) != 1:
            raise ValueError(f"answer has {len(self.blocks)} blocks; use .blocks")
        return self.blocks[0]


@dataclass(frozen=True)
class PerSiteAnswer:
    """Each participating site's own privatised answer (full noise, unmasked),
    one array per block, by site name."""

    query_id: str
    answers: Mapping[str, tuple[np.ndarray, ...]]

    @property
    def participants(self) -> tuple[str, ...]:
        return tuple(self.answers)


@dataclass(frozen=True)
class SelectionAnswer:
    """The index of the candidate one site's selection mechanism released."""

    query_id: str
    index: int
    site_name: str


@dataclass(frozen=True)
class SitePrivacy:
    """What one site's own ledger says a job (and everything so far) cost it."""

    site_name: str
    job: EpsilonReport
    total: EpsilonReport
    cap_epsilon: float
    mechanisms: tuple[Mechanism, ...] = field(default=())


@dataclass(frozen=True)
class SiteBudgetStatement:
    """What an in-process site states before a job, more than a site daemon
    states to a coordinator (``pb.SiteBudget`` and its registration): its
    adjacency and accounting method, its cap, what its ledger has spent (at
    the cap's delta) and the releases it holds, its record count where it is
    public (None under add/remove adjacency) and bound, and whether its
    policy means a large delta (``allow_large_delta``, or a cap delta that is
    itself large)."""

    adjacency: Adjacency
    accounting: str
    epsilon_cap: float
    delta_cap: float
    epsilon_spent: float
    num_records: int | None
    max_records: int | None
    large_delta_meant: bool
    #: Every release the ledger holds (each distinct mechanism and its count),
    #: so a job's plan composes with the whole history as the ledger will.
    history: tuple[tuple[Mechanism, int], ...] = ()


@runtime_checkable
class Federation(Protocol):
    """A set of sites that answer private aggregate queries for one job."""

    @property
    def job_id(self) -> str: ...

    @property
    def site_sizes(self) -> Mapping[str, int]:
        """Public record counts n_k per site (public under replace-one adjacency)."""
        ...

    @property
    def num_sites(self) -> int: ...

    @property
    def dim(self) -> int:
        """The number of features d of every site's records (the sites must
        agree on one schema); public, declared by the sites."""
        ...

    def query(
        self, kernel: str, params: Mapping[str, Any], mechanism: Mechanism
    ) -> AggregateAnswer:
        """Ask every site for its privatised kernel sum; return the aggregate."""
        ...

    def query_per_site(
        self, kernel: str, params: Mapping[str, Any], mechanism: Mechanism
    ) -> PerSiteAnswer:
        """Ask every site for its own privatised kernel answer, each noised in
        full by the site itself; the coordinator sees every one."""
        ...

    def select(
        self, kernel: str, params: Mapping[str, Any], mechanism: Mechanism
    ) -> SelectionAnswer:
        """Ask the job's single site for the index its selection mechanism
        picks among the kernel's scores (refused when the job has several)."""
        ...

    def privacy_spent(self, delta: float | None = None) -> dict[str, SitePrivacy]:
        """Each site's spend for this job at ``delta`` (default: each site's
        cap delta) and in total, as read from its own ledger."""
        ...

    def restricted_to(self, part: RecordPart) -> Federation:
        """A view of this federation whose every query runs, at every site,
        on ``part`` of its records only (same job, sites and ledgers;
        :class:`RecordPartView`)."""
        ...


class RecordPartView:
    """The federation ``base`` restricted to one part of every site's records
    (:mod:`privadapt.common.data.record_parts`): every query it makes carries the
    part, which each site applies to its own records and which is bound into
    every site's signed query digest. ``site_sizes`` are PUBLIC estimates of
    the parts' sizes (:meth:`RecordPart.public_size`), for normalisation
    only, never true counts (those are private).

    ``base`` is a federation whose ``query``, ``query_per_site`` and
    ``select`` take a keyword ``records`` (LocalFederation,
    NetworkFederation, PlanningFederation); its query ids, rounds and store
    are shared with the view, so a job may alternate between them.
    """

    def __init__(self, base: Any, part: RecordPart) -> None:
        if not isinstance(part, RecordPart):
            raise TypeError(f"part must be a RecordPart, got {type(part).__name__}")
        self._base = base
        self.records = part

    @property
    def job_id(self) -> str:
        return self._base.job_id

    @property
    def site_sizes(self) -> dict[str, int]:
        """Public estimates of each site's part size (class docstring)."""
        return {name: self.records.public_size(n) for name, n in self._base.site_sizes.items()}

    @property
    def num_sites(self) -> int:
        return self._base.num_sites

    @property
    def dim(self) -> int:
        return self._base.dim

    @property
    def codec(self) -> Any:
        """The base's fixed-point grid (``AttributeError`` when it has none):
        a part's releases are rounded onto the same grid as the base's."""
        return self._base.codec

    def query(
        self, kernel: str, params: Mapping[str, Any], mechanism: Mechanism
    ) -> AggregateAnswer:
        return self._base.query(kernel, params, mechanism, records=self.records)

    def query_per_site(
        self, kernel: str, params: Mapping[str, Any], mechanism: Mechanism
    ) -> PerSiteAnswer:
        return self._base.query_per_site(kernel, params, mechanism, records=self.records)

    def select(
        self, kernel: str, params: Mapping[str, Any], mechanism: Mechanism
    ) -> SelectionAnswer:
        return self._base.select(kernel, params, mechanism, records=self.records)

    def privacy_spent(self, delta: float | None = None) -> dict[str, SitePrivacy]:
        return self._base.privacy_spent(delta)

    def restricted_to(self, part: RecordPart) -> RecordPartView:
        """The base federation restricted to ``part`` instead (not nested)."""
        return RecordPartView(self._base, part)


class OneSiteView:
    """The federation ``base`` narrowed to its site ``site_name`` (and to
    ``part`` of that site's records): every query is asked of that site
    alone, as a per-site release (:class:`ReleaseForm`: the site adds the
    full noise itself, since no other site's share joins it), so it is
    charged to that site's ledger only and the other sites never see it.
    What one site's records alone can give (a model per site, seed 004's
    confidence boosting with the sites as its chunks) is then released
    under that site's own guarantee: parallel composition across sites is
    what per-site ledgers express.

    The coordinator sees the site's release, as in any per-site release;
    a site whose policy sets ``min_participants`` above 1 refuses a round of
    itself alone. ``base`` is a federation whose ``query_per_site`` and
    ``select`` take keywords ``records`` and ``sites`` (LocalFederation,
    NetworkFederation, PlanningFederation), which refuses a name that is not
    one of its sites; query ids are shared with it.
    """

    def __init__(self, base: Any, site_name: str, part: RecordPart = RecordPart.ALL) -> None:
        if not isinstance(part, RecordPart):
            raise TypeError(f"part must be a RecordPart, got {type(part).__name__}")
        self._base = base
        self.site_name = site_name
        self.records = part

    @property
    def job_id(self) -> str:
        return self._base.job_id

    @property
    def site_sizes(self) -> dict[str, int]:
        """The site's public size (a public estimate for a part: RecordPartView)."""
        return {self.site_name: self.records.public_size(self._base.site_sizes[self.site_name])}

    @property
    def num_sites(self) -> int:
        return 1

    @property
    def dim(self) -> int:
        return self._base.dim

    def query(
        self, kernel: str, params: Mapping[str, Any], mechanism: Mechanism
    ) -> AggregateAnswer:
        """The site's own release (a sum over one site is its answer)."""
        answer = self.query_per_site(kernel, params, mechanism)
        return AggregateAnswer(answer.query_id, answer.answers[self.site_name],
                               (self.site_name,))

    def query_per_site(
        self, kernel: str, params: Mapping[str, Any], mechanism: Mechanism
    ) -> PerSiteAnswer:
        return self._base.query_per_site(kernel, params, mechanism, records=self.records,
                                         sites=(self.site_name,))

    def select(
        self, kernel: str, params: Mapping[str, Any], mechanism: Mechanism
    ) -> SelectionAnswer:
        return self._base.select(kernel, params, mechanism, records=self.records,
                                 sites=(self.site_name,))

    def privacy_spent(self, delta: float | None = None) -> dict[str, SitePrivacy]:
        """The site's own ledger (the other sites were not asked); empty where
        the base reports none (a dry run's planning federation)."""
        spent = self._base.privacy_spent(delta)
        return {self.site_name: spent[self.site_name]} if self.site_name in spent else {}

    def restricted_to(self, part: RecordPart) -> OneSiteView:
        """The same site on ``part`` of its records instead (not nested)."""
        return OneSiteView(self._base, self.site_name, part)
