"""Diabetes (n = 100 private records): can a certified private selection
capture half the available gain at epsilon 10? Cross-fitting and sufficient
statistics, prototyped (experiments/results/GAIN_STUDY.md, section 13).

Today (GAIN_STUDY.md 11.3) the paired release validates on 24 records and
resolves a mean difference of rho_sel = t 2 sqrt(K') z_sel / n_val clips per
record (private_selection.paired_resolution): too coarse for this row's
gains. Two ways to validate on all 100 records:

(a) **Cross-fitting** (Chernozhukov et al. 2018, double machine learning's
    cross-fitting). Each site's records split by position into halves A and
    B (a public rule; the records of ``split_records`` are in random order).
    Ball GD (the package's default candidate, GAIN_STUDY.md 4.2: noisy GD from
    source-only w_0, projected on ||w - w_0|| <= ||w_0||, the tail average)
    trains m_A on A and m_B on B; the pair's free shrunk copies (offset
    projected on 0.25 ||w_0||) are a second pair. One paired release over
    all n records scores pair k by

        S_k = sum_{i in B} clip(d_i(m_A^k)) + sum_{i in A} clip(d_i(m_B^k)),
        d_i(m) = l(m; z_i) - l(w_0; z_i)   (each record with the model NOT trained on it),

    normalised by its clip C_k exactly as the package's kernel (sensitivity
    2 sqrt(K') replace-one: one record moves one term of each entry by at
    most 2), clips from the package's private histogram rule, the package's
    safe argmin (certified_choice.safe_argmin), and delivers the average
    (m_A^k + m_B^k) / 2 of the certified pair. Why the certificate transfers
    (population risk R, records i.i.d.): given A (so m_A), B is a fresh
    sample, so E[sum_B d_i(m_A) | A] = |B| (R(m_A) - R(w_0)), and the same
    for m_B on A; with |A| = |B| the unclipped S / n estimates
    (R(m_A) + R(m_B)) / 2 - R(w_0), and for a loss convex in w,
    R((m_A + m_B) / 2) <= (R(m_A) + R(m_B)) / 2 (Jensen, record by record).
    Assumptions: i.i.d. records (each half a fresh sample for the other's
    model); a convex loss; equal halves (else the weights |B| / n, |A| / n);
    a clip that does not bite (the release certifies the *clipped* score,
    and clip(d) is not convex in w: a biting clip leaves the bias
    E[(d - C)+] out); and a sampling term (Hoeffding over the n records, as
    selected_adaptation.py's population remark): the noise certificate
    itself is only about the records, "each half's model is better than
    source-only on the records it did not see", not about the average on
    them (the average was trained on every record).
    Privacy: a record of A is read by m_A's T gradient releases and by the
    two selection releases; m_B never reads it. With parallel composition
    over the disjoint halves it pays eps_train + eps_sel; today's ledgers
    compose every release on a site sequentially, so it pays m_A's and
    m_B's training: both are measured (``parallel``: each fold at the whole
    training share; ``sequential``: each at half of it).

(b) **Sufficient statistics** (Sheffet 2017; Wang 2018, AdaSSP): each fold
    releases S = X^T X and r = X^T y of its clipped records (||x|| <= 1,
    |y| <= 1; d = 10) with one Gaussian noise matrix E (d x d, i.i.d.,
    symmetrised: post-processing) and e (d). Sensitivity of (vec(x x^T),
    x y) under replace-one: ||v - v'||^2 = |x|^4 + |x|^2 y^2 + |x'|^4 +
    |x'|^2 y'^2 - 2 c^2 - 2 c y y' (c = x.x') <= 4 - 2 c^2 + 2 |c| <= 4.5,
    so Delta = 3 / sqrt(2) (add/remove: sqrt(2)). The candidates are ridge
    fits towards source-only, w = (G + lambda I)^-1 (b + lambda w_0) with
    G = S~ / n projected on the PSD cone, b = r~ / n, lambda = sqrt(2 d)
    sigma / n (the noise matrix's spectral norm, AdaSSP's rule) plus each
    public offset of RIDGE, then projected on the ball of ball GD. Certified
    by (i) the paired release on the holdout (today's split), (ii) the
    cross-fitted paired release as in (a), or (iii) **the statistics
    themselves**: the squared loss's sum over fold F is a quadratic, so
    Q_F(w) = w^T S_F w - w_0^T S_F w_0 - 2 (w - w_0)^T r_F is the exact
    (unclipped) paired difference sum; from the noisy statistics its error is
    <E, w w^T - w_0 w_0^T> - 2 (w - w_0).e ~ N(0, s_F(w)^2),
    s_F(w) = sigma sqrt(||w w^T - w_0 w_0^T||_F^2 + 4 ||w - w_0||^2),
    given w from the *other* fold's statistics (independent noise). m_A is
    scored on B's statistics and m_B on A's, so each half's error is
    Gaussian given its candidate; the two are not jointly Gaussian given
    both (A's noise made m_A and scores m_B), so the certificate takes a
    union bound over the 2 K' one-sided events,
    Q_B(m_A) + Q_A(m_B) + t (s_B(m_A) + s_A(m_B)) < 0, t = sqrt(2 log(2 K' /
    beta)). No selection release at all: the whole budget is the statistics.

(c) **A shift** (one parameter: source-only's predictions moved by delta,
    the intercept corrected; non-private, fitted on all 100 records, it
    captures about half of this row's gain: the shift is mostly in the
    label's mean). Each half releases R = sum (y - x.w_0) with noise at
    z 2c, c = 1 + ||w_0|| (|y - x.w_0| <= c for every record within the
    public bounds: the clip never bites), delta_F = R~_F / n_F. Certified by
    the cross-fitted paired release (selection share 0.25, or 0.75: one
    scalar needs little training budget), or by the sums themselves: a
    shift's paired difference sum on fold F is exactly n_F delta^2 -
    2 delta R_F, error -2 delta e_F, union bound over the two halves.

Every release is a numpy stand-in with the package's sensitivities and
Gaussian noise (not a CSPRNG, no secure-sum grid rounding; gradient sums
divided by the true part size where the package uses its public estimate).
Budget, as experiments/gain_prototype.py: z_total = the multiplier of one
Gaussian release at (epsilon, 1e-5); a release at z_i spends 1 / z_i^2 of
1 / z_total^2 (Gaussian DP composes exactly: Dong, Roth and Su 2022). The
selection share s = 0.25 (histogram 30% of it, as the package), training
1 - s; the ``epsilon_ledger`` / ``epsilon_parallel`` columns are the
package's PLD accountant on each site's releases composed sequentially
(today's ledger) or with parallel composition over the halves.
L_best: the best of target-only ERM, the non-private adapter and the free
models per split (GAIN_STUDY.md's non-private oracle); "oracle" rows: the
least noise-free unclipped score among the same candidates (non-private).

Run from the repository root:
    OPENBLAS_NUM_THREADS=1 .venv/bin/python -m experiments.diabetes_cross_fitting \
        [--splits 10] [--draws 3] [--quick]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from privadapt.common.blas_threads import default_to_single_threaded_blas

default_to_single_threaded_blas()

import numpy as np  # noqa: E402

from experiments.gain_study import Row, run_method  # noqa: E402
from experiments.seed000.diabetes import load_diabetes_domains  # noqa: E402
from experiments.seed000.reporting import (  # noqa: E402
    add_output_option,
    output_path,
    print_table,
    write_csv,
)
from experiments.selection import regression_task, split_records  # noqa: E402
from privadapt import Dataset  # noqa: E402
from privadapt.common.accounting.accountant import epsilon_spent  # noqa: E402
from privadapt.common.accounting.calibration import calibrate_noise_multiplier  # noqa: E402
from privadapt.common.data.record_parts import (  # noqa: E402
    TRAIN,
    VALIDATION,
    RecordPart,
    RecordSplitter,
)
from privadapt.common.mechanisms import Adjacency, GaussianMechanism  # noqa: E402
from privadapt.common.numerics.geometry import project_to_ball  # noqa: E402
from privadapt.server.algorithms.model_selection.candidates import (  # noqa: E402
    public_constant_model,
    shrunk_copy,
)
from privadapt.server.algorithms.model_selection.certified_choice import (  # noqa: E402
    certifying_t,
    safe_argmin,
)
from privadapt.server.algorithms.model_selection.private_selection import (  # noqa: E402
    EDGE_FACTORS,
    clips_from_histogram,
    public_difference_clips,
)
from privadapt.server.algorithms.public_erm import fit_linear  # noqa: E402

EPSILONS = (1.0, 3.0, 10.0, 30.0, 100.0, math.inf)  # 30, 100: where one half is reached
DELTA = 1e-5
BETA = 0.1
SELECTION_SHARE = 0.25
HISTOGRAM_SHARE = 0.3
TAIL_SHARE = 0.02
HOLDOUT_FRACTION = 0.25  # today's validation fraction
SHRINK = 0.25  # the free copy's radius, x ||w_0||
STATS_SENSITIVITY = 3.0 / math.sqrt(2.0)  # (vec(x x^T), x y), replace-one
RIDGE = (0.03, 0.3)  # public offsets of lambda above the noise's spectral norm
REFERENCE_METHODS = ("target-only (non-private)", "adapter (non-private)")
RESULTS = Path("experiments/results")
HEADER = ["design", "split", "draw", "epsilon", "loss", "oracle_loss", "source_only",
          "best_nonprivate", "chosen", "epsilon_ledger", "epsilon_parallel", "detail"]


@dataclass(frozen=True)
class Split:
    """One split's records: each site's halves (position), today's holdout
    parts (the package's hashed record parts), the test set and w_0."""

    folds: tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
    train: tuple[np.ndarray, np.ndarray]
    validation: tuple[np.ndarray, np.ndarray]
    test: tuple[np.ndarray, np.ndarray]
    source: tuple[np.ndarray, np.ndarray]
    center: np.ndarray
    gd: dict


def make_split(row: Row, split: int, center: np.ndarray, iterations: int) -> Split:
    task = row.task
    (features, labels), test = split_records(task, task.private_size, split)
    blocks = np.array_split(np.arange(len(labels)), task.num_sites)
    halves = [np.concatenate([b[:len(b) // 2] for b in blocks]),
              np.concatenate([b[len(b) // 2:] for b in blocks])]
    names = tuple(f"x{i}" for i in range(features.shape[1]))
    parts = {TRAIN: [], VALIDATION: []}
    for block in blocks:
        splitter = RecordSplitter(Dataset(features[block], labels[block], names))
        for part in parts:
            records = splitter.records(RecordPart(part, HOLDOUT_FRACTION, f"diabetes-s{split}"))
            parts[part].append((records.features, records.labels))
    joined = {p: (np.concatenate([f for f, _ in v]), np.concatenate([y for _, y in v]))
              for p, v in parts.items()}
    gd = {"iterations": iterations, "learning_rate": task.noisy_gd["learning_rate"],
          "clip_norm": task.noisy_gd["clip_norm"]}
    return Split(tuple((features[h], labels[h]) for h in halves), joined[TRAIN],
                 joined[VALIDATION], test, task.source, center, gd)


# ------------------------------------------------------------------ releases


def ball_gd(records, center, multiplier, rng, *, iterations, learning_rate, clip_norm):
    """Noisy GD from ``center`` projected on ||w - center|| <= ||center||, the
    mean of the last half of the iterates; per-record gradients 2 (w.x - y) x
    clipped at C, noise sigma = z 2C (replace-one) on their sum."""
    features, labels = records
    sigma = 0.0 if math.isinf(multiplier) else multiplier * 2.0 * clip_norm
    radius = float(np.linalg.norm(center))
    weights, total, first = center.copy(), np.zeros_like(center), iterations // 2
    for step in range(iterations):
        gradients = 2.0 * (features @ weights - labels)[:, None] * features
        norms = np.linalg.norm(gradients, axis=1)
        gradients *= np.minimum(1.0, clip_norm / np.maximum(norms, 1e-300))[:, None]
        noisy = (gradients.sum(axis=0) + sigma * rng.normal(size=len(center))) / len(labels)
        weights = project_to_ball(weights - learning_rate * noisy, radius, center)
        if step >= first:
            total += weights
    return total / (iterations - first)


def statistics(records, multiplier, rng):
    """(S~, r~, sigma): X^T X and X^T y of the clipped records plus Gaussian
    noise at z Delta (module docstring, (b))."""
    features, labels = records
    norms = np.linalg.norm(features, axis=1)
    features = features / np.maximum(1.0, norms)[:, None]
    labels = np.clip(labels, -1.0, 1.0)
    sigma = 0.0 if math.isinf(multiplier) else multiplier * STATS_SENSITIVITY
    dim = features.shape[1]
    noise = sigma * rng.normal(size=(dim, dim))
    gram = features.T @ features + (noise + noise.T) / 2.0
    return gram, features.T @ labels + sigma * rng.normal(size=dim), sigma


def ridge_candidates(gram, moments, sigma, count, center):
    """Ridge fits towards ``center`` from the noisy statistics of ``count``
    records, one per RIDGE offset, projected on the ball of ball GD."""
    values, vectors = np.linalg.eigh(gram / count)
    psd = (vectors * np.maximum(values, 0.0)) @ vectors.T
    dim = len(center)
    floor = math.sqrt(2.0 * dim) * sigma / count
    radius = float(np.linalg.norm(center))
    return [project_to_ball(np.linalg.solve(psd + (floor + o) * np.eye(dim),
                                            moments / count + (floor + o) * center),
                            radius, center) for o in RIDGE]


def differences(records, models, center):
    """Per record and model, (x.w - y)^2 - (x.w_0 - y)^2: shape (n, K')."""
    features, labels = records
    margins = features @ np.stack(models).T
    return (margins - labels[:, None]) ** 2 - ((features @ center - labels) ** 2)[:, None]


def paired_selection(diffs, public, multiplier, rng) -> dict:
    """The package's paired release with private clips, as a stand-in:
    histogram at z / sqrt(h) (sensitivity sqrt(2 K')), the normalised clipped
    sums at z / sqrt(1 - h) (sensitivity 2 sqrt(K')), the safe argmin."""
    count, entries = diffs.shape
    finite = math.isfinite(multiplier)
    edges = public[:, None] * EDGE_FACTORS[None, :]
    counts = np.stack([np.bincount(np.searchsorted(e, np.abs(d), side="right"),
                                   minlength=len(EDGE_FACTORS) + 1)
                       for e, d in zip(edges, diffs.T, strict=True)]).astype(float)
    counts_std = multiplier / math.sqrt(HISTOGRAM_SHARE) * math.sqrt(2 * entries) \
        if finite else 0.0
    counts += counts_std * rng.normal(size=counts.shape)
    clips = clips_from_histogram(counts, edges, counts_std, TAIL_SHARE * count)
    sigma = multiplier / math.sqrt(1 - HISTOGRAM_SHARE) * 2 * math.sqrt(entries) \
        if finite else 0.0
    sums = np.sum(np.clip(diffs, -clips, clips) / clips, axis=0)
    sums += sigma * rng.normal(size=entries)
    estimates = np.concatenate([[0.0], clips * sums / count])
    stds = np.concatenate([[0.0], clips * sigma / count])
    return {**certified(estimates, stds, certifying_t(entries, BETA)), "clips": clips.tolist(),
            "bite": np.mean(np.abs(diffs) > clips, axis=0).tolist()}


def stats_certificate(pairs, stats, center) -> dict:
    """(b)(iii): pair k = (m_A, m_B) scored on the other fold's statistics,
    union bound over the 2 K' one-sided events (module docstring)."""
    size = sum(s[3] for s in stats)
    estimates, stds = [0.0], [0.0]
    for model_a, model_b in pairs:
        total, spread = 0.0, 0.0
        for model, (gram, moments, sigma, _) in ((model_a, stats[1]), (model_b, stats[0])):
            total += model @ gram @ model - center @ gram @ center \
                - 2.0 * (model - center) @ moments
            offset = np.outer(model, model) - np.outer(center, center)
            spread += sigma * math.sqrt(np.sum(offset**2) + 4.0 * np.sum((model - center)**2))
        estimates.append(total / size)
        stds.append(spread / size)
    return certified(estimates, stds, certifying_t(2 * len(pairs), BETA))


def certified(estimates, stds, t) -> dict:
    """The package's safe argmin on (reference first) estimates and stds."""
    estimates, stds = np.asarray(estimates), np.asarray(stds)
    return {"index": safe_argmin(estimates, stds, t), "estimates": estimates[1:].tolist(),
            "upper": (estimates + t * stds)[1:].tolist()}


def residual_sum(records, center, multiplier, rng):
    """(R~, sigma): sum of y - x.w_0 over the clipped records plus Gaussian
    noise at z 2c, c = 1 + ||w_0|| (|y - x.w_0| <= c for ||x|| <= 1, |y| <= 1:
    the clip never bites, replace-one sensitivity 2c)."""
    features, labels = records
    features = features / np.maximum(1.0, np.linalg.norm(features, axis=1))[:, None]
    bound = 1.0 + float(np.linalg.norm(center))
    sigma = 0.0 if math.isinf(multiplier) else multiplier * 2.0 * bound
    residuals = np.clip(np.clip(labels, -1.0, 1.0) - features @ center, -bound, bound)
    return float(residuals.sum() + sigma * rng.normal()), sigma


def shifted(center, shift):
    """w_0 with every prediction moved by ``shift`` (the intercept column is
    1 / sqrt(2) on every record, experiments/seed000/diabetes.py)."""
    weights = center.copy()
    weights[-1] += shift * math.sqrt(2.0)
    return weights


def shift_certificate(fitted) -> dict:
    """(c): the shift delta_A fitted on A scored on B's residual sum,
    n_B delta_A^2 - 2 delta_A R~_B (the exact paired difference sum of a
    shift), error -2 delta_A e_B, and delta_B on A; union bound over the two
    one-sided events (module docstring)."""
    total, spread = 0.0, 0.0
    for own, other in ((fitted[0], fitted[1]), (fitted[1], fitted[0])):
        shift = own["shift"]
        total += other["size"] * shift**2 - 2.0 * shift * other["residual"]
        spread += 2.0 * abs(shift) * other["sigma"]
    size = fitted[0]["size"] + fitted[1]["size"]
    return certified([0.0, total / size], [0.0, spread / size], certifying_t(2, BETA))


# ------------------------------------------------------------------- designs


@dataclass(frozen=True)
class Design:
    """Candidates (``learner`` "ball GD", "statistics" or "shift", fitted on
    the holdout's train part or on each half), how they are certified
    ("paired" release, or from the "statistics" / "shift" releases
    themselves), and the shares of the job's Gaussian budget: each fitting
    run's and the selection's (0 without a selection release)."""

    learner: str
    cross_fit: bool
    certify: str
    train_share: float
    selection_share: float


def fit(design: Design, records, split: Split, z_total: float, rng) -> dict:
    """One fitting run on ``records``: its candidates, and what a
    self-certificate needs."""
    if design.learner == "ball GD":
        multiplier = z_total * math.sqrt(split.gd["iterations"] / design.train_share)
        model = ball_gd(records, split.center, multiplier, rng, **split.gd)
        return {"models": [model, shrunk_copy(model, split.center, SHRINK)]}
    multiplier = z_total / math.sqrt(design.train_share)
    count = len(records[1])
    if design.learner == "statistics":
        gram, moments, sigma = statistics(records, multiplier, rng)
        return {"models": ridge_candidates(gram, moments, sigma, count, split.center),
                "stats": (gram, moments, sigma, count)}
    residual, sigma = residual_sum(records, split.center, multiplier, rng)
    shift = residual / count
    return {"models": [shifted(split.center, shift)], "shift": shift, "residual": residual,
            "sigma": sigma, "size": count}


def run_design(design: Design, split: Split, z_total: float, rng) -> dict:
    """The chosen index (0: source-only), the delivered models (a pair's
    average when cross-fitted) and their noise-free mean paired differences
    on the records that score them."""
    if design.cross_fit:
        fitted = [fit(design, fold, split, z_total, rng) for fold in split.folds]
        pairs = list(zip(fitted[0]["models"], fitted[1]["models"], strict=True))
        models = [(a + b) / 2.0 for a, b in pairs]
        fold_a, fold_b = split.folds  # each record with the model of the other half
        diffs = np.concatenate([differences(fold_b, [a for a, _ in pairs], split.center),
                                differences(fold_a, [b for _, b in pairs], split.center)])
    else:
        fitted = [fit(design, split.train, split, z_total, rng)]
        models = fitted[0]["models"]
        diffs = differences(split.validation, models, split.center)
    if design.certify == "statistics":
        choice = stats_certificate(pairs, [f["stats"] for f in fitted], split.center)
    elif design.certify == "shift":
        choice = shift_certificate(fitted)
    else:
        public = public_difference_clips("squared", np.stack(models), split.center,
                                         *split.source)
        choice = paired_selection(diffs, public, z_total / math.sqrt(design.selection_share),
                                  rng)
    return {**choice, "models": models, "noise_free": diffs.mean(axis=0)}


TRAIN_SHARE = 1 - SELECTION_SHARE
SHIFT_SELECTION = 0.75  # one scalar trains the shift: the selection may take more
# "sequential": each half's run at half the training share, so that today's
# ledger (every release of a site composed) stays within epsilon.
DESIGNS = {
    "holdout: ball GD (today's form)": Design("ball GD", False, "paired", TRAIN_SHARE,
                                              SELECTION_SHARE),
    "holdout: statistics": Design("statistics", False, "paired", TRAIN_SHARE, SELECTION_SHARE),
    "cross-fit: ball GD, parallel": Design("ball GD", True, "paired", TRAIN_SHARE, SELECTION_SHARE),
    "cross-fit: ball GD, sequential": Design("ball GD", True, "paired", TRAIN_SHARE / 2,
                                             SELECTION_SHARE),
    "cross-fit: statistics, parallel": Design("statistics", True, "paired", TRAIN_SHARE,
                                              SELECTION_SHARE),
    "cross-fit: statistics, sequential": Design("statistics", True, "paired", TRAIN_SHARE / 2,
                                                SELECTION_SHARE),
    "cross-fit: statistics self-certified, parallel": Design("statistics", True,
                                                             "statistics", 1.0, 0.0),
    "cross-fit: statistics self-certified, sequential": Design("statistics", True,
                                                               "statistics", 0.5, 0.0),
    "cross-fit: shift, parallel": Design("shift", True, "paired", TRAIN_SHARE, SELECTION_SHARE),
    "cross-fit: shift, parallel, s 0.75": Design("shift", True, "paired",
                                                 1 - SHIFT_SELECTION, SHIFT_SELECTION),
    "cross-fit: shift, sequential, s 0.75": Design("shift", True, "paired",
                                                   (1 - SHIFT_SELECTION) / 2, SHIFT_SELECTION),
    "cross-fit: shift self-certified, parallel": Design("shift", True, "shift", 1.0, 0.0),
    "cross-fit: shift self-certified, sequential": Design("shift", True, "shift", 0.5, 0.0),
}


def site_releases(design: Design, iterations: int) -> tuple[list, list]:
    """(every release of one site, the releases one record of it is read by)
    as (noise multiplier / z_total, count): today's ledger composes the first,
    parallel composition over the halves needs only the second."""
    share = design.selection_share
    selection = [(1 / math.sqrt(share * HISTOGRAM_SHARE), 1),
                 (1 / math.sqrt(share * (1 - HISTOGRAM_SHARE)), 1)] if share else []
    steps = iterations if design.learner == "ball GD" else 1
    train = (math.sqrt(steps / design.train_share), steps)
    return [train] * (2 if design.cross_fit else 1) + selection, [train, *selection]


def spent(releases, z_total: float) -> float:
    """The package's PLD accountant on Gaussian releases at these multipliers."""
    if math.isinf(z_total):
        return math.inf
    mechanisms = [GaussianMechanism.single(1.0, factor * z_total / math.sqrt(count),
                                           Adjacency.REPLACE_ONE)
                  for factor, count in releases]  # T releases at z: one at z / sqrt(T)
    return float(epsilon_spent(mechanisms, DELTA).epsilon)


# --------------------------------------------------------------------- study


def diabetes_row(quick: bool) -> Row:
    task = regression_task("diabetes", load_diabetes_domains(), 100, 2, None, quick)
    constant = public_constant_model(*task.source, task.loss, task.radius, task.source_names)
    return Row(task, constant, float(np.mean(task.source[1])))


def test_loss(split: Split, weights) -> float:
    features, labels = split.test
    return float(np.mean((features @ weights - labels) ** 2))


def run(splits: int, draws: int, quick: bool, epsilons) -> list[list]:
    row = diabetes_row(quick)
    center = fit_linear(*row.task.source, row.task.loss, row.task.radius)
    budgets = {(d, e): [spent(r, calibrate_noise_multiplier(e, DELTA, 1)
                              if math.isfinite(e) else math.inf)
                        for r in site_releases(DESIGNS[d], row.task.iterations)]
               for d in DESIGNS for e in epsilons}
    out = []
    for index in range(splits):
        split = make_split(row, index, center, row.task.iterations)
        source_only = test_loss(split, center)
        best = min([source_only, test_loss(split, row.constant)]
                   + [run_method(row, m, index, math.inf, center)["loss"]
                      for m in REFERENCE_METHODS])
        for draw in range(draws):
            for e_index, epsilon in enumerate(epsilons):
                z_total = calibrate_noise_multiplier(epsilon, DELTA, 1) \
                    if math.isfinite(epsilon) else math.inf
                for d_index, (name, design) in enumerate(DESIGNS.items()):
                    rng = np.random.default_rng([index, draw, e_index, d_index])
                    result = run_design(design, split, z_total, rng)
                    models = [center, *result["models"]]
                    losses = [test_loss(split, w) for w in models]
                    oracle = int(np.argmin([0.0, *result["noise_free"]]))
                    detail = {k: result[k] for k in ("clips", "estimates", "upper", "bite")
                              if k in result}
                    detail["test_losses"] = losses
                    out.append([name, index, draw, f"{epsilon:g}", losses[result["index"]],
                                losses[oracle], source_only, best, result["index"],
                                *budgets[name, epsilon], json.dumps(detail)])
        print(f"split {index + 1}/{splits} done", flush=True)
    return out


def summarise(rows: list[list]) -> list[list]:
    """Per design and epsilon: gain captured by the certified choice, by the
    non-private oracle choice and by the best candidate delivered without any
    selection (uncertified), (mean L_src - mean L) / (mean L_src - mean
    L_best); units delivering a learned model; units worse than source-only
    on test and the worst shortfall (%); the two ledgers' epsilon."""
    table = []
    for name in DESIGNS:
        for epsilon in dict.fromkeys(r[3] for r in rows):
            unit = [r for r in rows if r[0] == name and r[3] == epsilon]
            if not unit:
                continue
            src, best = np.mean([r[6] for r in unit]), np.mean([r[7] for r in unit])

            def gain(losses, src=src, best=best):
                return float((src - np.mean(losses, axis=0)) / (src - best))

            candidates = np.array([json.loads(r[11])["test_losses"][1:] for r in unit])
            uncertified = max(gain(candidates[:, k]) for k in range(candidates.shape[1]))
            shortfall = max(100 * (r[4] - r[6]) / r[6] for r in unit)
            table.append([name, epsilon, gain([r[4] for r in unit]),
                          gain([r[5] for r in unit]), uncertified,
                          f"{sum(r[8] != 0 for r in unit)}/{len(unit)}",
                          f"{sum(r[4] > r[6] + 1e-12 for r in unit)}", float(shortfall),
                          float(unit[0][9]), float(unit[0][10])])
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", type=int, default=10)
    parser.add_argument("--draws", type=int, default=3, help="noise draws per split")
    parser.add_argument("--quick", action="store_true",
                        help="2 splits, 1 draw, epsilon 10 and inf, the task's quick T")
    parser.add_argument("--epsilons", default=None, help="comma-separated, e.g. 10,inf")
    add_output_option(parser, RESULTS / "diabetes_cross_fitting.csv")
    args = parser.parse_args(argv)
    splits, draws = (2, 1) if args.quick else (args.splits, args.draws)
    epsilons = (10.0, math.inf) if args.quick else EPSILONS
    if args.epsilons is not None:
        epsilons = tuple(float(e) for e in args.epsilons.split(","))
    rows = run(splits, draws, args.quick, epsilons)
    write_csv(output_path(args.out, RESULTS / "diabetes_cross_fitting.csv", args.quick),
              HEADER, rows)
    print("\ngain: (L_src - L) / (L_src - L_best), means over splits and draws; oracle: "
          "the non-private choice among the same candidates; candidate: the best one "
          "delivered without a selection (uncertified); learned: units delivering a "
          "learned model; below: units worse than source-only on test, worst: the largest "
          "shortfall to it (%); eps: each site's ledger today (sequential) and with "
          "parallel composition over the halves")
    print_table(["design", "eps", "gain", "oracle (non-private)", "candidate", "learned",
                 "below", "worst %", "eps today", "eps parallel"], summarise(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
