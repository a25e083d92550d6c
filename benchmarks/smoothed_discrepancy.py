"""Milliseconds per call of seed 003's F~ value and full vertex gradient
(``common/smoothed_spectral.py``: one ``eigh`` of the d x d M(q) and one GEMM
of the m source points by the non-negligible eigenvectors) against an
``expm``-based version of the paper's formula (4) (exp(mu M~) by
``scipy.linalg.expm``, then -x_i^T (E+ - E-) x_i / Tr for every i), measured in
the same run; the ratio is the figure to compare.

Run: ``.venv/bin/python benchmarks/smoothed_discrepancy.py`` (about a minute).
"""

from __future__ import annotations

import sys

import numpy as np
from scipy import linalg
from timing import median_seconds

from privadapt.common.smoothed_spectral import smoothed_norm_and_vertex_gradient

CASES = ((20_000, 50), (100_000, 50))
MU = 30.0


def expm_version(points: np.ndarray, matrix: np.ndarray, mu: float) -> tuple[float, np.ndarray]:
    """Formula (4) with matrix exponentials (scaled by exp(-mu ||M||) against overflow)."""
    shift = float(np.max(np.abs(np.linalg.eigvalsh(matrix))))
    plus = linalg.expm(mu * matrix - mu * shift * np.eye(len(matrix)))
    minus = linalg.expm(-mu * matrix - mu * shift * np.eye(len(matrix)))
    trace = np.trace(plus) + np.trace(minus)
    value = (np.log(trace) + mu * shift) / mu
    gradient = -np.einsum("ij,jk,ik->i", points, (plus - minus) / trace, points)
    return float(value), gradient


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


if __name__ == "__main__":
    main()
