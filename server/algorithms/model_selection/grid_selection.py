"""The private grid search's selection among its candidates (free models
first, then the guesses; private_grid_search.py), on the validation part S2
at (epsilon / 2, delta / 2). ``"auto"`` (default) is ``"error"`` for the
logistic loss and ``"paired"`` for the squared one (error_selection.py's
``resolve_score``), and ``"paired"`` for a classifier whose only free
model is the zero model (PrivateGridSearch):

* ``"error"`` (classifiers): the validation error counts of every
  candidate in one release, and a guess delivered only when certified
  better than every free model (the source-only model and the public
  constant; never the zero model, whose errors the release cannot count:
  PrivateGridSearch scores the paired difference to it instead), else the
  free model of fewer noisy errors (error_selection.py: the rule, its
  union bound and what it promises).
* ``"paired"``: the paired score of
  :func:`~.private_selection.private_selection` with candidate 0 as the
  reference (the source-only model, or the zero model without a public
  source): each other candidate's clipped loss difference to it,
  normalised by its clip C_k, so every entry has the same range and its
  noise is C_k sigma, in proportion to its own range as GEM weighs
  Delta_j; the reference is kept unless a candidate's upper confidence
  bound is below it (``safe_argmin`` at confidence beta): with probability
  1 - beta the delivered model's clipped mean difference to the reference
  on S2 is <= 0. Clips: chosen privately from a histogram of the
  differences (clips "private", needs the public source), or, without a
  public source, Delta_j: both losses of a record within the bounds lie in
  [0, Delta_j] (the zero model's loss Y^2, resp. log 2, is below every
  Delta_j), so that clip never bites there.
* ``"penalised"``: the paper's GEM on penalised clipped losses (seed 004,
  Alg. 1; at one site) or its noisy-sum form across sites (module docstring
  of private_grid_search.py). It keeps no baseline: its clipped loss ranks a
  model whose large losses are clipped above one that is better on them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from privadapt.common.accounting.calibration import ReleasePlan, noise_multiplier
from privadapt.common.federation import Federation, SitePrivacy
from privadapt.common.kernels.validation_loss import ValidationLoss, ValidationLossParams
from privadapt.common.mechanisms import Adjacency, GeneralizedExponentialMechanism
from privadapt.server.algorithms.model_selection.error_selection import error_selection
from privadapt.server.algorithms.model_selection.private_selection import private_selection
from privadapt.server.algorithms.step_privacy import report_delta

KERNEL = ValidationLoss()
SCORES = ("auto", "paired", "penalised", "error")


@dataclass
class GridChoice:
    """The index chosen into the candidates and what it was chosen on."""

    best_index: int
    method: str
    noisy_sums: np.ndarray | None = None
    noise_stds: np.ndarray | None = None
    estimates: np.ndarray | None = None
    privacy: dict[str, SitePrivacy] = field(default_factory=dict)


def _spent(federation: Federation, epsilon: float, delta: float) -> dict[str, SitePrivacy]:
    return federation.privacy_spent(None if math.isinf(epsilon) else report_delta(delta))


def select_paired(federation: Federation, candidates: np.ndarray, bounds: np.ndarray,
                  loss: str, epsilon: float, delta: float, beta: float, method: str,
                  public_arrays: tuple[np.ndarray, np.ndarray] | None) -> GridChoice:
    """The paired score against candidate 0 (module docstring)."""
    clips = "private" if public_arrays is not None else np.asarray(bounds[1:], dtype=float)
    result = private_selection(
        federation, candidates=candidates[1:], loss=loss, epsilon=epsilon / 2,
        delta=delta / 2, baseline_confidence=beta, method=method, reference=candidates[0],
        clips=clips, public_source=public_arrays)
    stds = None if result.clips is None else result.clips * result.noise_std
    return GridChoice(result.best_index, result.method, result.noisy_loss_sums, stds,
                      result.estimates, _spent(federation, epsilon, delta / 2))


def select_errors(federation: Federation, candidates: np.ndarray, num_free: int,
                  epsilon: float, delta: float, beta: float, method: str) -> GridChoice:
    """The error score, certified against the ``num_free`` free models
    leading ``candidates`` (module docstring)."""
    result = error_selection(federation, candidates=candidates, num_free=num_free,
                             epsilon=epsilon / 2, delta=delta / 2, baseline_confidence=beta,
                             method=method)
    stds = (None if result.noisy_loss_sums is None
            else np.full(len(candidates), result.noise_std))
    return GridChoice(result.best_index, result.method, result.noisy_loss_sums, stds,
                      result.estimates, _spent(federation, epsilon, delta / 2))


def select_at_the_site(federation: Federation, candidates: np.ndarray, bounds: np.ndarray,
                       penalties: np.ndarray, loss: str, epsilon: float,
                       beta: float) -> GridChoice:
    """GEM at epsilon/2, beta/4 run by the single site on its penalised sums."""
    params = ValidationLossParams(candidates, loss, bounds, penalties)
    mechanism = GeneralizedExponentialMechanism(
        tuple(float(b) for b in bounds), epsilon / 2, beta / 4, minimize=True)
    answer = federation.select(KERNEL.name, params.to_wire(), mechanism)
    return GridChoice(answer.index, "exponential",
                      privacy=federation.privacy_spent(None))  # pure: delta unused


def select_on_noisy_sums(federation: Federation, candidates: np.ndarray, bounds: np.ndarray,
                         penalties: np.ndarray, loss: str, epsilon: float, delta: float,
                         beta: float) -> GridChoice:
    """One secure-sum Gaussian release per data-dependent candidate, noise in
    proportion to its own bound, calibrated to (epsilon/2, delta/2) together;
    the choice is post-processing (private_grid_search.py)."""
    noisy_rows = np.flatnonzero(bounds > 0)
    multiplier = noise_multiplier(epsilon / 2, delta / 2, ReleasePlan(len(noisy_rows)))
    sums = np.full(len(candidates), np.nan)
    stds = np.zeros(len(candidates))
    dim = candidates.shape[1]
    for row in noisy_rows:
        params = ValidationLossParams(candidates[row:row + 1], loss, float(bounds[row]))
        mechanism = KERNEL.mechanism(params, multiplier, Adjacency.REPLACE_ONE, dim=dim)
        answer = federation.query(KERNEL.name, params.to_wire(), mechanism)
        sums[row] = float(np.asarray(answer.value, dtype=float)[0])
        stds[row] = answer.noise_std(mechanism)
    confidence = math.sqrt(2 * math.log(8 * len(noisy_rows) / beta))
    scores = np.where(np.isnan(sums), 0.0, sums) + penalties + confidence * stds
    return GridChoice(int(np.argmin(scores)), "secure_sum", sums, stds,
                      privacy=_spent(federation, epsilon, delta / 2))
