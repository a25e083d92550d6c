"""Federated private model selection: one noisy release of K clipped validation
loss sums, the argmin as post-processing (seed 004, ../shared/seeds/
004_2b354816f00c2aef.txt, Alg. 1, in its federated form).

Given K candidate linear models w_1..w_K (public: trained on other records, or
on public data only), every site computes s_k = sum_i min(l(w_k; x_i, y_i), L)
over its validation records (``validation_loss`` kernel,
:mod:`privadapt.common.kernels.validation_loss`); the sums leave the sites as
secure-sum shares of one Gaussian release,

    s~ = s + N(0, sigma^2 I_K),   sigma = z * sqrt(K) L  (plus grid rounding),

with z calibrated by the accountant so that this single release is exactly
(epsilon, delta)-DP (:func:`privadapt.common.accounting.calibration.calibrate_noise_multiplier`),
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

A single data holder (``method="exponential"``, the default ``"auto"``'s
choice when the federation has one site and no baseline margin is asked
for): the site itself runs the exponential mechanism on its K clipped loss
sums (a selection query, :mod:`privadapt.common.mechanisms.selection`) and
releases only the index, P(k) proportional to exp(-epsilon s_k / (2 L)). Each
sum moves by at most L (the kernel's per-candidate bound, not the vector's
sqrt(K) L), so this is pure epsilon-DP, and with probability 1 - beta
(Dwork and Roth 2014, Cor. 3.12)

    S_j <= min_k S_k + 2 L (log K + log(1 / beta)) / (epsilon n):

an error that grows with log K, where the Gaussian route's grows with
sqrt(K log K) (its noise covers the whole vector). Seed 004 uses the
generalized exponential mechanism for candidates of different sensitivities;
with one loss bound for every candidate it is this mechanism. No noisy scores
leave the site, so the baseline margin cannot be applied: ``"auto"`` keeps the
secure sum when ``baseline_confidence`` is set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from privadapt.common.accounting.calibration import ReleasePlan, noise_multiplier
from privadapt.common.federation import Federation, SitePrivacy
from privadapt.common.kernels.validation_loss import ValidationLoss, ValidationLossParams
from privadapt.common.losses import Loss
from privadapt.common.mechanisms import Adjacency, ExponentialMechanism, Mechanism
from privadapt.common.validation import check_positive

KERNEL = ValidationLoss()
#: How the K loss sums are privatised (module docstring).
METHODS = ("auto", "secure_sum", "exponential")


@dataclass
class SelectionResult:
    """The index chosen, the noisy sums it was chosen on (None when the site
    selected itself: only the index left it), and what it cost."""

    best_index: int
    noisy_loss_sums: np.ndarray | None
    noise_std: float
    num_records: int
    margin: float
    privacy: dict[str, SitePrivacy] = field(default_factory=dict)
    method: str = "secure_sum"


def selection_mechanism(
    params: ValidationLossParams, epsilon: float, delta: float, *, dim: int
) -> Mechanism:
    """One Gaussian release of the K sums at exactly (epsilon, delta), or no
    noise at all for ``epsilon = inf`` (the non-private oracle selection)."""
    multiplier = noise_multiplier(epsilon, delta, ReleasePlan(1))
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


def resolve_method(method: str, num_sites: int, epsilon: float,
                   baseline_confidence: float | None) -> str:
    """``"auto"``: the exponential mechanism at a single site (tighter, module
    docstring) unless the selection is non-private or needs the baseline
    margin, else the secure sum; an explicit choice is kept (the estimators
    declare the choices)."""
    if method != "auto":
        return method
    single = num_sites == 1 and math.isfinite(epsilon) and baseline_confidence is None
    return "exponential" if single else "secure_sum"


def private_selection(
    federation: Federation,
    *,
    candidates: np.ndarray,
    loss: Loss,
    loss_bound: float,
    epsilon: float,
    delta: float,
    baseline_confidence: float | None,
    method: str,
) -> SelectionResult:
    """Score ``candidates`` ((K, d) or (K, d, C)) on the federation's records
    with one private release and choose one (module docstring). ``epsilon``
    is checked here: besides :class:`~.selection.PrivateSelection`'s own, it
    is a share of a budget that its caller split."""
    check_positive("epsilon", epsilon, infinity_means="inf for the non-private oracle")
    params = ValidationLossParams(candidates, loss, loss_bound)
    dim = params.candidates.shape[1]
    method = resolve_method(method, federation.num_sites, epsilon, baseline_confidence)
    num_records = sum(federation.site_sizes.values())
    if method == "exponential":
        if not math.isfinite(epsilon) or baseline_confidence is not None:
            raise ValueError("the exponential mechanism needs a finite epsilon and no "
                             "baseline_confidence (only the index leaves the site)")
        mechanism = ExponentialMechanism(loss_bound, epsilon, minimize=True)
        chosen = federation.select(KERNEL.name, params.to_wire(), mechanism)
        return SelectionResult(
            best_index=chosen.index, noisy_loss_sums=None, noise_std=math.nan,
            num_records=num_records, margin=0.0,
            privacy=federation.privacy_spent(delta), method=method)
    mechanism = selection_mechanism(params, epsilon, delta, dim=dim)
    answer = federation.query(KERNEL.name, params.to_wire(), mechanism)
    noisy = np.asarray(answer.value, dtype=float)
    noise_std = 0.0 if mechanism.is_non_private else float(mechanism.noise_scales[0])
    margin = baseline_margin(noise_std, params.num_candidates, baseline_confidence)
    return SelectionResult(
        best_index=choose(noisy, margin),
        noisy_loss_sums=noisy,
        noise_std=noise_std,
        num_records=num_records,
        margin=margin,
        privacy=federation.privacy_spent(None if math.isinf(epsilon) else delta),
        method=method,
    )
