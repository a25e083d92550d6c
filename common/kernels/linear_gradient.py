"""Clipped per-record gradients of a linear model's loss.

For weights w and record (x, y) the per-record gradient is g = c(w; x, y) x,
with c = 2 (w.x - y) for the squared loss (w.x - y)^2 and
c = -y sigmoid(-y w.x) for the logistic loss log(1 + exp(-y w.x)), y in {-1, +1}.
Each g is scaled to L2 norm at most C (``clip_norm``) before summing, so one
record moves the sum by at most C (add/remove) or 2C (replace one), whatever
the record holds: the bound comes from clipping, not from the data.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

import numpy as np
from scipy import special

from privadapt.common.data import Dataset
from privadapt.common.kernels.base import (
    CHUNK_RECORDS,
    Kernel,
    clip_coefficients,
    positive_param,
    register,
)
from privadapt.common.mechanisms import Adjacency

LOSSES = ("squared", "logistic")


def loss_derivative(loss: str, margins: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """d loss / d (w.x) for each record: the per-record gradient is this times x."""
    if loss == "squared":
        return 2.0 * (margins - labels)
    return -labels * special.expit(-labels * margins)


def weights_param(params: Mapping[str, Any], dim: int) -> np.ndarray:
    weights = np.asarray(params.get("weights"), dtype=np.float64)
    if weights.shape != (dim,):
        raise ValueError(f"parameter 'weights' must have shape ({dim},), got {weights.shape}")
    if not np.all(np.isfinite(weights)):
        raise ValueError("parameter 'weights' holds NaN or infinite values")
    return weights


@register
class LinearGradient(Kernel):
    """Sum over records of clip_C(grad_w loss(w; x_i, y_i)).

    params: ``weights`` (d,), ``loss`` in {"squared", "logistic"}, ``clip_norm`` C.
    """

    name = "linear_gradient"

    def validate_params(self, params: Mapping[str, Any], dim: int) -> None:
        weights_param(params, dim)
        positive_param(params, "clip_norm")
        if params.get("loss") not in LOSSES:
            raise ValueError(
                f"parameter 'loss' must be one of {LOSSES}, got {params.get('loss')!r}"
            )

    def output_shapes(self, params: Mapping[str, Any], dim: int) -> tuple[tuple[int, ...], ...]:
        return ((dim,),)

    def l2_sensitivities(self, params: Mapping[str, Any], adjacency: Adjacency) -> tuple[float]:
        clip_norm = positive_param(params, "clip_norm")
        return (2.0 * clip_norm if adjacency == Adjacency.REPLACE_ONE else clip_norm,)

    def clip_bounds(self, params: Mapping[str, Any]) -> dict[str, float]:
        return {"clip_norm": positive_param(params, "clip_norm")}

    def max_abs_sum(self, params: Mapping[str, Any], num_records: int) -> float:
        return num_records * positive_param(params, "clip_norm")

    def compute(
        self, data: Dataset, params: Mapping[str, Any], state: MutableMapping[str, Any]
    ) -> tuple[np.ndarray]:
        weights = weights_param(params, data.dim)
        clip_norm = positive_param(params, "clip_norm")
        loss = params["loss"]
        total = np.zeros(data.dim)
        for start in range(0, data.num_records, CHUNK_RECORDS):
            features = data.features[start : start + CHUNK_RECORDS]
            labels = data.labels[start : start + CHUNK_RECORDS]
            coefficients = self._clipped_coefficients(features, labels, weights, loss, clip_norm)
            total += features.T @ coefficients
        return (total,)

    @staticmethod
    def _clipped_coefficients(
        features: np.ndarray, labels: np.ndarray, weights: np.ndarray, loss: str, clip_norm: float
    ) -> np.ndarray:
        """a_i with a_i x_i = clip_C(c_i x_i) (:func:`base.clip_coefficients`)."""
        with np.errstate(over="ignore", invalid="ignore"):
            coefficients = loss_derivative(loss, features @ weights, labels)
        return clip_coefficients(coefficients, features, clip_norm)
