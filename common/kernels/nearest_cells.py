"""Each record's nearest public target, by one canonical per-record rule, found
fast on one core with numpy (the NNA benchmark: 1e6 records, 10,000
targets, d = 8) while every record's answer stays a function of that record
and the targets alone.

The rule (:func:`canonical_squared_distances`). The cell of a record x among
targets t_0 .. t_{m-1} is the lowest index k minimising

    D(x, t_k) = fl(..fl(fl(e_0^2) + fl(e_1^2)) + .. + fl(e_{d-1}^2)),  e_j = fl(x_j - t_kj),

IEEE double arithmetic rounding to nearest, coordinates added in order 0 .. d-1.
D is computed from one record and one target, so the cell depends on nothing
else: changing, adding or removing another record never moves it, even under
exact ties (a record equidistant to several targets, duplicated targets: the
lowest index wins) and near-ties (D decides, whatever rounding made it so).
The sensitivity analysis of :mod:`.nearest_target_sums` rests on this.

The search (:func:`nearest_targets`) groups records for speed, which is safe
because it provably returns the rule's cell for every record:

1. The records are ordered by a k-d tree of the records themselves (scipy's
   cKDTree, its point order only) and cut into blocks of
   :data:`BLOCK_RECORDS` neighbours; the targets likewise into leaves of
   :data:`LEAF_TARGETS`. Each block and leaf has its bounding box.
2. An upper bound U_A^2 on every block record's nearest squared distance:
   the largest over the block of the least (float) squared distance to
   :data:`GUESSES` targets near the block's centre (any targets would do;
   near ones make it tight).
3. Pruning: a leaf of targets (float64 boxes), then a single target (its
   float32 copy against the block's box rounded outwards to float32), is
   dropped for block A when its squared distance to A's box exceeds U_A^2
   plus ``prune_slack``. That distance lower-bounds every record of A's, so
   no record's cell is dropped (proof below).
4. Filter: for the block's remaining targets, F(x, t) = ||t||^2 - 2 x.t (the
   squared distance less the record's own ||x||^2) is one BLAS product of
   [x, 1] and [-2 t, ||t||^2] in float32 (float64 above
   :data:`FLOAT32_FILTER_MAX_DIM` dimensions). A record whose least F is
   more than ``filter_margin`` below its second least has one possible cell;
   otherwise every target within the margin of the least F is compared by the
   rule itself (D, then index).

Why nothing is lost. Let S >= (max ||x|| + max ||t||)^2, v = 2^-24 and
U = 2^-53 (float32 and float64 unit roundoff), gamma_k(w) = k w / (1 - k w).
Any evaluation order of a dot product of length k satisfies
|fl(a.b) - a.b| <= gamma_k sum |a_i b_i| (Higham, *Accuracy and Stability
of Numerical Algorithms*, 2nd ed., (3.5); an FMA only tightens it; a classical
BLAS, no Strassen-like scheme, as :mod:`.blocked_gram` assumes). With D* the
exact squared distance of the float inputs:

* |D - D*| <= gamma_{d+2}(U) D* <= E64 = (d + 4) U S (d + 2 roundings of
  nonnegative terms); the float64 expansion of step 2 is as close;
* F is within E32 = (d + 8) w S of D* - ||x||^2, w the filter's roundoff:
  rounding x and t to the filter's type moves x.t by at most
  2.0001 w ||x|| ||t|| and ||t||^2 (computed in float64, then rounded) by
  2 w ||t||^2, the product of length d + 1 adds gamma_{d+1}(w)
  (2 ||x|| ||t|| + ||t||^2), and 2 ||x|| ||t|| + ||t||^2 <= S.

Let k be the rule's cell of a record x of block A and j any target. D(x, t_k)
<= D(x, t_j), so D*(x, t_k) <= D*(x, t_j) + 2 E64; with t_j the guess that
attains x's bound, D*(x, t_k) <= V = U_A^2 + 3 E64. The box distance of t_k
is at most sqrt(D*(x, t_k)). Computed for a leaf in float64 (d + 2 roundings
of nonnegative terms) it is at most V (1 + E64 / S) <= V + 2 E64. Computed
for t_k in float32: the float32 box contains the float64 one and t_k moves by
at most v ||t_k|| when rounded, so the distance grows by at most v sqrt(S)
before d + 2 float32 roundings: at most (sqrt(V) + v sqrt(S))^2
(1 + gamma_{d+2}(v)) <= V + (d + 8) v S. So ``prune_slack`` = 8 E64 +
(d + 10) v S keeps k. Among the survivors, with j the least-F target:
F(x, t_k) <= D*(x, t_k) - ||x||^2 + E32 <= D*(x, t_j) - ||x||^2 + 2 E64 + E32
<= F(x, t_j) + 2 E32 + 2 E64 = ``filter_margin``. So k is within the margin;
if it is the only target there it is the cell, and otherwise the rule,
applied to every target within the margin, picks k (k beats every other
target by D, or ties and has the lower index). Underflow (tiny coordinates)
adds absolute errors far below ``_UNDERFLOW_SLACK`` = 2^-100, added to both
E's; the caller scales inputs so nothing overflows (norms at most
:data:`MAX_NORM`; S is computed from the float norms inflated by 2^-20,
far more than their rounding).

The margins are a few ulps of S: at d = 8 a record is compared by the rule
when its two nearest targets' squared distances are within about 2^-19 S,
which random data rarely meets and exact ties always do.
"""

from __future__ import annotations

import numpy as np

from privadapt.common.numerics.geometry import row_norms

#: Records per block (the unit that shares a candidate list and one BLAS product).
BLOCK_RECORDS = 256
#: Targets per leaf box (the first, coarse pruning).
LEAF_TARGETS = 16
#: Targets near a block's centre whose distances bound its records' nearest.
GUESSES = 8
#: Records searched at once (bounds the working memory to a few hundred MB).
SEARCH_RECORDS = 2**20
#: The largest record or target norm the search accepts (its callers scale
#: both into the unit ball; far below float32 overflow).
MAX_NORM = 2.0
#: Above this fraction of kept leaves a block tests every target (the
#: gather of the kept ones would cost more than it saves).
DENSE_LEAF_FRACTION = 0.7
#: The filter runs in float32 up to this dimension (twice the speed of
#: float64; its margin grows with d), in float64 above it.
FLOAT32_FILTER_MAX_DIM = 64
#: Blocks whose leaf distances are computed at once (bounds that array).
_BLOCK_BATCH = 64

FLOAT32_ROUNDOFF = 2.0**-24
FLOAT64_ROUNDOFF = 2.0**-53
# Absolute error underflow can add to any squared distance the search
# compares (a few per coordinate, each below 2^-149 in float32).
_UNDERFLOW_SLACK = 2.0**-100
#: The most (record, target) entries one pass of near-tie resolution holds
#: (about 30 MB of temporaries).
_TIE_ENTRIES = 2**20


def canonical_squared_distances(records: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """D(x_i, t_i) of the rule for paired rows: fl(x_j - t_j) squared and
    added over j = 0 .. d-1 in that order, each row's value from its own pair."""
    differences = records - targets
    squares = differences * differences
    total = squares[:, 0].copy()
    for column in range(1, squares.shape[1]):
        total += squares[:, column]
    return total


def rule_among(records: np.ndarray, near: np.ndarray, target_ids: np.ndarray,
               targets: np.ndarray) -> np.ndarray:
    """Each record's cell by the rule (least D, then lowest target index)
    among the targets ``target_ids[j]`` with ``near[i, j]`` (each row has one
    at least). D is computed as :func:`canonical_squared_distances` computes
    it, operation for operation, broadcast over the kept columns."""
    columns = np.flatnonzero(near.any(axis=0))
    near, ids = near[:, columns], target_ids[columns]
    points = targets[ids]
    difference = records[:, None, 0] - points[None, :, 0]
    total = difference * difference
    for column in range(1, records.shape[1]):
        difference = records[:, None, column] - points[None, :, column]
        total += difference * difference
    total[~near] = np.inf
    least = total.min(axis=1)
    return np.where(total == least[:, None], ids[None, :],
                    np.iinfo(np.int64).max).min(axis=1)


class TargetIndex:
    """The public targets prepared once for :func:`nearest_targets`: their leaf
    order and boxes, float32 filter rows and a k-d tree for the guesses.

    Only the first copy of a repeated target is searched: a later copy has
    the same D to every record and a higher index, so it is never a cell
    (and a coordinator sending many copies cannot make every record a tie)."""

    def __init__(self, targets: np.ndarray) -> None:
        targets = np.asarray(targets, dtype=np.float64)
        self.norm = _largest_norm(targets)
        _, first = np.unique(targets, axis=0, return_index=True)
        #: The original index of each searched (distinct) target, increasing.
        self.original = np.sort(first)
        targets = targets[self.original]
        self.targets = targets
        self.dim = targets.shape[1]
        self.tree = _kd_tree(targets, leafsize=LEAF_TARGETS, balanced_tree=False)
        # Leaf boxes over the tree's point order (consecutive points of a
        # subtree): leaf l holds sorted positions [l L, (l + 1) L).
        self.order = np.asarray(self.tree.indices, dtype=np.int64)
        ordered = targets[self.order]
        starts = np.arange(0, len(ordered), LEAF_TARGETS)
        self.leaf_low = np.minimum.reduceat(ordered, starts, axis=0)
        self.leaf_high = np.maximum.reduceat(ordered, starts, axis=0)
        self.leaf_of = np.repeat(np.arange(len(starts)), LEAF_TARGETS)[:len(ordered)]
        self.ordered = ordered
        squared_norms = np.einsum("ij,ij->i", ordered, ordered)
        self.filter_dtype = np.float32 if self.dim <= FLOAT32_FILTER_MAX_DIM else np.float64
        self.filter_rows = np.column_stack([-2.0 * ordered, squared_norms]).astype(
            self.filter_dtype)
        self.points32 = ordered.astype(np.float32)
        self.positions = np.arange(len(ordered))


def nearest_targets(records: np.ndarray, index: TargetIndex) -> np.ndarray:
    """The rule's cell (module docstring) of every record: an int64 array of
    target indices. Records and targets must be finite with norms at most
    :data:`MAX_NORM`."""
    records = np.asarray(records, dtype=np.float64)
    cells = np.empty(len(records), dtype=np.int64)
    for start in range(0, len(records), SEARCH_RECORDS):
        chunk = records[start:start + SEARCH_RECORDS]
        cells[start:start + len(chunk)] = _search(chunk, index)
    return cells


def _largest_norm(rows: np.ndarray) -> float:
    """An upper bound on every row's norm (the float norm, inflated past its
    rounding); ValueError above :data:`MAX_NORM` or when not finite."""
    largest = float(row_norms(rows).max()) * (1 + 2.0**-20) if len(rows) else 0.0
    if not largest <= MAX_NORM:
        raise ValueError(f"the nearest-target search needs finite points of norm at most "
                         f"{MAX_NORM}, got {largest!r}")
    return largest


def _margins(dim: int, bound: float, filter_dtype: type) -> tuple[float, float]:
    """(prune_slack, filter_margin) for inputs with (max ||x|| + max ||t||)^2
    <= ``bound`` (module docstring; w = 2^-53 in E32 for a float64 filter)."""
    e64 = (dim + 4) * FLOAT64_ROUNDOFF * bound + _UNDERFLOW_SLACK
    unit = FLOAT32_ROUNDOFF if filter_dtype == np.float32 else FLOAT64_ROUNDOFF
    e32 = (dim + 8) * unit * bound + _UNDERFLOW_SLACK
    return 8 * e64 + (dim + 10) * FLOAT32_ROUNDOFF * bound, 2 * e32 + 2 * e64


def _search(records: np.ndarray, index: TargetIndex) -> np.ndarray:
    n, dim = records.shape
    if n == 0:
        return np.empty(0, dtype=np.int64)
    bound = (_largest_norm(records) + index.norm) ** 2
    prune_slack, filter_margin = _margins(dim, bound, index.filter_dtype)
    order = np.asarray(_kd_tree(records, leafsize=16, balanced_tree=False,
                                compact_nodes=False).indices, dtype=np.int64)
    ordered = records[order]
    starts = np.arange(0, n, BLOCK_RECORDS)
    low = np.minimum.reduceat(ordered, starts, axis=0)
    high = np.maximum.reduceat(ordered, starts, axis=0)
    upper = _upper_bounds(ordered, starts, low, high, index)
    rows = np.ones((n, dim + 1), dtype=index.filter_dtype)  # [x, 1], rounded once
    rows[:, :dim] = ordered
    cells = np.empty(n, dtype=np.int64)  # indices into index.targets
    # One buffer for every block's scores (no allocation per block).
    scores_buffer = np.empty(BLOCK_RECORDS * len(index.targets), dtype=index.filter_dtype)
    # The box in float32, rounded outwards, so it contains the float64 box.
    low32 = np.nextafter(low.astype(np.float32), np.float32(-np.inf))
    high32 = np.nextafter(high.astype(np.float32), np.float32(np.inf))
    for first in range(0, len(starts), _BLOCK_BATCH):
        batch = slice(first, first + _BLOCK_BATCH)
        leaf_gaps = (np.maximum(index.leaf_low[None] - high[batch, None], 0)
                     + np.maximum(low[batch, None] - index.leaf_high[None], 0))
        leaf_kept = np.einsum("bld,bld->bl", leaf_gaps, leaf_gaps) <= (
            upper[batch, None] + prune_slack)
        for offset, kept in enumerate(leaf_kept):
            block = first + offset
            begin = starts[block]
            end = min(begin + BLOCK_RECORDS, n)
            if np.count_nonzero(kept) > DENSE_LEAF_FRACTION * len(kept):
                candidates, points = index.positions, index.points32  # no gather
            else:
                candidates = np.flatnonzero(kept[index.leaf_of])
                points = index.points32[candidates]
            # Each target's squared distance to the block's box: to its
            # projection onto the box.
            offsets = np.maximum(points, low32[block])
            np.minimum(offsets, high32[block], out=offsets)
            np.subtract(points, offsets, out=offsets)
            candidates = candidates[np.einsum("cd,cd->c", offsets, offsets)
                                    <= upper[block] + prune_slack]
            scores = scores_buffer[:(end - begin) * len(candidates)].reshape(
                end - begin, len(candidates))
            np.matmul(rows[begin:end], index.filter_rows[candidates].T, out=scores)
            best = scores.argmin(axis=1)
            within = np.arange(end - begin)
            least = scores[within, best]
            scores[within, best] = np.inf
            close = np.flatnonzero(scores.min(axis=1).astype(np.float64) - least
                                   <= filter_margin)
            cells[begin:end] = index.order[candidates[best]]
            if len(close):  # the rule decides among the targets within the margin
                scores[close, best[close]] = least[close]
                target_ids = index.order[candidates]
                # A bounded number of (record, target) entries per pass: a
                # coordinator can place m targets on a sphere around a point
                # where records may sit, tying each such record with all m;
                # each then costs O(m d) time and the
                # pass O(_TIE_ENTRIES) memory, like a brute-force query.
                step = max(1, _TIE_ENTRIES // len(candidates))
                for part in range(0, len(close), step):
                    rows_now = close[part:part + step]
                    near = scores[rows_now].astype(np.float64) <= (
                        least[rows_now].astype(np.float64)[:, None] + filter_margin)
                    cells[begin + rows_now] = rule_among(ordered[begin + rows_now], near,
                                                         target_ids, index.targets)
    result = np.empty(n, dtype=np.int64)
    result[order] = index.original[cells]
    return result


def _upper_bounds(ordered: np.ndarray, starts: np.ndarray, low: np.ndarray,
                  high: np.ndarray, index: TargetIndex) -> np.ndarray:
    """U_A^2 for every block: the largest over its records of the least float
    squared distance to the targets nearest the block's box centre."""
    guesses = min(GUESSES, len(index.targets))
    _, near = index.tree.query((low + high) / 2, k=guesses)
    near = np.asarray(near, dtype=np.int64).reshape(len(starts), guesses)
    target_norms = np.einsum("ij,ij->i", index.targets, index.targets)
    record_norms = np.einsum("ij,ij->i", ordered, ordered)
    least = np.empty(len(ordered))
    full = len(ordered) // BLOCK_RECORDS  # blocks of BLOCK_RECORDS records
    for first in range(0, len(starts), _BLOCK_BATCH):
        blocks = np.arange(first, min(first + _BLOCK_BATCH, len(starts)))
        whole = blocks[blocks < full]
        if len(whole):
            span = slice(whole[0] * BLOCK_RECORDS, (whole[-1] + 1) * BLOCK_RECORDS)
            products = np.matmul(ordered[span].reshape(len(whole), BLOCK_RECORDS, -1),
                                 index.targets[near[whole]].transpose(0, 2, 1))
            squares = (record_norms[span].reshape(len(whole), BLOCK_RECORDS, 1)
                       + target_norms[near[whole]][:, None, :] - 2 * products)
            least[span] = squares.min(axis=2).ravel()
        if blocks[-1] >= full:  # the last, shorter block
            span = slice(full * BLOCK_RECORDS, len(ordered))
            products = ordered[span] @ index.targets[near[full]].T
            least[span] = (record_norms[span, None] + target_norms[near[full]][None]
                           - 2 * products).min(axis=1)
    return np.maximum.reduceat(least, starts)


def _kd_tree(points: np.ndarray, **options: object) -> object:
    """scipy's cKDTree over ``points``. Imported on first use: every site
    daemon imports the kernel registry, and scipy.spatial (with the linalg
    and sparse packages it loads) costs each one about 14 MiB and a fifth of
    a second at start-up, for kernels most jobs never ask for."""
    from scipy.spatial import cKDTree

    return cKDTree(points, **options)
