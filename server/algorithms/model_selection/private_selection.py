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
times the variance sigma^2, and every margin and certificate here reads sigma
as that larger value (``AggregateAnswer.noise_std_factor``).

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

Paired differences to a reference (``reference``: a public model, the free
source-only model in SelectedAdaptation; experiments/results/GAIN_STUDY.md,
4.1). The clipped loss min(l, L) ranks candidates by the bulk of the records
where the target has a heavy tail (a record above L scores L for every
candidate), and without any noise ranked the public constant above
source-only there. With a reference w_0 the release scores, for each other
candidate, s_k = sum_i clip(l(w_k) - l(w_0), -C_k, C_k) / C_k (the
validation_loss kernel with ``reference``; its docstring derives the L2
sensitivity 2 sqrt(K') under replace-one, sqrt(K') under add/remove, the
larger charged on a record part). The clips C_k (``clips``):

* ``"public"``: :func:`public_difference_clips`, the 95th percentile of |d_k|
  on the public source: free.
* ``"private"`` (default): chosen on the validation records themselves. One
  Gaussian release of the ``loss_difference_histogram`` kernel (per
  candidate, the counts of |d_k| in the bins cut at the public clip times
  4^-1 .. 4^3) at noise multiplier z / sqrt(h) (h = ``histogram_share``), then
  C_k = the smallest edge whose noisy tail count is at most q n (q =
  ``quantile``) plus one standard deviation of that count's noise
  (:func:`clips_from_histogram`, post-processing); then the paired release at
  z / sqrt(1 - h).
* an array: K' public clips given by the caller.

Privacy with a reference. z = the noise multiplier of ONE Gaussian release at
(epsilon, delta). Two Gaussian releases at multipliers z_1, z_2 (each sigma_i
= z_i times its own sensitivity, so each is mu_i = 1 / z_i Gaussian DP)
compose, even when the second's parameters depend on the first's answer as
the clips do here, to exactly the Gaussian mechanism at multiplier z with
1 / z^2 = 1 / z_1^2 + 1 / z_2^2 (Dong, Roth and Su 2022, Cor. 3.3: Gaussian
DP composes adaptively as mu^2 = mu_1^2 + mu_2^2); with z_1 = z / sqrt(h) and z_2 = z /
sqrt(1 - h), 1 / z_1^2 + 1 / z_2^2 = (h + 1 - h) / z^2. So "private" clips
spend exactly the (epsilon, delta) one release at z does, the claim of the
secure-sum path above, and each site's ledger (which composes the two
releases by PLD) reports it. The histogram's answer sets only the clips,
public parameters of the next release whose normalised sensitivity (2
sqrt(K')) and whose mechanism do not depend on them: the release sequence
(kernels, count, mechanisms) is data-independent, so a planning federation
answering zeros makes the same releases (joint_calibration.py needs this).

Choice with a reference (certified_choice.py's ``safe_argmin`` with the
reference the one free model). Index 0 is the reference (estimate 0, no
noise); candidate k >= 1 has the estimate e_k = C_k s~_k / n (its clipped
mean difference to the reference) and the noise std C_k sigma / n. The
rule keeps the reference unless some candidate's upper bound e_k + t C_k
sigma / n is below 0 (t = sqrt(2 log(max(K', 2) / beta)), beta =
``baseline_confidence``; t = 0 without it), and then delivers, among
those, the one of least estimate: with probability >= 1 - beta the
delivered model's clipped mean paired difference to the reference on the
validation records is negative, no worse than the reference there
(certified_choice.py derives it). (The least upper bound instead prefers
candidates close to the reference, whose C_k is small; GAIN_STUDY.md 4.1.)
Everything after the releases is post-processing.

One data holder with a reference (``method="exponential"``): the site runs
the exponential mechanism on the normalised paired sums with the reference
among the candidates (its own difference is identically 0), per-entry
sensitivity 2 under replace-one (the kernel's score sensitivities): pure
epsilon-DP. It needs public clips (a histogram first would be a second,
Gaussian release, not the one exponential mechanism), and it compares
normalised sums, s_k, not C_k s_k.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from privadapt.common.accounting.calibration import ReleasePlan, noise_multiplier
from privadapt.common.federation import Federation, SitePrivacy
from privadapt.common.kernels.loss_difference_histogram import (
    LossDifferenceHistogram,
    LossDifferenceHistogramParams,
)
from privadapt.common.kernels.validation_loss import (
    ValidationLoss,
    ValidationLossParams,
    loss_differences,
)
from privadapt.common.losses import Loss
from privadapt.common.mechanisms import Adjacency, ExponentialMechanism, Mechanism
from privadapt.common.validation import check_positive
from privadapt.server.algorithms.model_selection.certified_choice import (
    free_certifying_t,
    safe_argmin,
)

KERNEL = ValidationLoss()
HISTOGRAM = LossDifferenceHistogram()
#: How the K loss sums are privatised (module docstring).
METHODS = ("auto", "secure_sum", "exponential")
#: How the paired score's clips are chosen (module docstring).
CLIP_RULES = ("private", "public")
#: The public clips: this quantile of |l(w_k) - l(w_0)| on the public source.
PUBLIC_CLIP_QUANTILE = 0.95
#: No clip below this (a candidate equal to the reference has all differences 0)
#: and none above this (the histogram's largest edge, 64 times it, stays within
#: the 2^200 a kernel accepts, whatever the public differences).
MIN_DIFFERENCE_CLIP = 1e-6
MAX_DIFFERENCE_CLIP = 2.0**190
#: The private clips' histogram edges: each candidate's public clip times these
#: (6 bins; one record moves two bins per candidate whatever their number, but
#: every bin's noise adds to a tail count: GAIN_STUDY.md, 4.1 and 7).
EDGE_FACTORS = 4.0 ** np.arange(-1, 4)


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
    # With a reference (module docstring), every array indexed as best_index
    # is, the reference first: the clips C_k (0 for the reference), each
    # candidate's estimate C_k s~_k / n of its clipped mean difference to the
    # reference (0 for it), and its upper bound (estimate plus t C_k sigma /
    # n). ``noisy_loss_sums`` is then C_k s~_k (the noisy clipped difference
    # sums), ``noise_std`` sigma and ``margin`` t sigma, both on the
    # normalised sums. None without a reference, or where only the index left
    # the site.
    clips: np.ndarray | None = None
    estimates: np.ndarray | None = None
    upper: np.ndarray | None = None


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
                   baseline_confidence: float | None, paired_clips: object = None) -> str:
    """``"auto"``: the exponential mechanism at a single site (tighter, module
    docstring) unless the selection is non-private, needs the baseline
    margin or, with a reference, private clips (``paired_clips`` "private":
    a Gaussian histogram release first), else the secure sum; an explicit
    choice is kept (the estimators declare the choices)."""
    if method != "auto":
        return method
    single = (num_sites == 1 and math.isfinite(epsilon) and baseline_confidence is None
              and not (isinstance(paired_clips, str) and paired_clips == "private"))
    return "exponential" if single else "secure_sum"


def public_difference_clips(loss: Loss, candidates: np.ndarray, reference: np.ndarray,
                            features: np.ndarray, labels: np.ndarray,
                            quantile: float = PUBLIC_CLIP_QUANTILE) -> np.ndarray:
    """C_k = the ``quantile`` quantile of |l(w_k) - l(w_0)| over the public
    source's records (within [:data:`MIN_DIFFERENCE_CLIP`,
    :data:`MAX_DIFFERENCE_CLIP`]), one per
    candidate: a function of public data only, so free, like the clipped
    loss's ``loss_bound="auto"``."""
    diff = np.abs(loss_differences(np.asarray(features, float), np.asarray(labels, float),
                                   np.asarray(candidates, float),
                                   np.asarray(reference, float), loss))
    # An infinite difference is a difference above every finite clip.
    quantiles = np.quantile(np.minimum(diff, np.finfo(float).max), quantile, axis=0)
    return np.clip(quantiles, MIN_DIFFERENCE_CLIP, MAX_DIFFERENCE_CLIP)


def clips_from_histogram(counts: np.ndarray, edges: np.ndarray, noise_std: float,
                         allowed: float) -> np.ndarray:
    """Each candidate's clip from its row of noisy counts (shape (K, J); bin
    j >= 1 holds |d| in [edges[j - 1], edges[j])): the smallest edge e_{j-1}
    whose noisy tail count (of |d| >= e_{j-1}, a sum of J - j noisy bins) is
    at most ``allowed`` plus one standard deviation of its noise; the last
    edge if none is. A noisy tail that cannot be told from ``allowed`` bites;
    a clip too small only shrinks differences towards 0, one too large
    multiplies the noise. Post-processing of the release."""
    bins = counts.shape[1]
    tails = np.cumsum(counts[:, ::-1], axis=1)[:, ::-1]  # tails[:, j]: |d| >= edge j - 1
    clips = []
    for row, own in zip(tails, edges, strict=True):
        fits = [j for j in range(1, bins) if row[j] <= allowed + noise_std * math.sqrt(bins - j)]
        clips.append(own[fits[0] - 1] if fits else own[-1])
    return np.maximum(np.asarray(clips, dtype=float), MIN_DIFFERENCE_CLIP)


def paired_multipliers(epsilon: float, delta: float, clips: object,
                       histogram_share: float) -> tuple[float, float]:
    """(histogram's, paired release's) noise multipliers with a reference:
    z / sqrt(h) and z / sqrt(1 - h) for private clips (no histogram, inf, for
    public ones, and z for the paired release), z the multiplier of one
    release at (epsilon, delta): the two compose to exactly it (module
    docstring). inf at epsilon = inf."""
    z = noise_multiplier(epsilon, delta, ReleasePlan(1))
    if not (isinstance(clips, str) and clips == "private"):
        return math.inf, z
    return z / math.sqrt(histogram_share), z / math.sqrt(1.0 - histogram_share)


def paired_resolution(num_candidates: int, num_records: int, epsilon: float, delta: float,
                      *, clips: object = "private", histogram_share: float = 0.3,
                      confidence: float | None = 0.1) -> float:
    """rho = t 2 sqrt(K') z_paired / n: the least mean normalised difference
    (in units of each candidate's clip) the paired release can certify, from
    public values only (the noise std of a normalised sum is z_paired times
    its sensitivity 2 sqrt(K'), grid rounding aside). 0 without noise."""
    _, multiplier = paired_multipliers(epsilon, delta, clips, histogram_share)
    if math.isinf(multiplier):
        return 0.0
    t = free_certifying_t(num_candidates, 1, confidence)
    return t * 2.0 * math.sqrt(num_candidates) * multiplier / max(num_records, 1)


def private_selection(
    federation: Federation,
    *,
    candidates: np.ndarray,
    loss: Loss,
    loss_bound: float | np.ndarray | None = None,
    epsilon: float,
    delta: float,
    baseline_confidence: float | None,
    method: str,
    reference: np.ndarray | None = None,
    clips: str | np.ndarray = "private",
    histogram_share: float = 0.3,
    quantile: float = 0.02,
    public_source: tuple[np.ndarray, np.ndarray] | None = None,
) -> SelectionResult:
    """Score ``candidates`` ((K, d) or (K, d, C)) on the federation's records
    with one private release and choose one (module docstring). ``epsilon``
    is checked here: besides :class:`~.selection.PrivateSelection`'s own, it
    is a share of a budget that its caller split.

    Without ``reference``: the clipped losses at ``loss_bound``, the index
    into ``candidates``. With ``reference`` (a public model of a candidate's
    shape): the paired differences to it, ``loss_bound`` unused, the clips
    from ``clips`` ("private", "public": both need ``public_source`` =
    (features, labels); or K public clips), and the index into
    [reference, *candidates] (0: the reference)."""
    check_positive("epsilon", epsilon, infinity_means="inf for the non-private oracle")
    if reference is not None:
        return _paired_selection(
            federation, candidates=np.asarray(candidates, float), loss=loss,
            epsilon=epsilon, delta=delta, baseline_confidence=baseline_confidence,
            method=method, reference=np.asarray(reference, float), clips=clips,
            histogram_share=histogram_share, quantile=quantile, public_source=public_source)
    if loss_bound is None:
        raise ValueError("the clipped-loss selection needs a loss_bound")
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
    noise_std = answer.noise_std(mechanism)
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


def _checked_clips(clips: object, num_candidates: int) -> str | np.ndarray:
    if isinstance(clips, str):
        if clips not in CLIP_RULES:
            raise ValueError(f"clips must be one of {list(CLIP_RULES)} or {num_candidates} "
                             f"positive numbers, got {clips!r}")
        return clips
    given = np.asarray(clips, dtype=float)
    if given.shape != (num_candidates,) or not np.all(np.isfinite(given)) \
            or np.any(given <= 0):
        raise ValueError(f"clips must hold {num_candidates} positive finite numbers, got "
                         f"{clips!r}")
    return given


def _paired_selection(
    federation: Federation, *, candidates: np.ndarray, loss: Loss, epsilon: float,
    delta: float, baseline_confidence: float | None, method: str, reference: np.ndarray,
    clips: object, histogram_share: float, quantile: float,
    public_source: tuple[np.ndarray, np.ndarray] | None,
) -> SelectionResult:
    """The selection on paired differences to ``reference`` (module docstring)."""
    count = len(candidates)
    rule = _checked_clips(clips, count)
    if not 0 < histogram_share < 1:
        raise ValueError(f"histogram_share must be in (0, 1), got {histogram_share!r}")
    if not 0 < quantile < 1:
        raise ValueError(f"quantile must be in (0, 1), got {quantile!r}")
    if isinstance(rule, str):
        if public_source is None:
            raise ValueError(f"clips {rule!r} need the public source (public_source)")
        public = public_difference_clips(loss, candidates, reference, *public_source)
    else:
        public = rule
    dim = candidates.shape[1]
    num_records = sum(federation.site_sizes.values())
    method = resolve_method(method, federation.num_sites, epsilon, baseline_confidence, rule)
    if method == "exponential":
        return _paired_exponential(federation, candidates, loss, epsilon, delta, reference,
                                   rule, public, num_records)
    histogram_multiplier, multiplier = paired_multipliers(epsilon, delta, rule,
                                                          histogram_share)
    chosen = public
    if isinstance(rule, str) and rule == "private":
        edges = public[:, None] * EDGE_FACTORS[None, :]
        histogram = LossDifferenceHistogramParams(candidates, reference, loss, edges)
        release = HISTOGRAM.mechanism(histogram, histogram_multiplier, Adjacency.REPLACE_ONE,
                                      dim=dim)
        answer = federation.query(HISTOGRAM.name, histogram.to_wire(), release)
        counts = np.asarray(answer.value, dtype=float)
        counts_std = answer.noise_std(release)
        chosen = clips_from_histogram(counts, edges, counts_std, quantile * num_records)
    params = ValidationLossParams(candidates, loss, chosen, reference=reference)
    mechanism = KERNEL.mechanism(params, multiplier, Adjacency.REPLACE_ONE, dim=dim)
    answer = federation.query(KERNEL.name, params.to_wire(), mechanism)
    noisy = np.asarray(answer.value, dtype=float)
    sigma = answer.noise_std(mechanism)
    t = free_certifying_t(count, 1, baseline_confidence)
    all_clips = np.concatenate([[0.0], chosen])
    estimates = np.concatenate([[0.0], chosen * noisy / num_records])
    stds = all_clips * sigma / num_records
    return SelectionResult(
        best_index=safe_argmin(estimates, stds, t),
        noisy_loss_sums=np.concatenate([[0.0], chosen * noisy]),
        noise_std=sigma, num_records=num_records, margin=t * sigma,
        privacy=federation.privacy_spent(None if math.isinf(epsilon) else delta),
        method=method, clips=all_clips, estimates=estimates, upper=estimates + t * stds)


def _paired_exponential(federation: Federation, candidates: np.ndarray, loss: Loss,
                        epsilon: float, delta: float, reference: np.ndarray, rule: object,
                        public: np.ndarray, num_records: int) -> SelectionResult:
    """One site's exponential mechanism on the normalised paired sums, the
    reference among the candidates (module docstring)."""
    if isinstance(rule, str) and rule == "private":
        raise ValueError("the exponential mechanism takes public clips (clips 'public' or "
                         "an array): private ones need a Gaussian histogram release first")
    if not math.isfinite(epsilon):
        raise ValueError("the exponential mechanism needs a finite epsilon")
    # The reference's own difference is identically 0, whatever its clip.
    with_reference = np.concatenate([reference[None], candidates])
    all_clips = np.concatenate([[1.0], public])
    params = ValidationLossParams(with_reference, loss, all_clips, reference=reference)
    (sensitivity,) = set(KERNEL.score_sensitivities(params, Adjacency.REPLACE_ONE,
                                                    candidates.shape[1]))
    mechanism = ExponentialMechanism(sensitivity, epsilon, minimize=True)
    chosen = federation.select(KERNEL.name, params.to_wire(), mechanism)
    return SelectionResult(
        best_index=chosen.index, noisy_loss_sums=None, noise_std=math.nan,
        num_records=num_records, margin=0.0, privacy=federation.privacy_spent(delta),
        method="exponential", clips=np.concatenate([[0.0], public]))
