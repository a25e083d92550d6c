"""For every target point, the average of a site's t nearest private points:
the release of NAS (seed 001, ../shared/seeds/001_bc09c11f93585935.txt,
Alg. 1 line 1: c_x = (1/t) sum_{i <= t} s_x^i), answered per site.

Params: ``targets``, m public target points (m, d), checked as for NNA
(:func:`~privadapt.common.kernels.nearest_target_sums.check_targets`), and
``t``, 1 <= t <= :data:`MAX_NEIGHBOURS`. The site clips its points to
||s|| <= 1/2 and returns one block (m, d) whose row x is
c_x = (1/t) sum of the min(t, n) clipped points nearest x. With fewer than t
records the missing ones count as 0 (the origin, inside the ball): nothing
the site answers depends on whether n < t except through the points
themselves, which the sensitivity below covers.

Sensitivity (any two clipped points are within 1). Order the records by
(distance to x, position in the dataset); N_t(X) is the first min(t, |X|).
Add a record s: N_t(X u {s}) is N_t(X) or N_{t-1}(X) u {s}, so c_x moves by
0, s/t (fewer than t records) or (s - f)/t (f the old t-th): at most 1/t in
L2 and sqrt(d)/t in L1. Replace s by s' (X = Y u {s}, X' = Y u {s'}): each of
N_t(X), N_t(X') is N_t(Y) or N_{t-1}(Y) plus the new record, so c_x moves by
one of 0, (s - y)/t, (y - s')/t, (s - s')/t: again at most 1/t. A record can
be among the t nearest of every target point, so over all m rows, under both
adjacencies: L2 sqrt(m)/t, L1 m sqrt(d)/t. This is the whole release's L1
sensitivity that Theorem 5.9's b = n sqrt(d)/(t epsilon) is calibrated to
(its n is |T| = m: n Laplace mechanisms of L1 sensitivity sqrt(d)/t each at
epsilon/n, by basic composition, are one Laplace mechanism of L1
sensitivity n sqrt(d)/t at scale b), and Theorem 5.11's sigma =
(1/t) sqrt(n/(2 rho)) to (the L2 sqrt(n)/t, rho = (n/t^2)/(2 sigma^2)).

Determinism. The order must not depend on other records: each
(record, target) squared distance is computed from that pair alone
(coordinate by coordinate, elementwise), ties go to the earlier record.
The average of the chosen points is a float sum whose rounding depends on
the chosen set; ``computation_errors`` charges it, (t + 2) 2^-53 per entry,
plus the float clip's few ulps.

Work that does not depend on the data. An earlier version let a k-d tree
propose candidates (every record within the t-th distance plus a margin);
a coordinator sending 2^16 targets at one point with t = 1 made
every record clipped onto the sphere a candidate of every target: 4.3 GB and
23 s at n = 20,000, a MemoryError whose occurrence depended on the private
norms, and a running time that told how many copies of a guessed record the
site held (0.27 s for one, 6.3 s for 128). Now every target block meets
every record chunk once (brute force: m n d coordinate operations, the same
for any records), keeping a running top t by (distance, index); memory is
bounded by the chunk sizes. The work is bounded before any record is read:
m d <= :data:`MAX_TARGET_COORDINATES`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, MutableMapping
from typing import Any

import numpy as np

from privadapt.common.data.dataset import Dataset
from privadapt.common.kernels.base import Kernel, KernelParams, register, wire_values
from privadapt.common.kernels.exact_sum import FLOAT_UNIT_ROUNDOFF, clip_slack
from privadapt.common.kernels.nearest_target_sums import CLIP_NORM, check_targets
from privadapt.common.mechanisms import Adjacency
from privadapt.common.numerics.geometry import clip_rows_to_norm
from privadapt.common.validation import frozen_value

#: The largest t a site averages over (its work per target grows with t).
MAX_NEIGHBOURS = 4096
#: The most target coordinates (m d) one query may ask for: the site's work
#: is m n d, about a minute at n = 2^20 records at this bound.
MAX_TARGET_COORDINATES = 2**16
#: Pairs (targets x records) per working block: bounds the site's memory.
_BLOCK_PAIRS = 2**18


@frozen_value(eq=False)
class NearestSourceParams(KernelParams):
    """``targets``: m public points (m, d); ``t``: how many nearest private
    points each target's average takes."""

    targets: np.ndarray
    t: int

    def __post_init__(self) -> None:
        self.targets = check_targets(self.targets)
        t = self.t
        if isinstance(t, bool) or not isinstance(t, int | np.integer) \
                or not 1 <= t <= MAX_NEIGHBOURS:
            raise ValueError(f"parameter 't' must be an integer in [1, {MAX_NEIGHBOURS}], "
                             f"got {t!r}")
        self.t = int(t)
        m, d = self.targets.shape
        if m * d > MAX_TARGET_COORDINATES:
            raise ValueError(f"parameter 'targets' holds {m} points of {d} features; a site "
                             f"averages for at most {MAX_TARGET_COORDINATES} target "
                             "coordinates (m d) per query (its work is m n d)")

    @classmethod
    def from_wire(cls, params: Mapping[str, Any], dim: int) -> NearestSourceParams:
        values = wire_values(params, ("targets", "t"))
        return cls(check_targets(values["targets"], dim), values["t"])

    def to_wire(self) -> dict[str, Any]:
        return {"targets": self.targets, "t": self.t}


def nearest_indices(records: np.ndarray, targets: np.ndarray, t: int) -> np.ndarray:
    """For each target, the indices of its min(t, n) nearest ``records`` in
    the order (pair distance, index), shape (m, min(t, n)): every target
    against every record, in blocks (module docstring)."""
    n, m = len(records), len(targets)
    count = min(t, n)
    target_block = max(1, min(m, _BLOCK_PAIRS // max(count, 1024)))
    record_chunk = max(1, _BLOCK_PAIRS // target_block)
    chosen = np.empty((m, count), dtype=np.int64)
    for first in range(0, m, target_block):
        block = targets[first:first + target_block]
        best_squared = np.empty((len(block), 0))
        best_index = np.empty((len(block), 0), dtype=np.int64)
        for start in range(0, n, record_chunk):
            chunk = records[start:start + record_chunk]
            squared = np.zeros((len(block), len(chunk)))
            for j in range(records.shape[1]):  # coordinate by coordinate: per pair
                difference = chunk[None, :, j] - block[:, None, j]
                squared += difference * difference
            index = np.broadcast_to(np.arange(start, start + len(chunk)), squared.shape)
            merged_squared = np.concatenate([best_squared, squared], axis=1)
            merged_index = np.concatenate([best_index, index], axis=1)
            order = np.lexsort((merged_index, merged_squared), axis=-1)[:, :count]
            best_squared = np.take_along_axis(merged_squared, order, axis=1)
            best_index = np.take_along_axis(merged_index, order, axis=1)
        chosen[first:first + len(block)] = best_index
    return chosen


@register
class NearestSourceAverages(Kernel):
    """c_x = (1/t) sum of the site's t nearest clipped points to each target x
    (module docstring); meant for per-site releases (NAS)."""

    name = "nearest_source_averages"
    Params = NearestSourceParams

    def work(self, params: NearestSourceParams, dim: int, num_records: int) -> float:
        # Every public target against every record, coordinate by coordinate
        # (m n d), and for each target the running t best merged with each
        # chunk of records and sorted by (distance, index): about 2 n + t
        # keys per target (chunks hold max(t, 1024) records), each at about
        # two keys' log2 comparisons. The estimate once counted only n d +
        # m t d: 1.7e6 for 6.7 s of CPU at n = 43,000, m = 1,024, t = 64.
        targets, depth = params.targets.shape[0], max(dim, 1)
        sort = 2.0 * math.log2(2 * max(params.t, 1024))
        per_target = float(num_records) * (depth + 2 * sort) + params.t * (depth + sort)
        return float(num_records) * depth + targets * per_target

    def output_shapes(self, params: NearestSourceParams, dim: int) -> tuple[tuple[int, ...]]:
        return (params.targets.shape,)

    def l2_sensitivities(self, params: NearestSourceParams, adjacency: Adjacency
                         ) -> tuple[float]:
        # 2 CLIP_NORM = 1: the diameter of the clip ball, per target row.
        return (np.sqrt(params.targets.shape[0]) * 2 * CLIP_NORM / params.t,)

    def clip_bounds(self, params: NearestSourceParams) -> dict[str, float]:
        return {"clip_norm": CLIP_NORM}

    def max_abs_sum(self, params: NearestSourceParams, num_records: int) -> float:
        return CLIP_NORM  # an average of points in the ball, whatever n

    def computation_errors(
        self, params: NearestSourceParams, dim: int, max_records: int
    ) -> tuple[float]:
        return (clip_slack(CLIP_NORM, dim) + (params.t + 2) * FLOAT_UNIT_ROUNDOFF,)

    def compute(
        self, data: Dataset, params: NearestSourceParams, state: MutableMapping[str, Any]
    ) -> tuple[np.ndarray]:
        targets = params.targets
        out = np.zeros(targets.shape)
        if data.num_records == 0:
            return (out,)
        records = clip_rows_to_norm(data.features, CLIP_NORM)
        chosen = nearest_indices(records, targets, params.t)
        step = max(1, _BLOCK_PAIRS // chosen.shape[1])
        for first in range(0, len(targets), step):
            rows = chosen[first:first + step]
            out[first:first + len(rows)] = records[rows].sum(axis=1) / params.t
        return (out,)
