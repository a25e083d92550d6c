"""The error score: a classifier's private selection on validation errors,
certified against every free model (the default of SelectedAdaptation,
PrivateGridSearch and ConfidenceBoosting for ``loss="logistic"``).

The release. Each candidate is scaled to a huge norm (:func:`error_scored`:
the same predictions) and scored by the clipped logistic loss at L = 1, so
a record scores 1 when the candidate misclassifies it and about 0 when it
does not: one Gaussian release of the K validation error counts
(private_selection.py's clipped-loss release, sensitivity sqrt(K) under
replace-one and add/remove), at the whole selection budget: no clip to
choose, so no histogram release before it. Every entry's noise has the
same std sigma (the release's, ``AggregateAnswer.noise_std``).

The choice (:func:`error_selection`): the free models (source-only, and
the public constant, the majority label, where the caller has it) lead
the candidates; ``safe_argmin`` with them as the free entries delivers a
learned candidate only when its upper confidence bound beats every free
model, e_k - e_f + t sqrt(2) sigma / n < 0 (the difference of two
independent noisy counts has std sqrt(2) sigma), else the free model of
fewer noisy errors. With t = sqrt(2 log(max(P, 2) / beta)) over the P = L F
+ F (F - 1) compared pairs (L learned, F free; certified_choice.py
derives it): with probability >= 1 -
beta over the noise the delivered model makes fewer validation errors
than every free model when it is learned, and at most t sqrt(2) sigma
(the resolution, :func:`error_resolution` in error-rate units) more than
the better free model when it is free. Post-processing of the one release.
A single site with no ``baseline_confidence`` runs the exponential
mechanism instead (private_selection.py): only the index leaves it, and
nothing is certified. No free model may be 0 (:func:`counts_errors`): the
release cannot count a zero model's errors, so the callers drop a zero
public constant and refuse a zero source-only model before any release;
the grid search whose only free model is its zero model scores the paired
difference to it instead (grid_search.py).

Why it is the default for a classifier. Users judge a classifier by its
accuracy, and a certificate on the log loss says nothing about it: on
Adult marital (93.4% one label) every log-loss default delivered 0.90-0.925
accuracy at epsilon 1, below the majority label's 0.934, while certified
better than it in log loss (experiments/results/GAIN_STUDY.md 11.4). The 0-1
loss ranks candidates exactly as their true validation error does (no clip
bites: every record's score is in [0, 1]), and with the majority label a
free candidate the promise above is "never below the better of source-only
and the majority label by more than the resolution". Its price: errors
differ less between good models than losses do, so at the same noise a
small gain in accuracy is certified less often than the same model's gain
in log loss (GAIN_STUDY.md 12 measures both).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from privadapt.common.accounting.calibration import ReleasePlan, noise_multiplier
from privadapt.common.federation import Federation
from privadapt.server.algorithms.base import InvalidParameterError
from privadapt.server.algorithms.model_selection.certified_choice import (
    free_certifying_t,
    safe_argmin,
)
from privadapt.server.algorithms.model_selection.private_selection import (
    SelectionResult,
    private_selection,
)

#: The norm each candidate is scaled to (:func:`error_scored`).
ERROR_SCALE = 1e6
#: ``selection_score="auto"`` by loss: the error score for a classifier (module
#: docstring), the paired score (private_selection.py) for a regression.
AUTO_SCORES = {"logistic": "error", "squared": "paired"}


def resolve_score(score: str, loss: str) -> str:
    """A selection's ``selection_score`` with "auto" resolved by ``loss``
    (:data:`AUTO_SCORES`)."""
    return AUTO_SCORES[loss] if score == "auto" else score


def check_error_score(owner: str, score: str, loss: str) -> None:
    """Refuse the error score for anything but a classifier: it counts the
    records a logistic model misclassifies (:func:`error_scored`)."""
    if score == "error" and loss != "logistic":
        raise InvalidParameterError(f"{owner}: selection_score 'error' scores classifiers "
                                    f"(loss 'logistic'); got {loss!r}")


def error_scored(candidates: np.ndarray) -> np.ndarray:
    """The candidates as the release scores them: each scaled to norm
    :data:`ERROR_SCALE` (same sign of x.w, so the same predictions). With
    the clip L = 1 the kernel's min(log(1 + exp(-y x.w')), 1) is then 1 for
    a record the candidate misclassifies (y x.w < 0) and about
    exp(-ERROR_SCALE |x.w| / ||w||), nearly 0, for one it gets right: the
    sums are the validation error counts, up to the records within a
    distance |x.w| / ||w|| of about 1e-5 of the decision boundary, in the
    features' own units (which score in between, log 2 exactly on it, where
    the candidate predicts +1), and a zero candidate (log 2 on every record:
    :func:`counts_errors`). Public
    post-processing of the candidates: the release's sensitivity (sqrt(K)
    L) does not depend on them.

    Each candidate is divided by its largest entry before its norm is taken,
    so no norm overflows or underflows (a candidate of norm 1e160
    was scaled by 0 and scored log 2 on every record)."""
    flat = candidates.reshape(len(candidates), -1)
    largest = np.abs(flat).max(axis=1)
    safe = np.where(largest > 0, largest, 1.0)
    unit = flat / safe[:, None]  # largest entry 1 in size (or all 0)
    norms = np.linalg.norm(unit, axis=1)  # in [1, sqrt(size)], or 0
    scale = np.where(largest > 0, ERROR_SCALE / np.where(norms > 0, norms, 1.0), 0.0)
    return (unit * scale[:, None]).reshape(candidates.shape)


def counts_errors(model: np.ndarray) -> bool:
    """Whether the release counts ``model``'s validation errors: not the zero
    model's. It predicts +1 on every record (a tie counts as +1,
    linear_model.py), yet every record scores log 2 in the release whatever
    its label, so a certificate against it would compare with 0.69 per
    record, not with its errors (on 90% positive labels a learned model at
    44% errors was "certified" better than its 10%). The grid search's zero
    model is 0, and so is the public constant of a public source whose two
    labels are equally frequent (it has no majority label)."""
    return bool(np.any(np.asarray(model) != 0))


def error_scored_constant(owner: str, source_only: np.ndarray,
                          constant: np.ndarray | None) -> np.ndarray | None:
    """The public constant as a free candidate of the error score: itself,
    or None where it is 0 (a public source with no majority label), whose
    errors the release cannot count (:func:`counts_errors`). A zero
    source-only model, the free model every learned one is certified
    against, is refused, naming ``owner``, before any release."""
    if not counts_errors(source_only):
        raise InvalidParameterError(
            f"{owner}: the source-only model is 0 here, and the error score cannot count "
            "its errors (error_selection.counts_errors): use selection_score='paired'")
    return constant if constant is not None and counts_errors(constant) else None


def error_selection(federation: Federation, *, candidates: np.ndarray, num_free: int,
                    epsilon: float, delta: float, baseline_confidence: float | None,
                    method: str = "auto") -> SelectionResult:
    """One release of the validation error counts of ``candidates`` (the
    first ``num_free`` free) at (``epsilon``, ``delta``) and the choice
    certified against every free model (module docstring). The result's
    ``estimates`` are the noisy error rates, ``margin`` t sqrt(2) sigma on
    the counts. ``ValueError`` before any release when a free model is 0
    (:func:`counts_errors`: nothing could be certified against it)."""
    candidates = np.asarray(candidates, dtype=float)
    if not all(counts_errors(model) for model in candidates[:num_free]):
        raise ValueError("a free model of the error score is 0: the release cannot count its "
                         "errors (it scores log 2 on every record), so nothing can be "
                         "certified against it")
    result = private_selection(
        federation, candidates=error_scored(candidates),
        loss="logistic", loss_bound=1.0, epsilon=epsilon, delta=delta,
        baseline_confidence=baseline_confidence, method=method)
    if result.noisy_loss_sums is None:  # the site chose itself: only the index left it
        return result
    records = max(result.num_records, 1)
    estimates = result.noisy_loss_sums / records
    stds = np.full(len(estimates), result.noise_std / records)
    t = free_certifying_t(len(estimates) - num_free, num_free, baseline_confidence)
    return dataclasses.replace(
        result, best_index=safe_argmin(estimates, stds, t, num_free),
        margin=t * math.sqrt(2.0) * result.noise_std, estimates=estimates)


def error_resolution(num_candidates: int, num_free: int, num_records: int, epsilon: float,
                     delta: float, confidence: float | None) -> float:
    """t sqrt(2) sigma / n: the least error-rate difference the release at
    (``epsilon``, ``delta``) certifies between a learned candidate and a
    free one (module docstring), from public values only (sigma = z
    sqrt(K), the release's sensitivity sqrt(K) at L = 1; grid rounding and
    collusion tolerance aside). 0 without noise."""
    if math.isinf(epsilon):
        return 0.0
    multiplier = noise_multiplier(epsilon, delta, ReleasePlan(1))
    t = free_certifying_t(num_candidates - num_free, num_free, confidence)
    return t * math.sqrt(2.0) * multiplier * math.sqrt(num_candidates) / max(num_records, 1)
