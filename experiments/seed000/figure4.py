"""Seed 000, Figure 4 style on UCI Adult: PNCnvxAdap target test accuracy
against the target sample size n for several epsilon, with the non-private
NCnvxAdap line (dashed in the paper) and the train-source / train-target
(non-private) levels for reference.

Data as ``table4.py`` (source = men, target = women, test = the women of
adult.test). Per run, a validation sample of 1000 women is held out and the
private target training sample of size n is drawn **with replacement** from the
remaining women (as the paper does to reach n up to 50,000). alpha is chosen per
(n, run) by NCnvxAdap's validation accuracy (**non-private** selection) and
reused by PNCnvxAdap, whose (epsilon, delta) covers the training run only; the
other hyperparameters are table4.py's. Each private run's epsilon is read back
from the sites' ledgers.

Run from the repository root:
    .venv/bin/python -m experiments.seed000.figure4 [--runs 3] [--quick] [--networked]
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from experiments.grid import Runner, add_runner_options, runner_from
from experiments.seed000.federation import Federations, add_networked_flag
from experiments.seed000.reporting import (
    add_output_option,
    maybe_png,
    mean_std,
    output_path,
    print_table,
    write_csv,
)
from experiments.seed000.table4 import ALPHAS, RADIUS, adapt
from privadapt.common.data.datasets.adult import load_adult_domains
from privadapt.server.algorithms.public_erm import accuracy, fit_linear

RESULTS_DEFAULT = Path("experiments/seed000/results")

EPSILONS = (1.0, 5.0, 10.0, 15.0)
SIZES = (1000, 2000, 5000, 10000, 20000, 50000)
VALIDATION = 1000


def one_run(domains, n, run, federations, iterations):
    """Accuracy of every line at one (n, run): {(method, epsilon): (acc, ledger eps)}."""
    rng = np.random.default_rng(4000 + 97 * run + n)
    pool = domains.target_sites[0]
    order = rng.permutation(pool.num_records)
    validation = (pool.features[order[:VALIDATION]], pool.labels[order[:VALIDATION]])
    drawn = rng.choice(order[VALIDATION:], size=n, replace=True)
    train = (pool.features[drawn], pool.labels[drawn])
    test = (domains.target_test.features, domains.target_test.labels)
    source = (domains.source.features, domains.source.labels)
    warm = fit_linear(*source, "logistic", RADIUS)
    results = {("train source", math.inf): (accuracy(warm, *test), math.nan),
               ("train target (non-private)", math.inf): (
                   accuracy(fit_linear(*train, "logistic", RADIUS), *test), math.nan)}
    fits = {alpha: adapt(source, train, federations, alpha, math.inf, iterations, warm,
                         run + 1)[0] for alpha in ALPHAS}
    alpha = max(ALPHAS, key=lambda a: accuracy(fits[a], *validation))
    results[("NCnvxAdap", math.inf)] = (accuracy(fits[alpha], *test), math.nan)
    for epsilon in EPSILONS:
        weights, spent = adapt(source, train, federations, alpha, epsilon, iterations, warm,
                               run + 1)
        results[("PNCnvxAdap", epsilon)] = (accuracy(weights, *test), spent)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="tiny run (smoke test)")
    add_output_option(parser, RESULTS_DEFAULT)
    add_networked_flag(parser)
    add_runner_options(parser)
    args = parser.parse_args(argv)
    args.out = output_path(args.out, RESULTS_DEFAULT, args.quick)
    # Site daemons serve one unit at a time.
    runner = Runner(workers=1) if args.networked else runner_from(args)
    runs, sizes, iterations = (1, [300, 1200], 10) if args.quick else (
        args.runs, args.sizes, args.iterations)
    if runs < 1 or min(sizes) < 1 or iterations < 1:
        parser.error("--runs, --sizes and --iterations must be >= 1")
    started = time.perf_counter()
    domains = load_adult_domains(num_sites=1, seed=0)
    print(f"UCI Adult: source (men) {domains.source.num_records}; target train n in {sizes} "
          f"drawn with replacement (3 sites), validation {VALIDATION}, test "
          f"{domains.target_test.num_records} women; T={iterations}; runs={runs}")
    print("alpha selected on the target validation sample by NCnvxAdap: non-private.")
    collected: dict[tuple[int, str, float], list[tuple[float, float]]] = {}
    workdir = Path(tempfile.mkdtemp(prefix="privadapt-figure4-"))
    with Federations(workdir, networked=args.networked) as federations:
        print(f"sites: {federations.description}", flush=True)
        for n in sizes:
            for results in runner.map(functools.partial(one_run, domains, n,
                                                        federations=federations,
                                                        iterations=iterations), range(runs)):
                for (method, epsilon), value in results.items():
                    collected.setdefault((n, method, epsilon), []).append(value)
            print(f"  n={n} done ({time.perf_counter() - started:.0f} s)", flush=True)
    rows = []
    for (n, method, epsilon), values in collected.items():
        mean, std = mean_std([a for a, _ in values])
        spent = max(s for _, s in values)
        rows.append([n, method, epsilon, 100 * mean, 100 * std, spent, runs])
    print("\nFigure 4 (target test accuracy %, mean +- std over runs)")
    print_table(["n", "method", "epsilon", "accuracy %", "std", "ledger eps"],
                [[r[0], r[1], f"{r[2]:g}", r[3], r[4],
                  "-" if math.isnan(r[5]) else f"{r[5]:.3f}"] for r in rows])
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(args.out / "figure4.csv", ["n", "method", "epsilon", "accuracy_mean_percent",
                                         "accuracy_std_percent", "ledger_epsilon", "runs"],
              rows)

    def draw(plt):
        lines = sorted({(r[1], r[2]) for r in rows}, key=lambda line: (line[0], line[1]))
        for method, epsilon in lines:
            points = [(r[0], r[3]) for r in rows if (r[1], r[2]) == (method, epsilon)]
            label = method if math.isinf(epsilon) else f"{method} eps={epsilon:g}"
            style = "-" if method == "PNCnvxAdap" else ("--" if method == "NCnvxAdap" else ":")
            plt.plot(*zip(*points, strict=True), style, marker="o", markersize=3, label=label)
        plt.xscale("log")
        plt.xlabel("target sample n")
        plt.ylabel("target test accuracy %")
        plt.legend(fontsize=6)

    maybe_png(args.out / "figure4.png", draw)
    print(f"Done in {time.perf_counter() - started:.1f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
