"""Euclidean distances for source-target clustering (seed 001, Section 3).

Non-private helpers of the coordinator's solvers: blocked BLAS products
(||a||^2 + ||b||^2 - 2 a.b, clamped at 0) so that no n x m matrix larger than a
block is ever held, and the per-target nearest-source distance
Delta(x, S) = min_{s in S} ||x - s|| that makes the source a free centre.
These run on public or already-sanitised points only: the site-side kernels
(:mod:`privadapt.common.kernels.nearest_target_sums`) have their own,
record-by-record arithmetic.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

# Rows per block: a block of distances is BLOCK_ROWS x m doubles.
BLOCK_ROWS = 2048


def as_points(points: np.ndarray, name: str) -> np.ndarray:
    """``points`` as a finite float (n, d) array, or ValueError naming it."""
    array = np.asarray(points, dtype=float)
    if array.ndim != 2:
        raise ValueError(f"{name} must be a 2-d array (n, d), got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} has non-finite values")
    return array


def pairwise_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """||a_i - b_j|| for every row pair (one BLAS product; for blocks)."""
    squared = (np.einsum("ij,ij->i", a, a)[:, None] + np.einsum("ij,ij->i", b, b)[None, :]
               - 2.0 * (a @ b.T))
    return np.sqrt(np.maximum(squared, 0.0))


def distance_blocks(a: np.ndarray, b: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """(start, distances of a[start:start + BLOCK_ROWS] to every row of b)."""
    for start in range(0, len(a), BLOCK_ROWS):
        yield start, pairwise_distances(a[start:start + BLOCK_ROWS], b)


def nearest_distances(points: np.ndarray, centres: np.ndarray | None) -> np.ndarray:
    """min over ``centres`` of the distance to each point; inf for no centres."""
    if centres is None or len(centres) == 0:
        return np.full(len(points), np.inf)
    out = np.empty(len(points))
    for start, block in distance_blocks(points, centres):
        out[start:start + len(block)] = block.min(axis=1)
    return out


def stc_cost(
    target: np.ndarray, source: np.ndarray | None, centres: np.ndarray
) -> float:
    """Cost(T, S, T_k) = (1/|T|) sum_{x in T} Delta(x, S u T_k) (seed 001, Section 3)."""
    target = as_points(target, "target")
    return float(stc_distances(target, nearest_distances(target, source), centres).mean())


def stc_distances(
    target: np.ndarray, source_distances: np.ndarray, centres: np.ndarray
) -> np.ndarray:
    """Each target point's Delta(x, S u centres), given its Delta(x, S)."""
    if len(centres) == 0:
        return source_distances.copy()
    return np.minimum(source_distances, nearest_distances(target, centres))
