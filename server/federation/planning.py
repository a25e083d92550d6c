"""The releases a job will make, found by running its own algorithm on stand-ins.

Why not a planner per algorithm: every algorithm already decides its
mechanisms itself (``calibrate_noise_multiplier`` for its T, its kernels'
``mechanism`` for the sensitivities) before and while it queries. A second
description of the same choices would drift from the code that runs. So a
dry run (:func:`~privadapt.server.jobs.dry_run.plan_releases`) fits the job's
estimator exactly as a job does on a :class:`PlanningFederation`: a ``Federation`` with the
job's public sizes and dimension that records every query and answers it with
zeros of the kernel's released shapes (index 0 for a selection). It rounds
onto the fixed-point grid a job's ``NetworkFederation`` uses (its ``codec``:
an algorithm with integer noise, such as the discrete Laplace, sizes its
mechanism for that grid). Nothing is sent, stored or charged; no site is
contacted.

What this can miss: an algorithm whose later mechanisms depend on the
*values* of earlier answers (none of the job algorithms today: their noise is
fixed by epsilon, delta, T and the clipping) would be previewed along the
zero-answer path. The sites' ledgers remain the authority on every charge.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from privadapt.common.data.record_parts import RecordPart
from privadapt.common.errors import QueryRefusedError
from privadapt.common.federation import (
    AggregateAnswer,
    PerSiteAnswer,
    RecordPartView,
    ReleaseForm,
    SelectionAnswer,
    SitePrivacy,
)
from privadapt.common.kernels import get_kernel
from privadapt.common.kernels.base import SIZING_RECORDS
from privadapt.common.kernels.site_charge import site_charge
from privadapt.common.mechanisms import Adjacency, Mechanism
from privadapt.common.numerics.fixed_point import FixedPointCodec

#: The grid a job's NetworkFederation rounds onto: server/jobs/manager.py gives it no
#: codec of its own, so it is the default one (common/numerics/fixed_point.py).
JOB_GRID = FixedPointCodec()


@dataclass(frozen=True)
class PlannedRelease:
    """One query the algorithm will ask: what every participating site is
    charged for (its own answer, or its share of a secure sum)."""

    kernel: str
    params: Mapping[str, Any]
    mechanism: Mechanism
    form: ReleaseForm
    records: RecordPart = RecordPart.ALL
    fractional_bits: int = JOB_GRID.fractional_bits  # the grid the site rounds onto
    sites: tuple[str, ...] | None = None  # None: every site of the job


class PlanningFederation:
    """A ``Federation`` that records queries and answers them with zeros
    (module docstring). ``sizes``: each site's public n, None where it is
    private (an add/remove site), as the networked federation has them;
    ``codec``: the job's fixed-point grid."""

    def __init__(self, job_id: str, sizes: Mapping[str, int | None], dim: int,
                 codec: FixedPointCodec = JOB_GRID) -> None:
        self._job_id = job_id
        self._sizes = dict(sizes)
        self._dim = dim
        self.codec = codec
        self.releases: list[PlannedRelease] = []

    @property
    def job_id(self) -> str:
        return self._job_id

    @property
    def site_sizes(self) -> dict[str, int]:
        private = sorted(name for name, n in self._sizes.items() if n is None)
        if private:
            # As NetworkFederation.site_sizes refuses it at run time.
            raise QueryRefusedError(
                f"site {private[0]!r} accounts under add/remove adjacency, where its size is "
                "private: query record_count with noise instead")
        return {name: int(n) for name, n in self._sizes.items() if n is not None}

    @property
    def num_sites(self) -> int:
        return len(self._sizes)

    @property
    def dim(self) -> int:
        return self._dim

    def restricted_to(self, part: RecordPart) -> RecordPartView:
        return RecordPartView(self, part)

    def _record(self, kernel: str, params: Mapping[str, Any], mechanism: Mechanism,
                form: ReleaseForm, records: RecordPart,
                sites: Sequence[str] | None = None) -> tuple[str, tuple[np.ndarray, ...]]:
        if sites is not None and (not sites or not set(sites) <= set(self._sizes)
                                  or len(set(sites)) != len(sites)):
            raise ValueError(f"sites must be distinct names among {list(self._sizes)}, "
                             f"got {list(sites)}")
        self.releases.append(PlannedRelease(kernel, dict(params), mechanism, form, records,
                                            self.codec.fractional_bits,
                                            None if sites is None else tuple(sites)))
        found = get_kernel(kernel)
        shapes = found.output_shapes(found.Params.from_wire(params, self._dim), self._dim)
        return f"plan-{len(self.releases)}", tuple(np.zeros(shape) for shape in shapes)

    def query(self, kernel: str, params: Mapping[str, Any], mechanism: Mechanism,
              *, records: RecordPart = RecordPart.ALL) -> AggregateAnswer:
        query_id, blocks = self._record(kernel, params, mechanism, ReleaseForm.SECURE_SUM,
                                        records)
        return AggregateAnswer(query_id, blocks, tuple(self._sizes))

    def query_per_site(self, kernel: str, params: Mapping[str, Any], mechanism: Mechanism,
                       *, records: RecordPart = RecordPart.ALL,
                       sites: Sequence[str] | None = None) -> PerSiteAnswer:
        query_id, blocks = self._record(kernel, params, mechanism, ReleaseForm.PER_SITE,
                                        records, sites)
        return PerSiteAnswer(query_id, {name: blocks for name in (sites or self._sizes)})

    def select(self, kernel: str, params: Mapping[str, Any], mechanism: Mechanism,
               *, records: RecordPart = RecordPart.ALL,
               sites: Sequence[str] | None = None) -> SelectionAnswer:
        if len(self._sizes if sites is None else sites) != 1:
            raise QueryRefusedError(
                f"job {self._job_id!r}: a selection is answered only when one site holds all "
                f"of the job's private data, and this job has {len(self._sizes)} sites")
        query_id, _ = self._record(kernel, params, mechanism, ReleaseForm.PER_SITE, records,
                                   sites)
        return SelectionAnswer(query_id, 0, next(iter(sites or self._sizes)))

    def privacy_spent(self, delta: float | None = None) -> dict[str, SitePrivacy]:
        return {}  # nothing was charged; the preview is server/jobs/privacy_plan.py's


def charged_at_site(release: PlannedRelease, adjacency: Adjacency, dim: int,
                    max_records: int = SIZING_RECORDS) -> Mechanism:
    """The release as a site accounting under ``adjacency``, with at most
    ``max_records`` records (its public n under replace-one), charges it:
    the site's own rule
    (:func:`~privadapt.common.kernels.site_charge.site_charge`), on the
    release's record part and grid."""
    kernel = get_kernel(release.kernel)
    params = kernel.Params.from_wire(release.params, dim)
    return site_charge(kernel, params, release.mechanism, release.records, adjacency, dim,
                       release.fractional_bits, max_records)
