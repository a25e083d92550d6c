"""Per-centre counts, coordinate sums and (optionally) squared-coordinate sums
of a site's records, each record assigned to its nearest public centre: one
Lloyd step of k-means, the sufficient statistics of seed 001's private
k-means baseline (DP Lloyd, Su et al. 2016) and of its DP Gaussian-mixture
stand-in for DP-GAN (../shared/seeds/001_bc09c11f93585935.txt, Section 6).

Public parameters: K centres c_1..c_K (shape (K, d)), the clip radius r
(``clip_norm``; seed 001 normalises to r = 1/2, so every distance is at most
1), a count weight w > 0 (``count_weight``) and an optional moment weight
v > 0 (``moment_weight``; None: no moment columns). Each record x is clipped
to ||x|| <= r and assigned to a(x) = argmin_j ||x - c_j|| (ties: the lowest
index). The site releases one block of shape (K, 1 + d) or (K, 1 + 2d):

    row j = sum_{x : a(x) = j} [w, x_1..x_d, v x_1^2 .. v x_d^2].

One block, because the Laplace mechanism takes one block (the count, the sums
and the moments are released together, and w, v say how the one noise scale
splits between them: the coordinator divides column 0 by w and the moment
columns by v). Laplace on a concatenated block with weights is exactly Su et
al.'s split of each iteration's epsilon between the count and the sum.

Sensitivity (derivation). a(x) depends on x and the public centres only, so a
record moves exactly the one row it is assigned to (and, replaced, the one
its replacement is assigned to). For a clipped x, ||x|| <= r, so
||x||_1 <= sqrt(d) r, sum_j x_j^2 = ||x||^2 <= r^2 and
||x (.) x||_2^2 = sum_j x_j^4 <= (sum_j x_j^2)^2 <= r^4. With u = [w, x, v x(.)x]:

* add/remove one record: one row moves by u.
  L2: ||u||^2 <= w^2 + r^2 + v^2 r^4.  L1: ||u||_1 <= w + sqrt(d) r + v r^2.
  (Attained for d = 1 at x = r; for d > 1 at x = r e_1 in L2 and at
  x = (r / sqrt(d)) (1, .., 1) in the first two L1 terms.)
* replace a by b: if a(a) != a(b), two rows move by u(a) and -u(b):
  L2^2 <= 2 (w^2 + r^2 + v^2 r^4), L1 <= 2 (w + sqrt(d) r + v r^2). If
  a(a) = a(b), one row moves by [0, a - b, v (a(.)a - b(.)b)]:
  ||a - b||^2 <= 4 r^2 and sum_j (a_j^2 - b_j^2)^2 <= sum_j (a_j^4 + b_j^4)
  <= 2 r^4 (|p - q| <= max(p, q) for p, q >= 0), so L2^2 <= 4 r^2 + 2 v^2 r^4,
  which exceeds the two-row bound only when r > w; in L1,
  ||a - b||_1 + v sum_j |a_j^2 - b_j^2| <= 2 sqrt(d) r + 2 v r^2, never more
  than the two-row bound.
  So replace-one: L2 = max(sqrt(2 (w^2 + r^2 + v^2 r^4)), sqrt(4 r^2 + 2 v^2 r^4)),
  L1 = 2 (w + sqrt(d) r + v r^2).

The L1 bound is the kernel's own (``sensitivities``), not the generic
sqrt(size) times L2, which would charge sqrt(K (1 + 2d)) times too much.

Computation (issue 17). The assignment is computed per record from the record
and the public centres only, by elementwise float operations (d passes of
(x_j - c_j)^2 accumulated in a fixed order, after scaling both by one power of
two), so it is the same whatever else is in the dataset or how records are
chunked: no BLAS blocking that could depend on n. The rows are summed exactly
(:class:`~.exact_sum.ExactSum`: each record's row is its own term), so the
only rounding left is the one conversion to float64 and a few ulps of the
float clip, which the default ``computation_errors`` charges.

Range checks: at most :data:`MAX_CENTRES` centres (a site's work is n K d and
a coordinator chooses K), finite, each of norm at most r (every record lies in
the clip ball, so a centre outside it is a coordinator error, and inside it
every scaled squared distance is at most 4: nothing overflows); r, w, v and
the moment columns' bound v r^2 within :data:`~.base.BOUND_RANGE`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from privadapt.common.data import Dataset
from privadapt.common.geometry import clip_rows_to_norm, row_norms
from privadapt.common.kernels.base import (
    BOUND_RANGE,
    Kernel,
    KernelParams,
    check_bound,
    readonly,
    register,
    wire_values,
)
from privadapt.common.kernels.exact_sum import ExactSum
from privadapt.common.kernels.grid_rounding import Norm
from privadapt.common.mechanisms import Adjacency
from privadapt.common.validation import check_finite_array

#: The most centres one query may name: a site's work grows with K, and the
#: exact sum's working array with K (1 + 2d) per record.
MAX_CENTRES = 4096
#: A centre may exceed the clip radius by this relative slack (a coordinator's
#: own float projection onto the ball lands a few ulps out).
CENTRE_NORM_SLACK = 1e-9
# Entries of the (records, K, columns) one-hot array summed exactly at once.
_WORKING_ENTRIES = 2**21


@dataclass(frozen=True, eq=False)
class NearestCentreSumsParams(KernelParams):
    """``centres`` (K, d) within the clip ball; ``clip_norm`` r; ``count_weight``
    w; ``moment_weight`` v or None (module docstring)."""

    centres: np.ndarray
    clip_norm: float
    count_weight: float = 1.0
    moment_weight: float | None = None

    def __post_init__(self) -> None:
        clip = check_bound("parameter 'clip_norm'", self.clip_norm)
        object.__setattr__(self, "clip_norm", clip)
        object.__setattr__(self, "count_weight",
                           check_bound("parameter 'count_weight'", self.count_weight))
        if self.moment_weight is not None:
            weight = check_bound("parameter 'moment_weight'", self.moment_weight)
            if not weight * clip**2 <= BOUND_RANGE[1]:  # the moment columns' bound v r^2
                raise ValueError(f"parameter 'moment_weight' times clip_norm^2 must be at most "
                                 f"2^200, got {weight!r} * {clip!r}^2")
            object.__setattr__(self, "moment_weight", weight)
        centres = check_finite_array("parameter 'centres'", self.centres, (None, None))
        if not 1 <= centres.shape[0] <= MAX_CENTRES or centres.shape[1] < 1:
            raise ValueError(f"parameter 'centres' must hold 1 to {MAX_CENTRES} centres of at "
                             f"least one coordinate, got shape {centres.shape}")
        largest = float(row_norms(centres / _scale_of(clip)).max()) * _scale_of(clip)
        if not largest <= clip * (1 + CENTRE_NORM_SLACK):
            raise ValueError(f"parameter 'centres' must lie in the clip ball ||c|| <= "
                             f"clip_norm = {clip!r}; the largest centre has norm {largest!r}")
        object.__setattr__(self, "centres", readonly(centres))

    @classmethod
    def from_wire(cls, params: Mapping[str, Any], dim: int) -> NearestCentreSumsParams:
        values = wire_values(params, ("centres", "clip_norm", "count_weight"))
        parsed = cls(values["centres"], values["clip_norm"], values["count_weight"],
                     params.get("moment_weight"))
        if parsed.centres.shape[1] != dim:
            raise ValueError(f"parameter 'centres' must have d = {dim} coordinates per centre, "
                             f"got shape {parsed.centres.shape}")
        return parsed

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"centres": self.centres, "clip_norm": self.clip_norm,
                                "count_weight": self.count_weight}
        if self.moment_weight is not None:
            wire["moment_weight"] = self.moment_weight
        return wire

    @property
    def num_centres(self) -> int:
        return int(self.centres.shape[0])

    def num_columns(self, dim: int) -> int:
        """1 + d, or 1 + 2d with the moment columns."""
        return 1 + dim * (1 if self.moment_weight is None else 2)

    @property
    def entry_bound(self) -> float:
        """A bound on any entry of one record's row: w, |x_j| <= r, v x_j^2 <= v r^2."""
        return max(self.count_weight, self.clip_norm, self.moment_bound)

    @property
    def moment_bound(self) -> float:
        """v r^2 >= ||v x (.) x||_2 (0 without moment columns)."""
        return 0.0 if self.moment_weight is None else self.moment_weight * self.clip_norm**2


def _scale_of(clip: float) -> float:
    """The power of two at or above r: dividing by it is exact, and puts every
    clipped record and admitted centre in the unit ball."""
    mantissa, exponent = math.frexp(clip)
    return math.ldexp(1.0, exponent - 1 if mantissa == 0.5 else exponent)


def nearest_centres(points: np.ndarray, centres: np.ndarray, scale: float) -> np.ndarray:
    """argmin_j ||x - c_j|| for each row x of ``points`` (ties: lowest j),
    computed elementwise per record (module docstring, "Computation")."""
    scaled_points, scaled_centres = points / scale, centres / scale
    distances = np.zeros((len(points), len(centres)))
    for j in range(points.shape[1]):
        distances += (scaled_points[:, j, None] - scaled_centres[None, :, j]) ** 2
    return np.argmin(distances, axis=1)


@register
class NearestCentreSums(Kernel):
    """Per-centre [w count, coordinate sums, v squared-coordinate sums] of the
    clipped records, each at its nearest public centre (module docstring)."""

    name = "nearest_centre_sums"
    Params = NearestCentreSumsParams

    def output_shapes(self, params: NearestCentreSumsParams, dim: int
                      ) -> tuple[tuple[int, ...]]:
        return ((params.num_centres, params.num_columns(dim)),)

    def l2_sensitivities(self, params: NearestCentreSumsParams, adjacency: Adjacency
                         ) -> tuple[float]:
        # hypot: no square overflows for bounds up to 2^200.
        w, r, m = params.count_weight, params.clip_norm, params.moment_bound
        one_row = math.hypot(w, r, m)
        if adjacency == Adjacency.ADD_REMOVE_ONE:
            return (one_row,)
        return (max(math.sqrt(2.0) * one_row, math.hypot(2 * r, math.sqrt(2.0) * m)),)

    def sensitivities(self, params: NearestCentreSumsParams, adjacency: Adjacency, norm: Norm,
                      dim: int) -> tuple[float]:
        if norm == "l2":
            return self.l2_sensitivities(params, adjacency)
        one_row = params.count_weight + math.sqrt(dim) * params.clip_norm + params.moment_bound
        return (one_row if adjacency == Adjacency.ADD_REMOVE_ONE else 2 * one_row,)

    def clip_bounds(self, params: NearestCentreSumsParams) -> dict[str, float]:
        return {"clip_norm": params.clip_norm}

    def max_abs_sum(self, params: NearestCentreSumsParams, num_records: int) -> float:
        return num_records * params.entry_bound

    def compute(self, data: Dataset, params: NearestCentreSumsParams,
                state: MutableMapping[str, Any]) -> tuple[np.ndarray]:
        shape = self.output_shapes(params, data.dim)[0]
        total = ExactSum(shape)
        chunk = max(1, _WORKING_ENTRIES // math.prod(shape))
        for rows, assigned in _assigned_rows(data, params, chunk):
            # Each record's own row, placed at its centre: one term per record.
            terms = np.zeros((len(rows), *shape))
            terms[np.arange(len(rows)), assigned] = rows
            total.add_terms(terms, params.entry_bound)
        return (total.value(),)


def _assigned_rows(data: Dataset, params: NearestCentreSumsParams, chunk: int
                   ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Per chunk of records: their rows [w, x, v x(.)x] and nearest centres."""
    scale = _scale_of(params.clip_norm)
    for start in range(0, data.num_records, chunk):
        points = clip_rows_to_norm(data.features[start:start + chunk], params.clip_norm)
        parts = [np.full((len(points), 1), params.count_weight), points]
        if params.moment_weight is not None:
            parts.append(params.moment_weight * points**2)
        yield np.hstack(parts), nearest_centres(points, params.centres, scale)
