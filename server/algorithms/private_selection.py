"""Federated private model selection: one noisy release of K clipped validation
loss sums, the argmin as post-processing (seed 004, ../shared/seeds/
004_2b354816f00c2aef.txt, Alg. 1, in the federated form of issue 13).

Given K candidate linear models w_1..w_K (public: trained on other records, or
on public data only), every site computes s_k = sum_i min(l(w_k; x_i, y_i), L)
over its validation records (``validation_loss`` kernel,
:mod:`privadapt.common.kernels.validation_loss`); the sums leave the sites as
secure-sum shares of one Gaussian release,

    s~ = s + N(0, sigma^2 I_K),   sigma = z * sqrt(K) L  (plus grid rounding),

with z calibrated by the accountant so that this single release is exactly
(epsilon, delta)-DP (:func:`privadapt.common.calibration.calibrate_noise_multiplier`),
and the coordinator returns j = argmin_k s~_k.

Privacy. The only access to private records is the one release of s~, whose
L2 sensitivity sqrt(K) L holds under add/remove and replace-one alike (the
kernel's docstring): it is (epsilon, delta)-DP. The argmin, the margin below
and everything derived from s~ are post-processing and cost nothing more. The
candidates are public inputs: when they were trained privately on the same
sites, their cost composes with this one on the sites' ledgers (train on one
part of the data and validate on another, as Alg. 1 does, and the release here
touches only the validation part).

Utility (with n validation records in all, S_k = s_k / n the true clipped mean
validation loss of candidate k, and candidate 0 a baseline such as the model
fitted for free on the public source). By the Gaussian tail
P(N(0, sigma^2) > t) <= exp(-t^2 / (2 sigma^2)) and a union bound over K
one-sided events (noise on candidate 0 above t, noise on each other candidate
below -t), with probability at least 1 - beta every one is within
t = sigma sqrt(2 log(K / beta)). Since s~_j <= s~_0,

    S_j - S_0 <= (noise_0 - noise_j) / n <= 2 sigma sqrt(2 log(K / beta)) / n:

the chosen model's validation loss is within that of the baseline's.
``baseline_confidence = beta`` instead keeps candidate 0 unless another beats
it by the margin m = 2 sigma sqrt(2 log(K / beta)) on the noisy sums
(s~_k + m < s~_0); on the same event S_j <= S_0 then holds outright, so with
probability 1 - beta the delivered model is no worse than the baseline on
validation, at the price of missing improvements smaller than m / n. With
collusion tolerance t > 0 the sites' shares add up to K_sites / (K_sites - t)
times the variance sigma^2, so read sigma as that larger value there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from privadapt.common.calibration import calibrate_noise_multiplier
from privadapt.common.federation import Federation, SitePrivacy
from privadapt.common.kernels.validation_loss import ValidationLoss, ValidationLossParams
from privadapt.common.losses import Loss
from privadapt.common.mechanisms import Adjacency, Mechanism
from privadapt.common.validation import check_positive

KERNEL = ValidationLoss()


@dataclass
class SelectionResult:
    """The index chosen, the noisy sums it was chosen on, and what it cost."""

    best_index: int
    noisy_loss_sums: np.ndarray
    noise_std: float
    num_records: int
    margin: float
    privacy: dict[str, SitePrivacy] = field(default_factory=dict)


def selection_mechanism(
    params: ValidationLossParams, epsilon: float, delta: float, *, dim: int
) -> Mechanism:
    """One Gaussian release of the K sums at exactly (epsilon, delta), or no
    noise at all for ``epsilon = inf`` (the non-private oracle selection)."""
    multiplier = math.inf if math.isinf(epsilon) else calibrate_noise_multiplier(epsilon, delta, 1)
    return KERNEL.mechanism(params, multiplier, Adjacency.REPLACE_ONE, dim=dim)


def baseline_margin(noise_std: float, num_candidates: int, confidence: float | None) -> float:
    """m = 2 sigma sqrt(2 log(K / beta)) (module docstring), 0 without a baseline."""
    if confidence is None or num_candidates < 2 or noise_std == 0:
        return 0.0
    return 2.0 * noise_std * math.sqrt(2.0 * math.log(num_candidates / confidence))


def choose(noisy_sums: np.ndarray, margin: float) -> int:
    """argmin of the noisy sums, candidate 0 kept unless another is below it by ``margin``."""
    best = int(np.argmin(noisy_sums))
    return best if noisy_sums[best] + margin < noisy_sums[0] else 0


def private_selection(
    federation: Federation,
    *,
    candidates: np.ndarray,
    loss: Loss,
    loss_bound: float,
    epsilon: float,
    delta: float,
    baseline_confidence: float | None = None,
) -> SelectionResult:
    """Score ``candidates`` ((K, d) or (K, d, C)) on the federation's records
    with one noisy release and choose one (module docstring)."""
    check_positive("epsilon", epsilon, infinity_means="inf for the non-private oracle")
    params = ValidationLossParams(candidates, loss, loss_bound)
    dim = params.candidates.shape[1]
    mechanism = selection_mechanism(params, epsilon, delta, dim=dim)
    answer = federation.query(KERNEL.name, params.to_wire(), mechanism)
    noisy = np.asarray(answer.value, dtype=float)
    noise_std = 0.0 if mechanism.is_non_private else float(mechanism.noise_scales[0])
    margin = baseline_margin(noise_std, params.num_candidates, baseline_confidence)
    return SelectionResult(
        best_index=choose(noisy, margin),
        noisy_loss_sums=noisy,
        noise_std=noise_std,
        num_records=sum(federation.site_sizes.values()),
        margin=margin,
        privacy=federation.privacy_spent(None if math.isinf(epsilon) else delta),
    )
