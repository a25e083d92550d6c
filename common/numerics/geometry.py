"""Norms, clipping and projection: the Euclidean geometry every bound rests on.

Sites clip records and per-record gradients with these functions (the
sensitivity of every kernel comes from them), and coordinators project
iterates onto the model ball ||w|| <= Lambda with the same code, so one
definition of "norm at most C" holds on both sides. Every clip is robust to
adversarial records: a row whose norm under- or overflows is still measured
exactly, and one that cannot be measured in floating point is scaled to zero,
which keeps the bound.
"""

from __future__ import annotations

import numpy as np

# Below this (or above its inverse) the plain sqrt(sum x^2) under- or overflows.
_SAFE_NORM = 1e-150
# Below this a float has lost relative precision (the subnormal range).
_SMALLEST_NORMAL = float(np.finfo(np.float64).tiny)


def record_products(features: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``features @ weights`` ((n, d) by (d,) or (d, C)), each record's entry
    computed from that record alone, in an order fixed by d.

    Why not BLAS: its blocked kernels round the last rows of a matrix (the
    edge tile) differently from the others, so adding or removing one record
    changed the float margins of a few *other* records; with large cancelling
    features that moved their clipped losses by up to the clip bound each,
    beyond any kernel's sensitivity (a score change of 2.3 L was measured
    against a charge of L). An elementwise product
    (exactly rounded per entry) reduced along the contiguous last axis (numpy's
    pairwise sum over d, the same for every row) depends only on the row."""
    features = np.ascontiguousarray(features, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        if weights.ndim == 1:
            return np.multiply(features, weights).sum(axis=1)
        columns = np.ascontiguousarray(weights.T)
        return np.stack([np.multiply(features, column).sum(axis=1) for column in columns],
                        axis=1) if len(columns) else np.zeros((len(features), 0))


def project_to_ball(weights: np.ndarray, radius: float,
                    center: np.ndarray | None = None) -> np.ndarray:
    """Euclidean projection onto {w : ||w - center|| <= radius} (Frobenius for
    a matrix; ``center`` None: the origin)."""
    if center is None:
        norm = float(np.linalg.norm(weights))
        return weights if norm <= radius else weights * (radius / norm)
    offset = weights - center
    norm = float(np.linalg.norm(offset))
    return weights if norm <= radius else center + offset * (radius / norm)


def row_norms(rows: np.ndarray) -> np.ndarray:
    """L2 norm of each row, exact to rounding even for rows whose squares
    under- or overflow (an adversarial record of 1e-300s must not look like 0,
    or it escapes clipping); inf only when the norm itself exceeds float range."""
    with np.errstate(over="ignore", under="ignore"):
        norms = np.sqrt(np.einsum("ij,ij->i", rows, rows))
    suspect = (norms < _SAFE_NORM) | ~(norms < 1.0 / _SAFE_NORM)
    if np.any(suspect):
        extreme = rows[suspect]
        largest = np.max(np.abs(extreme), axis=1)
        scale = np.where(largest > 0, largest, 1.0)
        with np.errstate(over="ignore"):
            norms[suspect] = largest * np.linalg.norm(extreme / scale[:, None], axis=1)
    return norms


def _clip_factors(norms: np.ndarray, bound: float) -> np.ndarray:
    """min(1, bound / norm) per row, without dividing by zero."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.minimum(1.0, bound / np.maximum(norms, np.finfo(float).tiny))


def clip_coefficients(coefficients: np.ndarray, rows: np.ndarray, bound: float) -> np.ndarray:
    """a_i with ||a_i x_i|| <= ``bound``: each per-record gradient c_i x_i of a
    linear model scaled down to the bound. A record whose gradient cannot be
    computed in floating point (overflow) contributes zero, which keeps the bound.

    A clipped coefficient in the subnormal range is set to zero too: there it
    has lost its relative precision (c' = 2 x the
    least subnormal against x = 1.1e308 gave ||c' x|| = 2.67 C), and the
    kernels' clip slack assumes a few ulps of relative error."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        row_norm = row_norms(rows)
        norms = np.abs(coefficients) * row_norm
        over = norms > bound
        clipped = np.array(coefficients, dtype=np.float64, copy=True)
        # c' = sign(c) C / ||x||, one division: the factor C / (|c| ||x||)
        # can itself fall into the subnormals (c = 8.8e213, ||x|| = 2.1e84,
        # C = 1.1e-24 gave ||c' x|| = 1.0096 C) while c' is a normal number.
        clipped[over] = np.copysign(bound / row_norm[over], coefficients[over])
    clipped[~(np.isfinite(clipped) & np.isfinite(norms))] = 0.0
    clipped[np.abs(clipped) < _SMALLEST_NORMAL] = 0.0
    return clipped


def clip_residuals(residuals: np.ndarray, rows: np.ndarray, bound: float) -> np.ndarray:
    """Residual rows r_i scaled so that ||x_i r_i^T||_F = ||x_i|| ||r_i|| <= ``bound``
    (the multi-output form of :func:`clip_coefficients`); a row whose norm
    cannot be computed in floating point contributes zero; a subnormal entry is
    set to zero, as in :func:`clip_coefficients` (it has lost its relative
    precision, and x_i times it could exceed the bound)."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        row_norm, residual_norm = row_norms(rows), row_norms(residuals)
        norms = row_norm * residual_norm
        over = norms > bound
        clipped = np.array(residuals, dtype=np.float64, copy=True)
        # (r / ||r||) (C / ||x||): a unit row times a normal number, never a
        # subnormal factor (as in clip_coefficients).
        clipped[over] = (residuals[over] / residual_norm[over, None]
                         * (bound / row_norm[over])[:, None])
    clipped[~(np.all(np.isfinite(clipped), axis=1) & np.isfinite(norms))] = 0.0
    clipped[np.abs(clipped) < _SMALLEST_NORMAL] = 0.0
    return clipped


def clip_rows_to_norm(rows: np.ndarray, bound: float) -> np.ndarray:
    """Each row scaled to L2 norm at most ``bound`` (rows too large for their
    norm to be computed in floating point are scaled to zero)."""
    norms = row_norms(rows)
    factors = _clip_factors(norms, bound)
    factors[~np.isfinite(norms)] = 0.0
    return rows * factors[:, None]
