"""A federation of in-process sites, for experiments, benchmarks and tests.

Each query goes through the wire encoding and back before the sites see it,
and sites return shares already encoded on the fixed-point grid; the federation
sums them modulo 2^64 and decodes, as the networked federation does (without
the pairwise masks, which cancel there), so both see the same parameters and
round identically (DESIGN.md section 3).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from privadapt.client.site import Site
from privadapt.common.errors import QueryRefusedError
from privadapt.common.federation import AggregateAnswer, Query, SitePrivacy
from privadapt.common.fixed_point import FixedPointCodec
from privadapt.common.mechanisms import Adjacency, Mechanism
from privadapt.common.wire import query_from_proto, query_to_proto


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
        self._sites = tuple(sites)
        self._job_id = job_id or f"job-{uuid.uuid4().hex[:12]}"
        self.collusion_tolerance = collusion_tolerance
        self.codec = codec or FixedPointCodec()
        self._query_numbers = itertools.count(1)

    @property
    def job_id(self) -> str:
        return self._job_id

    @property
    def site_sizes(self) -> dict[str, int]:
        """Public only under replace-one adjacency (DESIGN.md section 2); a site
        accounting add/remove must be asked for a noisy ``record_count`` instead."""
        private = [s.name for s in self._sites if s.policy.adjacency != Adjacency.REPLACE_ONE]
        if private:
            raise QueryRefusedError(
                f"sites {private} account under add/remove adjacency, where their sizes are "
                "private: query record_count with noise instead"
            )
        return {site.name: site.num_records for site in self._sites}

    @property
    def num_sites(self) -> int:
        return len(self._sites)

    def query(
        self, kernel: str, params: Mapping[str, Any], mechanism: Mechanism
    ) -> AggregateAnswer:
        query = Query(
            job_id=self._job_id,
            query_id=f"q{next(self._query_numbers):06d}",
            kernel=kernel,
            params=params,
            mechanism=mechanism,
            collusion_tolerance=self.collusion_tolerance,
            fractional_bits=self.codec.fractional_bits,
        )
        # Through the wire encoding and back, so a query that could not cross the
        # network (an unsupported parameter type, a non-finite value) fails here too.
        query, _ = query_from_proto(query_to_proto(query, round=0))
        shares = [site.answer(query, self.num_sites) for site in self._sites]
        blocks = tuple(
            self.codec.decode(self.codec.add(s.blocks[b] for s in shares))
            for b in range(len(shares[0].blocks))
        )
        return AggregateAnswer(query.query_id, blocks, tuple(s.site_name for s in shares))

    def privacy_spent(self, delta: float | None = None) -> dict[str, SitePrivacy]:
        return {site.name: site.privacy_spent(self._job_id, delta) for site in self._sites}
