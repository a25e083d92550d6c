"""The gain study: the candidate fixes, prototyped in the experiment only
(the package is unchanged; experiments/gain_kernels.py registers the two
prototype kernels in this process).

One prototype job per (row, split, epsilon), at (epsilon, 1e-5) in all:

* budget: every release is Gaussian, so the job is planned in Gaussian DP:
  z_total = the noise multiplier of ONE Gaussian release at (epsilon, delta)
  (``calibrate_noise_multiplier(epsilon, delta, 1)``); a release at multiplier
  z_i spends the share 1 / z_i^2 of 1 / z_total^2, and the shares add up to 1
  (the composition of Gaussian mechanisms is the Gaussian mechanism with
  1 / z^2 = sum 1 / z_i^2, exactly: Dong, Roth and Su 2022, Cor. 3.3; the
  sites' PLD ledgers report it, ``epsilon_spent`` in every row's detail).
  ``selection_share`` s of it selects, the rest trains the M private
  candidates equally (a noisy-GD candidate of T steps at share f runs at
  z = z_total sqrt(T / f)).
* records: each site's "train" and "validation" record parts
  (``validation_fraction``), as SelectedAdaptation's sites split them.
* candidates: the free source-only model w_src (the reference) and the public
  constant (where it is a linear model), and M = len(``radii``) **ball GD**
  candidates: noisy projected GD on the train part started at w_src and
  projected onto the ball ||w - w_src|| <= rho (seed 002's offset
  theta = w_src + delta, ||delta|| <= rho), rho = factor * ||w_src|| for each
  factor of ``radii``, the task's noisy-GD clip, step and T, delivering the
  average of the second half of the iterates. The linear_gradient kernel clips each record's
  gradient at C whatever w is, so its sensitivity (2C, replace-one) and the
  privacy are plain noisy GD's; the ball is coordinator-side post-processing.
* one selection among them per score (each its own release at the selection
  share; every score is thus a separate job of the same plan):
  - ``clipped loss``: today's score, validation_loss at L = the 95th
    percentile of w_src's public losses, today's baseline margin rule;
  - ``clipped errors`` (logistic): today's classifier default (error_scored);
  - ``paired, public C``: gain_paired_validation_loss with reference w_src
    and C_k = the 95th percentile of |l(w_k) - l(w_src)| on the public source;
  - ``paired, private C``: C_k chosen privately on the validation part: a
    gain_difference_histogram release (30% of the selection share) and C_k
    the smallest bin edge whose noisy tail count is at most 2% of the part;
    the paired release at the other 70%; the bins are each candidate's public
    C_k times 4^-1 .. 4^3 (6 bins: one record moves two bins per candidate
    whatever their number, but every bin's noise adds to a tail count), and
    C_k is the smallest edge whose noisy tail count is at most 2% of the part
    plus one standard deviation of that count's noise (a noisy tail that
    cannot be told from 2% bites; a clip too small only shrinks every
    record's difference towards 0, one too large multiplies the noise);
  - ``paired, worst-case C``: C_k from the public data bounds (||x|| <= 1,
    |y| <= 1): ||dw|| (||w_k|| + ||w_src|| + 2) for the squared loss, ||dw||
    for the logistic one: a clip that never bites on records within them.
  The paired scores keep the reference unless some candidate's upper
  confidence bound C_k (s~_k + t sigma) is below its 0 (t =
  sqrt(2 log(K' / beta)), beta = 0.1), and then deliver, among those, the
  one of least estimate C_k s~_k ("safe argmin"; ``RULE = "ucb"``: the least
  upper bound, which favours the candidates nearest the reference): with
  probability 1 - beta every noise is below t sigma and the delivered
  model's clipped paired difference to w_src on the validation part is <= 0.
* ``oracle (non-private)``: the candidate with the least *unclipped* mean
  validation loss (reads the validation records: what a score should
  approximate, not something a site would allow).

``config`` variants (the --prototype of gain_study.py) change the
selection share, validation fraction and radii; ``grid`` replaces the radii
by seed 004's doubling grid as offsets around w_src (rho_j = 2^(j-5) ||w_src||,
j = 1..5: PrivateGridSearch redone with the free models as candidates and
the paired score); ``boost`` is ConfidenceBoosting redone: one ball-GD model
per site on that site's train part alone at the whole training share, the
free models and one paired selection over every site's validation part.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from experiments.adapter_study import federation
from experiments.gain_kernels import (
    HISTOGRAM,
    HISTOGRAM_KERNEL,
    PAIRED,
    PAIRED_KERNEL,
    HistogramParams,
    PairedParams,
    loss_differences,
)
from privadapt.common.accounting.calibration import calibrate_noise_multiplier
from privadapt.common.data.record_parts import TRAIN, RecordPart
from privadapt.common.federation import OneSiteView
from privadapt.common.kernels.linear_gradient import LinearGradient, LinearGradientParams
from privadapt.common.kernels.validation_loss import ValidationLoss, ValidationLossParams
from privadapt.common.losses import loss_values
from privadapt.common.mechanisms import Adjacency
from privadapt.server.algorithms.base import record_parts
from privadapt.server.algorithms.model_selection.candidates import auto_loss_bound, error_scored
from privadapt.server.algorithms.model_selection.private_selection import (
    baseline_margin,
    choose,
    private_selection,
)

DELTA = 1e-5
BETA = 0.1
GRADIENT = LinearGradient()
VALIDATION = ValidationLoss()
TAIL_SHARE = 0.02  # paired, private C: at most this share of the part is clipped
HISTOGRAM_SHARE = 0.3  # of the selection's share, for the private C
# The histogram's public bin edges, per candidate: its public clip C_k times these.
EDGE_FACTORS = 4.0 ** np.arange(-1, 4)
# The paired scores' choice: "safe_argmin" (the least estimated difference
# among the candidates whose upper confidence bound is below the reference's
# 0; the reference if none) or "ucb" (the least upper confidence bound).
RULE = "safe_argmin"


@dataclass(frozen=True)
class Config:
    name: str
    selection_share: float = 0.25
    validation_fraction: float = 0.25
    radii: tuple[float, ...] = (0.25, 1.0)  # rho / ||w_src||
    iterations: float = 1.0  # T as a factor of the task's
    # Confidence boosting's form: one ball-GD model per site, on that site's
    # train part alone (OneSiteView), each at the whole training share (the
    # sites' records are disjoint: parallel composition), radius radii[0].
    per_site: bool = False
    # Free candidates cut from the last trained one: w_src + the offset
    # (w - w_src) projected onto the ball of radius factor * ||w_src||, for
    # each factor (post-processing: no training budget, only selection noise).
    shrink: tuple[float, ...] = ()


CONFIGS = {
    "base": Config("base"),
    "s10": Config("s10", selection_share=0.1),
    "v10": Config("v10", validation_fraction=0.1),
    "s10v10": Config("s10v10", selection_share=0.1, validation_fraction=0.1),
    "s50": Config("s50", selection_share=0.5),
    "v50": Config("v50", validation_fraction=0.5),
    "s50v50": Config("s50v50", selection_share=0.5, validation_fraction=0.5),
    "one25": Config("one25", radii=(0.25,)),
    "one": Config("one", radii=(1.0,)),
    "three": Config("three", radii=(0.1, 0.5, 2.0)),
    "T4": Config("T4", iterations=0.25),
    # seed 004's doubling grid as offsets around w_src: rho_j = 2^(j - 5) ||w_src||
    "grid": Config("grid", radii=tuple(2.0 ** (j - 5) for j in range(1, 6))),
    "boost": Config("boost", radii=(0.25,), per_site=True),
    "shrink": Config("shrink", radii=(1.0,), shrink=(0.25,)),
    "shrink3": Config("shrink3", radii=(1.0,), shrink=(0.125, 0.25, 0.5)),
}
SCORES = ("clipped loss", "clipped errors", "paired, public C", "paired, private C",
          "paired, worst-case C", "paired, private C, safe vs free",
          "paired, private C + errors, safe vs free", "package: paired, private C",
          "oracle (non-private)")
_CACHE: dict[tuple, dict[str, dict]] = {}


def prototype_methods(config: str) -> list[str]:
    prefix = "" if config == "base" else f"[{config}] "
    radii = () if CONFIGS[config].per_site else CONFIGS[config].radii
    return ([f"{prefix}P: {score}" for score in SCORES]
            + [f"{prefix}cand: ball GD rho={r:g}" for r in radii]
            + [f"{prefix}cand: shrunk to rho={r:g}" for r in CONFIGS[config].shrink])


PROTOTYPES = prototype_methods("base")


def _scores(task, weights, test):
    from experiments.gain_study import model_scores
    return model_scores(task, weights, test)


def ball_gd(fed, *, loss, center, rho, learning_rate, iterations, clip_norm, multiplier,
            dim) -> np.ndarray:
    """Noisy GD from ``center`` projected onto ||w - center|| <= rho; the
    average of the second half of the iterates (module docstring)."""
    params = LinearGradientParams(np.zeros(dim), loss, clip_norm)
    mechanism = GRADIENT.mechanism(params, multiplier, Adjacency.REPLACE_ONE, dim=dim)
    n = sum(fed.site_sizes.values())
    weights, total = center.copy(), np.zeros(dim)
    first = iterations // 2
    for t in range(iterations):
        query = LinearGradientParams(weights, loss, clip_norm)
        gradient = np.asarray(fed.query(GRADIENT.name, query.to_wire(), mechanism).value) / n
        step = weights - learning_rate * gradient - center
        norm = float(np.linalg.norm(step))
        weights = center + (step if norm <= rho else step * (rho / norm))
        if t >= first:
            total += weights
    return total / (iterations - first)


def gaussian_epsilon(multiplier: float, delta: float) -> float:
    """The epsilon at ``delta`` of one Gaussian release at noise multiplier z
    (Balle and Wang 2018: delta(eps) = Phi(1/(2z) - eps z) - e^eps
    Phi(-1/(2z) - eps z)), so that the package, given (epsilon, delta),
    calibrates the multiplier the prototype uses."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    def excess(eps: float) -> float:
        return (norm.cdf(0.5 / multiplier - eps * multiplier)
                - math.exp(eps + norm.logcdf(-0.5 / multiplier - eps * multiplier)) - delta)

    return float(brentq(excess, 1e-9, 1e3))


def worst_case_clips(loss, candidates, reference) -> np.ndarray:
    gaps = np.linalg.norm(candidates - reference, axis=1)
    if loss == "logistic":
        return np.maximum(gaps, 1e-9)
    sizes = np.linalg.norm(candidates, axis=1) + np.linalg.norm(reference)
    return np.maximum(gaps * (sizes + 2.0), 1e-9)


def public_clips(loss, candidates, reference, source) -> np.ndarray:
    diff = np.abs(loss_differences(source[0], source[1], candidates, reference, loss))
    return np.maximum(np.quantile(np.minimum(diff, 1e300), 0.95, axis=0), 1e-6)


def private_clips(val, loss, candidates, reference, multiplier, dim, n_val,
                  public: np.ndarray) -> tuple:
    """C_k from a noisy histogram of |differences| (module docstring)."""
    edges = public[:, None] * EDGE_FACTORS[None, :]
    params = HistogramParams(candidates, reference, loss, edges)
    mechanism = HISTOGRAM_KERNEL.mechanism(params, multiplier, Adjacency.REPLACE_ONE, dim=dim)
    counts = np.asarray(val.query(HISTOGRAM, params.to_wire(), mechanism).value)
    sigma = 0.0 if mechanism.is_non_private else float(mechanism.noise_scales[0])
    tails = np.cumsum(counts[:, ::-1], axis=1)[:, ::-1]  # tails[:, j]: |d| >= edge j-1
    bins = counts.shape[1]
    clips = []
    for row, own in zip(tails, edges, strict=True):
        # Bin j >= 1 holds [own[j-1], own[j]); the count of |d| >= own[j-1] is row[j],
        # a sum of bins - j noisy bins.
        ok = [j for j in range(1, bins)
              if row[j] <= TAIL_SHARE * n_val + sigma * math.sqrt(bins - j)]
        clips.append(own[ok[0] - 1] if ok else own[-1])
    return np.maximum(np.asarray(clips), 1e-6), counts


def paired_choice(val, loss, candidates, reference, clips, multiplier, dim) -> tuple:
    params = PairedParams(candidates, reference, loss, clips)
    if math.isinf(multiplier):
        mechanism = PAIRED_KERNEL.mechanism(params, math.inf, Adjacency.REPLACE_ONE, dim=dim)
        sigma = 0.0
    else:
        mechanism = PAIRED_KERNEL.mechanism(params, multiplier, Adjacency.REPLACE_ONE, dim=dim)
        sigma = float(mechanism.noise_scales[0])
    noisy = np.asarray(val.query(PAIRED, params.to_wire(), mechanism).value, dtype=float)
    t = math.sqrt(2 * math.log(max(len(clips), 2) / BETA))
    estimate = clips * noisy  # each candidate's clipped difference sum to the reference
    safe = clips * (noisy + t * sigma) < 0  # upper confidence bound below the reference's 0
    if RULE == "ucb":
        upper = clips * (noisy + t * sigma)
        best = int(np.argmin(upper))
        return (best + 1 if upper[best] < 0 else 0), noisy, sigma
    if not np.any(safe):
        return 0, noisy, sigma
    best = int(np.argmin(np.where(safe, estimate, np.inf)))
    return best + 1, noisy, sigma


def safe_vs_free(estimates: np.ndarray, stds: np.ndarray, has_constant: bool,
                 errors: np.ndarray | None = None, error_stds: np.ndarray | None = None
                 ) -> int:
    """The delivered index (0: the reference w_src; k >= 1: candidates[k]) when
    a model must not lose to *any* free model: the reference (estimate 0, no
    noise) and, with ``has_constant``, the public constant (entry 0 of the
    estimates). Candidate k qualifies when its estimated loss difference to
    the reference plus t times its noise is below 0 (better than source-only
    with probability 1 - beta, as the paired choice), its estimated loss
    difference to the constant minus t times the noise of that difference is
    below 0 (not significantly worse than the constant), and, with ``errors``
    (paired error sums and stds, the classifiers' second release), its error
    difference to every free model minus t times its noise is at most 0 (not
    significantly less accurate than either); t = sqrt(2 log(m / beta)) for
    the m comparisons. Among those, the least loss estimate; if none, the
    free model of least estimate (the constant when its estimated difference
    to the reference is negative). Post-processing of the releases."""
    free = [None] + ([0] if has_constant else [])  # None: the reference

    def diff(values, stds_, k, f):
        if f is None:
            return values[k], stds_[k]
        return values[k] - values[f], math.hypot(stds_[k], stds_[f])

    comparisons = max(2, len(estimates) * len(free) * (2 if errors is not None else 1))
    t = math.sqrt(2 * math.log(comparisons / BETA))

    def qualifies(k, against):
        for f in against:
            value, std = diff(estimates, stds, k, f)
            if (value + t * std >= 0) if f is None else (value - t * std >= 0):
                return False
            if errors is not None:
                value, std = diff(errors, error_stds, k, f)
                if value - t * std > 0:
                    return False
        return True

    first = 1 if has_constant else 0
    learned = [k for k in range(first, len(estimates)) if qualifies(k, free)]
    if learned:
        return 1 + min(learned, key=lambda k: estimates[k])
    # No learned model qualifies: the better free model by its estimate (no
    # margin: either is free, and keeping source-only where the constant is
    # far better would deliver a model below the majority class).
    return 1 if has_constant and estimates[0] < 0 else 0


def clipped_choice(val, loss, candidates, bound, multiplier, dim) -> tuple:
    params = ValidationLossParams(candidates, loss, bound)
    mechanism = VALIDATION.mechanism(params, multiplier, Adjacency.REPLACE_ONE, dim=dim)
    noisy = np.asarray(val.query(VALIDATION.name, params.to_wire(), mechanism).value,
                       dtype=float)
    sigma = 0.0 if mechanism.is_non_private else float(mechanism.noise_scales[0])
    margin = baseline_margin(sigma, len(candidates), BETA)
    return choose(noisy, margin), noisy, sigma


def _spent_per_score(fed, trained: int, loss: str) -> dict[str, float]:
    """Each score's job (the training releases and its own selection
    releases) composed by the ledgers' accountant at delta: the site's list
    of charges is the training's, then the selections in the order _run_job
    makes them."""
    from privadapt.common.accounting.accountant import epsilon_spent
    mechanisms = list(next(iter(fed.privacy_spent(DELTA).values())).mechanisms)
    train, rest = mechanisms[:trained], mechanisms[trained:]
    order = ["clipped loss", *(["clipped errors"] if loss == "logistic" else []),
             "paired, public C", "paired, worst-case C"]
    spent = {score: epsilon_spent([*train, rest[i]], DELTA).epsilon
             for i, score in enumerate(order)}
    private = rest[len(order):len(order) + 2]
    spent["paired, private C"] = epsilon_spent([*train, *private], DELTA).epsilon
    spent["paired, private C, safe vs free"] = spent["paired, private C"]
    if loss == "logistic":
        spent["paired, private C + errors, safe vs free"] = epsilon_spent(
            [*train, *rest[len(order) + 2:len(order) + 5]], DELTA).epsilon
    spent["package: paired, private C"] = epsilon_spent([*train, *rest[-2:]], DELTA).epsilon
    spent["training"] = epsilon_spent(train, DELTA).epsilon
    return spent


def run_prototype(row, method, private, test, epsilon, split, seed, source_only,
                  config: str = "base") -> dict:
    key = (row.task.name, split, epsilon, config)
    if key not in _CACHE:
        _CACHE[key] = _run_job(row, private, test, epsilon, split, seed, source_only,
                               CONFIGS[config])
    prefix = "" if config == "base" else f"[{config}] "
    return _CACHE[key].get(method[len(prefix):], {"status": "n/a for this loss"})


def _run_job(row, private, test, epsilon, split, seed, source_only, config: Config) -> dict:
    from experiments.gain_study import job_id, validation_records_of
    task = row.task
    dim = private[0].shape[1]
    finite = math.isfinite(epsilon)
    z_total = calibrate_noise_multiplier(epsilon, DELTA, 1) if finite else math.inf
    share = config.selection_share
    train_share = (1 - share) / len(config.radii)
    iterations = max(1, round(config.iterations * task.iterations))
    name = job_id(task, split, epsilon, f"proto-{config.name}")
    free = [source_only] + ([row.constant] if row.constant is not None else [])
    free_names = ["source_only"] + (["public_constant"] if row.constant is not None else [])
    results: dict[str, dict] = {}
    with federation(*private, task.num_sites, seed, private=finite).new_job(name) as fed:
        train, val = record_parts(fed, config.validation_fraction, "prototype")
        n_val = sum(val.site_sizes.values())
        learned, names = [], []
        scale = float(np.linalg.norm(source_only))
        settings = {"loss": task.loss, "center": source_only,
                    "learning_rate": task.noisy_gd["learning_rate"], "iterations": iterations,
                    "clip_norm": task.noisy_gd["clip_norm"], "dim": dim}
        if config.per_site:
            train_share = 1 - share  # each site's records train one model only
            multiplier = z_total * math.sqrt(iterations / train_share) if finite else math.inf
            part = RecordPart(TRAIN, config.validation_fraction, fed.job_id)
            for site in fed.site_sizes:
                view = OneSiteView(fed, site, part)
                learned.append(ball_gd(view, rho=config.radii[0] * scale,
                                       multiplier=multiplier, **settings))
                names.append(f"ball GD rho={config.radii[0]:g} {site}")
        for factor in () if config.per_site else config.radii:
            multiplier = z_total * math.sqrt(iterations / train_share) if finite else math.inf
            learned.append(ball_gd(train, rho=factor * scale, multiplier=multiplier,
                                   **settings))
            names.append(f"ball GD rho={factor:g}")
        shrunk = []
        for factor in config.shrink:
            offset = learned[-1] - source_only
            norm = float(np.linalg.norm(offset))
            limit = factor * scale
            shrunk.append(source_only + (offset if norm <= limit else offset * (limit / norm)))
            names.append(f"shrunk to rho={factor:g}")
        candidates = np.stack([*free, *learned, *shrunk])
        all_names = [*free_names, *names]
        others = candidates[1:]
        select = z_total / math.sqrt(share) if finite else math.inf
        choices, info = {}, {}
        bound = auto_loss_bound(task.loss, source_only, *task.source)
        choices["clipped loss"], noisy, sigma = clipped_choice(val, task.loss, candidates,
                                                               bound, select, dim)
        info["clipped loss"] = {"noisy": (noisy / n_val).tolist(), "sigma": sigma / n_val,
                                "L": bound}
        if task.loss == "logistic":
            choices["clipped errors"], noisy, sigma = clipped_choice(
                val, task.loss, error_scored(candidates), 1.0, select, dim)
            info["clipped errors"] = {"noisy": (noisy / n_val).tolist()}
        clip_sets = {"paired, public C": public_clips(task.loss, others, source_only,
                                                      task.source),
                     "paired, worst-case C": worst_case_clips(task.loss, others, source_only)}
        for score, clips in clip_sets.items():
            choices[score], noisy, sigma = paired_choice(val, task.loss, others, source_only,
                                                         clips, select, dim)
            info[score] = {"clips": clips.tolist(), "noisy": noisy.tolist(), "sigma": sigma}
        hist = select / math.sqrt(HISTOGRAM_SHARE) if finite else math.inf
        paired = select / math.sqrt(1 - HISTOGRAM_SHARE) if finite else math.inf
        clips, _counts = private_clips(val, task.loss, others, source_only, hist, dim, n_val,
                                       clip_sets["paired, public C"])
        choices["paired, private C"], noisy, sigma = paired_choice(
            val, task.loss, others, source_only, clips, paired, dim)
        info["paired, private C"] = {"clips": clips.tolist(), "noisy": noisy.tolist(),
                                     "sigma": sigma}
        # Post-processing of the same release: safe against every free model.
        has_constant = row.constant is not None
        choices["paired, private C, safe vs free"] = safe_vs_free(
            clips * noisy, clips * sigma, has_constant)
        info["paired, private C, safe vs free"] = info["paired, private C"]
        if task.loss == "logistic":
            # Its own job: histogram (30%), paired losses (35%), paired errors (35%).
            third = select / math.sqrt(0.35) if finite else math.inf
            clips2, _ = private_clips(val, task.loss, others, source_only, hist, dim, n_val,
                                      clip_sets["paired, public C"])
            _, noisy2, sigma2 = paired_choice(val, task.loss, others, source_only, clips2,
                                              third, dim)
            _, noisy3, sigma3 = paired_choice(val, "error", others, source_only,
                                              np.ones(len(others)), third, dim)
            choices["paired, private C + errors, safe vs free"] = safe_vs_free(
                clips2 * noisy2, clips2 * sigma2, has_constant, noisy3, np.full(
                    len(others), sigma3))
            info["paired, private C + errors, safe vs free"] = {
                "clips": clips2.tolist(), "noisy": noisy2.tolist(), "sigma": sigma2,
                "noisy_errors": noisy3.tolist(), "sigma_errors": sigma3}
        # The package's private_selection on the same candidates and records, at
        # the selection's multiplier (its epsilon at DELTA): its releases come last.
        result = private_selection(
            val, candidates=others, loss=task.loss,
            epsilon=gaussian_epsilon(select, DELTA) if finite else math.inf,
            delta=DELTA if finite else 0.0, baseline_confidence=BETA, method="secure_sum",
            reference=source_only, clips="private", histogram_share=HISTOGRAM_SHARE,
            quantile=TAIL_SHARE, public_source=task.source)
        choices["package: paired, private C"] = result.best_index
        info["package: paired, private C"] = {
            "clips": result.clips[1:].tolist(), "sigma": result.noise_std,
            "noisy": (result.estimates[1:] * n_val / result.clips[1:]).tolist()}
        job = fed.job_id
        trained = iterations if config.per_site else len(config.radii) * iterations
        spent = _spent_per_score(fed, trained, task.loss) if finite \
            else {}
    # Diagnostics read the validation records directly (non-private, reported only).
    features, labels = validation_records_of(task, private, job, config.validation_fraction)
    losses = loss_values(task.loss, features @ candidates.T, labels[:, None])
    unclipped = losses.mean(axis=0)
    choices["oracle (non-private)"] = int(np.argmin(unclipped))
    diffs = losses[:, 1:] - losses[:, :1]
    test_losses = [_scores(task, w, test)["loss"] for w in candidates]
    for score, index in choices.items():
        detail = {"chosen": all_names[index], "names": all_names,
                  "unclipped_validation": unclipped.tolist(), "test_loss": test_losses,
                  "validation_records": int(n_val), **info.get(score, {})}
        if "clips" in detail:
            detail["bite"] = np.mean(np.abs(diffs) > np.asarray(detail["clips"]), axis=0).tolist()
        if score == "clipped loss":
            detail["bite"] = float(np.mean(losses[:, 0] > bound))
        # Every score is one job of the same plan: the training releases plus
        # one selection. The ledger's total holds them all (several selections).
        detail["plan"] = {"selection_share": share, "train_share_each": train_share,
                          "iterations": iterations, "z_total": z_total,
                          "epsilon_spent": spent.get(score, math.nan if finite else math.inf)}
        results[f"P: {score}"] = {**_scores(task, candidates[index], test), "detail": detail}
    results_spent = {"epsilon_spent": spent}
    for factor, weights in zip(() if config.per_site else config.radii, learned, strict=False):
        results[f"cand: ball GD rho={factor:g}"] = {**_scores(task, weights, test),
                                                    "detail": results_spent}
    for factor, weights in zip(config.shrink, shrunk, strict=True):
        results[f"cand: shrunk to rho={factor:g}"] = {**_scores(task, weights, test),
                                                      "detail": results_spent}
    return results
