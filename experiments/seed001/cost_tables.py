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

Per run (``--runs``, the paper's 30 by default) every private method makes
one release (its own plan: NNA one secure sum, NAS one per-site release,
the baselines 5 rounds), on a fresh federation with a fresh noise seed, and
AkM (seed = run) picks k targets for every k from that release
(:mod:`experiments.seed001.sources`). Datasets are drawn once (seed 0), as in
the paper's fixed datasets; the cost is averaged over runs.

Run from the repository root:
    .venv/bin/python -m experiments.seed001.cost_tables [--runs 30] [--quick] [--networked]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from experiments.seed000.federation import add_networked_flag
from experiments.seed000.reporting import maybe_png, mean_std, print_table, write_csv
from experiments.seed001 import datasets as ds
from experiments.seed001 import networked
from experiments.seed001.sources import METHODS, PRIVACY, nna
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


def run_rows(data: ds.SourceTarget, ks: tuple[int, ...], runs: int
             ) -> list[tuple[object, ...]]:
    """One dataset's CSV rows: every method and setting, and NNA over 3 sites."""
    jobs = [(name, method, privacy, coreset, 1)
            for name, (method, _, _) in METHODS.items()
            for privacy, coreset in settings(name)]
    jobs += [("NNA", nna, privacy, True, SITES) for privacy in PRIVACY]
    costs: dict[tuple[str, str, bool, int], dict[int, list[float]]] = {}
    for run in range(runs):
        for name, method, privacy, coreset, sites in jobs:
            fed = federation(data.source, sites, seed=1000 * run + sites)
            source = method(data, fed, privacy, coreset, run)
            source = None if source is None or len(source) == 0 else source
            per_k = costs.setdefault((name, privacy, coreset, sites), {})
            for k in ks:
                chosen = accelerated_k_medoids(data.target, k, source=source, seed=run)
                per_k.setdefault(k, []).append(
                    stc_cost(data.target, data.source, data.target[chosen]))
    rows = []
    for (name, privacy, coreset, sites), per_k in costs.items():
        uses_coreset = METHODS[name][2]
        for k, values in per_k.items():
            mean, std = mean_std(values)
            rows.append((data.name, name, privacy, ("yes" if coreset else "no")
                         if uses_coreset else "-", sites, k, mean, std, len(values)))
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
    add_networked_flag(parser)
    args = parser.parse_args(argv)
    ks = QUICK_KS if args.quick else tuple(args.ks)
    runs = 1 if args.quick else args.runs
    every = ds.all_datasets(seed=0, include_mnist=False)
    wanted = (args.datasets if args.datasets is not None
              else QUICK_DATASETS if args.quick
              else [d.name for d in every])
    chosen = [d for d in every if d.name in wanted]
    rows: list[tuple[object, ...]] = []
    for data in chosen:
        start = time.perf_counter()
        rows += run_rows(data, ks, runs)
        print(f"{data.name}: |S| = {len(data.source)}, |T| = {len(data.target)}, "
              f"{runs} runs, {time.perf_counter() - start:.1f} s", flush=True)
    stem = "cost_tables_quick" if args.quick else "cost_tables"
    write_csv(args.out / f"{stem}.csv", HEADER, rows)
    maybe_png(args.out / f"{stem}.png", draw(rows, [d.name for d in chosen]))
    print_table(*pivot(rows, ks))
    if args.networked:
        return networked_check(chosen[0], ks[0], args.out / f"{stem}_networked.csv")
    return 0


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
