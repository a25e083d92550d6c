"""Seed 000, Figure 1 style: PCnvxAdap test MSE against the target sample size n
for epsilon in {0.5, 1, 5, 10, 15}, delta = 0.01, with the noise-free CnvxAdap
line, the DP target-only noisy projected GD line (Figure 2's comparator) and the
DP target-only noisy minibatch SGD line of the paper's Figure 1 (Bassily et al.
2019; Poisson batches of n/10 drawn by the sites, add/remove adjacency), all at
the same epsilons.

Data: the synthetic covariate-shift regression of ``synthetic.py`` (the paper
uses Gas, which is not shipped). The private target training sample of size n
is drawn **with replacement** from a target training pool (as the paper does to
reach large n); the target test set is fixed. Privacy noise comes only from the
in-process sites; each private run's epsilon is read back from the sites' own
ledgers (``ledger_epsilon`` column, the largest over sites).

Defaults are smaller than the paper (n from 1,000 to 32,000 rather than 5,000 to
35,000; 5 runs rather than 10; T = 200 iterations) so the script finishes in a few minutes on
2 cores. Hyperparameters are fixed (alpha = 0.3, k2 = 0, step_scale 3, warm
start at the public source-only fit; noisy GD: eta = 1, clip 2, T = 200),
chosen by hand, not tuned per epsilon.

Run from the repository root:
    .venv/bin/python -m experiments.seed000.figure1 [--runs 5] [--quick] [--epsilons 0.5 1]
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
from experiments.seed000.synthetic import make_shifted_regression
from privadapt import NoisyGD, NoisySGD, PCnvxAdap
from privadapt.common.mechanisms import Adjacency
from privadapt.server.algorithms.public_erm import fit_linear

RESULTS_DEFAULT = Path("experiments/seed000/results")

EPSILONS = (0.5, 1.0, 5.0, 10.0, 15.0)
DELTA = 0.01
BOUNDS = {"feature_norm": 1.0, "label_bound": 1.0, "radius": 5.0}
ALPHA = 0.3
NOISY_GD = {"learning_rate": 1.0, "radius": 5.0, "clip_norm": 2.0}
# Noisy minibatch SGD (Bassily et al. 2019): expected batch n/10 by Poisson
# sampling at the sites, add/remove adjacency (what sampled accounting supports),
# 5% of epsilon on a noisy count of n; same step, ball and clip as noisy GD.
SGD_BATCH_FRACTION = 0.1


def mse(weights, test):
    return float(np.mean((test[0] @ weights - test[1]) ** 2))


def ledger_epsilon(model) -> float:
    return max(spent.job.epsilon for spent in model.privacy_.values())


def sampled_cell(cell: tuple, pool, source, test, federations, iterations, weight_noise):
    """``run_cell`` of one (n, method, epsilon, run): its n target records drawn
    with replacement from ``pool`` by ``run``, its noise seeded by ``run``."""
    n, method, epsilon, run = cell
    rng = np.random.default_rng(10_000 * run + n)
    rows_drawn = rng.integers(0, len(pool[1]), size=n)
    train = (pool[0][rows_drawn], pool[1][rows_drawn])
    return run_cell(method, epsilon, train, source, test, federations, iterations,
                    weight_noise, seed=run + 1)


def run_cell(method, epsilon, train, source, test, federations, iterations, weight_noise, seed):
    """One (method, epsilon, sample) run: (test MSE, ledger epsilon)."""
    private = math.isfinite(epsilon)
    sgd = method == "noisy SGD (target only)"
    federation = federations.make(*train, private=private, noise_seed=seed, tag=method,
                                  adjacency=Adjacency.ADD_REMOVE_ONE if sgd
                                  else Adjacency.REPLACE_ONE)
    if sgd:
        batch = max(1, round(SGD_BATCH_FRACTION * len(train[1])))
        model = NoisySGD(loss="squared", epsilon=epsilon, delta=DELTA, iterations=iterations,
                         expected_batch_size=batch, **NOISY_GD).fit(federation)
    elif method == "noisy GD (target only)":
        model = NoisyGD(loss="squared", epsilon=epsilon, delta=DELTA, iterations=iterations,
                        **NOISY_GD).fit(federation)
    else:
        warm = fit_linear(*source, "squared", BOUNDS["radius"])
        model = PCnvxAdap(alpha=ALPHA, epsilon=epsilon, delta=DELTA, iterations=iterations,
                          step_scale=3.0, weight_noise=weight_noise, **BOUNDS)
        model.fit(federation, source, initial_weights=warm)
    weights = model.average_coef_ if sgd else model.coef_  # SGD: the average iterate
    return mse(weights, test), ledger_epsilon(model) if private else math.inf


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--sizes", type=int, nargs="+",
                        default=[1000, 2000, 4000, 8000, 16000, 32000])
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--epsilons", type=float, nargs="+", default=list(EPSILONS),
                        help="the private lines' epsilons (noisy SGD's calibration is the "
                             "slow part, and slower the larger epsilon is)")
    parser.add_argument("--no-weight-noise", action="store_true",
                        help="PCnvxAdap without the paper's u-noise (cnvx_adap.py docstring)")
    parser.add_argument("--quick", action="store_true", help="tiny run (smoke test)")
    add_output_option(parser, RESULTS_DEFAULT)
    add_networked_flag(parser)
    add_runner_options(parser)
    args = parser.parse_args(argv)
    args.out = output_path(args.out, RESULTS_DEFAULT, args.quick)
    # Site daemons serve one unit at a time.
    runner = Runner(workers=1) if args.networked else runner_from(args)
    runs, sizes, iterations = (1, [200, 800], 20) if args.quick else (
        args.runs, args.sizes, args.iterations)
    weight_noise = not args.no_weight_noise
    started = time.perf_counter()
    data = make_shifted_regression(num_source=1000, num_target=4000, seed=0)
    pool = (data.target_features[:2000], data.target_labels[:2000])
    test = (data.target_features[2000:], data.target_labels[2000:])
    source = (data.source_features, data.source_labels)
    print(f"Synthetic regression: source m=1000, target pool 2000 (resampled with "
          f"replacement to n), test 2000; delta={DELTA}; T={iterations}; runs={runs}; "
          f"PCnvxAdap weight_noise={weight_noise}; MSE of the true regressor "
          f"{mse(data.target_weights, test):.5f}")
    workdir = Path(tempfile.mkdtemp(prefix="privadapt-figure1-"))
    lines = [("CnvxAdap", math.inf)] + [
        (method, e) for method in ("PCnvxAdap", "noisy GD (target only)",
                                   "noisy SGD (target only)") for e in args.epsilons]
    rows = []
    with Federations(workdir, networked=args.networked) as federations:
        print(f"sites: {federations.description}", flush=True)
        for n in sizes:
            cells = runner.map(functools.partial(
                sampled_cell, pool=pool, source=source, test=test, federations=federations,
                iterations=iterations, weight_noise=weight_noise),
                [(n, method, epsilon, run) for method, epsilon in lines for run in range(runs)])
            for method, epsilon in lines:
                errors, spent = [], []
                for _ in range(runs):
                    error, eps_spent = next(cells)
                    errors.append(error)
                    spent.append(eps_spent)
                mean, std = mean_std(errors)
                rows.append([n, method, epsilon, mean, std, max(spent), runs])
            print(f"  n={n} done ({time.perf_counter() - started:.0f} s)", flush=True)
    header = ["n", "method", "epsilon", "test_mse_mean", "test_mse_std", "ledger_epsilon",
              "runs"]
    print("\nFigure 1 (target test MSE; mean +- std over runs)")
    print_table(["n", "method", "epsilon", "MSE", "std", "ledger eps"],
                [[r[0], r[1], f"{r[2]:g}", r[3], r[4], f"{r[5]:.3f}"] for r in rows])
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(args.out / "figure1.csv", header, rows)

    def draw(plt):
        for method, epsilon in lines:
            points = [(r[0], r[3]) for r in rows if r[1] == method and r[2] == epsilon]
            style = "--" if method == "CnvxAdap" else (
                "-." if "GD" in method else (":" if "SGD" in method else "-"))
            plt.plot(*zip(*points, strict=True), style, label=f"{method} eps={epsilon:g}")
        plt.xlabel("target sample n")
        plt.ylabel("test MSE")
        plt.legend(fontsize=6)

    maybe_png(args.out / "figure1.png", draw)
    print(f"Done in {time.perf_counter() - started:.1f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
