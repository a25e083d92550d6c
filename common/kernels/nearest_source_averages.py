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

Determinism (issue 17). The order must not depend on other records: each
(record, target) squared distance is computed from that pair alone
(coordinate by coordinate, elementwise), ties go to the earlier record, and
a k-d tree over the site's records (scipy's, whose distances may round
differently) only proposes candidates: every record within r_t + margin of
x, where r_t is the tree's t-th distance and the margin covers both
arithmetics' error (8 (d + 4) 2^-53, four times a bound on either's error
for distances <= 3/2), so the exact-order t nearest are always among them.
The average of the chosen points is a float sum whose rounding depends on
the chosen set; ``computation_errors`` charges it, (t + 2) 2^-53 per entry,
plus the float clip's few ulps.

Known limit: the candidates are every record within r_t + margin, so a site
whose records sit at one point (many exact duplicates around a target)
examines up to n candidates for that target; the work is bounded by
m n (d + log n), and is about m t log n on spread-out data.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.spatial import cKDTree

from privadapt.common.data import Dataset
from privadapt.common.geometry import clip_rows_to_norm
from privadapt.common.kernels.base import Kernel, KernelParams, register, wire_values
from privadapt.common.kernels.exact_sum import FLOAT_UNIT_ROUNDOFF, clip_slack
from privadapt.common.kernels.nearest_target_sums import CLIP_NORM, check_targets
from privadapt.common.mechanisms import Adjacency

#: The largest t a site averages over (its work per target grows with t).
MAX_NEIGHBOURS = 4096
#: Targets handled together (bounds the (targets, t, d) working array).
_TARGET_CHUNK_ENTRIES = 2**22


@dataclass(frozen=True, eq=False)
class NearestSourceParams(KernelParams):
    """``targets``: m public points (m, d); ``t``: how many nearest private
    points each target's average takes."""

    targets: np.ndarray
    t: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "targets", check_targets(self.targets))
        t = self.t
        if isinstance(t, bool) or not isinstance(t, int | np.integer) \
                or not 1 <= t <= MAX_NEIGHBOURS:
            raise ValueError(f"parameter 't' must be an integer in [1, {MAX_NEIGHBOURS}], "
                             f"got {t!r}")
        object.__setattr__(self, "t", int(t))

    @classmethod
    def from_wire(cls, params: Mapping[str, Any], dim: int) -> NearestSourceParams:
        values = wire_values(params, ("targets", "t"))
        return cls(check_targets(values["targets"], dim), values["t"])

    def to_wire(self) -> dict[str, Any]:
        return {"targets": self.targets, "t": self.t}


def pair_squared_distances(points: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """||points_i - targets_i||^2 row by row, coordinate by coordinate: each
    entry from its own pair alone, in a fixed order."""
    total = np.zeros(len(points))
    for j in range(points.shape[1]):
        difference = points[:, j] - targets[:, j]
        total = total + difference * difference
    return total


def nearest_indices(records: np.ndarray, targets: np.ndarray, t: int) -> np.ndarray:
    """For each target, the indices of its min(t, n) nearest ``records`` in
    the order (pair distance, index), shape (m, min(t, n))."""
    count = min(t, len(records))
    tree = cKDTree(records)
    distances, _ = tree.query(targets, k=count)
    radius = np.asarray(distances).reshape(len(targets), count)[:, -1]
    margin = 8.0 * (records.shape[1] + 4) * FLOAT_UNIT_ROUNDOFF
    proposals = tree.query_ball_point(targets, radius + margin, return_sorted=False)
    sizes = np.array([len(p) for p in proposals], dtype=np.int64)
    candidates = np.concatenate([np.asarray(p, dtype=np.int64) for p in proposals])
    owners = np.repeat(np.arange(len(targets)), sizes)
    squared = pair_squared_distances(records[candidates], targets[owners])
    order = np.lexsort((candidates, squared, owners))  # by target, distance, index
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    picks = order[(starts[:, None] + np.arange(count)[None, :]).reshape(-1)]
    return candidates[picks].reshape(len(targets), count)


@register
class NearestSourceAverages(Kernel):
    """c_x = (1/t) sum of the site's t nearest clipped points to each target x
    (module docstring); meant for per-site releases (NAS)."""

    name = "nearest_source_averages"
    Params = NearestSourceParams

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
        count = min(params.t, len(records))
        chunk = max(1, _TARGET_CHUNK_ENTRIES // (count * records.shape[1]))
        for start in range(0, len(targets), chunk):
            chosen = nearest_indices(records, targets[start:start + chunk], params.t)
            out[start:start + chunk] = records[chosen].sum(axis=1) / params.t
        return (out,)
