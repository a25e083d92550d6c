"""Clipped per-record gradients of a linear model's loss.

For weights w and record (x, y) the per-record gradient is g = c(w; x, y) x,
with c = 2 (w.x - y) for the squared loss (w.x - y)^2 and
c = -y sigmoid(-y w.x) for the logistic loss log(1 + exp(-y w.x)), y in {-1, +1}
(:func:`privadapt.common.losses.loss_derivative`). Each g is scaled to L2 norm
at most C (``clip_norm``) before summing, so one record moves the sum by at
most C (add/remove) or 2C (replace one), whatever the record holds: the bound
comes from clipping, not from the data.

Float error. The sum X^T c is taken by BLAS in fixed blocks of rows
(:mod:`.blocked_gram`): every entry is a sum of products x_ij c_i with
|x_ij c_i| <= ||c_i x_i|| <= C (plus the float clip's few ulps), so it lies
within ``gram_error(N, C)`` (Higham's gamma bound, any evaluation order, N the
site's public bound on its records) of the exact sum of the clipped terms,
whose sensitivity is the one above. :meth:`LinearGradient.computation_errors`
charges that bound. At N = 2^20 it is about 5e-7 C per entry, below the
coarsest grid step the release is charged anyway (2^-16 per entry), and the
exact sum this replaces (:mod:`.exact_sum`) cost 8 ms of a 1e5-float round.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

import numpy as np

from privadapt.common.data.dataset import Dataset
from privadapt.common.kernels.base import (
    Kernel,
    KernelParams,
    check_bound,
    readonly,
    register,
    wire_values,
)
from privadapt.common.kernels.blocked_gram import BLOCK_RECORDS, gram_error, weighted_rows
from privadapt.common.kernels.exact_sum import clip_slack
from privadapt.common.losses import BINARY_LOSSES, BinaryLoss, record_loss_derivatives
from privadapt.common.mechanisms import Adjacency
from privadapt.common.numerics.geometry import clip_coefficients
from privadapt.common.validation import (
    check_array_shape,
    check_finite_array,
    check_one_of,
    frozen_value,
)


@frozen_value(eq=False)
class LinearGradientParams(KernelParams):
    """``weights`` w (d,), ``loss`` in {"squared", "logistic"}, ``clip_norm`` C."""

    weights: np.ndarray
    loss: BinaryLoss
    clip_norm: float

    def __post_init__(self) -> None:
        self.weights = readonly(
            check_finite_array("parameter 'weights'", self.weights, (None,)))
        self.clip_norm = check_bound("parameter 'clip_norm'", self.clip_norm)
        check_one_of("parameter 'loss'", self.loss, BINARY_LOSSES)

    @classmethod
    def from_wire(cls, params: Mapping[str, Any], dim: int) -> LinearGradientParams:
        values = wire_values(params, ("weights", "loss", "clip_norm"))
        # Copied and checked finite once, by the constructor.
        weights = check_array_shape("parameter 'weights'", values["weights"], (dim,))
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

    def computation_errors(
        self, params: LinearGradientParams, dim: int, max_records: int
    ) -> tuple[float]:
        # Within e of sum_i c_i x_i (c_i the float-clipped coefficients): the
        # blocked BLAS bound on products of magnitude at most ||c_i x_i||, which
        # the float clip keeps within clip_slack of C; that function's own
        # sensitivity exceeds the declared one by the same slack per record.
        slack = clip_slack(params.clip_norm, dim)
        return (slack + gram_error(max_records, params.clip_norm + slack),)

    def compute(
        self, data: Dataset, params: LinearGradientParams, state: MutableMapping[str, Any]
    ) -> tuple[np.ndarray]:
        return (weighted_rows(self._clipped_blocks(data, params), data.dim),)

    @staticmethod
    def _clipped_blocks(
        data: Dataset, params: LinearGradientParams
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(rows, clipped coefficients) per block of :data:`BLOCK_RECORDS`
        records; each coefficient computed from its own record only."""
        for start in range(0, data.num_records, BLOCK_RECORDS):
            features = data.features[start : start + BLOCK_RECORDS]
            labels = data.labels[start : start + BLOCK_RECORDS]
            coefficients = record_loss_derivatives(params.loss, features, params.weights, labels)
            yield features, clip_coefficients(coefficients, features, params.clip_norm)
