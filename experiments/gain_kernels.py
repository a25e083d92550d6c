"""Prototype kernels of the gain study (experiments only: registered when this module
is imported, so only in-process ``LocalFederation`` sites of a study that
imports it can answer them; no site daemon knows them).

``gain_paired_validation_loss``: the selection score on paired differences to
a reference candidate. For K candidates w_1..w_K, a reference w_0 (public:
the free source-only model) and public per-candidate clips C_k > 0, a site
releases one block of shape (K,)

    s_k = sum_i clip(l(w_k; x_i, y_i) - l(w_0; x_i, y_i), -C_k, C_k) / C_k.

Each term lies in [-1, 1]; a loss that is not finite makes the difference
count as +1 if only the candidate's is infinite, -1 if only the reference's
is, 0 if both are (never a refusal, which would depend on the data).

Sensitivity (derivation). Add or remove one record: each s_k moves by that
record's term, at most 1 in magnitude, so the L2 sensitivity of the vector is
sqrt(K). Replace one record: each s_k moves by (new term) - (old term), two
numbers in [-1, 1], so by at most 2: L2 sensitivity 2 sqrt(K). Both hold
whatever the records and candidates, since the clip is applied per record at
the site (``compute`` below), not assumed of the data. Un-normalised, entry k
is the clipped difference sum with sensitivity 2 C_k (replace-one) or C_k
(add/remove); normalising by the public C_k makes one Gaussian sigma on the
vector give entry k the noise C_k sigma, in proportion to its own range, as
seed 004's GEM weighs candidates of different sensitivities. A query on a
record part is charged at the larger of the two (common/data/record_parts.py):
replace-one's 2 sqrt(K). Against the clipped-loss score min(l, L) (range L,
sensitivity L per entry under both adjacencies) the paired score pays a factor
2 C_k / L in noise and gains that its clip bites only where the candidate and
the reference *disagree* by more than C_k.

``gain_difference_histogram``: per candidate k, the counts of records whose
|l(w_k) - l(w_0)| falls into each of J public bins [c_{k,j-1}, c_{k,j})
(c_{k,0} = 0, c_{k,J} = inf; the edges are the candidate's own), a block of
shape (K, J). One record adds 1 to exactly one bin of
each candidate: L2 sensitivity sqrt(K) under add/remove, sqrt(2 K) under
replace-one (one bin down, one up, per candidate). Its noisy tail counts give
each C_k privately (a quantile of the target's own differences).

In the package (GAIN_STUDY.md, implementation plan) the first becomes a
``reference`` argument of ``validation_loss`` (with ``loss_bound`` then the
per-candidate C_k and the kernel's sensitivities as above), the second a new
kernel beside it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from privadapt.common.data.dataset import Dataset
from privadapt.common.kernels.base import (
    CHUNK_RECORDS,
    Kernel,
    KernelParams,
    get_kernel,
    readonly,
    register,
)
from privadapt.common.kernels.exact_sum import ExactSum
from privadapt.common.losses import loss_values
from privadapt.common.mechanisms import Adjacency
from privadapt.common.validation import check_finite_array, check_one_of

PAIRED = "gain_paired_validation_loss"
HISTOGRAM = "gain_difference_histogram"


def loss_differences(features: np.ndarray, labels: np.ndarray, candidates: np.ndarray,
                     reference: np.ndarray, loss: str) -> np.ndarray:
    """l(w_k) - l(w_0) per record and candidate, shape (n, K): +inf / -inf /
    0 where only the candidate's / only the reference's / both losses are
    not finite (the caller clips)."""
    if loss == "error":  # 0-1 loss of the sign of x.w against labels +-1: d in {-1, 0, 1}
        own = (np.where(features @ candidates.T >= 0, 1.0, -1.0) != labels[:, None])
        base = (np.where(features @ reference >= 0, 1.0, -1.0) != labels)[:, None]
        return own.astype(float) - base.astype(float)
    with np.errstate(over="ignore", invalid="ignore"):
        own = loss_values(loss, features @ candidates.T, labels[:, None])
        base = loss_values(loss, features @ reference, labels)[:, None]
        own_bad, base_bad = ~np.isfinite(own), ~np.isfinite(base)
        diff = np.where(own_bad | base_bad, 0.0, own - base)
    diff = np.where(own_bad & ~base_bad, np.inf, diff)
    return np.where(base_bad & ~own_bad, -np.inf, diff)


@dataclass(frozen=True, eq=False)
class PairedParams(KernelParams):
    """``candidates`` (K, d), ``reference`` (d,), ``loss`` ("squared", "logistic"
    or "error": the 0-1 loss of sign(x.w) against labels +-1), ``clips`` (K,) > 0."""

    candidates: np.ndarray
    reference: np.ndarray
    loss: str
    clips: np.ndarray

    def __post_init__(self) -> None:
        check_one_of("parameter 'loss'", self.loss, ("squared", "logistic", "error"))
        candidates = check_finite_array("parameter 'candidates'", self.candidates, (None, None))
        reference = check_finite_array("parameter 'reference'", self.reference,
                                       (candidates.shape[1],))
        clips = check_finite_array("parameter 'clips'", self.clips, (candidates.shape[0],))
        if np.any(clips <= 0) or np.any(clips > 2.0**100) or np.any(clips < 2.0**-100):
            raise ValueError("parameter 'clips' must be in [2^-100, 2^100]")
        object.__setattr__(self, "candidates", readonly(candidates))
        object.__setattr__(self, "reference", readonly(reference))
        object.__setattr__(self, "clips", readonly(clips))

    @classmethod
    def from_wire(cls, params: Mapping[str, Any], dim: int) -> PairedParams:
        parsed = cls(params["candidates"], params["reference"], params["loss"], params["clips"])
        if parsed.candidates.shape[1] != dim:
            raise ValueError(f"parameter 'candidates' must have d = {dim} features")
        return parsed

    def to_wire(self) -> dict[str, Any]:
        return {"candidates": self.candidates, "reference": self.reference, "loss": self.loss,
                "clips": self.clips}


class _Paired(Kernel):
    name = PAIRED
    Params = PairedParams

    def output_shapes(self, params: PairedParams, dim: int) -> tuple[tuple[int, ...]]:
        return ((params.candidates.shape[0],),)

    def l2_sensitivities(self, params: PairedParams, adjacency: Adjacency) -> tuple[float]:
        per_entry = 2.0 if Adjacency(adjacency) == Adjacency.REPLACE_ONE else 1.0
        return (per_entry * math.sqrt(params.candidates.shape[0]),)

    def score_sensitivities(self, params: PairedParams, adjacency: Adjacency,
                            dim: int) -> tuple[float, ...]:
        per_entry = 2.0 if Adjacency(adjacency) == Adjacency.REPLACE_ONE else 1.0
        return (per_entry,) * params.candidates.shape[0]

    def max_abs_sum(self, params: PairedParams, num_records: int) -> float:
        return float(num_records)

    def work(self, params: PairedParams, dim: int, num_records: int) -> float:
        return float(num_records) * max(dim, 1) * (params.candidates.shape[0] + 1)

    def compute(self, data: Dataset, params: PairedParams,
                state: MutableMapping[str, Any]) -> tuple[np.ndarray]:
        total = ExactSum((params.candidates.shape[0],))
        for start in range(0, data.num_records, CHUNK_RECORDS):
            stop = start + CHUNK_RECORDS
            diff = loss_differences(data.features[start:stop], data.labels[start:stop],
                                    params.candidates, params.reference, params.loss)
            total.add_terms(np.clip(diff / params.clips, -1.0, 1.0), 1.0)
        return (total.value(),)


@dataclass(frozen=True, eq=False)
class HistogramParams(KernelParams):
    """``candidates`` (K, d), ``reference`` (d,), ``loss``, ``edges`` (K, J - 1):
    per candidate, increasing positive bin edges c_1 < ... < c_{J-1}."""

    candidates: np.ndarray
    reference: np.ndarray
    loss: str
    edges: np.ndarray

    def __post_init__(self) -> None:
        check_one_of("parameter 'loss'", self.loss, ("squared", "logistic"))
        candidates = check_finite_array("parameter 'candidates'", self.candidates, (None, None))
        reference = check_finite_array("parameter 'reference'", self.reference,
                                       (candidates.shape[1],))
        edges = check_finite_array("parameter 'edges'", self.edges,
                                   (candidates.shape[0], None))
        if edges.shape[1] < 1 or np.any(edges <= 0) or np.any(np.diff(edges, axis=1) <= 0):
            raise ValueError("parameter 'edges' must be increasing and positive")
        object.__setattr__(self, "candidates", readonly(candidates))
        object.__setattr__(self, "reference", readonly(reference))
        object.__setattr__(self, "edges", readonly(edges))

    @classmethod
    def from_wire(cls, params: Mapping[str, Any], dim: int) -> HistogramParams:
        return cls(params["candidates"], params["reference"], params["loss"], params["edges"])

    def to_wire(self) -> dict[str, Any]:
        return {"candidates": self.candidates, "reference": self.reference, "loss": self.loss,
                "edges": self.edges}


class _Histogram(Kernel):
    name = HISTOGRAM
    Params = HistogramParams

    def output_shapes(self, params: HistogramParams, dim: int) -> tuple[tuple[int, ...]]:
        return ((params.candidates.shape[0], params.edges.shape[1] + 1),)

    def l2_sensitivities(self, params: HistogramParams, adjacency: Adjacency) -> tuple[float]:
        k = params.candidates.shape[0]
        return (math.sqrt(2 * k) if Adjacency(adjacency) == Adjacency.REPLACE_ONE
                else math.sqrt(k),)

    def max_abs_sum(self, params: HistogramParams, num_records: int) -> float:
        return float(num_records)

    def compute(self, data: Dataset, params: HistogramParams,
                state: MutableMapping[str, Any]) -> tuple[np.ndarray]:
        k, bins = params.candidates.shape[0], params.edges.shape[1] + 1
        counts = np.zeros((k, bins))
        for start in range(0, data.num_records, CHUNK_RECORDS):
            stop = start + CHUNK_RECORDS
            diff = np.abs(loss_differences(data.features[start:stop], data.labels[start:stop],
                                           params.candidates, params.reference, params.loss))
            for j in range(k):  # inf -> the last bin
                index = np.searchsorted(params.edges[j], diff[:, j], side="right")
                counts[j] += np.bincount(index, minlength=bins)
        return (counts,)


def _register() -> None:
    for kernel in (_Paired, _Histogram):
        try:
            get_kernel(kernel.name)
        except KeyError:
            register(kernel)


_register()
PAIRED_KERNEL = get_kernel(PAIRED)
HISTOGRAM_KERNEL = get_kernel(HISTOGRAM)
