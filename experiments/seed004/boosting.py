"""Seed 004's confidence boosting across sites and output perturbation, on the
project's shifts, against source-only and target-only
noisy GD at epsilon 1, 3 and 10 over repeated splits (mean +- std).

Methods (every private one a single job at (epsilon, 1e-5) per site):

* ``source-only``: the ball-constrained ERM on the public source (free);
* ``noisy GD``: target-only noisy GD on every site's records (the task's
  settings, experiments/selection.py);
* ``boost: noisy GD``: :class:`ConfidenceBoosting`, one noisy-GD model per
  site on its own train part, the source-only model as candidate 0, one
  private selection on every site's validation part;
* ``boost: output pert.``: the same with output perturbation as the per-site
  learner;
* ``output pert. (avg)``: :class:`OutputPerturbation`, every site's noisy
  regularised ERM averaged by size;
* ``target-only (non-private)``: noise-free GD on the private records, a
  reference only.

Output perturbation's lambda is its public rule (``regularization="auto"``,
server/algorithms/output_perturbation/perturbed_erm.py: lambda^3 = 8 n beta_l d z^2 G^2 / R^2,
the regulariser's bias against the noise's smoothness cost), not tuned on the
target; its clip region is the task's (||x|| <= the noisy-GD clip for the
logistic loss, 1 for the regressions, |y| <= 1). The tasks, splits and settings are
experiments/adapter_study.py's (``study_tasks``), read, not changed.

Run from the repository root:
    .venv/bin/python -m experiments.seed004.boosting [--splits 3] [--quick]
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

from experiments.adapter_study import RAM_DIRECTORY, federation, study_tasks
from experiments.grid import add_runner_options, runner_from
from experiments.seed000.reporting import maybe_png, mean_std, print_table, write_csv
from experiments.selection import Task, metric, split_records
from privadapt import NoisyGD
from privadapt.server.algorithms.model_selection.confidence_boosting import ConfidenceBoosting
from privadapt.server.algorithms.output_perturbation.estimators import OutputPerturbation
from privadapt.server.algorithms.public_erm import fit_linear

EPSILONS = (1.0, 3.0, 10.0)
DELTA = 1e-5
METHODS = ("source-only", "noisy GD", "boost: noisy GD", "boost: output pert.",
           "output pert. (avg)", "target-only (non-private)")
RESULTS = Path(__file__).resolve().parent / "results"


def output_perturbation_settings(task: Task) -> dict:
    """The task's clip region; lambda by the estimator's public rule ("auto")."""
    clip = task.noisy_gd["clip_norm"] if task.loss == "logistic" else 1.0
    return {"regularization": "auto", "clip_norm": clip, "label_bound": 1.0}


def run_methods(task: Task, private, test, epsilon: float, seed: int,
                source_only: np.ndarray) -> dict[str, float]:
    op = output_perturbation_settings(task)
    gd = {"loss": task.loss, "iterations": task.iterations, **task.noisy_gd}
    results = {}
    with federation(*private, task.num_sites, seed, private=True) as sites:
        model = NoisyGD(epsilon=epsilon, delta=DELTA, **gd).fit(sites)
    results["noisy GD"] = metric(task, model.coef_, test)
    for name, learner in (
            # The paper's learner: noisy GD from zero (no ball around source-only),
            # and its selection among the sites' models.
            ("boost: noisy GD", {"learner": "noisy_gd", "clip_norm": task.noisy_gd["clip_norm"],
                                 "radius_factor": None, "selection_score": "loss",
                                 "combine": "select"}),
            ("boost: output pert.", {"learner": "output_perturbation", "selection_score": "loss",
                                     "combine": "select", **op})):
        with federation(*private, task.num_sites, seed + 1, private=True) as sites:
            boosted = ConfidenceBoosting(
                loss=task.loss, radius=task.radius, epsilon=epsilon, delta=DELTA,
                learning_rate=task.noisy_gd["learning_rate"], iterations=task.iterations,
                **learner).fit(sites, task.source, source_only=source_only)
        results[name] = metric(task, boosted.coef_, test)
    with federation(*private, task.num_sites, seed + 2, private=True) as sites:
        averaged = OutputPerturbation(loss=task.loss, radius=task.radius, epsilon=epsilon,
                                      delta=DELTA, **op).fit(sites)
    results["output pert. (avg)"] = metric(task, averaged.coef_, test)
    return results


def one_split(task: Task, size: int, split: int, source_only: np.ndarray) -> dict:
    private, test = split_records(task, size, split)
    runs = {("source-only", eps): metric(task, source_only, test) for eps in EPSILONS}
    with federation(*private, task.num_sites, split, private=False) as sites:
        exact = NoisyGD(loss=task.loss, epsilon=math.inf, delta=0.0,
                        iterations=task.iterations, **task.noisy_gd).fit(sites)
    for eps in EPSILONS:
        runs["target-only (non-private)", eps] = metric(task, exact.coef_, test)
        seed = 100 * split + int(eps)
        for name, value in run_methods(task, private, test, eps, seed, source_only).items():
            runs[name, eps] = value
    return runs


def summarise(task: Task, size: int, runs: list[dict]) -> list[list]:
    rows = []
    sign = 1.0 if task.loss == "logistic" else -1.0  # accuracy up, MSE down
    for method in METHODS:
        for eps in EPSILONS:
            mean, std = mean_std([run[method, eps] for run in runs])
            shortfalls = [sign * (run["source-only", eps] - run[method, eps])
                          / run["source-only", eps] for run in runs]
            rows.append([task.name, size, method, eps, mean, std,
                         100 * float(np.percentile(shortfalls, 90)), len(runs)])
    return rows


def draw(rows: list[list]):
    def plot(pyplot) -> None:
        tasks = list(dict.fromkeys((r[0], r[1]) for r in rows))
        for k, (name, size) in enumerate(tasks):
            pyplot.subplot(1, len(tasks), k + 1)
            for method in METHODS:
                points = [(r[3], r[4]) for r in rows
                          if (r[0], r[1], r[2]) == (name, size, method)]
                pyplot.plot(*zip(*points, strict=True), marker="o", label=method)
            pyplot.xscale("log")
            pyplot.title(f"{name}, n={size}", fontsize=7)
            pyplot.xlabel("epsilon")
        pyplot.legend(fontsize=5)
    return plot


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", type=int, default=3)
    parser.add_argument("--quick", action="store_true",
                        help="2 splits of the two small regressions, short runs")
    parser.add_argument("--tasks", default=None,
                        help="comma-separated name@n of the tasks to run (default: all)")
    parser.add_argument("--tag", default="", help="appended to the CSV/PNG names")
    parser.add_argument("--out", type=Path, default=RESULTS)
    add_runner_options(parser)
    args = parser.parse_args(argv)
    runner = runner_from(args)
    if RAM_DIRECTORY.is_dir():
        tempfile.tempdir = str(RAM_DIRECTORY)  # the ledgers' commits (adapter_study.py)
    splits = 2 if args.quick else args.splits
    started = time.perf_counter()
    rows = []
    chosen = None if args.tasks is None else set(args.tasks.split(","))
    for task, size in study_tasks(args.quick):
        if chosen is not None and f"{task.name}@{size}" not in chosen:
            continue
        print(f"{task.name}: n={size} over {task.num_sites} sites, {splits} splits",
              flush=True)
        task = replace(task, private_size=size)
        source_only = fit_linear(*task.source, task.loss, task.radius)
        runs = list(runner.map(functools.partial(one_split, task, size,
                                                 source_only=source_only), range(splits)))
        rows.extend(summarise(task, size, runs))
        print(f"  done ({time.perf_counter() - started:.0f} s)", flush=True)
    print("\nMetric: test accuracy (adult) or test MSE (regressions), mean +- std over "
          "splits; p90 shortfall: 90th percentile over splits of the relative loss to "
          "source-only (positive: worse)")
    header = ["dataset", "n", "method", "epsilon", "mean", "std", "p90 shortfall %", "splits"]
    print_table(header, rows)
    stem = ("boosting_quick" if args.quick else "boosting") + args.tag
    write_csv(args.out / f"{stem}.csv", ["dataset", "n", "method", "epsilon", "metric_mean",
                                         "metric_std", "p90_shortfall_percent", "splits"], rows)
    maybe_png(args.out / f"{stem}.png", draw(rows))
    print(f"Done in {time.perf_counter() - started:.1f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
