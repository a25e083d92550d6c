"""Why PCnvxAdap / PNCnvxAdap stayed far from their
non-private versions, and what each lever of the iteration plan does.

For each shift, private size n, epsilon in {1, 3, 10} and repeated splits
(mean +- std), the table compares

* ``source-only``: the public source's own fit (free);
* ``noisy GD``: target-only noisy projected GD (experiments/selection.py's settings);
* ``non-private``: CnvxAdap / NCnvxAdap (epsilon = inf) with the seed's plan
  (curvature steps, T = the task's iterations), warm-started at source-only;
* ``before``: the private adapter with the previous defaults (curvature steps,
  T = the task's iterations, the u-noise of Alg. 1 line 10, Alg. 2's random
  iterate, the sites clipping at the whole ball's G), warm-started as the
  experiments did;
* ``+ <lever>``: ``before`` with one lever changed (each alone);
* ``after``: the new defaults (all levers; ``PCnvxAdap(...)`` as constructed
  with no plan arguments);
* ``after, smooth step``: ``after`` with ``step_sizes="noise_aware_smooth"``
  (the noise-aware cap without the Lipschitz G^2 term, which keeps the
  default's step at D / (G sqrt(T)) whatever epsilon is);
* ``selected (private)``: ``SelectedAdaptation``, one
  job at (epsilon, 1e-5) in all: each site splits its private records into a
  training and a validation record part by a content hash
  (``VALIDATION_FRACTION``; common/data/record_parts.py), noisy GD and
  the task's adapter with the smooth step trained on the training parts, the
  free public constant (majority / mean label) a candidate where the source
  has an intercept, and the free source-only model kept unless one beats it on one private
  release of the clipped validation losses by the baseline margin; its steps'
  budgets jointly calibrated so that each site's ledger spends the job's whole
  epsilon (``composition="pld"``; ``--composition basic``: the earlier split
  by basic composition, which left about 43% of epsilon 1 unspent);
* ``oracle (non-private)``: the same job's candidates, chosen by their
  noise-free clipped validation loss (reads the validation records directly:
  what the private selection approximates, not something a site would allow);
* with ``--grid``: ``selected, grid (private)`` and ``oracle, grid
  (non-private)``, the same job with the grid's private candidates instead
  of noisy GD and the smooth adapter (``ADAPTER`` in the grid stands for the
  task's adapter, ``pncnvx_adap`` or ``pcnvx_adap``), beside the selection
  without it, into ``adapter_study_selection_grid.csv``.

Every lever is a public rule (n, epsilon, delta, d, the clip region, the public
source) and changes neither kernel nor mechanism; the ledger charges each
run what its plan releases, and every private run here spends its (epsilon,
1e-5) exactly. No hyperparameter is tuned on the target here (the task
settings are experiments/selection.py's, fixed by hand). One caveat, said in
docs/papers/supervised-adaptation.md: the constant D = Lambda / 4 of the noise-aware step was picked
while looking at these same shifts, so this table is not a held-out test of it.

Datasets (experiments/selection.py's loaders): UCI Adult men -> women
(logistic, PNCnvxAdap; test: women of adult.test), scikit-learn's diabetes
sex 1 -> sex 2 (squared, PCnvxAdap; n = 100 of its 207 target records, the
rest is the test), the synthetic concept-shift regression (PCnvxAdap), and
(full run only) the demo's Adult split ``marital-not-married`` (PNCnvxAdap with
the settings of the men -> women task; n = 3000 of its target records over 3
sites; test: its target rows of adult.test), where source-only is worse than
the majority label and the warm start is far from the target's optimum.

Run from the repository root:
    .venv/bin/python -m experiments.adapter_study [--splits 5] [--quick | --selection]
        [--selected-only] [--composition pld|basic] [--tasks "adult men->women@2000,..."]
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

from experiments.grid import add_runner_options, runner_from
from experiments.seed000.diabetes import load_diabetes_domains
from experiments.seed000.reporting import mean_std, print_table, write_csv
from experiments.seed000.synthetic import make_shifted_regression
from experiments.selection import Task, adult_task, metric, regression_task, split_records
from privadapt import Dataset, LocalFederation, NoisyGD, load_adult_domains
from privadapt.common.data.datasets.adult import DEMO_SPLIT
from privadapt.common.data.record_parts import VALIDATION, RecordPart, RecordSplitter
from privadapt.common.losses import loss_values
from privadapt.server.algorithms.model_selection.selected_adaptation import SelectedAdaptation
from privadapt.server.algorithms.public_erm import fit_linear

EPSILONS = (1.0, 3.0, 10.0)
DELTA = 1e-5
# The previous defaults, spelt out (``before``), and each lever alone.
BEFORE = {"step_sizes": "curvature", "weight_noise": True, "clip_radius": None,
          "return_average": False}
LEVERS = {
    "+ averaging": {"return_average": True},
    "+ no u-noise": {"weight_noise": False},
    "+ clip radius": {"clip_radius": "auto"},
    "+ auto T": {"iterations": "auto"},
    "+ noise-aware step": {"step_sizes": "noise_aware"},
}
SMOOTH = "after, smooth step"
SELECTED = "selected (private)"
ORACLE = "oracle (non-private)"
SELECTED_GRID = "selected, grid (private)"
ORACLE_GRID = "oracle, grid (non-private)"
#: In a --grid, the task's adapter (PNCnvxAdap for logistic, PCnvxAdap for squared).
ADAPTER = "ADAPTER"
METHODS = ("source-only", "noisy GD", "non-private", "before", *LEVERS, "after", SMOOTH,
           SELECTED, ORACLE)
RAM_DIRECTORY = Path("/dev/shm")
VALIDATION_FRACTION = 0.25  # of each site's private records: the selection's part


def site_datasets(features: np.ndarray, labels: np.ndarray, parts: int) -> list[Dataset]:
    names = tuple(f"x{i}" for i in range(features.shape[1]))
    return [Dataset(features[rows], labels[rows], names)
            for rows in np.array_split(np.arange(len(labels)), parts)]


def federation(features: np.ndarray, labels: np.ndarray, parts: int, seed: int,
               private: bool) -> LocalFederation:
    """``parts`` simulation sites; ``private=False`` allows the noise-free runs."""
    data = site_datasets(features, labels, parts)
    caps = {"epsilon_cap": 100.0, "delta_cap": 0.05} if private else \
        {"epsilon_cap": math.inf, "delta_cap": 0.5, "allow_non_private": True}
    return LocalFederation.from_datasets(data, noise_seed=seed, **caps)


def adapter(task: Task, epsilon: float, seed: int, options: dict):
    """The task's adapter with ``options`` over the new defaults; the PCnvxAdap
    tasks have no ``return_average`` (Alg. 1 always averages)."""
    model = task.adapter(epsilon=epsilon, delta=0.0 if math.isinf(epsilon) else DELTA,
                         iterations=task.iterations, seed=seed)
    valid = set(model.get_params())
    model.set_params(**{k: v for k, v in options.items() if k in valid})
    if "iterations" not in options:  # "after" keeps its own default plan
        model.set_params(iterations=task.iterations)
    return model


def selection_settings(task: Task, epsilon: float, seed: int,
                       selection_share: float | None = None,
                       composition: str | None = None, grid: str | None = None) -> dict:
    """SelectedAdaptation's hyperparameters for ``task``: its noisy GD and
    adapter settings (read off the task's own adapter), candidates noisy GD
    and the adapter with the smooth step, or ``grid`` (a candidate list,
    ``ADAPTER`` standing for the task's adapter); ``selection_share`` and
    ``composition`` None: the estimator's defaults."""
    adapter = task.adapter(epsilon=epsilon, delta=DELTA, iterations=task.iterations, seed=seed)
    params = adapter.get_params()
    base = "pncnvx_adap" if "l1" in params else "pcnvx_adap"
    name = f"{base}_smooth"
    candidates = f"noisy_gd,{name}" if grid is None else grid.replace(ADAPTER, base)
    return {"loss": task.loss, "radius": task.radius, "epsilon": epsilon, "delta": DELTA,
            "clip_norm": task.noisy_gd["clip_norm"],
            "learning_rate": task.noisy_gd["learning_rate"], "iterations": task.iterations,
            "feature_norm": params["feature_norm"], "label_bound": params["label_bound"],
            "alpha": params["alpha"], "penalty": params.get("l1", params.get("k1")),
            "mu": params["mu"] if math.isfinite(params["mu"]) else 100.0,
            "step_scale": params["step_scale"], "candidates": candidates,
            "seed": seed,
            **({} if selection_share is None else {"selection_share": selection_share}),
            **({} if composition is None else {"composition": composition})}


def selected(task: Task, private: tuple[np.ndarray, np.ndarray], epsilon: float, seed: int,
             selection_share: float | None, composition: str | None = None,
             selection_score: str | None = None,
             grid: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(the private selection's model, the non-private oracle's choice among
    the same candidates) of one SelectedAdaptation job at epsilon, each site
    splitting its records into record parts as a networked job's sites do;
    ``grid``: its private candidates (selection_settings)."""
    settings = {**selection_settings(task, epsilon, seed, selection_share, composition, grid),
                "validation_fraction": VALIDATION_FRACTION,
                **({} if selection_score is None else {"selection_score": selection_score})}
    with federation(*private, task.num_sites, seed, private=True) as sites:
        public = task.source if task.source_names is None else \
            Dataset(*task.source, task.source_names)
        model = SelectedAdaptation(**settings).fit(sites, public_source=public)
        part = RecordPart(VALIDATION, VALIDATION_FRACTION, sites.job_id)
    validation = [RecordSplitter(data).records(part)
                  for data in site_datasets(*private, task.num_sites)]
    features = np.concatenate([part.features for part in validation])
    labels = np.concatenate([part.labels for part in validation])
    # The oracle compares what the selection scores: clipped losses, errors,
    # or (paired) unclipped losses, whose differences the paired score clips
    # only where the clips bite.
    bound = np.inf if model.loss_bound_ is None else model.loss_bound_
    losses = [np.mean(np.where(features @ w >= 0, 1.0, -1.0) != labels)
              if model.selection_score_ == "error" else
              np.minimum(loss_values(task.loss, features @ w, labels), bound).mean()
              for w in model.candidates_]
    return model.coef_, model.candidates_[int(np.argmin(losses))]


def one_split(task: Task, size: int, split: int, warm: np.ndarray,
              methods: tuple[str, ...], selection_share: float | None = None,
              composition: str | None = None, selection_score: str | None = None,
              grid: str | None = None) -> dict[tuple[str, float], float]:
    private, test = split_records(task, size, split)
    results = {("source-only", eps): metric(task, warm, test) for eps in EPSILONS}
    with federation(*private, task.num_sites, split, private=False) as sites:
        model = adapter(task, math.inf, split, BEFORE).fit(sites, task.source,
                                                           initial_weights=warm)
    for eps in EPSILONS:
        results["non-private", eps] = metric(task, model.coef_, test)
    plans = {"before": BEFORE, **{name: {**BEFORE, **lever} for name, lever in LEVERS.items()},
             "after": {"iterations": "auto"},
             SMOOTH: {"iterations": "auto", "step_sizes": "noise_aware_smooth"}}
    for eps in EPSILONS:
        seed = 100 * split + int(eps)
        if "noisy GD" in methods:
            with federation(*private, task.num_sites, seed, private=True) as sites:
                gd = NoisyGD(loss=task.loss, epsilon=eps, delta=DELTA,
                             iterations=task.iterations, **task.noisy_gd).fit(sites)
            results["noisy GD", eps] = metric(task, gd.coef_, test)
        for name, options in plans.items():
            if name not in methods:
                continue
            with federation(*private, task.num_sites, seed + 1, private=True) as sites:
                # "after" starts from its own default warm start (the same source-only fit).
                warm_start = None if name in ("after", SMOOTH) else warm
                model = adapter(task, eps, seed, options).fit(sites, task.source,
                                                             initial_weights=warm_start)
            results[name, eps] = metric(task, model.coef_, test)
        if SELECTED in methods:
            chosen, oracle = selected(task, private, eps, seed + 2, selection_share,
                                      composition, selection_score)
            results[SELECTED, eps] = metric(task, chosen, test)
            results[ORACLE, eps] = metric(task, oracle, test)
        if SELECTED_GRID in methods:
            chosen, oracle = selected(task, private, eps, seed + 3, selection_share,
                                      composition, selection_score, grid)
            results[SELECTED_GRID, eps] = metric(task, chosen, test)
            results[ORACLE_GRID, eps] = metric(task, oracle, test)
    return results


def study_tasks(quick: bool) -> list[tuple[Task, int]]:
    """(task, n) pairs; quick: the two small regressions only, short runs."""
    synthetic = make_shifted_regression(num_source=1000, num_target=4000, seed=0)
    diabetes = regression_task("diabetes sex1->sex2", load_diabetes_domains(), 100, 2, None,
                               quick)
    regression = regression_task("synthetic concept shift", synthetic, 2000, 3, 2000, quick)
    if quick:
        return [(diabetes, 100), (regression, 200)]
    adult = adult_task(quick)
    return [(adult, 200), (adult, 2000), (diabetes, 100), (regression, 200),
            (regression, 2000), (demo_split_task(adult), 3000)]


def demo_split_task(adult: Task) -> Task:
    """The demo's Adult split with the men -> women task's settings."""
    domains = load_adult_domains(num_sites=1, seed=0, split=DEMO_SPLIT)
    pool, test = domains.target_sites[0], domains.target_test
    return replace(adult, name=f"adult {DEMO_SPLIT}",
                   source=(domains.source.features, domains.source.labels),
                   pool=(pool.features, pool.labels), test=(test.features, test.labels),
                   source_names=domains.source.feature_names)


def summarise(task: Task, size: int, runs: list[dict], methods) -> list[list]:
    rows = []
    for method in methods:
        for eps in EPSILONS:
            mean, std = mean_std([run[method, eps] for run in runs])
            reference = float(np.mean([run["non-private", eps] for run in runs]))
            source = float(np.mean([run["source-only", eps] for run in runs]))
            sign = 1.0 if task.loss == "logistic" else -1.0  # accuracy up, MSE down
            # The target: per split, how much worse than source-only (relative).
            shortfalls = [sign * (run["source-only", eps] - run[method, eps])
                          / run["source-only", eps] for run in runs]
            rows.append([task.name, size, method, eps, mean, std,
                         100 * sign * (reference - mean) / reference,
                         100 * sign * (source - mean) / source,
                         100 * float(np.percentile(shortfalls, 90)), len(runs)])
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", type=int, default=5)
    parser.add_argument("--quick", action="store_true",
                        help="2 splits, the two small regressions, before/after/smooth and "
                             "the selection only")
    parser.add_argument("--selection", action="store_true",
                        help="without the levers: source-only, noisy GD, non-private, after, "
                             "smooth, selected and oracle (its own CSV)")
    parser.add_argument("--selected-only", action="store_true",
                        help="with --selection: source-only, non-private, selected and oracle "
                             "only (the selection's own table, faster)")
    parser.add_argument("--selection-share", type=float, default=None,
                        help="SelectedAdaptation's selection_share (default: its own)")
    parser.add_argument("--composition", choices=("pld", "rdp", "basic"), default=None,
                        help="SelectedAdaptation's composition (default: its own, 'pld'; "
                             "'basic' is the plan before joint calibration)")
    parser.add_argument("--selection-score", choices=("loss", "error"), default=None,
                        help="SelectedAdaptation's selection_score (default: its own, 'auto': "
                             "'error' for the logistic tasks, 'loss' otherwise; the oracle "
                             "compares what the selection scores; with 'error' or 'loss' the "
                             "CSV is adapter_study_selection_<score>.csv)")
    parser.add_argument("--grid", default=None,
                        help="with --selection: also run the selection job with these "
                             "private candidates (a SelectedAdaptation candidate list, "
                             f"{ADAPTER!r} standing for the task's adapter, e.g. \"noisy_gd, "
                             f"{ADAPTER}, {ADAPTER}_smooth:iterations=50\"), beside the "
                             "selection without it (adapter_study_selection_grid.csv)")
    parser.add_argument("--tasks", default=None,
                        help="comma-separated task names to run (default: all)")
    parser.add_argument("--out", type=Path, default=Path("experiments/results"))
    add_runner_options(parser)
    args = parser.parse_args(argv)
    runner = runner_from(args)
    if RAM_DIRECTORY.is_dir():
        # The simulation's ledgers are temporary: on a RAM filesystem their
        # synchronous commits (one per release) do not wait for the disk, which
        # made --quick 4x slower on a busy machine. Results do not change.
        tempfile.tempdir = str(RAM_DIRECTORY)
    splits = 2 if args.quick else args.splits
    methods = METHODS
    if args.quick:
        methods = ("source-only", "non-private", "before", "after", SMOOTH, SELECTED, ORACLE)
    elif args.selection:
        methods = ("source-only", "noisy GD", "non-private", "after", SMOOTH, SELECTED, ORACLE)
        if args.selected_only:
            methods = ("source-only", "non-private", SELECTED, ORACLE)
    if args.grid is not None:
        if not (args.selection or args.quick):
            parser.error("--grid needs --selection or --quick")
        methods = (*methods, SELECTED_GRID, ORACLE_GRID)
    started = time.perf_counter()
    rows = []
    chosen_tasks = None if args.tasks is None else set(args.tasks.split(","))
    for task, size in study_tasks(args.quick):
        if chosen_tasks is not None and f"{task.name}@{size}" not in chosen_tasks:
            continue
        print(f"{task.name}: n={size} over {task.num_sites} sites, {splits} splits, "
              f"T={task.iterations}", flush=True)
        task = replace(task, private_size=size)
        warm = fit_linear(*task.source, task.loss, task.radius)
        runs = list(runner.map(functools.partial(
            one_split, task, size, warm=warm, methods=methods,
            selection_share=args.selection_share, composition=args.composition,
            selection_score=args.selection_score, grid=args.grid), range(splits)))
        rows.extend(summarise(task, size, runs, methods))
        print(f"  done ({time.perf_counter() - started:.0f} s)", flush=True)
    print("\nMetric: test accuracy (adult) or test MSE (regressions), mean +- std over splits;"
          " gap %: how much worse than the non-private adapter (resp. source-only), relative;"
          " p90 shortfall: 90th percentile over splits of the relative loss to source-only")
    header = ["dataset", "n", "method", "epsilon", "mean", "std", "gap to non-private %",
              "gap to source-only %", "p90 shortfall %", "splits"]
    print_table(header, rows)
    name = "adapter_study_quick" if args.quick else \
        "adapter_study_selection" if args.grid is not None else \
        f"adapter_study_selection_{args.selection_score}" if args.selection_score else \
        "adapter_study_selection" if args.selection else "adapter_study"
    name += "_grid.csv" if args.grid is not None else ".csv"
    write_csv(args.out / name, ["dataset", "n", "method", "epsilon", "metric_mean",
                                "metric_std", "gap_to_nonprivate_percent",
                                "gap_to_source_only_percent", "p90_shortfall_percent",
                                "splits"], rows)
    print(f"Done in {time.perf_counter() - started:.1f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
