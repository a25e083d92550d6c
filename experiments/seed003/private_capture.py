"""Seed 003, Section 7: why a private line does or does not beat public-only,
each explanation tested by a run that changes only it.

On Section 7's data (``experiments.seed003.section7``: m = 1,000 public
source points, an unlabeled private target of n points, lambda = 0.001,
delta = 1/8,000), every row is one run of one line, paired with the
public-only ridge and the oracle on the same data draw (same seed):

* ``iterations``: noisy Frank-Wolfe (Alg. 2) and noisy mirror descent
  (Alg. 3) at the single holder for each K of ``--iterations``, mu from
  Corollary 3 at that K (mu grows like sqrt(K), and with it the score's
  sensitivity; the composition over K releases grows the noise too);
* ``mu``: noisy Frank-Wolfe at K = ``--mu-iterations`` with mu scaled by each
  factor of ``--mu-factors`` (1: Corollary 3's mu);
* ``noise_free``: Alg. 2's open-loop Frank-Wolfe with the exact argmin
  (epsilon = inf) at each K: what the same iterations reach without the
  selection's noise;
* ``single_stage``: Alg. 1 on one Gaussian release of M_0 (3 sites, the
  federated route) and on the exact M_0, for each K of ``--iterations`` and
  each mu factor, all from the same release (post-processing).

Besides the test MSE each row has ||M(q-hat)||_2 (against the exact M_0),
the noise scale on the gradient (Laplace scale of Alg. 2's scores, Gaussian
sd of Alg. 3's coordinates; 0 without noise) and the spread (standard
deviation over the m vertices) of the exact gradient at the uniform start,
which that noise must not swamp for a selection to find a good vertex.

Run from the repository root:
    .venv/bin/python -m experiments.seed003.private_capture [--runs 3] [--quick]
        [--parts iterations mu noise_free single_stage] [--sizes 1000 8000]
        [--epsilons 1 10] [--iterations 3 10 30 100 300 1000]
        [--mu-iterations 1000] [--mu-factors 0.1 0.3 1 3]
        [--out experiments/results/seed003_private_capture.csv]
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np

from experiments.seed000.reporting import (
    add_output_option,
    mean_std,
    output_path,
    print_table,
    write_csv,
)
from experiments.seed003 import section7
from privadapt.client.local_federation import LocalFederation
from privadapt.common.data.dataset import Dataset
from privadapt.server.algorithms.discrepancy_minimization.noisy_minimization import (
    noisy_frank_wolfe,
    noisy_mirror_descent,
)
from privadapt.server.algorithms.discrepancy_minimization.smoothed_discrepancy import (
    SmoothedDiscrepancy,
    second_moment,
    spectral_norm,
)
from privadapt.server.algorithms.discrepancy_minimization.unlabeled_adaptation import (
    adapt_on_moment,
    release_target_moment,
    weighted_ridge,
)

RESULTS_DEFAULT = Path("experiments/results/seed003_private_capture.csv")

PARTS = ("iterations", "mu", "noise_free", "single_stage")
DELTA = 1 / 8000
HEADER = ("part", "method", "epsilon", "n", "iterations", "mu_factor", "mu", "seed",
          "test_mse", "public_only", "oracle", "discrepancy_norm", "noise_scale",
          "score_spread")


class Draw:
    """One seed's data (drawn as ``section7.one_run`` draws it) and its references."""

    def __init__(self, n: int, seed: int, test_size: int) -> None:
        rng = np.random.default_rng(seed)
        self.n, self.seed = n, seed
        self.points, self.labels = section7.source_sample(1000, rng)
        self.target = section7.gaussian(n, section7.TARGET_SIGNS, rng)
        test_x = section7.gaussian(test_size, section7.TARGET_SIGNS, rng)
        self.test = (test_x, section7.label(test_x))
        self.exact = second_moment(self.target)
        uniform = np.full(len(self.points), 1 / len(self.points))
        self.public_only = self.error(uniform)
        self.oracle = section7.test_error(
            weighted_ridge(self.target, section7.label(self.target), np.full(n, 1 / n),
                           section7.RIDGE), self.test)

    def mu(self, iterations: int, factor: float) -> float:
        return factor * section7.mu_for(self.points, self.n, iterations)

    def error(self, weights: np.ndarray) -> float:
        coef = weighted_ridge(self.points, self.labels, weights, section7.RIDGE)
        return section7.test_error(coef, self.test)

    def norm(self, weights: np.ndarray) -> float:
        return spectral_norm(self.exact - second_moment(self.points, weights))

    def spread(self, mu: float) -> float:
        objective = SmoothedDiscrepancy(self.points, self.exact, mu, section7.LAMBDA)
        _, gradient = objective.value_and_gradient(np.full(len(self.points),
                                                            1 / len(self.points)))
        return float(np.std(gradient))

    def row(self, part: str, method: str, epsilon: float, iterations: int, factor: float,
            mu: float, test_mse: float, norm: float, noise: float) -> tuple[object, ...]:
        return (part, method, epsilon, self.n, iterations, factor, mu, self.seed, test_mse,
                self.public_only, self.oracle, norm, noise, self.spread(mu))


def per_iteration(draw: Draw, part: str, method: str, epsilon: float, iterations: int,
                  factor: float) -> tuple[object, ...]:
    """One run of Alg. 2 or 3 at the single holder."""
    mu = draw.mu(iterations, factor)
    algorithm = noisy_frank_wolfe if method == "noisy_fw" else noisy_mirror_descent
    result = algorithm(section7.single_holder(draw.target, epsilon, draw.seed), draw.points,
                       epsilon=epsilon, delta=DELTA, calibration="accountant",
                       feature_norm=section7.R, mu=mu, regularization=section7.LAMBDA,
                       iterations=iterations)
    return draw.row(part, method, epsilon, iterations, factor, mu, draw.error(result.weights),
                    draw.norm(result.weights), result.noise_scale)


def released_moment(draw: Draw, epsilon: float) -> np.ndarray:
    """One Gaussian release of M_0 from the target over 3 in-process sites."""
    names = tuple(f"x{i}" for i in range(section7.DIM))
    parts = [Dataset(draw.target[rows], np.zeros(len(rows)), names)
             for rows in np.array_split(np.arange(draw.n), 3)]
    with LocalFederation.from_datasets(parts, epsilon_cap=epsilon, delta_cap=DELTA,
                                       noise_seed=draw.seed) as sites:
        return release_target_moment(sites, epsilon=epsilon, delta=DELTA,
                                     feature_norm=section7.R).matrix


def single_stage(draw: Draw, epsilon: float, iterations: list[int], factors: list[float]
                 ) -> list[tuple[object, ...]]:
    """Alg. 1 on one release of M_0 (exact M_0 for epsilon = inf), every K and
    mu factor; the noise column is the release's spectral error."""
    moment = draw.exact if math.isinf(epsilon) else released_moment(draw, epsilon)
    noise_norm = spectral_norm(moment - draw.exact)
    rows = []
    for count in iterations:
        for factor in factors:
            mu = draw.mu(count, factor)
            weights, coef = adapt_on_moment(
                draw.points, draw.labels, moment, method="single_stage_fw", mu=mu,
                regularization=section7.LAMBDA, radius=section7.RADIUS, ridge=section7.RIDGE,
                iterations=count)
            rows.append(draw.row("single_stage", "single_stage_fw", epsilon, count, factor, mu,
                                 section7.test_error(coef, draw.test), draw.norm(weights),
                                 noise_norm))
    return rows


def one_draw(draw: Draw, args: argparse.Namespace) -> list[tuple[object, ...]]:
    rows: list[tuple[object, ...]] = []
    for epsilon in args.epsilons:
        if "iterations" in args.parts:
            rows += [per_iteration(draw, "iterations", method, epsilon, count, 1.0)
                     for method in ("noisy_fw", "noisy_md") for count in args.iterations]
        if "mu" in args.parts:
            rows += [per_iteration(draw, "mu", "noisy_fw", epsilon, args.mu_iterations, factor)
                     for factor in args.mu_factors]
        if "single_stage" in args.parts:
            rows += single_stage(draw, epsilon, args.iterations, args.mu_factors)
    if "single_stage" in args.parts:
        rows += single_stage(draw, math.inf, args.iterations, args.mu_factors)
    if "noise_free" in args.parts:
        rows += [per_iteration(draw, "noise_free", "noisy_fw", math.inf, count, 1.0)
                 for count in args.iterations]
    return rows


def summary(rows: list[tuple[object, ...]]) -> list[list[object]]:
    """Mean test MSE per line, how many seeds beat public-only, the mean
    public-only, ||M(q-hat)||, noise scale and score spread."""
    groups: dict[tuple[object, ...], list[tuple[object, ...]]] = {}
    for row in rows:
        groups.setdefault(row[:6], []).append(row)
    out = []
    for key, mine in groups.items():
        mse = [float(r[8]) for r in mine]
        out.append([*key, mean_std(mse)[0], sum(float(r[8]) < float(r[9]) for r in mine),
                    len(mine), float(np.mean([float(r[9]) for r in mine])),
                    float(np.mean([float(r[11]) for r in mine])),
                    float(np.mean([float(r[12]) for r in mine])),
                    float(np.mean([float(r[13]) for r in mine]))])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 8000])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 10.0])
    parser.add_argument("--iterations", type=int, nargs="+", default=[3, 10, 30, 100, 300, 1000])
    parser.add_argument("--mu-iterations", type=int, default=1000)
    parser.add_argument("--mu-factors", type=float, nargs="+", default=[0.1, 0.3, 1.0, 3.0])
    parser.add_argument("--test-size", type=int, default=5000)
    parser.add_argument("--quick", action="store_true", help="tiny run (smoke test)")
    add_output_option(parser, RESULTS_DEFAULT)
    args = parser.parse_args(argv)
    args.out = output_path(args.out, RESULTS_DEFAULT, args.quick)
    if args.quick:
        args.runs, args.sizes, args.epsilons = 1, [400], [10.0]
        args.iterations, args.mu_iterations, args.mu_factors = [5, 10], 10, [0.3, 1.0]
        args.test_size = 500
    started = time.perf_counter()
    rows: list[tuple[object, ...]] = []
    for n in args.sizes:
        for seed in range(args.runs):
            rows += one_draw(Draw(n, seed, args.test_size), args)
            print(f"n={n} seed {seed} done ({time.perf_counter() - started:.0f} s)", flush=True)
    write_csv(args.out, HEADER, rows)
    print_table([*HEADER[:6], "mean_mse", "beats_public", "runs", "public_only",
                 "norm_M", "noise", "spread"], summary(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
