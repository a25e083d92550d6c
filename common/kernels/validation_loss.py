"""Clipped validation losses of K candidate linear models: the score of private
model selection (seed 004, ../shared/seeds/004_2b354816f00c2aef.txt, Alg. 1
line 7, in its federated form).

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

Per-candidate bounds (seed 004's grid search). ``loss_bound`` may
instead be an array of K bounds L_k >= 0 (at least one positive): candidate
k's losses are clipped to [0, L_k], so by the argument above entry k moves by
at most L_k, the score sensitivities are (L_1..L_K), and the L2 sensitivity is
sqrt(sum_k L_k^2) (each entry's change bounded on its own, then the norm). A
bound L_k = 0 makes entry k the constant 0: a candidate whose score is public,
such as seed 004's zero model with its score Y^2 (below). A model of norm B
on records of norm r and labels Y has losses within its own bound (squared:
(B r + Y)^2), so clipping each guess at its own bound loses nothing, where one
bound for all would clip the small models' losses no tighter than the largest's
and charge every entry the largest's sensitivity.

``score_offsets`` (optional, K public numbers): added once to the site's sums
after they are computed, s_k + o_k. They are constants of the query, not per
record, so they move no entry between neighbours and change no sensitivity:
they carry seed 004's public penalties n tau_k and the zero model's public
score Y^2 n into a selection that runs at one site (GEM compares penalised
scores). Added once per site, they are meant for a single holder; a secure sum
over several sites would add them once per site, so a coordinator adds them to
the released total itself instead.

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

Paired differences to a reference (``reference``, optional). The clipped loss
min(l_k, L) orders candidates by E[l_k] - E[(l_k - L)+]: a record whose loss
exceeds L scores L for *every* candidate, so where the target has a heavy tail
the score ignores which candidate is better on exactly the records that
separate them, and can rank a flat public constant above the model of least
unclipped loss even without noise (experiments/results/GAIN_STUDY.md, 3a).
With a public reference model w_0 (the free source-only model) the site
releases instead, with ``loss_bound`` read as per-candidate clips C_k > 0 (one
number for all, or K),

    s_k = sum_i clip(l(w_k; x_i, y_i) - l(w_0; x_i, y_i), -C_k, C_k) / C_k.

Why it orders as the unclipped loss. clip(d, -C, C) has the sign of d on every
record, and the bias of the clipped mean, E[(d - C)+] - E[(-d - C)+], comes
only from records where the candidate and the reference *disagree* by more
than C_k, not from records where both losses are large (a record that
inflates every candidate's loss cancels in d). With C_k >= max_i |d_i| the
score is the unclipped mean difference, exactly.

Non-finite losses (:func:`loss_differences`): a record whose candidate loss is
not finite and reference loss is counts +1 (the candidate is worse), the
reverse -1, both not finite 0; a softmax record whose label is no class index
0 (both candidates score it the worst). Never a refusal: whether a site
answers must not depend on its records.

Sensitivity with a reference (derivation). Every normalised term lies in
[-1, 1]: the clip is applied per record at the site (:func:`paired_terms`),
whatever the records and the candidates the coordinator sends.
* Add or remove one record: each s_k moves by that record's term, at most 1;
  the vector's L2 sensitivity is sqrt(K).
* Replace one record: each s_k moves by (new term) - (old term), two numbers
  in [-1, 1], so by at most 2; the L2 sensitivity is 2 sqrt(K).
Per entry (a selection's score sensitivities): 2, resp. 1. A query on a part
of the records is charged the larger of the two (record_parts.py): replacing
a record can move it into or out of the part. Un-normalised, entry k is the
clipped difference sum with sensitivity 2 C_k (replace-one); one Gaussian
sigma on the normalised vector gives entry k the noise C_k sigma in the
units of the loss, in proportion to its own range, as seed 004's GEM weighs
candidates of different sensitivities. The reference's own entry would be
identically 0, so it is not a candidate here: the coordinator reads it as 0.
``score_offsets`` (GEM's public penalties on losses) are refused together with
a reference: they are defined on losses, not on differences.
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
    check_bound,
    readonly,
    register,
    wire_values,
)
from privadapt.common.kernels.exact_sum import ExactSum, conversion_error, power_of_two_above
from privadapt.common.losses import (
    LOSSES,
    SOFTMAX_CROSS_ENTROPY,
    Loss,
    loss_values,
    masked_class_indices,
    softmax_cross_entropy_terms,
)
from privadapt.common.mechanisms import Adjacency
from privadapt.common.numerics.geometry import record_products
from privadapt.common.validation import check_finite_array, check_one_of, frozen_value

#: The most candidates one query may score: the site's time grows with K and
#: a coordinator chooses K (the wire alone would let it send millions).
MAX_CANDIDATES = 4096
#: The most scored columns (K candidates times C classes) one query may ask:
#: a softmax candidate's work and memory grow with C too (C = 200,000 cost
#: 36.5 s at n = 2,000 under an estimate of 4,000).
MAX_SCORED_COLUMNS = 2**16


@frozen_value(eq=False)
class ValidationLossParams(KernelParams):
    """``candidates``: K linear models, an array of shape (K, d) (squared or
    logistic ``loss``) or (K, d, C) with C >= 2 classes (softmax cross-entropy);
    ``loss_bound``: L, the clip on each record's loss, or K bounds L_k >= 0
    (at least one positive), one per candidate; ``score_offsets``: None or
    K public constants added to the sums; ``reference``: None, or one public
    model of a candidate's shape, (d,) or (d, C): the release is then the
    paired differences to it and ``loss_bound`` the clips C_k > 0 of the
    differences (module docstring)."""

    candidates: np.ndarray
    loss: Loss
    loss_bound: float | np.ndarray
    score_offsets: np.ndarray | None = None
    reference: np.ndarray | None = None

    def __post_init__(self) -> None:
        candidates = checked_candidates(self.candidates, self.loss)
        self.candidates = readonly(candidates)
        self.loss_bound = _checked_loss_bound(self.loss_bound, candidates.shape[0])
        if self.score_offsets is not None:
            offsets = check_finite_array("parameter 'score_offsets'", self.score_offsets,
                                         (candidates.shape[0],))
            self.score_offsets = readonly(offsets)
        if self.reference is not None:
            if self.score_offsets is not None:
                raise ValueError("parameter 'score_offsets' cannot go with a 'reference': the "
                                 "offsets are public penalties on losses, not on differences")
            reference = check_finite_array("parameter 'reference'", self.reference,
                                           candidates.shape[1:])
            self.reference = readonly(reference)
            if np.any(self.bounds <= 0):
                raise ValueError("parameter 'loss_bound' must hold clips > 0 for paired "
                                 "differences (each difference is divided by its clip)")

    @classmethod
    def from_wire(cls, params: Mapping[str, Any], dim: int) -> ValidationLossParams:
        values = wire_values(params, ("candidates", "loss", "loss_bound"))
        parsed = cls(values["candidates"], values["loss"], values["loss_bound"],
                     params.get("score_offsets"), params.get("reference"))
        if parsed.candidates.shape[1] != dim:
            raise ValueError(f"parameter 'candidates' must have d = {dim} features per model "
                             f"(axis 1), got shape {parsed.candidates.shape}")
        return parsed

    def to_wire(self) -> dict[str, Any]:
        wire = {"candidates": self.candidates, "loss": self.loss, "loss_bound": self.loss_bound}
        if self.score_offsets is not None:
            wire["score_offsets"] = self.score_offsets
        if self.reference is not None:  # absent: the encoding (and digest) of before
            wire["reference"] = self.reference
        return wire

    @property
    def paired(self) -> bool:
        """Whether the release is the paired differences to a reference."""
        return self.reference is not None

    @property
    def num_candidates(self) -> int:
        return int(self.candidates.shape[0])

    @property
    def scored_columns(self) -> int:
        """K C: the margins computed per record (C = 1 but for the softmax)."""
        classes = self.candidates.shape[2] if self.candidates.ndim == 3 else 1
        return self.num_candidates * int(classes)

    @property
    def bounds(self) -> np.ndarray:
        """L_k for every candidate, shape (K,), whether one bound was given or K."""
        return np.broadcast_to(np.asarray(self.loss_bound, dtype=np.float64),
                               (self.num_candidates,))

    @property
    def max_offset(self) -> float:
        """max_k |o_k| (0 without offsets)."""
        return 0.0 if self.score_offsets is None else float(np.abs(self.score_offsets).max())


def checked_candidates(value: Any, loss: str) -> np.ndarray:
    """K linear models for ``loss`` as a float64 array, (K, d) or (K, d, C)
    with C >= 2 for the softmax, within the site's limits on K and on the
    scored columns K C; ``ValueError`` naming the parameter otherwise (and
    for an unknown ``loss``)."""
    check_one_of("parameter 'loss'", loss, LOSSES)
    shape = (None, None, None) if loss == SOFTMAX_CROSS_ENTROPY else (None, None)
    candidates = check_finite_array("parameter 'candidates'", value, shape)
    if candidates.shape[0] < 1 or candidates.shape[1] < 1:
        raise ValueError(f"parameter 'candidates' must hold at least one model of at least "
                         f"one feature, got shape {candidates.shape}")
    if candidates.shape[0] > MAX_CANDIDATES:
        raise ValueError(f"parameter 'candidates' holds {candidates.shape[0]} models, more "
                         f"than the {MAX_CANDIDATES} a site scores in one query")
    if candidates.ndim == 3 and candidates.shape[2] < 2:
        raise ValueError(f"parameter 'candidates' must have C >= 2 classes for the softmax "
                         f"cross-entropy, got shape {candidates.shape}")
    columns = candidates.shape[0] * (candidates.shape[2] if candidates.ndim == 3 else 1)
    if columns > MAX_SCORED_COLUMNS:
        raise ValueError(f"parameter 'candidates' asks for {columns} scored columns (models "
                         f"times classes), more than the {MAX_SCORED_COLUMNS} a site scores "
                         "in one query")
    return candidates


def _checked_loss_bound(value: Any, num_candidates: int) -> float | np.ndarray:
    """One clip bound (a float, as before), or K bounds in [0, 2^200] with at
    least one positive (a read-only float64 array: a tensor on the wire)."""
    if np.ndim(value) == 0:
        return check_bound("parameter 'loss_bound'", value)
    bounds = check_finite_array("parameter 'loss_bound'", value, (num_candidates,))
    if np.any(bounds < 0) or np.any(bounds > BOUND_RANGE[1]) or not np.any(bounds > 0):
        raise ValueError(f"parameter 'loss_bound' must hold {num_candidates} bounds in "
                         f"[0, 2^200], at least one positive, got {bounds.tolist()}")
    positive = bounds[bounds > 0]
    if np.any(positive < BOUND_RANGE[0]):
        raise ValueError("parameter 'loss_bound' has a positive bound below 2^-200")
    return readonly(bounds)


def clipped_losses(
    features: np.ndarray, labels: np.ndarray, params: ValidationLossParams
) -> np.ndarray:
    """min(l(w_k; x_i, y_i), L) for each record i and candidate k, shape (n, K);
    non-finite losses count as L, and so does a record whose label is no class
    index of a softmax candidate (the worst a record can score; never a
    refusal, which would depend on the data)."""
    losses, valid = _record_losses(features, labels, params.candidates, params.loss)
    losses = np.where(valid[:, None], losses, params.bounds)
    losses = np.where(np.isnan(losses), params.bounds, losses)
    return np.clip(losses, 0.0, params.bounds)


def _record_losses(features: np.ndarray, labels: np.ndarray, models: np.ndarray,
                   loss: str) -> tuple[np.ndarray, np.ndarray]:
    """(losses, valid): l(w_k; x_i, y_i) for each record and model of
    ``models`` ((K, d) or (K, d, C)), shape (n, K), unclipped (possibly not
    finite), and per record whether its label is scored at all (False only
    for a softmax record whose label is no class index)."""
    if loss == SOFTMAX_CROSS_ENTROPY:
        classes, valid = masked_class_indices(labels, models.shape[2])
        with np.errstate(over="ignore", invalid="ignore"):
            losses = np.column_stack([
                softmax_cross_entropy_terms(record_products(features, weights), classes)[0]
                for weights in models])
        return losses, valid
    with np.errstate(over="ignore", invalid="ignore"):
        losses = loss_values(loss, record_products(features, models.T), labels[:, None])
    return losses, np.ones(len(labels), dtype=bool)


def loss_differences(features: np.ndarray, labels: np.ndarray, candidates: np.ndarray,
                     reference: np.ndarray, loss: str) -> np.ndarray:
    """l(w_k; x_i, y_i) - l(w_0; x_i, y_i) per record and candidate, shape
    (n, K), with the rules for losses that are not finite (module docstring):
    +inf where only the candidate's is, -inf where only the reference's is, 0
    where both are or the record's label is no class index. Never NaN; the
    caller clips."""
    own, valid = _record_losses(features, labels, candidates, loss)
    base, _ = _record_losses(features, labels, reference[None], loss)
    own_bad, base_bad = ~np.isfinite(own), ~np.isfinite(base)
    with np.errstate(invalid="ignore"):
        diff = np.where(own_bad | base_bad, 0.0, own - base)
    diff = np.where(own_bad & ~base_bad, np.inf, diff)
    diff = np.where(base_bad & ~own_bad, -np.inf, diff)
    return np.where(valid[:, None], diff, 0.0)


def paired_terms(
    features: np.ndarray, labels: np.ndarray, params: ValidationLossParams
) -> np.ndarray:
    """clip(l(w_k) - l(w_0), -C_k, C_k) / C_k for each record and candidate,
    shape (n, K), every entry in [-1, 1] whatever the records (module
    docstring); ``params`` must carry a reference."""
    if params.reference is None:
        raise ValueError("paired terms need a 'reference'")
    diff = loss_differences(features, labels, params.candidates, params.reference, params.loss)
    with np.errstate(over="ignore"):  # a huge difference over a tiny clip: inf, clipped to 1
        terms = np.clip(diff / params.bounds, -1.0, 1.0)
    return np.where(np.isnan(terms), 0.0, terms)


@register
class ValidationLoss(Kernel):
    """(sum_i min(l(w_k; x_i, y_i), L))_k for K candidates, or with a reference
    the normalised paired differences (module docstring): one block of shape (K,)."""

    name = "validation_loss"
    Params = ValidationLossParams

    def work(self, params: ValidationLossParams, dim: int, num_records: int) -> float:
        # Every candidate's margin (every class's, for the softmax) on every
        # record, and the reference's when there is one; the softmax's
        # exponentials and logarithm cost about 32 more per class (0.6 s of CPU
        # for 8 candidates of 10 classes at n = 43,000, d = 16, about 3 times
        # the margins' multiply-adds alone).
        columns = params.scored_columns
        if params.paired:
            columns += params.scored_columns // params.num_candidates
        softmax = 32 if params.candidates.ndim == 3 else 0
        return float(num_records) * (max(dim, 1) + softmax) * columns

    def output_shapes(self, params: ValidationLossParams, dim: int) -> tuple[tuple[int, ...]]:
        return ((params.num_candidates,),)

    def l2_sensitivities(
        self, params: ValidationLossParams, adjacency: Adjacency
    ) -> tuple[float]:
        if params.paired:
            # Module docstring: each normalised entry moves by at most 2
            # (replace-one) or 1 (add/remove).
            return (_paired_per_entry(adjacency) * math.sqrt(params.num_candidates),)
        # Module docstring: at most L_k in entry k under either adjacency.
        if np.ndim(params.loss_bound) == 0:
            return (math.sqrt(params.num_candidates) * params.loss_bound,)
        return (math.sqrt(math.fsum(float(b) ** 2 for b in params.bounds)),)

    def score_sensitivities(
        self, params: ValidationLossParams, adjacency: Adjacency, dim: int
    ) -> tuple[float, ...]:
        if params.paired:
            return (_paired_per_entry(adjacency),) * params.num_candidates
        # Module docstring: entry k moves by at most L_k under either adjacency.
        return tuple(float(b) for b in params.bounds)

    def max_abs_sum(self, params: ValidationLossParams, num_records: int) -> float:
        if params.paired:
            return float(num_records)  # n terms in [-1, 1]
        return num_records * float(params.bounds.max()) + params.max_offset

    def computation_errors(
        self, params: ValidationLossParams, dim: int, max_records: int
    ) -> tuple[float, ...]:
        # Offsets add one more float64 rounding, of the offset sum: half an ulp.
        (error,) = super().computation_errors(params, dim, max_records)
        if params.score_offsets is None:
            return (error,)
        return (error + conversion_error(self.max_abs_sum(params, max_records)),)

    def compute(
        self, data: Dataset, params: ValidationLossParams, state: MutableMapping[str, Any]
    ) -> tuple[np.ndarray]:
        if params.paired:
            return (self._paired_sums(data, params),)
        # Exact. Column k is summed on the grid of its own bound,
        # 2^-84 of top_k (the least power of two >= L_k), as one exact sum:
        # dividing the column by top_k (a power of two) puts every column on
        # the grid 2^-84 of 1 without changing any rounding (what underflows
        # lies far below that grid, where the sum rounds to 0 anyway), and
        # the correctly rounded total times top_k is exact. One sum for all K
        # columns costs what one bound did; a sum per distinct bound cost
        # 5.7x as much at K = 4,096. Columns of bound 0 are 0.
        bounds = params.bounds
        scored = bounds > 0
        tops = np.ones(params.num_candidates)
        tops[scored] = [power_of_two_above(float(b)) for b in bounds[scored]]
        total = ExactSum((params.num_candidates,))
        # Rows per chunk so that the (rows, K, C) margins stay within the
        # working memory of CHUNK_RECORDS records of one column, whatever K
        # and C are sent (sized by K alone, C = 100,000 took 2 GB at
        # n = 400, so whether a site failed depended on its private n).
        rows = max(1, CHUNK_RECORDS // params.scored_columns)
        for start in range(0, data.num_records, rows):
            stop = start + rows
            terms = clipped_losses(data.features[start:stop], data.labels[start:stop], params)
            total.add_terms(terms / tops, 1.0)
        sums = np.where(scored, total.value() * tops, 0.0)
        if params.score_offsets is not None:
            sums = sums + params.score_offsets
        return (sums,)

    @staticmethod
    def _paired_sums(data: Dataset, params: ValidationLossParams) -> np.ndarray:
        """The exact sum of the normalised paired terms, all on the grid of 1
        (every term is in [-1, 1]), rounded once."""
        total = ExactSum((params.num_candidates,))
        rows = max(1, CHUNK_RECORDS // (params.scored_columns + 1))
        for start in range(0, data.num_records, rows):
            stop = start + rows
            total.add_terms(paired_terms(data.features[start:stop], data.labels[start:stop],
                                         params), 1.0)
        return total.value()


def _paired_per_entry(adjacency: Adjacency) -> float:
    """How far one normalised paired sum moves on neighbours (module docstring)."""
    return 2.0 if Adjacency(adjacency) == Adjacency.REPLACE_ONE else 1.0
