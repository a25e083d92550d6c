"""Per-target counts and sums of the private points nearest each target point:
the one release of NNA (seed 001, ../shared/seeds/001_bc09c11f93585935.txt,
Alg. 2 lines 3-4: h_x, n_x = |h_x|, r_x = sum_{s in h_x} s).

Params: ``targets``, the m public (coreset) target points T, an array (m, d).
Each site clips each private point s to ||s|| <= 1/2 (:data:`CLIP_NORM`, the
normalisation of seed 001's experiments, so any two points are within 1),
assigns it to its nearest target point (the cell h_x it falls in) and returns
one block of shape (m, d + 1): row x is (n_x, r_x). Over sites, the secure sum
of the blocks is the NNA statistic of the union of the sites' points.

Sensitivity (derived here; the site computes it from the public parameters).
A record's cell depends on that record and the public targets only, so the
other records' cells and contributions do not move when it changes.

* Add/remove one record s: one row x changes, by (1, s): L2 sqrt(1 + ||s||^2)
  <= sqrt(1 + 1/4) = sqrt(5)/2, L1 1 + ||s||_1 <= 1 + sqrt(d)/2.
* Replace s by s': in different cells, two rows change, by -(1, s) and
  (1, s'): L2 sqrt(2 + ||s||^2 + ||s'||^2) <= sqrt(5/2), L1 <= 2 + sqrt(d); in
  the same cell only the sum moves, by s' - s: L2 <= 1, L1 <= sqrt(d). So
  sqrt(5/2) and 2 + sqrt(d).

Seed 001's constants (Theorems 5.10 and 5.12), from its assumption that any
two points are within 1 rather than within the clip ball: L1 sqrt(d) + 1 and
L2 2 (add/remove; its sum changes by a point s, which it bounds by 1 in L2,
and it adds the two L2 norms). Both exceed the add/remove values here, so the
paper's noise (b = (sqrt(d) + 1)/epsilon, sigma = sqrt(2/rho)) is sound for
this kernel and charged at what it really spends.

Rounding and float error (issue 17). Only the changed rows differ between
neighbours: every other row is bitwise identical (the same records in the
same cells, summed exactly), so the grid rounding and the computation error
are charged on the d + 1 changed entries (2 (d + 1) under replace-one), not
on all m (d + 1) (:meth:`NearestTargetSums.charged_sensitivities`, through
the one formula :func:`~privadapt.common.kernels.grid_rounding.rounding_charged`).
The sums are exact scatter-adds (:class:`~privadapt.common.kernels.exact_sum.ExactSum`),
the counts are integers; the cell of a record is the scipy k-d tree's nearest
target of that record alone (built on the public targets; a query's result
depends on the query point and the tree only), so no BLAS block couples
records.

Site work: a k-d tree of the m targets and one nearest-neighbour query per
record; m <= :data:`MAX_TARGETS` and m (d + 1) <= :data:`MAX_RELEASE_ENTRIES`
bound both the work per record and the release.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.spatial import cKDTree

from privadapt.common.data import Dataset
from privadapt.common.geometry import clip_rows_to_norm, row_norms
from privadapt.common.kernels.base import (
    CHUNK_RECORDS,
    Kernel,
    KernelParams,
    readonly,
    register,
    wire_values,
)
from privadapt.common.kernels.exact_sum import ExactSum, clip_slack, conversion_error
from privadapt.common.kernels.grid_rounding import Norm, rounding_charged
from privadapt.common.mechanisms import Adjacency
from privadapt.common.validation import check_finite_array

#: Every private point is clipped to this norm (seed 001: maximal norm 1/2).
CLIP_NORM = 0.5
#: The largest norm of a target point a site accepts: the public target is
#: normalised like the private points; up to 1 leaves room and keeps every
#: distance below 3/2.
TARGET_NORM_BOUND = 1.0
#: The most target points one query may send (the site's k-d tree and release).
MAX_TARGETS = 2**16
#: The most entries m (d + 1) of one release.
MAX_RELEASE_ENTRIES = 2**22
#: Targets per leaf of the k-d tree: in 8 dimensions, with thousands of
#: clustered targets, leaves of 64 answered 2 to 6 times faster than scipy's
#: default 16 (the tree cannot prune inside a cluster; a leaf is scanned in
#: one tight loop).
TREE_LEAF_SIZE = 64


def check_targets(value: Any, dim: int | None = None) -> np.ndarray:
    """Target points as a read-only (m, d) float array: finite, 1 <= m <=
    MAX_TARGETS, m (d + 1) <= MAX_RELEASE_ENTRIES, every norm at most
    TARGET_NORM_BOUND and d = ``dim`` when given; ValueError otherwise."""
    targets = check_finite_array("parameter 'targets'", value, (None, None))
    m, d = targets.shape
    if m < 1 or d < 1:
        raise ValueError(f"parameter 'targets' must hold at least one point of at least one "
                         f"feature, got shape {targets.shape}")
    if dim is not None and d != dim:
        raise ValueError(f"parameter 'targets' must have d = {dim} features, got shape "
                         f"{targets.shape}")
    if m > MAX_TARGETS or m * (d + 1) > MAX_RELEASE_ENTRIES:
        raise ValueError(f"parameter 'targets' holds {m} points of {d} features; a site "
                         f"answers at most {MAX_TARGETS} points and {MAX_RELEASE_ENTRIES} "
                         "released entries per query")
    if np.any(row_norms(targets) > TARGET_NORM_BOUND):
        raise ValueError(f"parameter 'targets' has a point of norm above {TARGET_NORM_BOUND} "
                         "(normalise the target like the private points)")
    return readonly(targets)


@dataclass(frozen=True, eq=False)
class NearestTargetParams(KernelParams):
    """``targets``: the public target points (m, d) the records are assigned to."""

    targets: np.ndarray

    def __post_init__(self) -> None:
        object.__setattr__(self, "targets", check_targets(self.targets))

    @classmethod
    def from_wire(cls, params: Mapping[str, Any], dim: int) -> NearestTargetParams:
        (targets,) = wire_values(params, ("targets",)).values()
        return cls(check_targets(targets, dim))

    def to_wire(self) -> dict[str, Any]:
        return {"targets": self.targets}

    @property
    def num_targets(self) -> int:
        return int(self.targets.shape[0])


def nearest_cells(records: np.ndarray, tree: cKDTree) -> np.ndarray:
    """Each (clipped) record's nearest target, by the k-d tree of the public
    targets: a function of that record alone."""
    _, cells = tree.query(records, k=1)
    return np.asarray(cells, dtype=np.int64)


@register
class NearestTargetSums(Kernel):
    """(n_x, r_x) for every target point x: counts and sums of the clipped
    private points whose nearest target point is x (module docstring)."""

    name = "nearest_target_sums"
    Params = NearestTargetParams

    def output_shapes(self, params: NearestTargetParams, dim: int) -> tuple[tuple[int, ...]]:
        return ((params.num_targets, dim + 1),)

    def l2_sensitivities(self, params: NearestTargetParams, adjacency: Adjacency) -> tuple[float]:
        one = 1.0 + CLIP_NORM**2  # ||(1, s)||^2
        return (math.sqrt(2 * one if adjacency == Adjacency.REPLACE_ONE else one),)

    def sensitivities(
        self, params: NearestTargetParams, adjacency: Adjacency, norm: Norm, dim: int
    ) -> tuple[float, ...]:
        if norm == "l2":
            return self.l2_sensitivities(params, adjacency)
        one = 1.0 + math.sqrt(dim) * CLIP_NORM  # ||(1, s)||_1
        return (2 * one if adjacency == Adjacency.REPLACE_ONE else one,)

    def clip_bounds(self, params: NearestTargetParams) -> dict[str, float]:
        return {"clip_norm": CLIP_NORM}

    def max_abs_sum(self, params: NearestTargetParams, num_records: int) -> float:
        return float(num_records)  # counts <= n, sums' entries <= n / 2

    def computation_errors(
        self, params: NearestTargetParams, dim: int, max_records: int
    ) -> tuple[float]:
        # Counts are exact; a sum entry is the one float64 rounding of an
        # exact sum (<= n / 2) plus the float clip's few ulps per record.
        return (clip_slack(CLIP_NORM, dim) + conversion_error(max_records * CLIP_NORM),)

    def charged_sensitivities(
        self, params: NearestTargetParams, adjacency: Adjacency, norm: Norm, dim: int,
        fractional_bits: int, max_records: int = 1,
    ) -> tuple[float, ...]:
        # Only the changed rows' entries differ on neighbours (module docstring).
        changed = (2 if Adjacency(adjacency) == Adjacency.REPLACE_ONE else 1) * (dim + 1)
        return rounding_charged(self.sensitivities(params, adjacency, norm, dim), ((changed,),),
                                norm, fractional_bits,
                                self.computation_errors(params, dim, max_records))

    def compute(
        self, data: Dataset, params: NearestTargetParams, state: MutableMapping[str, Any]
    ) -> tuple[np.ndarray]:
        m, dim = params.num_targets, data.dim
        tree = cKDTree(params.targets, leafsize=TREE_LEAF_SIZE)
        counts = np.zeros(m, dtype=np.int64)
        sums = ExactSum((m, dim))
        for start in range(0, data.num_records, CHUNK_RECORDS * 8):
            clipped = clip_rows_to_norm(data.features[start:start + CHUNK_RECORDS * 8],
                                        CLIP_NORM)
            cells = nearest_cells(clipped, tree)
            counts += np.bincount(cells, minlength=m)
            sums.add_grouped_terms(clipped, cells, CLIP_NORM)
        return (np.column_stack([counts.astype(np.float64), sums.value()]),)
