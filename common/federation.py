"""The spine: algorithms talk to a Federation through private aggregate queries.

    answer = federation.query(kernel, params, mechanism)

A *kernel* (``privadapt.common.kernels``) is the only code that reads private
records; a *mechanism* (``privadapt.common.mechanisms``) says how its sum is
privatised; a *Federation* turns the query into one privatised aggregate. An
algorithm is written against :class:`Federation` only and never knows whether
its sites are in-process objects or daemons across the network (DESIGN.md 3).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from privadapt.common.accounting import EpsilonReport
from privadapt.common.fixed_point import DEFAULT_FRACTIONAL_BITS
from privadapt.common.mechanisms import Mechanism


@dataclass(frozen=True)
class Query:
    """One private aggregate query as a site receives it.

    ``params`` are public (model weights, clip bounds); ``collusion_tolerance``
    is the job's t, which sizes every site's noise share (sigma^2 / (K - t));
    ``fractional_bits`` fixes the aggregation grid 2^-f every share is rounded to.
    """

    job_id: str
    query_id: str
    kernel: str
    params: Mapping[str, Any]
    mechanism: Mechanism
    collusion_tolerance: int = 0
    fractional_bits: int = DEFAULT_FRACTIONAL_BITS


@dataclass(frozen=True)
class SiteShare:
    """A site's answer: its clipped sums plus its noise share, each rounded onto
    the fixed-point grid and encoded modulo 2^64 (uint64), one array per block."""

    site_name: str
    query_id: str
    blocks: tuple[np.ndarray, ...]


@dataclass(frozen=True)
class AggregateAnswer:
    """The privatised sum over the participating sites, one array per block."""

    query_id: str
    blocks: tuple[np.ndarray, ...]
    participants: tuple[str, ...]

    @property
    def value(self) -> np.ndarray:
        """The single block of a one-block answer."""
        if len(self.blocks) != 1:
            raise ValueError(f"answer has {len(self.blocks)} blocks; use .blocks")
        return self.blocks[0]


@dataclass(frozen=True)
class SitePrivacy:
    """What one site's own ledger says a job (and everything so far) cost it."""

    site_name: str
    job: EpsilonReport
    total: EpsilonReport
    cap_epsilon: float
    mechanisms: tuple[Mechanism, ...] = field(default=())


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

    def privacy_spent(self, delta: float | None = None) -> dict[str, SitePrivacy]:
        """Each site's spend for this job at ``delta`` (default: each site's
        cap delta) and in total, as read from its own ledger."""
        ...
