"""Milliseconds per call of seed 003's F~ value and full vertex gradient
(``common/numerics/smoothed_spectral.py``: one ``eigh`` of the d x d M(q) and one GEMM
of the m source points by the non-negligible eigenvectors) against an
``expm``-based version of the paper's formula (4) (exp(mu M~) by
``scipy.linalg.expm``, then -x_i^T (E+ - E-) x_i / Tr for every i), measured in
the same run; the ratio is the figure to compare. Then milliseconds per
Frank-Wolfe iteration (open-loop steps, and exact line search) with M(q) and the
line search's direction kept by rank-one updates
(``server/algorithms/discrepancy_minimization/simplex_iterate.py``) against rebuilding them by GEMMs
each step, same run, same iterates.

Run: ``.venv/bin/python benchmarks/smoothed_discrepancy.py`` (a few minutes).
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np
from scipy import linalg
from timing import median_seconds

from privadapt.common.numerics.smoothed_spectral import smoothed_norm_and_vertex_gradient
from privadapt.server.algorithms.discrepancy_minimization.smoothed_discrepancy import (
    SmoothedDiscrepancy,
    frank_wolfe,
)

CASES = ((20_000, 50), (100_000, 50))
MU = 30.0
FW_ITERATIONS = 20


def expm_version(points: np.ndarray, matrix: np.ndarray, mu: float) -> tuple[float, np.ndarray]:
    """Formula (4) with matrix exponentials (scaled by exp(-mu ||M||) against overflow)."""
    shift = float(np.max(np.abs(np.linalg.eigvalsh(matrix))))
    plus = linalg.expm(mu * matrix - mu * shift * np.eye(len(matrix)))
    minus = linalg.expm(-mu * matrix - mu * shift * np.eye(len(matrix)))
    trace = np.trace(plus) + np.trace(minus)
    value = (np.log(trace) + mu * shift) / mu
    gradient = -np.einsum("ij,jk,ik->i", points, (plus - minus) / trace, points)
    return float(value), gradient


def problem(m: int, d: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """m source points and a target moment M_0 in dimension d."""
    points = rng.normal(size=(m, d)) / np.sqrt(d)
    target = rng.normal(size=(4 * d, d)) / np.sqrt(d)
    return points, target.T @ target / len(target)


def interleaved_medians(first, second, repeats: int) -> tuple[float, float]:
    """Median seconds of two actions timed alternately (after one warm-up call
    each), so a machine whose load changes during the run slows both alike."""
    first()
    second()
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for action, kept in ((first, times[0]), (second, times[1])):
            started = time.perf_counter()
            action()
            kept.append(time.perf_counter() - started)
    return statistics.median(times[0]), statistics.median(times[1])


def frank_wolfe_rows() -> None:
    """ms per Frank-Wolfe iteration, rank-one updates versus rebuilding."""
    rng = np.random.default_rng(1)
    print(f"\n{'m':>8} {'d':>4} {'step rule':>12} {'rank-one ms/it':>15} {'rebuild ms/it':>14} "
          f"{'speed-up':>9} {'max |dq|':>9}")
    for m, d in CASES:
        points, moment = problem(m, d, rng)
        objective = SmoothedDiscrepancy(points, moment, MU, 1e-3)
        for rule in ("open_loop", "line_search"):
            def run(rank_one: bool, rule: str = rule, objective=objective):
                return frank_wolfe(objective, iterations=FW_ITERATIONS, tolerance=0.0,
                                   step_rule=rule, rank_one=rank_one)
            fast, slow = interleaved_medians(lambda run=run: run(True),
                                             lambda run=run: run(False), 5)
            difference = np.max(np.abs(run(True).weights - run(False).weights))
            print(f"{m:>8} {d:>4} {rule:>12} {1e3 * fast / FW_ITERATIONS:>15.2f} "
                  f"{1e3 * slow / FW_ITERATIONS:>14.2f} {slow / fast:>9.2f} "
                  f"{difference:>9.1e}")


def main() -> None:
    rng = np.random.default_rng(0)
    print(f"{'m':>8} {'d':>4} {'eigh+GEMM ms':>13} {'expm ms':>9} {'ratio':>6} {'max |diff|':>11}")
    for m, d in CASES:
        points = rng.normal(size=(m, d)) / np.sqrt(d)
        target = rng.normal(size=(4 * d, d)) / np.sqrt(d)
        weights = rng.dirichlet(np.ones(m))
        matrix = target.T @ target / len(target) - points.T @ (weights[:, None] * points)
        ours = median_seconds(
            lambda x=points, a=matrix: smoothed_norm_and_vertex_gradient(x, a, MU), 5,
            warm_up=True)
        theirs = median_seconds(lambda x=points, a=matrix: expm_version(x, a, MU), 5,
                                warm_up=True)
        difference = np.max(np.abs(smoothed_norm_and_vertex_gradient(points, matrix, MU)[1]
                                   - expm_version(points, matrix, MU)[1]))
        print(f"{m:>8} {d:>4} {1e3 * ours:>13.2f} {1e3 * theirs:>9.2f} "
              f"{theirs / ours:>6.1f} {difference:>11.2e}")
    sys.stdout.flush()
    frank_wolfe_rows()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
