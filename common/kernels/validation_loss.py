"""Clipped validation losses of K candidate linear models: the score of private
model selection (seed 004, ../shared/seeds/004_2b354816f00c2aef.txt, Alg. 1
line 7, in its federated form of issue 13).

For candidates w_1..w_K (public: the coordinator sends them) and a clip bound
L (``loss_bound``), a site releases one block of shape (K,):

    s_k = sum_i min(l(w_k; x_i, y_i), L),   k = 1..K,

over its records, with l one of :mod:`privadapt.common.losses` (squared,
logistic, or softmax cross-entropy with W_k of shape (d, C)). A loss that is
not finite (an overflowing margin) counts as L, the worst a record can score.

Sensitivity (derivation). Every term min(l_k, L) lies in [0, L]: losses are
non-negative and clipped above at L.
* Add or remove one record: each s_k moves by that record's term, in [0, L].
* Replace one record: each s_k moves by (new term) - (old term), two numbers
  in [0, L], so again by at most L in absolute value.
So the vector (s_1..s_K) moves by at most L in each of its K entries, and its
L2 sensitivity is sqrt(K) L under both adjacencies, whatever the records and
whatever candidates the coordinator sends; the bound comes from the clip, not
from the data, so features need no clipping here (the score is the loss of the
model as it will be used).

Which records are scored: all of the site's records. The kernel does not split
the data itself; a site's split would have to be private, fixed for the job and
remembered across queries, which is state the site would need to manage. The
sound choice that needs no state is that the coordinator runs the selection on
a federation of validation datasets (records the candidates were not trained
on), or, when the candidates were trained on public data or on other records
only, on the site's whole sample. Scoring records a candidate was trained on
is still private (the selection's release composes with the training's), only
the score then favours models that overfit. The paper (Alg. 1 line 1)
partitions the private sample into S1 (training, n/2) and S2 (validation, n/2).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from privadapt.common.data import Dataset
from privadapt.common.geometry import record_products
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
from privadapt.common.losses import (
    LOSSES,
    SOFTMAX_CROSS_ENTROPY,
    Loss,
    loss_values,
    masked_class_indices,
    softmax_cross_entropy_terms,
)
from privadapt.common.mechanisms import Adjacency
from privadapt.common.validation import check_finite_array, check_one_of


@dataclass(frozen=True, eq=False)
class ValidationLossParams(KernelParams):
    """``candidates``: K linear models, an array of shape (K, d) (squared or
    logistic ``loss``) or (K, d, C) with C >= 2 classes (softmax cross-entropy);
    ``loss_bound`` L, the clip on each record's loss."""

    candidates: np.ndarray
    loss: Loss
    loss_bound: float

    def __post_init__(self) -> None:
        check_one_of("parameter 'loss'", self.loss, LOSSES)
        shape = (None, None, None) if self.loss == SOFTMAX_CROSS_ENTROPY else (None, None)
        candidates = check_finite_array("parameter 'candidates'", self.candidates, shape)
        if candidates.shape[0] < 1 or candidates.shape[1] < 1:
            raise ValueError(f"parameter 'candidates' must hold at least one model of at least "
                             f"one feature, got shape {candidates.shape}")
        if candidates.ndim == 3 and candidates.shape[2] < 2:
            raise ValueError(f"parameter 'candidates' must have C >= 2 classes for the softmax "
                             f"cross-entropy, got shape {candidates.shape}")
        object.__setattr__(self, "candidates", readonly(candidates))
        object.__setattr__(self, "loss_bound",
                           check_bound("parameter 'loss_bound'", self.loss_bound))

    @classmethod
    def from_wire(cls, params: Mapping[str, Any], dim: int) -> ValidationLossParams:
        values = wire_values(params, ("candidates", "loss", "loss_bound"))
        parsed = cls(values["candidates"], values["loss"], values["loss_bound"])
        if parsed.candidates.shape[1] != dim:
            raise ValueError(f"parameter 'candidates' must have d = {dim} features per model "
                             f"(axis 1), got shape {parsed.candidates.shape}")
        return parsed

    def to_wire(self) -> dict[str, Any]:
        return {"candidates": self.candidates, "loss": self.loss, "loss_bound": self.loss_bound}

    @property
    def num_candidates(self) -> int:
        return int(self.candidates.shape[0])


def clipped_losses(
    features: np.ndarray, labels: np.ndarray, params: ValidationLossParams
) -> np.ndarray:
    """min(l(w_k; x_i, y_i), L) for each record i and candidate k, shape (n, K);
    non-finite losses count as L, and so does a record whose label is no class
    index of a softmax candidate (the worst a record can score; never a
    refusal, which would depend on the data, issue 17)."""
    if params.loss == SOFTMAX_CROSS_ENTROPY:
        classes, valid = masked_class_indices(labels, params.candidates.shape[2])
        with np.errstate(over="ignore", invalid="ignore"):
            losses = np.column_stack([
                softmax_cross_entropy_terms(record_products(features, weights), classes)[0]
                for weights in params.candidates])
        losses = np.where(valid[:, None], losses, params.loss_bound)
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            losses = loss_values(params.loss, record_products(features, params.candidates.T),
                                 labels[:, None])
    losses = np.where(np.isnan(losses), params.loss_bound, losses)
    return np.clip(losses, 0.0, params.loss_bound)


@register
class ValidationLoss(Kernel):
    """(sum_i min(l(w_k; x_i, y_i), L))_k for K candidates: one block of shape (K,)."""

    name = "validation_loss"
    Params = ValidationLossParams

    def output_shapes(self, params: ValidationLossParams, dim: int) -> tuple[tuple[int, ...]]:
        return ((params.num_candidates,),)

    def l2_sensitivities(
        self, params: ValidationLossParams, adjacency: Adjacency
    ) -> tuple[float]:
        # Module docstring: at most L per entry under either adjacency.
        return (math.sqrt(params.num_candidates) * params.loss_bound,)

    def score_sensitivities(
        self, params: ValidationLossParams, adjacency: Adjacency, dim: int
    ) -> tuple[float, ...]:
        # Module docstring: each entry moves by at most L under either adjacency.
        return (params.loss_bound,) * params.num_candidates

    def max_abs_sum(self, params: ValidationLossParams, num_records: int) -> float:
        return num_records * params.loss_bound

    def compute(
        self, data: Dataset, params: ValidationLossParams, state: MutableMapping[str, Any]
    ) -> tuple[np.ndarray]:
        total = ExactSum((params.num_candidates,))  # exact: issue 17
        for start in range(0, data.num_records, CHUNK_RECORDS):
            stop = start + CHUNK_RECORDS
            total.add_terms(clipped_losses(data.features[start:stop], data.labels[start:stop],
                                           params), params.loss_bound)
        return (total.value(),)
