"""Histograms of |paired loss differences| to a reference: what chooses the
clips of the paired selection score privately (validation_loss.py, module
docstring, "Paired differences to a reference"; experiments/results/
GAIN_STUDY.md, 4.1).

For K candidate linear models w_1..w_K, a public reference w_0 and, per
candidate, J - 1 increasing positive public bin edges c_{k,1} < ... <
c_{k,J-1} (``edges``, shape (K, J - 1); c_{k,0} = 0 and c_{k,J} = inf), a
site releases one block of shape (K, J): entry (k, j) is the number of its
records whose |l(w_k) - l(w_0)| lies in [c_{k,j}, c_{k,j+1}). The differences
follow validation_loss's rules for losses that are not finite
(:func:`~privadapt.common.kernels.validation_loss.loss_differences`): an
infinite difference falls in the last bin, a record where both losses are
infinite (or, for the softmax, whose label is no class index) in the first.
Never a refusal.

Sensitivity (derivation). Every record falls in exactly one bin of each
candidate's row, whatever its values (the bins of a row partition [0, inf]).
* Add or remove one record: one entry of each row moves by 1; the block moves
  by sqrt(K) in L2.
* Replace one record: in each row one entry loses 1 and one gains 1 (or none
  moves, if both records fall in the same bin); the block moves by at most
  sqrt(2 K) in L2.
The number of bins J costs nothing in sensitivity, but every bin carries its
own noise, so a tail count summed over many noisy bins is noisier: the
selection uses a few (private_selection.py). A query on a part of the
records is charged the larger of the two (record_parts.py): sqrt(2 K).

How the clips are read from it (server/algorithms/model_selection/
private_selection.py): C_k is the smallest edge whose noisy tail count is at
most a public quantile of the part plus one standard deviation of that
count's noise. The counts are a Gaussian release like any other; C_k is
post-processing of it and only sets a public parameter of the next release
(the paired sums), whose normalised sensitivity does not depend on C_k.
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
    readonly,
    register,
    wire_values,
)
from privadapt.common.kernels.validation_loss import checked_candidates, loss_differences
from privadapt.common.losses import Loss
from privadapt.common.mechanisms import Adjacency
from privadapt.common.validation import check_finite_array, frozen_value

#: The most bins per candidate: each bin's noise adds to a tail count, so a
#: useful histogram has a few; a bound keeps a coordinator from asking for a
#: block of millions of entries.
MAX_BINS = 64


@frozen_value(eq=False)
class LossDifferenceHistogramParams(KernelParams):
    """``candidates`` (K, d) or (K, d, C) (softmax), ``reference`` of a
    candidate's shape, ``loss``, ``edges`` (K, J - 1): per candidate,
    increasing bin edges in [2^-200, 2^200] (module docstring)."""

    candidates: np.ndarray
    reference: np.ndarray
    loss: Loss
    edges: np.ndarray

    def __post_init__(self) -> None:
        candidates = checked_candidates(self.candidates, self.loss)
        reference = check_finite_array("parameter 'reference'", self.reference,
                                       candidates.shape[1:])
        edges = check_finite_array("parameter 'edges'", self.edges,
                                   (candidates.shape[0], None))
        if not 1 <= edges.shape[1] < MAX_BINS:
            raise ValueError(f"parameter 'edges' must give 1 to {MAX_BINS - 1} edges per "
                             f"candidate, got {edges.shape[1]}")
        low, high = BOUND_RANGE
        if np.any(edges < low) or np.any(edges > high) or np.any(np.diff(edges, axis=1) <= 0):
            raise ValueError("parameter 'edges' must be increasing in each row, within "
                             "[2^-200, 2^200]")
        self.candidates = readonly(candidates)
        self.reference = readonly(reference)
        self.edges = readonly(edges)

    @classmethod
    def from_wire(cls, params: Mapping[str, Any], dim: int) -> LossDifferenceHistogramParams:
        values = wire_values(params, ("candidates", "reference", "loss", "edges"))
        parsed = cls(values["candidates"], values["reference"], values["loss"],
                     values["edges"])
        if parsed.candidates.shape[1] != dim:
            raise ValueError(f"parameter 'candidates' must have d = {dim} features per model "
                             f"(axis 1), got shape {parsed.candidates.shape}")
        return parsed

    def to_wire(self) -> dict[str, Any]:
        return {"candidates": self.candidates, "reference": self.reference, "loss": self.loss,
                "edges": self.edges}

    @property
    def num_candidates(self) -> int:
        return int(self.candidates.shape[0])

    @property
    def num_bins(self) -> int:
        """J: the edges plus one."""
        return int(self.edges.shape[1]) + 1


def difference_bins(features: np.ndarray, labels: np.ndarray,
                    params: LossDifferenceHistogramParams) -> np.ndarray:
    """Each record's bin per candidate, shape (n, K), integers in [0, J - 1]
    (module docstring: exactly one bin per record and candidate)."""
    diff = np.abs(loss_differences(features, labels, params.candidates, params.reference,
                                   params.loss))
    return np.column_stack([np.searchsorted(params.edges[k], diff[:, k], side="right")
                            for k in range(params.num_candidates)])


@register
class LossDifferenceHistogram(Kernel):
    """Per candidate, counts of |l(w_k) - l(w_0)| in public bins: one block (K, J)."""

    name = "loss_difference_histogram"
    Params = LossDifferenceHistogramParams

    def output_shapes(self, params: LossDifferenceHistogramParams,
                      dim: int) -> tuple[tuple[int, ...]]:
        return ((params.num_candidates, params.num_bins),)

    def l2_sensitivities(self, params: LossDifferenceHistogramParams,
                         adjacency: Adjacency) -> tuple[float]:
        # Module docstring: one bin per row moves under add/remove, two under replace-one.
        moved = 2 if Adjacency(adjacency) == Adjacency.REPLACE_ONE else 1
        return (math.sqrt(moved * params.num_candidates),)

    def max_abs_sum(self, params: LossDifferenceHistogramParams, num_records: int) -> float:
        return float(num_records)  # a count

    def work(self, params: LossDifferenceHistogramParams, dim: int, num_records: int) -> float:
        # Every candidate's margins and the reference's on every record (the
        # binning is a few comparisons more per entry).
        classes = params.candidates.shape[2] if params.candidates.ndim == 3 else 1
        columns = (params.num_candidates + 1) * classes
        return float(num_records) * max(dim, 1) * columns

    def compute(self, data: Dataset, params: LossDifferenceHistogramParams,
                state: MutableMapping[str, Any]) -> tuple[np.ndarray]:
        # Integer counts below 2^53 are exact in float64.
        size = params.num_candidates * params.num_bins
        counts = np.zeros(size)
        # Chunks of at most CHUNK_RECORDS margins (every class's, for the
        # softmax): the working memory must not grow with the private n.
        classes = params.candidates.shape[2] if params.candidates.ndim == 3 else 1
        rows = max(1, CHUNK_RECORDS // ((params.num_candidates + 1) * classes))
        # Candidate k's bin j is entry k J + j of one bincount over the chunk.
        offsets = np.arange(params.num_candidates) * params.num_bins
        for start in range(0, data.num_records, rows):
            stop = start + rows
            bins = difference_bins(data.features[start:stop], data.labels[start:stop], params)
            counts += np.bincount((bins + offsets).ravel(), minlength=size)
        return (counts.reshape(params.num_candidates, params.num_bins),)
