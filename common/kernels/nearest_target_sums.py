"""Per-target counts, coordinate sums and (optionally) squared-coordinate sums
of a site's clipped records, each record at its nearest public point: the one
release of NNA (seed 001, ../shared/seeds/001_bc09c11f93585935.txt, Alg. 2
lines 3-4: h_x, n_x = |h_x|, r_x = sum_{s in h_x} s) and one Lloyd step of
seed 001's private baselines (DP Lloyd k-means, Su et al. 2016, and its DP
Gaussian-mixture stand-in for DP-GAN, whose last release adds the squared
sums). One kernel serves both: the statistic is the same, "what falls in the
cell of each public point".

Params (the query; every one range-checked by :meth:`NearestTargetParams.from_wire`):

* ``targets``: the m public points (NNA: the (coreset) target T; the
  baselines: their K centres), an array (m, d), each of norm at most 2 r;
* ``clip_norm`` r (optional, default 1/2 = :data:`CLIP_NORM`, seed 001's
  normalisation, so any two clipped points are within 1);
* ``count_weight`` w > 0 (optional, default 1) and ``moment_weight`` v > 0
  (optional; absent: no moment columns). The weights say how one noise scale
  splits between the count, the sums and the moments (the coordinator divides
  column 0 by w and the moment columns by v): Laplace on one weighted block is
  exactly Su et al.'s split of a round's epsilon between count and sum.

Each site clips each record s to ||s|| <= r, assigns it to its nearest target
a(s) (the cell h_x it falls in) and returns one block of shape (m, 1 + d), or
(m, 1 + 2d) with moments:

    row x = sum_{s : a(s) = x} [w, s_1..s_d, v s_1^2 .. v s_d^2].

Over sites, the secure sum of the blocks is the statistic of the union.
Absent optional parameters are absent from the wire too (NNA's query is
``{"targets": ...}`` alone), so ``to_wire`` gives back what the site received.

Sensitivity (derived here; the site computes it from the public parameters).
a(s) depends on s and the public targets only, so the other records' cells
and rows do not move when one record changes. For a clipped s, ||s|| <= r,
||s||_1 <= sqrt(d) r, sum_j s_j^2 <= r^2 and ||s (.) s||_2^2 = sum_j s_j^4
<= (sum_j s_j^2)^2 <= r^4. With u(s) = [w, s, v s(.)s] (v = 0 without moments):

* add/remove one record s: one row moves by u(s).
  L2: ||u||^2 <= w^2 + r^2 + v^2 r^4.  L1: ||u||_1 <= w + sqrt(d) r + v r^2.
  (Attained for d = 1 at s = r; for d > 1 at s = r e_1 in L2 and, in the
  first two L1 terms, at s = (r / sqrt(d)) (1, .., 1).)
  NNA (w = 1, no moments, r = 1/2): L2 sqrt(5)/2, L1 1 + sqrt(d)/2.
* replace a by b: in different cells two rows move, by -u(a) and u(b):
  L2^2 <= 2 (w^2 + r^2 + v^2 r^4), L1 <= 2 (w + sqrt(d) r + v r^2). In the
  same cell one row moves by [0, b - a, v (b(.)b - a(.)a)]:
  ||a - b||^2 <= 4 r^2 and sum_j (a_j^2 - b_j^2)^2 <= sum_j (a_j^4 + b_j^4)
  <= 2 r^4 (|p - q| <= max(p, q) for p, q >= 0), so L2^2 <= 4 r^2 + 2 v^2 r^4
  (it exceeds the two-row bound only when r > w); in L1,
  ||a - b||_1 + v sum_j |a_j^2 - b_j^2| <= 2 sqrt(d) r + 2 v r^2, never more
  than the two-row bound.
  So replace-one: L2 = max(sqrt(2 (w^2 + r^2 + v^2 r^4)), sqrt(4 r^2 + 2 v^2 r^4)),
  L1 = 2 (w + sqrt(d) r + v r^2). NNA: sqrt(5/2) and 2 + sqrt(d).

The L1 bound is the kernel's own (``sensitivities``), not the generic
sqrt(size) times L2, which would charge sqrt(m (1 + 2d)) times too much.

Seed 001's NNA constants (Theorems 5.10 and 5.12), from its assumption that
any two points are within 1 rather than within the clip ball: L1 sqrt(d) + 1
and L2 2 (add/remove). Both exceed the NNA values above, so the paper's noise
(b = (sqrt(d) + 1)/epsilon, sigma = sqrt(2/rho)) is sound for this kernel and
charged at what it really spends.

Rounding and float error. Only the changed rows differ between
neighbours: every other row is bitwise identical (the same records in the
same cells, each record's own computed term summed exactly), so the grid
rounding and the computation error are charged on the 1 + d (+ d) entries of
one row (two rows under replace-one), not on all of them
(:meth:`NearestTargetSums.charged_sensitivities`, through the one formula
:func:`~privadapt.common.kernels.grid_rounding.rounding_charged`). The sums
and moments are exact scatter-adds of per-record terms
(:class:`~privadapt.common.kernels.exact_sum.ExactSum`), the counts are
integers multiplied by w once; the float error left is the one conversion of
each entry to float64 and a few ulps of a clipped record's own term
(:meth:`NearestTargetSums.computation_errors`). The cell of a record is its
canonical nearest target (:mod:`~privadapt.common.kernels.nearest_cells`):
the lowest index among the targets at the least squared distance, that
distance summed coordinate by coordinate in a fixed order from the record
and the target alone. So ties (a record equidistant to several targets,
duplicated targets) and near-ties are decided by the record and the targets,
never by the other records, although the search groups records into blocks
for speed: it provably returns that cell for every record (float32 and BLAS
only filter candidates, with proved margins; the rule decides). Records and
targets are divided by the power of two at or above 2 r before the search
sees them (exact, and it puts every record's norm at or below 1/2 and every
target's at or below 1 + 1e-9 whatever r is: nothing overflows).

Range checks: 1 <= m <= :data:`MAX_TARGETS`, m (1 + 2d) <= :data:`MAX_RELEASE_ENTRIES`
(they bound the site's work per record and the release), finite targets of
norm at most 2 r (every record lies in the clip ball, so a farther target is
a coordinator error; 2 r leaves NNA's normalised target room), r, w, v and
the moment columns' bound v r^2 within :data:`~.base.BOUND_RANGE` (the last
one is the overflow found by the rounding attack: a v under 2^200 times a
large r^2 would otherwise overflow the moments).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, MutableMapping
from typing import Any

import numpy as np

from privadapt.common.data.dataset import Dataset
from privadapt.common.kernels.base import (
    BOUND_RANGE,
    CHUNK_RECORDS,
    Kernel,
    KernelParams,
    check_bound,
    readonly,
    register,
    wire_values,
)
from privadapt.common.kernels.exact_sum import ExactSum, clip_slack, conversion_error
from privadapt.common.kernels.grid_rounding import Norm, rounding_charged
from privadapt.common.kernels.nearest_cells import SEARCH_RECORDS, TargetIndex, nearest_targets
from privadapt.common.mechanisms import Adjacency
from privadapt.common.numerics.geometry import clip_rows_to_norm, row_norms
from privadapt.common.validation import check_finite_array, frozen_value

#: The default clip radius (seed 001: maximal norm 1/2).
CLIP_NORM = 0.5
#: The largest norm of a target point relative to the clip radius: NNA's
#: public target is normalised like the private points; 2 r leaves room and
#: keeps every distance below 3 r.
TARGET_NORM_FACTOR = 2.0
#: The largest target norm at the default clip radius.
TARGET_NORM_BOUND = TARGET_NORM_FACTOR * CLIP_NORM
#: The most target points one query may send (the site's search and release).
MAX_TARGETS = 2**16
#: The most entries of one release.
MAX_RELEASE_ENTRIES = 2**22
#: The most target coordinates (m d) one query may send. A site's work per
#: record grows with them (the search prunes little in high dimension): we
#: measured 10 ms per record at m = 2^16, d = 63 with a
#: k-d tree (hours at the 2^20-record bound); 10,000 targets in 8 dimensions
#: stay allowed.
MAX_TARGET_COORDINATES = 2**17
#: A target may exceed its norm bound by this relative slack (a coordinator's
#: own float projection onto a ball lands a few ulps out).
TARGET_NORM_SLACK = 1e-9


def check_targets(value: Any, dim: int | None = None,
                  norm_bound: float = TARGET_NORM_BOUND) -> np.ndarray:
    """Target points as a read-only (m, d) float array: finite, 1 <= m <=
    MAX_TARGETS, m (d + 1) <= MAX_RELEASE_ENTRIES, every norm at most
    ``norm_bound`` and d = ``dim`` when given; ValueError otherwise."""
    targets = check_finite_array("parameter 'targets'", value, (None, None))
    m, d = targets.shape
    if m < 1 or d < 1:
        raise ValueError(f"parameter 'targets' must hold at least one point of at least one "
                         f"feature, got shape {targets.shape}")
    if dim is not None and d != dim:
        raise ValueError(f"parameter 'targets' must have d = {dim} features, got shape "
                         f"{targets.shape}")
    if m > MAX_TARGETS or m * (d + 1) > MAX_RELEASE_ENTRIES or m * d > MAX_TARGET_COORDINATES:
        raise ValueError(f"parameter 'targets' holds {m} points of {d} features; a site "
                         f"answers at most {MAX_TARGETS} points, {MAX_TARGET_COORDINATES} target "
                         f"coordinates and {MAX_RELEASE_ENTRIES} "
                         "released entries per query")
    scale = power_of_two_at_or_above(norm_bound)  # exact: no norm overflows
    largest = float(row_norms(targets / scale).max()) * scale
    if not largest <= norm_bound * (1 + TARGET_NORM_SLACK):
        raise ValueError(f"parameter 'targets' has a point of norm above {norm_bound!r} "
                         f"(normalise the target like the private points), got {largest!r}")
    return readonly(targets)


def power_of_two_at_or_above(value: float) -> float:
    """The power of two at or above ``value`` > 0: dividing by it is exact."""
    mantissa, exponent = math.frexp(value)
    return math.ldexp(1.0, exponent - 1 if mantissa == 0.5 else exponent)


@frozen_value(eq=False)
class NearestTargetParams(KernelParams):
    """``targets`` (m, d) of norm at most 2 r; ``clip_norm`` r, ``count_weight``
    w, ``moment_weight`` v, each None when absent from the query (r = 1/2,
    w = 1, no moment columns; module docstring)."""

    targets: np.ndarray
    clip_norm: float | None = None
    count_weight: float | None = None
    moment_weight: float | None = None

    def __post_init__(self) -> None:
        if self.clip_norm is not None:
            self.clip_norm = check_bound("parameter 'clip_norm'", self.clip_norm)
        if self.count_weight is not None:
            self.count_weight = check_bound("parameter 'count_weight'", self.count_weight)
        if self.moment_weight is not None:
            weight = check_bound("parameter 'moment_weight'", self.moment_weight)
            if not weight * self.clip**2 <= BOUND_RANGE[1]:  # the moment columns' bound
                raise ValueError(f"parameter 'moment_weight' times clip_norm^2 must be at most "
                                 f"2^200, got {weight!r} * {self.clip!r}^2")
            self.moment_weight = weight
        targets = check_targets(self.targets, norm_bound=TARGET_NORM_FACTOR * self.clip)
        if targets.shape[0] * self.num_columns(targets.shape[1]) > MAX_RELEASE_ENTRIES:
            raise ValueError(f"parameter 'targets' holds {targets.shape[0]} points; with "
                             f"moments a site answers at most {MAX_RELEASE_ENTRIES} released "
                             "entries per query")
        self.targets = targets

    @classmethod
    def from_wire(cls, params: Mapping[str, Any], dim: int) -> NearestTargetParams:
        (targets,) = wire_values(params, ("targets",)).values()
        parsed = cls(targets, params.get("clip_norm"), params.get("count_weight"),
                     params.get("moment_weight"))
        check_targets(parsed.targets, dim, TARGET_NORM_FACTOR * parsed.clip)
        return parsed

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"targets": self.targets}
        for key in ("clip_norm", "count_weight", "moment_weight"):
            if getattr(self, key) is not None:
                wire[key] = getattr(self, key)
        return wire

    @property
    def num_targets(self) -> int:
        return int(self.targets.shape[0])

    @property
    def clip(self) -> float:
        """r: ``clip_norm``, or 1/2 when absent."""
        return CLIP_NORM if self.clip_norm is None else self.clip_norm

    @property
    def weight(self) -> float:
        """w: ``count_weight``, or 1 when absent."""
        return 1.0 if self.count_weight is None else self.count_weight

    def num_columns(self, dim: int) -> int:
        """1 + d, or 1 + 2d with the moment columns."""
        return 1 + dim * (1 if self.moment_weight is None else 2)

    @property
    def moment_bound(self) -> float:
        """v r^2 >= ||v s (.) s||_2 (0 without moment columns)."""
        return 0.0 if self.moment_weight is None else self.moment_weight * self.clip**2

    @property
    def term_bound(self) -> float:
        """A bound on any entry of one record's sums and moments: r and v r^2."""
        return max(self.clip, self.moment_bound)


@register
class NearestTargetSums(Kernel):
    """[w n_x, r_x, v q_x] for every target point x: weighted counts, sums and
    optional squared sums of the clipped records whose nearest target point is
    x (module docstring)."""

    name = "nearest_target_sums"
    Params = NearestTargetParams

    def output_shapes(self, params: NearestTargetParams, dim: int) -> tuple[tuple[int, ...]]:
        return ((params.num_targets, params.num_columns(dim)),)

    def l2_sensitivities(self, params: NearestTargetParams, adjacency: Adjacency) -> tuple[float]:
        # hypot: no square overflows for bounds up to 2^200.
        w, r, m = params.weight, params.clip, params.moment_bound
        one_row = math.hypot(w, r, m)
        if Adjacency(adjacency) == Adjacency.ADD_REMOVE_ONE:
            return (one_row,)
        return (max(math.sqrt(2.0) * one_row, math.hypot(2 * r, math.sqrt(2.0) * m)),)

    def sensitivities(
        self, params: NearestTargetParams, adjacency: Adjacency, norm: Norm, dim: int
    ) -> tuple[float, ...]:
        if norm == "l2":
            return self.l2_sensitivities(params, adjacency)
        one_row = params.weight + math.sqrt(dim) * params.clip + params.moment_bound
        return (2 * one_row if Adjacency(adjacency) == Adjacency.REPLACE_ONE else one_row,)

    def clip_bounds(self, params: NearestTargetParams) -> dict[str, float]:
        return {"clip_norm": params.clip}

    def max_abs_sum(self, params: NearestTargetParams, num_records: int) -> float:
        return num_records * max(params.weight, params.term_bound)

    def computation_errors(
        self, params: NearestTargetParams, dim: int, max_records: int
    ) -> tuple[float]:
        # w n is one rounding of an exact product; a sum or moment entry is
        # the one float64 rounding of an exact sum of per-record terms, each
        # a few ulps over its bound (the float clip and v s_j^2).
        columns = params.num_columns(dim)
        return (clip_slack(params.term_bound, columns)
                + conversion_error(self.max_abs_sum(params, max_records)),)

    def charged_sensitivities(
        self, params: NearestTargetParams, adjacency: Adjacency, norm: Norm, dim: int,
        fractional_bits: int, max_records: int = 1,
    ) -> tuple[float, ...]:
        # Only the changed rows' entries differ on neighbours (module docstring).
        rows = 2 if Adjacency(adjacency) == Adjacency.REPLACE_ONE else 1
        changed = rows * params.num_columns(dim)
        return rounding_charged(self.sensitivities(params, adjacency, norm, dim), ((changed,),),
                                norm, fractional_bits,
                                self.computation_errors(params, dim, max_records))

    def compute(
        self, data: Dataset, params: NearestTargetParams, state: MutableMapping[str, Any]
    ) -> tuple[np.ndarray]:
        m, dim, r = params.num_targets, data.dim, params.clip
        scale = power_of_two_at_or_above(TARGET_NORM_FACTOR * r)
        index = TargetIndex(params.targets / scale)
        counts = np.zeros(m, dtype=np.int64)
        sums = ExactSum((m, params.num_columns(dim) - 1))
        # Chunks bound the working memory; a record's cell does not depend on
        # its chunk (nearest_cells: the rule is per record).
        for start in range(0, data.num_records, SEARCH_RECORDS):
            clipped = clip_rows_to_norm(data.features[start:start + SEARCH_RECORDS], r)
            cells = nearest_targets(clipped / scale, index)
            counts += np.bincount(cells, minlength=m)
            for first in range(0, len(clipped), CHUNK_RECORDS * 8):
                chunk = clipped[first:first + CHUNK_RECORDS * 8]
                terms = (chunk if params.moment_weight is None
                         else np.hstack([chunk, params.moment_weight * chunk**2]))
                sums.add_grouped_terms(terms, cells[first:first + len(chunk)],
                                       params.term_bound)
        weighted = counts.astype(np.float64) * params.weight
        return (np.column_stack([weighted, sums.value()]),)
