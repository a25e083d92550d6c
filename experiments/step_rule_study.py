"""Does a public, data-independent step rule beat the
adapters' default (the noise-aware w step with D = Lambda / 4 from the warm
start) on every row of experiments/adapter_study.py without losing on any?

Rules compared (declared before the run; each reads only public values: n,
which the kernel already treats as public under replace-one, epsilon,
delta, d and the model radius Lambda):

* ``default``: ``step_sizes="noise_aware"``, D = Lambda / 4 (the adapters'
  default before this study);
* ``smooth``: ``"noise_aware_smooth"`` (the cap without the Lipschitz G^2
  term), D = Lambda / 4;
* ``switch``: the smooth step where the noise is small, the default
  elsewhere. "Small" is the adapters' own public yardstick: the iteration
  rule's T ~ epsilon n / sqrt(d log(1/delta)) reaches its cap of 200
  (noise_aware_plan.auto_iterations), i.e. rho = epsilon n / (200 sqrt(d
  log(1/delta))) >= 1. It won (no row lost, large gains at rho >= 1) and is
  now the adapters' default, ``step_sizes="auto"``
  (``noise_aware_plan.auto_step_rule``), which this rule runs;
* ``D ~ n eps``: the default step with D = Lambda / 4 * min(4, max(1, rho)):
  the allowed travel grows from Lambda / 4 to the paper's Lambda as the
  noise shrinks.

Every run is the adapter's default plan otherwise (``after`` in the study:
warm start, auto T, auto clip radius, no u-noise, average iterate), one job
at (epsilon, 1e-5), the same noise seed for every rule (paired). Writes
``experiments/results/step_rules.csv``.

Run from the repository root:
    .venv/bin/python -m experiments.step_rule_study [--splits 3] [--tasks ...]
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from experiments.adapter_study import (
    BEFORE,
    DELTA,
    EPSILONS,
    RAM_DIRECTORY,
    adapter,
    federation,
    study_tasks,
)
from experiments.grid import add_runner_options, runner_from
from experiments.seed000.reporting import mean_std, print_table, write_csv
from experiments.selection import Task, metric, split_records
from privadapt.server.algorithms.public_erm import fit_linear
from privadapt.server.algorithms.reweighting.noise_aware_plan import (
    MAX_ITERATIONS,
    WARM_DISTANCE_FRACTION,
    iteration_demand,
)

RULES = ("default", "smooth", "switch", "D ~ n eps")


def noise_ratio(epsilon: float, size: int, dim: int) -> float:
    """rho = epsilon n / (T_max sqrt(d log(1/delta))): 1 where the iteration
    rule's T reaches its cap (public values only)."""
    return iteration_demand(epsilon, DELTA, size, dim) / MAX_ITERATIONS


def rule_options(rule: str, epsilon: float, size: int, dim: int, radius: float) -> dict:
    """The adapter options of ``rule`` at this (epsilon, n, d, Lambda)."""
    if rule == "smooth":
        return {"step_sizes": "noise_aware_smooth"}
    if rule == "switch":
        return {"step_sizes": "auto"}
    options = {"step_sizes": "noise_aware"}
    if rule == "D ~ n eps":
        rho = noise_ratio(epsilon, size, dim)
        options["step_distance"] = radius * WARM_DISTANCE_FRACTION * min(4.0, max(1.0, rho))
    return options


def one_split(task: Task, size: int, split: int, warm: np.ndarray) -> dict:
    private, test = split_records(task, size, split)
    results = {("source-only", eps): metric(task, warm, test) for eps in EPSILONS}
    with federation(*private, task.num_sites, split, private=False) as sites:
        exact = adapter(task, math.inf, split, BEFORE).fit(sites, task.source,
                                                           initial_weights=warm)
    dim = private[0].shape[1]
    for eps in EPSILONS:
        results["non-private (reference)", eps] = metric(task, exact.coef_, test)
        seed = 100 * split + int(eps)
        for rule in RULES:
            radius = adapter(task, eps, seed, {}).get_params()["radius"]
            options = {"iterations": "auto", **rule_options(rule, eps, size, dim, radius)}
            with federation(*private, task.num_sites, seed + 1, private=True) as sites:
                model = adapter(task, eps, seed, options).fit(sites, task.source)
            results[rule, eps] = metric(task, model.coef_, test)
    return results


def summarise(task: Task, size: int, runs: list[dict]) -> list[list]:
    """Per (rule, epsilon): mean, std, and the paired change against the
    default (positive: better), mean and standard error over splits."""
    sign = 1.0 if task.loss == "logistic" else -1.0  # accuracy up, MSE down
    rows = []
    dim_rho = {eps: noise_ratio(eps, size, task.pool[0].shape[1]) for eps in EPSILONS}
    for method in ("source-only", "non-private (reference)", *RULES):
        for eps in EPSILONS:
            mean, std = mean_std([run[method, eps] for run in runs])
            change = np.array([sign * (run[method, eps] - run["default", eps]) for run in runs])
            error = float(change.std(ddof=1) / math.sqrt(len(change))) if len(runs) > 1 \
                else math.nan
            rows.append([task.name, size, method, eps, round(dim_rho[eps], 3), mean, std,
                         float(change.mean()), error, len(runs)])
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", type=int, default=3)
    parser.add_argument("--quick", action="store_true",
                        help="2 splits of the two small regressions, short runs")
    parser.add_argument("--tasks", default=None,
                        help="comma-separated name@n of the tasks to run (default: all)")
    parser.add_argument("--tag", default="", help="appended to the CSV name")
    parser.add_argument("--out", type=Path, default=Path("experiments/results"))
    add_runner_options(parser)
    args = parser.parse_args(argv)
    runner = runner_from(args)
    if RAM_DIRECTORY.is_dir():
        tempfile.tempdir = str(RAM_DIRECTORY)  # the ledgers' commits (adapter_study.py)
    splits = 2 if args.quick else args.splits
    chosen = None if args.tasks is None else set(args.tasks.split(","))
    started = time.perf_counter()
    rows = []
    for task, size in study_tasks(args.quick):
        if chosen is not None and f"{task.name}@{size}" not in chosen:
            continue
        print(f"{task.name}: n={size}, {splits} splits", flush=True)
        task = replace(task, private_size=size)
        warm = fit_linear(*task.source, task.loss, task.radius)
        runs = list(runner.map(functools.partial(one_split, task, size, warm=warm),
                               range(splits)))
        rows.extend(summarise(task, size, runs))
        print(f"  done ({time.perf_counter() - started:.0f} s)", flush=True)
    header = ["dataset", "n", "rule", "epsilon", "rho", "mean", "std",
              "paired gain over default", "its std error", "splits"]
    print("\nMetric: test accuracy (adult) or test MSE (regressions); gain: how much better "
          "than the default rule on the same split and noise (accuracy up, MSE down)")
    print_table(header, rows)
    stem = ("step_rules_quick" if args.quick else "step_rules") + args.tag
    write_csv(args.out / f"{stem}.csv",
              ["dataset", "n", "rule", "epsilon", "rho", "metric_mean", "metric_std",
               "paired_gain_over_default", "gain_std_error", "splits"], rows)
    print(f"Done in {time.perf_counter() - started:.1f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
