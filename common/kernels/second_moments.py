"""Clipped second moments of z = [x, y]: the sufficient statistics of the squared
loss (seed 000, d_DP; seed 003, M0).

Each record contributes z z^T with x scaled to norm at most r (``feature_norm``)
and y clipped to [-Y, Y] (``label_bound``), so ||z||^2 <= r^2 + Y^2 = s. The
released block is the (d+1) x (d+1) matrix sum_i z_i z_i^T. Sensitivity in
Frobenius norm: add/remove moves it by ||z z^T||_F = ||z||^2 <= s; replace-one
by ||a a^T - b b^T||_F = (||a||^4 + ||b||^4 - 2 (a.b)^2)^(1/2) <= sqrt(2) s.

The sum is exact (:class:`~privadapt.common.kernels.exact_sum.ExactSum`): each
record's z z^T is rounded toward zero (so its norm bound still holds) and the
terms are added without rounding, so a changed record moves the sum by its own term
only, however large n or the other records are (issue 17).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from privadapt.common.data import Dataset
from privadapt.common.geometry import clip_rows_to_norm
from privadapt.common.kernels.base import (
    CHUNK_RECORDS,
    Kernel,
    KernelParams,
    check_bound,
    register,
    wire_values,
)
from privadapt.common.kernels.exact_sum import ExactSum
from privadapt.common.mechanisms import Adjacency


@dataclass(frozen=True)
class SecondMomentsParams(KernelParams):
    """The clip region: ``feature_norm`` r (||x|| <= r) and ``label_bound`` Y (|y| <= Y)."""

    feature_norm: float
    label_bound: float

    def __post_init__(self) -> None:
        for key in ("feature_norm", "label_bound"):
            object.__setattr__(self, key, check_bound(f"parameter {key!r}", getattr(self, key)))

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


@register
class SecondMoments(Kernel):
    """Sum over records of z z^T, z = [clip_r(x), clip_Y(y)]."""

    name = "second_moments"
    Params = SecondMomentsParams

    def output_shapes(self, params: SecondMomentsParams, dim: int) -> tuple[tuple[int, ...]]:
        return ((dim + 1, dim + 1),)

    def l2_sensitivities(self, params: SecondMomentsParams, adjacency: Adjacency) -> tuple[float]:
        bound = params.record_bound
        return (math.sqrt(2.0) * bound if adjacency == Adjacency.REPLACE_ONE else bound,)

    def clip_bounds(self, params: SecondMomentsParams) -> dict[str, float]:
        return {"clip_norm": params.feature_norm, "label_bound": params.label_bound}

    def max_abs_sum(self, params: SecondMomentsParams, num_records: int) -> float:
        return num_records * params.record_bound

    def compute(
        self, data: Dataset, params: SecondMomentsParams, state: MutableMapping[str, Any]
    ) -> tuple[np.ndarray]:
        size = data.dim + 1
        total = ExactSum((size, size))
        chunk = max(1, CHUNK_RECORDS * 64 // size**2)  # chunk x size^2 products in memory
        for start in range(0, data.num_records, chunk):
            z = params.clip(data, start, start + chunk)
            # Each record's own z z^T (entries at most ||z||^2 <= s), summed exactly.
            total.add_terms(z[:, :, None] * z[:, None, :], params.record_bound)
        return (total.value(),)
