"""Seed 000, Table 1 style: relative test MSE (target-only = 1.0) of CnvxAdap,
KMM, DM, source-only and pooled least squares, on the synthetic covariate-shift
regression of ``synthetic.py`` (with its stated concept shift, known answer) and on
scikit-learn's diabetes data split by sex (``diabetes.py``).

Per split the target pool is re-split into train / validation (random, seeded);
for the synthetic set the test set and the source sample stay fixed, for
diabetes (207 target patients) train / validation / test are all re-drawn.
Hyperparameters of every method (ridge, KMM's B, DM's mu, CnvxAdap's alpha and
k2) are chosen on the target validation split: a **non-private** selection, as
in the paper's Table 1. CnvxAdap runs through simulation sites (noise off:
in-process, or site daemons with ``--networked``), warm-started at the
source-only fit (public data). The paper's regression sets (Wind, Airline, Gas,
News) are not available offline.

Run from the repository root:
    .venv/bin/python -m experiments.seed000.table1 [--splits 10] [--quick] [--networked]
"""

from __future__ import annotations

import argparse
import functools
import itertools
import math
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from experiments.baselines.dm import DiscrepancyMinimization
from experiments.baselines.kmm import KernelMeanMatching, weighted_least_squares
from experiments.grid import Runner, add_runner_options, runner_from
from experiments.seed000.diabetes import load_diabetes_domains
from experiments.seed000.federation import Federations, add_networked_flag
from experiments.seed000.reporting import (
    add_output_option,
    maybe_png,
    mean_std,
    output_path,
    print_table,
    write_csv,
)
from experiments.seed000.synthetic import ShiftedRegression, make_shifted_regression
from privadapt import PCnvxAdap

RESULTS_DEFAULT = Path("experiments/seed000/results")

RIDGES = (1e-6, 1e-3, 1e-2, 1e-1)
KMM_BOUNDS = (2.0, 10.0, 100.0)
ALPHAS = (0.1, 0.3, 0.5, 0.7)
K2S = (0.0, 0.1)
BOUNDS = {"feature_norm": 1.0, "label_bound": 1.0, "radius": 5.0}
METHODS = ("target-only", "source-only", "pooled", "KMM", "DM", "CnvxAdap")
DM_RADII = (1.0, 5.0)


def mse(weights: np.ndarray, features: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean((features @ weights - labels) ** 2))


def best_on_validation(candidates, validation):
    """The candidate weights with the lowest validation MSE."""
    return min(candidates, key=lambda w: mse(w, *validation))


def least_squares(features, labels, validation, weights=None):
    weights = np.ones(len(labels)) if weights is None else weights
    return best_on_validation([weighted_least_squares(features, labels, weights, ridge)
                               for ridge in RIDGES], validation)


def kmm_fit(source, train, validation):
    (xs, ys), (xt, yt) = source, train
    candidates = []
    for upper in KMM_BOUNDS:
        beta = KernelMeanMatching(upper_bound=upper, iterations=500).fit(xs, xt).weights_
        # Reweighted source together with the target training records (weight 1).
        candidates.append(least_squares(np.vstack([xs, xt]), np.r_[ys, yt], validation,
                                        np.r_[beta, np.ones(len(yt))]))
    return best_on_validation(candidates, validation)


def dm_fit(source, train, validation):
    """DM (Cortes & Mohri 2014, experiments/baselines/dm.py): source weights by
    smoothed-discrepancy Frank-Wolfe against the target training features, then
    weighted least squares on the ball; Lambda chosen on validation."""
    return best_on_validation(
        [DiscrepancyMinimization(radius=radius, iterations=300).fit(*source, train[0]).coef_
         for radius in DM_RADII], validation)


def cnvx_fit(source, train, validation, federations, iterations, warm_start):
    # CnvxAdap: PCnvxAdap without noise (simulation sites).
    model = PCnvxAdap(alpha=ALPHAS[0], epsilon=math.inf, delta=0.0, iterations=iterations,
                      step_scale=3.0, **BOUNDS)
    candidates = []
    for alpha, k2 in itertools.product(ALPHAS, K2S):
        federation = federations.make(*train, private=False, tag="cnvx")
        model.set_params(alpha=alpha, k2=k2).fit(federation, source, initial_weights=warm_start)
        candidates.append(model.coef_)
    return best_on_validation(candidates, validation)


@dataclass(frozen=True)
class RegressionSet:
    """One Table 1 row group: a source sample, a target pool, and how to split it."""

    name: str
    data: ShiftedRegression
    sizes: tuple[int, int, int]  # target train, validation, test
    fixed_test: bool  # the last ``test`` records of the pool, or re-drawn per split


def one_split(regression, split, federations, iterations):
    data, (n_train, n_val, n_test) = regression.data, regression.sizes
    rng = np.random.default_rng(1000 + split)
    if regression.fixed_test:
        pool = len(data.target_labels) - n_test
        order = np.r_[rng.permutation(pool)[:n_train + n_val], np.arange(pool, pool + n_test)]
    else:
        order = rng.permutation(len(data.target_labels))
    pick = lambda rows: (data.target_features[rows], data.target_labels[rows])  # noqa: E731
    train, validation = pick(order[:n_train]), pick(order[n_train:n_train + n_val])
    test = pick(order[n_train + n_val:n_train + n_val + n_test])
    source = (data.source_features, data.source_labels)
    fits = {
        "target-only": least_squares(*train, validation),
        "source-only": least_squares(*source, validation),
        "pooled": least_squares(np.vstack([source[0], train[0]]), np.r_[source[1], train[1]],
                                validation),
        "KMM": kmm_fit(source, train, validation),
        "DM": dm_fit(source, train, validation),
    }
    fits["CnvxAdap"] = cnvx_fit(source, train, validation, federations, iterations,
                                fits["source-only"])
    return {method: mse(w, *test) for method, w in fits.items()}


def regression_sets(quick: bool) -> list[RegressionSet]:
    num_source, synthetic_sizes = (200, (25, 25, 300)) if quick else (1000, (25, 25, 2000))
    synthetic = make_shifted_regression(num_source=num_source,
                                        num_target=2 * sum(synthetic_sizes), seed=0)
    return [RegressionSet("synthetic", synthetic, synthetic_sizes, fixed_test=True),
            RegressionSet("diabetes", load_diabetes_domains(), (60, 40, 107),
                          fixed_test=False)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", type=int, default=None, help="default 10 (--quick: 2)")
    parser.add_argument("--quick", action="store_true", help="tiny run (smoke test)")
    add_output_option(parser, RESULTS_DEFAULT)
    add_networked_flag(parser)
    add_runner_options(parser)
    args = parser.parse_args(argv)
    args.out = output_path(args.out, RESULTS_DEFAULT, args.quick)
    # Site daemons serve one unit at a time.
    runner = Runner(workers=1) if args.networked else runner_from(args)
    splits = args.splits or (2 if args.quick else 10)
    iterations = 60 if args.quick else 300
    started = time.perf_counter()
    sets = regression_sets(args.quick)
    for regression in sets:
        n_train, n_val, n_test = regression.sizes
        print(f"{regression.name}: source m={len(regression.data.source_labels)}, target "
              f"train n={n_train}, validation {n_val}, test {n_test}, "
              f"d={regression.data.source_features.shape[1]}")
    print(f"{splits} random splits; CnvxAdap {iterations} iterations")
    print("Model selection on the target validation split: non-private.")
    rows = []
    workdir = Path(tempfile.mkdtemp(prefix="privadapt-table1-"))
    with Federations(workdir, networked=args.networked) as federations:
        print(f"sites: {federations.description}", flush=True)
        for regression in sets:
            relative = {method: [] for method in METHODS}
            absolute = {method: [] for method in METHODS}
            each_split = runner.map(functools.partial(one_split, regression,
                                                      federations=federations,
                                                      iterations=iterations), range(splits))
            for split, errors in enumerate(each_split):
                for method in METHODS:
                    relative[method].append(errors[method] / errors["target-only"])
                    absolute[method].append(errors[method])
                print(f"  {regression.name} split {split + 1}/{splits}: " + ", ".join(
                    f"{m} {errors[m]:.5f}" for m in METHODS), flush=True)
            for method in METHODS:
                rel_mean, rel_std = mean_std(relative[method])
                abs_mean, _ = mean_std(absolute[method])
                rows.append([regression.name, method, rel_mean, rel_std, abs_mean, splits])
    header = ["dataset", "method", "relative_mse_mean", "relative_mse_std", "test_mse_mean",
              "splits"]
    print("\nTable 1 (relative MSE, target-only = 1.0; mean +- std over splits)")
    print_table(["dataset", "method", "relative MSE", "std", "test MSE"],
                [r[:5] for r in rows])
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(args.out / "table1.csv", header, rows)

    def draw(plt):
        width = 0.8 / len(sets)
        for k, regression in enumerate(sets):
            mine = [r for r in rows if r[0] == regression.name]
            plt.bar(np.arange(len(mine)) + k * width, [r[2] for r in mine], width,
                    yerr=[r[3] for r in mine], label=regression.name)
        plt.xticks(np.arange(len(METHODS)) + width / 2, METHODS, fontsize=7)
        plt.axhline(1.0, linestyle="--", color="grey")
        plt.ylabel("relative MSE (target-only = 1)")
        plt.legend()

    maybe_png(args.out / "table1.png", draw)
    print(f"Done in {time.perf_counter() - started:.1f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
