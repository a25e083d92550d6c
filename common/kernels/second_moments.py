"""Clipped second moments of z = [x, y]: the sufficient statistics of the squared
loss (seed 000, d_DP; seed 003, M0).

Each record contributes z z^T with x scaled to norm at most r (``feature_norm``)
and y clipped to [-Y, Y] (``label_bound``), so ||z||^2 <= r^2 + Y^2 = s.

What is released: not the (d+1) x (d+1)
matrix sum_i z_i z_i^T, which is symmetric and so repeats every off-diagonal
entry, but its upper triangle, D (D+1)/2 entries for D = d + 1, in
:func:`triangle_of` order: row by row, j <= k (``numpy.triu_indices(D)``:
(0,0), (0,1), ..., (0,d), (1,1), ..., (d,d)), each off-diagonal entry scaled
by sqrt(2). Callers rebuild the matrix with :func:`symmetric_from_triangle`.

Why sqrt(2) (sensitivity derivation). The scaled triangle t(M) is an isometry
of the symmetric matrices: ||t(M)||_2 = ||M||_F. So its L2 sensitivity is the
Frobenius one: add/remove ||z z^T||_F = ||z||^2 <= s; replace-one
||a a^T - b b^T||_F^2 = ||a||^4 + ||b||^4 - 2 (a.b)^2 <= 2 s^2, i.e. sqrt(2) s
(attained: a = (r e1, Y), b = (v, Y) with ||v|| = r, v.e1 = -Y^2 / r, when
Y <= r and d >= 2). Gaussian noise N(0, sigma^2) on t(M) is then exactly the
noise the former full-matrix release gave after symmetrising
(M + M^T) / 2: sigma on the diagonal, sigma / sqrt(2) off it. The accuracy is
unchanged, the release is half the size (and its grid rounding charge,
sqrt(size) steps, smaller).

The unscaled triangle (u_jk = z_j z_k, j <= k) has a smaller sensitivity, but
does not need less noise per entry. With ||u(z)||^2 = (||z||^4 + ||z||_4^4) / 2:
add/remove sqrt(r^4 + r^2 Y^2 + Y^4) (at z = (r e1, Y)); replace-one
||u(a) - u(b)||^2 = ||u(a)||^2 + ||u(b)||^2 - ((a.b)^2 + sum_j a_j^2 b_j^2),
and (u.v)^2 <= sum_j u_j^2 v_j^2 + sum_{j != k} |u_j u_k v_j v_k| bounds the
subtracted term below by (alpha beta)^2 (a = (u, alpha), b = (v, beta)), so
the maximum is 2 r^4 + r^2 Y^2 + max(r^2 Y^2 + Y^4 / 2, Y^4), attained for
d >= 2 (at u = r (cos t, sin t), v = r (sin t, cos t), sin 2t = Y^2 / (2 r^2),
beta = -alpha = -Y when Y^2 <= 2 r^2; at (r e1, Y), (r e2, 0) otherwise).
Its off-diagonal noise is that sensitivity times the multiplier, against
sensitivity / sqrt(2) for the scaled triangle. Add/remove: never less
(r^4 + r^2 Y^2 + Y^4 >= s^2 / 2), up to sqrt(2) times more when Y << r; it
wins only on the diagonal, which matters less as d grows. Replace-one: the
same for Y^2 <= sqrt(2) r^2 (2 r^4 + 2 r^2 Y^2 + Y^4 / 2 >= s^2); above
that the unscaled maximum falls below s^2, but there the declared sqrt(2) s
of the scaled triangle is itself not tight (it is attained only for Y <= r),
so tightening that bound for Y > r is the open improvement.

Computation: the sum is one BLAS Gram matrix of the clipped rows
(:mod:`.blocked_gram`), not an exact sum; ``computation_errors`` charges its
proved, public error bound (about (4096 + N / 4096) u N s per entry at a site
of at most N records, u = 2^-53) plus a few ulps of a record's float clip.
:func:`exact_moment_sum` keeps the exact per-record sum for the kernel whose
coordinator-chosen parameters could amplify the rounding (exact_discrepancy).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

import numpy as np

from privadapt.common.data.dataset import Dataset
from privadapt.common.kernels.base import (
    CHUNK_RECORDS,
    Kernel,
    KernelParams,
    check_bound,
    register,
    wire_values,
)
from privadapt.common.kernels.blocked_gram import BLOCK_RECORDS, gram, gram_error
from privadapt.common.kernels.exact_sum import ExactSum, clip_slack
from privadapt.common.mechanisms import Adjacency
from privadapt.common.numerics.geometry import clip_rows_to_norm
from privadapt.common.validation import frozen_value

#: The factor on every off-diagonal entry of the released triangle (module docstring).
OFF_DIAGONAL_SCALE = math.sqrt(2.0)


def triangle_size(size: int) -> int:
    """Entries of the upper triangle (with the diagonal) of a size x size matrix."""
    return size * (size + 1) // 2


def triangle_of(matrix: np.ndarray) -> np.ndarray:
    """The released vector of a symmetric ``matrix``: its upper triangle row by
    row (j <= k), off-diagonal entries times sqrt(2)."""
    rows, cols = np.triu_indices(matrix.shape[0])
    return matrix[rows, cols] * np.where(rows == cols, 1.0, OFF_DIAGONAL_SCALE)


def symmetric_from_triangle(triangle: np.ndarray) -> np.ndarray:
    """The symmetric matrix whose :func:`triangle_of` is ``triangle``;
    ``ValueError`` for a vector whose length is no D (D+1) / 2."""
    triangle = np.asarray(triangle, dtype=float)
    length = triangle.shape[0] if triangle.ndim == 1 else -1
    size = (math.isqrt(8 * length + 1) - 1) // 2 if length > 0 else 0
    if size < 1 or triangle_size(size) != length:
        raise ValueError(f"a released moment triangle must be a vector of D (D+1)/2 "
                         f"entries, got shape {triangle.shape}")
    rows, cols = np.triu_indices(size)
    matrix = np.zeros((size, size))
    matrix[rows, cols] = triangle / np.where(rows == cols, 1.0, OFF_DIAGONAL_SCALE)
    matrix[cols, rows] = matrix[rows, cols]
    return matrix


@frozen_value
class SecondMomentsParams(KernelParams):
    """The clip region: ``feature_norm`` r (||x|| <= r) and ``label_bound`` Y (|y| <= Y)."""

    feature_norm: float
    label_bound: float

    def __post_init__(self) -> None:
        for key in ("feature_norm", "label_bound"):
            setattr(self, key, check_bound(f"parameter {key!r}", getattr(self, key)))

    @classmethod
    def from_wire(cls, params: Mapping[str, Any], dim: int) -> SecondMomentsParams:
        return cls(**wire_values(params, ("feature_norm", "label_bound")))

    def to_wire(self) -> dict[str, Any]:
        return {"feature_norm": self.feature_norm, "label_bound": self.label_bound}

    @property
    def record_bound(self) -> float:
        """s = r^2 + Y^2 >= ||z||^2 for every clipped record."""
        return self.feature_norm**2 + self.label_bound**2

    def clip(self, data: Dataset, start: int, stop: int) -> np.ndarray:
        """z = [clip_r(x), clip_Y(y)] for records ``start:stop``, one row each."""
        features = clip_rows_to_norm(data.features[start:stop], self.feature_norm)
        labels = np.clip(data.labels[start:stop], -self.label_bound, self.label_bound)
        return np.column_stack([features, labels])

    def clipped_blocks(self, data: Dataset, block: int) -> Iterator[np.ndarray]:
        """The clipped rows z, ``block`` records at a time."""
        for start in range(0, data.num_records, block):
            yield self.clip(data, start, start + block)


def exact_moment_sum(data: Dataset, params: SecondMomentsParams) -> np.ndarray:
    """sum_i z_i z_i^T as a symmetric matrix, summed exactly
    (:class:`~privadapt.common.kernels.exact_sum.ExactSum`): each record's
    z z^T is rounded toward zero (so its norm bound still holds) and the terms
    added without rounding, so a changed record moves the sum by its own term
    only, however large n or the other records are."""
    size = data.dim + 1
    total = ExactSum((size, size))
    chunk = max(1, CHUNK_RECORDS * 64 // size**2)  # chunk x size^2 products in memory
    for z in params.clipped_blocks(data, chunk):
        # Each record's own z z^T (entries at most ||z||^2 <= s), summed exactly.
        # (Summing only its triangle halves the terms but ran 15% slower.)
        total.add_terms(z[:, :, None] * z[:, None, :], params.record_bound)
    return total.value()


@register
class SecondMoments(Kernel):
    """sum over records of z z^T, z = [clip_r(x), clip_Y(y)], released as its
    sqrt(2)-scaled upper triangle (module docstring)."""

    name = "second_moments"
    Params = SecondMomentsParams

    def output_shapes(self, params: SecondMomentsParams, dim: int) -> tuple[tuple[int, ...]]:
        return ((triangle_size(dim + 1),),)

    def l2_sensitivities(self, params: SecondMomentsParams, adjacency: Adjacency) -> tuple[float]:
        bound = params.record_bound
        return (math.sqrt(2.0) * bound if adjacency == Adjacency.REPLACE_ONE else bound,)

    def clip_bounds(self, params: SecondMomentsParams) -> dict[str, float]:
        return {"clip_norm": params.feature_norm, "label_bound": params.label_bound}

    def max_abs_sum(self, params: SecondMomentsParams, num_records: int) -> float:
        # Off-diagonal entries are sqrt(2) |sum z_j z_k| <= sqrt(2) n s / 2.
        return num_records * params.record_bound

    def computation_errors(
        self, params: SecondMomentsParams, dim: int, max_records: int
    ) -> tuple[float]:
        # The released value is within e of T(sum_i z_i z_i^T) (T = triangle_of,
        # z the float-clipped rows): BLAS error (blocked_gram) on a row norm
        # squared at most s plus its clip's few ulps, times sqrt(2) off the
        # diagonal, plus the scaling's own ulp. That function's sensitivity
        # exceeds the declared one only through the float clip (||z||^2 a few
        # ulps over s), covered by clip_slack as for exact sums.
        term = params.record_bound
        size = triangle_size(dim + 1)
        rows_bound = term + clip_slack(term, dim + 1)
        blas = gram_error(max_records, rows_bound)
        scaling = 2.0**-52 * max_records * rows_bound
        return (clip_slack(term, size) + OFF_DIAGONAL_SCALE * blas * (1 + 2.0**-50) + scaling,)

    def score_sensitivities(
        self, params: SecondMomentsParams, adjacency: Adjacency, dim: int
    ) -> tuple[float, ...]:
        # The triangle is one vector now, but the entries of a matrix are no
        # candidates' scores: a selection over them stays refused, as before.
        raise ValueError(f"kernel {self.name!r} releases a moment matrix (as its triangle), "
                         "not one vector of scores: it cannot answer a selection")

    def compute(
        self, data: Dataset, params: SecondMomentsParams, state: MutableMapping[str, Any]
    ) -> tuple[np.ndarray]:
        total = gram(params.clipped_blocks(data, BLOCK_RECORDS), data.dim + 1)
        return (triangle_of(total),)
