"""Clipped second moments of z = [x, y]: the sufficient statistics of the squared
loss (seed 000, d_DP; seed 003, M0).

Each record contributes z z^T with x scaled to norm at most r (``feature_norm``)
and y clipped to [-Y, Y] (``label_bound``), so ||z||^2 <= r^2 + Y^2 = s. The
released block is the (d+1) x (d+1) matrix sum_i z_i z_i^T. Sensitivity in
Frobenius norm: add/remove moves it by ||z z^T||_F = ||z||^2 <= s; replace-one
by ||a a^T - b b^T||_F = (||a||^4 + ||b||^4 - 2 (a.b)^2)^(1/2) <= sqrt(2) s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, MutableMapping
from typing import Any

import numpy as np

from privadapt.common.data import Dataset
from privadapt.common.kernels.base import (
    CHUNK_RECORDS,
    Kernel,
    clip_rows_to_norm,
    positive_param,
    register,
)
from privadapt.common.mechanisms import Adjacency


@register
class SecondMoments(Kernel):
    """Sum over records of z z^T, z = [clip_r(x), clip_Y(y)].

    params: ``feature_norm`` r, ``label_bound`` Y.
    """

    name = "second_moments"

    def validate_params(self, params: Mapping[str, Any], dim: int) -> None:
        positive_param(params, "feature_norm")
        positive_param(params, "label_bound")

    def output_shapes(self, params: Mapping[str, Any], dim: int) -> tuple[tuple[int, ...], ...]:
        return ((dim + 1, dim + 1),)

    def _record_bound(self, params: Mapping[str, Any]) -> float:
        feature_norm = positive_param(params, "feature_norm")
        return feature_norm**2 + positive_param(params, "label_bound") ** 2

    def l2_sensitivities(self, params: Mapping[str, Any], adjacency: Adjacency) -> tuple[float]:
        bound = self._record_bound(params)
        return (math.sqrt(2.0) * bound if adjacency == Adjacency.REPLACE_ONE else bound,)

    def clip_bounds(self, params: Mapping[str, Any]) -> dict[str, float]:
        return {
            "clip_norm": positive_param(params, "feature_norm"),
            "label_bound": positive_param(params, "label_bound"),
        }

    def max_abs_sum(self, params: Mapping[str, Any], num_records: int) -> float:
        return num_records * self._record_bound(params)

    def compute(
        self, data: Dataset, params: Mapping[str, Any], state: MutableMapping[str, Any]
    ) -> tuple[np.ndarray]:
        feature_norm = positive_param(params, "feature_norm")
        label_bound = positive_param(params, "label_bound")
        total = np.zeros((data.dim + 1, data.dim + 1))
        for start in range(0, data.num_records, CHUNK_RECORDS):
            features = clip_rows_to_norm(data.features[start : start + CHUNK_RECORDS], feature_norm)
            labels = np.clip(data.labels[start : start + CHUNK_RECORDS], -label_bound, label_bound)
            z = np.column_stack([features, labels])
            total += z.T @ z
        return (total,)
