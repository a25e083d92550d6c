"""Seed 000, Section 4: the private discrepancy estimate d_DP on UCI Adult
(public source = men, private target = women), against the exact empirical
discrepancy d-hat, for several epsilon.

Two estimates (server/algorithms/discrepancy/private_discrepancy.py): **federated**, one Gaussian
release of the private second moments summed over 3 sites, then the exact
trust-region supremum; **single holder**, the paper's own d-hat + Laplace at one
site that holds the whole private sample. The paper states its Laplace
mechanism for the single holder only; the federated route is ours. Squared
loss, ||x|| <= r = 1, |y| <= Y = 1 (labels in {-1, +1}), ||w|| <= Lambda.
Every run's epsilon is read back from the sites' ledgers.

Run from the repository root:
    .venv/bin/python -m experiments.seed000.discrepancy [--runs 30] [--quick] [--networked]
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from experiments.seed000.federation import Federations, add_networked_flag
from experiments.seed000.reporting import (
    add_output_option,
    maybe_png,
    mean_std,
    output_path,
    print_table,
    write_csv,
)
from privadapt import PrivateDiscrepancy, load_adult_domains

RESULTS_DEFAULT = Path("experiments/seed000/results")

EPSILONS = (0.1, 0.5, 1.0, 5.0)
RADII = (1.0, 5.0)
DELTA = 1e-5
BOUNDS = {"feature_norm": 1.0, "label_bound": 1.0}
METHODS = {"federated": ("federated", 3), "single holder": ("single_holder", 1)}


def estimate(federations, method, target, source, epsilon, radius, run):
    """(d_DP, ledger epsilon) of one run."""
    route, num_sites = METHODS[method]
    private = math.isfinite(epsilon)
    federation = federations.make(*target, private=private, num_sites=num_sites,
                                  noise_seed=run + 1, tag=method)
    model = PrivateDiscrepancy(epsilon=epsilon, delta=DELTA, radius=radius, method=route,
                               **BOUNDS).fit(federation, source)
    spent = max(p.job.epsilon for p in model.privacy_.values()) if private else math.nan
    return model.discrepancy_, spent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="tiny run (smoke test)")
    add_output_option(parser, RESULTS_DEFAULT)
    add_networked_flag(parser)
    args = parser.parse_args(argv)
    args.out = output_path(args.out, RESULTS_DEFAULT, args.quick)
    runs, radii, epsilons = (1, RADII[:1], (1.0,)) if args.quick else (args.runs, RADII,
                                                                         EPSILONS)
    if runs < 1:
        parser.error("--runs must be >= 1")
    started = time.perf_counter()
    domains = load_adult_domains(num_sites=1, seed=0)
    target = (domains.target_sites[0].features, domains.target_sites[0].labels)
    source = (domains.source.features, domains.source.labels)
    print(f"UCI Adult: public source (men) m={len(source[1])}, private target (women) "
          f"n={len(target[1])}, d={target[0].shape[1]}; delta={DELTA} (federated only); "
          f"{runs} runs per cell")
    rows = []
    workdir = Path(tempfile.mkdtemp(prefix="privadapt-discrepancy-"))
    with Federations(workdir, networked=args.networked) as federations:
        print(f"sites: {federations.description}", flush=True)
        for radius in radii:
            exact, _ = estimate(federations, "federated", target, source, math.inf, radius, 0)
            rows.append([radius, "exact d-hat", math.inf, exact, 0.0, 0.0, math.nan, 1])
            for method in METHODS:
                for epsilon in epsilons:
                    values, spent = zip(*(estimate(federations, method, target, source,
                                                   epsilon, radius, run)
                                          for run in range(runs)), strict=True)
                    mean, std = mean_std(values)
                    error = float(np.mean(np.abs(np.asarray(values) - exact)))
                    rows.append([radius, method, epsilon, mean, std, error, max(spent), runs])
            print(f"  Lambda={radius:g} done ({time.perf_counter() - started:.0f} s)",
                  flush=True)
    print("\nd_DP on Adult (mean +- std over runs; |error| = mean |d_DP - d-hat|)")
    print_table(["Lambda", "method", "epsilon", "d_DP", "std", "|error|", "ledger eps"],
                [[f"{r[0]:g}", r[1], f"{r[2]:g}", r[3], r[4], r[5],
                  "-" if math.isnan(r[6]) else f"{r[6]:.3f}"] for r in rows])
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(args.out / "discrepancy.csv", ["radius", "method", "epsilon", "d_dp_mean",
                                             "d_dp_std", "mean_abs_error", "ledger_epsilon",
                                             "runs"], rows)

    def draw(plt):
        for radius in radii:
            for method in METHODS:
                points = [(r[2], r[5]) for r in rows if r[0] == radius and r[1] == method]
                plt.plot(*zip(*points, strict=True), marker="o",
                         label=f"{method}, Lambda={radius:g}")
        plt.xscale("log")
        plt.yscale("log")
        plt.xlabel("epsilon")
        plt.ylabel("mean |d_DP - d-hat|")
        plt.legend(fontsize=7)

    maybe_png(args.out / "discrepancy.png", draw)
    print(f"Done in {time.perf_counter() - started:.1f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
