"""Clipped per-record gradients of a linear model's loss.

For weights w and record (x, y) the per-record gradient is g = c(w; x, y) x,
with c = 2 (w.x - y) for the squared loss (w.x - y)^2 and
c = -y sigmoid(-y w.x) for the logistic loss log(1 + exp(-y w.x)), y in {-1, +1}
(:func:`privadapt.common.losses.loss_derivative`). Each g is scaled to L2 norm
at most C (``clip_norm``) before summing, so one record moves the sum by at
most C (add/remove) or 2C (replace one), whatever the record holds: the bound
comes from clipping, not from the data. The clipped terms are summed exactly
(:class:`~privadapt.common.kernels.exact_sum.ExactSum`), so no other record's
rounding can move the sum when one changes (issue 17).
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from privadapt.common.data import Dataset
from privadapt.common.geometry import clip_coefficients, record_products
from privadapt.common.kernels.base import (
    CHUNK_RECORDS,
    Kernel,
    KernelParams,
    check_bound,
    readonly,
    register,
    wire_values,
)
from privadapt.common.kernels.exact_sum import ExactSum
from privadapt.common.losses import BINARY_LOSSES, BinaryLoss, loss_derivative
from privadapt.common.mechanisms import Adjacency
from privadapt.common.validation import check_finite_array, check_one_of


@dataclass(frozen=True, eq=False)
class LinearGradientParams(KernelParams):
    """``weights`` w (d,), ``loss`` in {"squared", "logistic"}, ``clip_norm`` C."""

    weights: np.ndarray
    loss: BinaryLoss
    clip_norm: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "weights", readonly(
            check_finite_array("parameter 'weights'", self.weights, (None,))))
        object.__setattr__(self, "clip_norm",
                           check_bound("parameter 'clip_norm'", self.clip_norm))
        check_one_of("parameter 'loss'", self.loss, BINARY_LOSSES)

    @classmethod
    def from_wire(cls, params: Mapping[str, Any], dim: int) -> LinearGradientParams:
        values = wire_values(params, ("weights", "loss", "clip_norm"))
        weights = check_finite_array("parameter 'weights'", values["weights"], (dim,))
        return cls(weights, values["loss"], values["clip_norm"])

    def to_wire(self) -> dict[str, Any]:
        return {"weights": self.weights, "loss": self.loss, "clip_norm": self.clip_norm}


@register
class LinearGradient(Kernel):
    """Sum over records of clip_C(grad_w loss(w; x_i, y_i))."""

    name = "linear_gradient"
    Params = LinearGradientParams

    def output_shapes(self, params: LinearGradientParams, dim: int) -> tuple[tuple[int, ...]]:
        return ((dim,),)

    def l2_sensitivities(self, params: LinearGradientParams, adjacency: Adjacency) -> tuple[float]:
        clip_norm = params.clip_norm
        return (2.0 * clip_norm if adjacency == Adjacency.REPLACE_ONE else clip_norm,)

    def clip_bounds(self, params: LinearGradientParams) -> dict[str, float]:
        return {"clip_norm": params.clip_norm}

    def max_abs_sum(self, params: LinearGradientParams, num_records: int) -> float:
        return num_records * params.clip_norm

    def compute(
        self, data: Dataset, params: LinearGradientParams, state: MutableMapping[str, Any]
    ) -> tuple[np.ndarray]:
        total = ExactSum((data.dim,))
        for start in range(0, data.num_records, CHUNK_RECORDS):
            features = data.features[start : start + CHUNK_RECORDS]
            labels = data.labels[start : start + CHUNK_RECORDS]
            with np.errstate(over="ignore", invalid="ignore"):
                margins = record_products(features, params.weights)
                coefficients = loss_derivative(params.loss, margins, labels)
            clipped = clip_coefficients(coefficients, features, params.clip_norm)
            with np.errstate(over="ignore", invalid="ignore"):
                terms = features * clipped[:, None]  # each row of norm <= C
            total.add_terms(terms, params.clip_norm)
        return (total.value(),)
