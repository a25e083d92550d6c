"""The choice after a selection's release, certified against the free
models: which candidate a private selection delivers from its noisy scores
(private_selection.py's paired score, with the reference its one free
model; error_selection.py's error score, with source-only and the public
constant). Post-processing of the release: nothing here reads a record.

The entries. The first F are the free models (public, trained on no
private record), the other L the learned candidates; entry k has estimate
e_k (its noisy mean score, lower is better) and noise std s_k, the noises
independent (one Gaussian release of a vector has independent
coordinates; the paired score's reference is exact, e_0 = 0 and s_0 = 0).

The rule (:func:`safe_argmin`). A learned k is certified when its upper
confidence bound beats every free model,

    e_k - e_f + t sqrt(s_k^2 + s_f^2) < 0   for every free f

(the difference of two independent noisy scores has std sqrt(s_k^2 +
s_f^2), sqrt(2) s for equal noises); among the certified the least
estimate is delivered, and without one the free model of least estimate
(the better free model as the release sees it).

The guarantee. A union bound over the P = L F + F (F - 1) ordered pairs
(k, f) and (f, f') with f != f', each a one-sided Gaussian tail P(N(0, 1) >
t) <= exp(-t^2 / 2) at t = sqrt(2 log(max(P, 2) / beta))
(:func:`free_certifying_t`; beta the selection's ``baseline_confidence``,
t = 0 without it): with probability >= 1 - beta no pair's noise difference
exceeds t times its std, and then (S_j the true mean score on the
validation records)

* a delivered learned model is better than every free model: S_j < min_f S_f;
* a delivered free model f* is within the resolution of the better one,
  f_b: S_f* - S_fb <= t sqrt(s_f*^2 + s_fb^2), since e_f* <= e_fb.

So with probability >= 1 - beta the delivered model is never worse than
the better free model by more than t sqrt(2) s (equal noises), and never
worse at all when a learned model is delivered. With F = 1 (the paired
score's exact reference) P = L = K', the gap is e_k + t s_k and the rule
is "keep the reference unless some upper bound is below 0".
"""

from __future__ import annotations

import math

import numpy as np


def certifying_t(num_pairs: int, confidence: float | None) -> float:
    """t = sqrt(2 log(max(P, 2) / beta)) for ``num_pairs`` P one-sided
    comparisons (module docstring), 0 without a confidence."""
    if confidence is None:
        return 0.0
    return math.sqrt(2.0 * math.log(max(num_pairs, 2) / confidence))


def free_certifying_t(num_learned: int, num_free: int, confidence: float | None) -> float:
    """t of :func:`safe_argmin` with ``num_free`` free models: the union
    bound over the L F + F (F - 1) pairs it compares (module docstring);
    with one free model L pairs, the paired score's K'."""
    return certifying_t(num_learned * num_free + num_free * (num_free - 1), confidence)


def safe_argmin(estimates: np.ndarray, stds: np.ndarray, t: float, num_free: int = 1) -> int:
    """The first ``num_free`` entries are the free models (with one, the
    reference: estimate 0, no noise). A learned entry k is certified when
    ``estimates[k] - estimates[f] + t hypot(stds[k], stds[f])`` is below 0
    for every free f; the certified one of least estimate is delivered,
    else the free one of least estimate (module docstring)."""
    estimates = np.asarray(estimates, dtype=float)
    stds = np.asarray(stds, dtype=float)
    free, learned = estimates[:num_free], estimates[num_free:]
    gaps = learned[:, None] - free[None, :] + t * np.hypot(stds[num_free:, None],
                                                           stds[None, :num_free])
    certified = np.all(gaps < 0, axis=1)
    if not np.any(certified):
        return int(np.argmin(free))
    return num_free + int(np.argmin(np.where(certified, learned, np.inf)))
