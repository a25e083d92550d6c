"""Sums of per-record products by BLAS (a Gram matrix sum_i z_i z_i^T, a
weighted column sum X^T c), with a proved, data-independent bound on their
float error (without the cost of an exact sum).

An exact sum (:mod:`.exact_sum`) makes one record move the result by its own
term only, but costs a per-record outer product. A Gram matrix needs less: its
entry (j, k) is the dot product of two columns of Z, and any evaluation order
of a dot product of length b satisfies |fl(x^T y) - x^T y| <= gamma_b |x|^T |y|,
gamma_k = k u / (1 - k u), u = 2^-53 (Higham, *Accuracy and Stability of
Numerical Algorithms*, 2nd ed., eq. (3.5) and its remark that it holds for any
order; eq. (3.13) for a matrix product; an FMA only tightens it). It assumes
IEEE double arithmetic rounding to nearest and a classical BLAS (every entry
a sum of its n products in some order, as OpenBLAS, MKL and BLIS compute it;
no Strassen-like scheme). Z is taken
in fixed blocks of :data:`BLOCK_RECORDS` rows, each block's Z^T Z by BLAS, the
m = ceil(n / b) block results added in order (gamma_{m-1} of the sum of their
magnitudes), so with Lemma 3.3 (gamma_j + gamma_k + gamma_j gamma_k <=
gamma_{j+k}) every entry is within gamma_{b+m-1} sum_i |z_ij| |z_ik| <=
gamma_{b+m-1} n max_i ||z_i||^2 of the exact Gram matrix of the float rows
(|z_j z_k| <= ||z||^2). The bound is public: it uses the public bound N on n
and the clip bound on ||z||^2, never the data. Relative to the largest entry
n s it is about (b + n/b) u: 2^-21 at N = 2^20 (b = 4096), so its charge
(:mod:`.grid_rounding`: 2e per entry) is negligible next to the sensitivity.

Gradual underflow adds at most half the least subnormal per product (additions
are exact when they underflow); :func:`gram_error` adds 2^-1020 per record,
which also covers a machine that flushes subnormals to zero.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from privadapt.common.kernels.exact_sum import FLOAT_UNIT_ROUNDOFF

#: Rows per BLAS block. Fixed (never data-dependent): the error bound uses it.
BLOCK_RECORDS = 4096
# Per record, a bound on what underflow (or flushing it to zero) can lose.
_UNDERFLOW_PER_RECORD = 2.0**-1020


def gram(blocks: Iterable[np.ndarray], size: int) -> np.ndarray:
    """sum over ``blocks`` (each at most :data:`BLOCK_RECORDS` rows of ``size``
    finite columns) of block^T block, added in order."""
    total = np.zeros((size, size))
    for block in blocks:
        if len(block) > BLOCK_RECORDS:
            raise ValueError(f"a Gram block has {len(block)} rows, more than "
                             f"{BLOCK_RECORDS}: its error bound would not hold")
        total += block.T @ block
    return total


def weighted_rows(blocks: Iterable[tuple[np.ndarray, np.ndarray]], size: int) -> np.ndarray:
    """sum over ``blocks`` (pairs of at most :data:`BLOCK_RECORDS` rows X of
    ``size`` finite columns and their coefficients c) of X^T c, added in
    order. Every entry is a sum of the products x_ij c_i: the bound of
    :func:`gram_error` holds with |x_ij c_i| <= ||c_i x_i|| in place of
    ||z||^2, i.e. ``gram_error(N, bound on ||c_i x_i||)``."""
    total = np.zeros(size)
    for rows, coefficients in blocks:
        if len(rows) > BLOCK_RECORDS:
            raise ValueError(f"a product block has {len(rows)} rows, more than "
                             f"{BLOCK_RECORDS}: its error bound would not hold")
        total += rows.T @ coefficients
    return total


def gamma(count: int) -> float:
    """gamma_k = k u / (1 - k u); ``ValueError`` once k u >= 1/2 (no useful bound)."""
    product = count * FLOAT_UNIT_ROUNDOFF
    if product >= 0.5:
        raise ValueError(f"a float sum of {count} terms has no useful error bound")
    return product / (1.0 - product)


def gram_error(max_records: int, row_norm_squared: float) -> float:
    """A bound on |computed - exact| for every entry of :func:`gram` over at most
    ``max_records`` rows, each of squared norm at most ``row_norm_squared``
    (and of :func:`weighted_rows` when every product |x_ij c_i| is at most
    ``row_norm_squared``)."""
    records = max(1, int(max_records))
    blocks = math.ceil(records / BLOCK_RECORDS)
    count = min(records, BLOCK_RECORDS) + blocks - 1
    # Rounded up: the bound itself must not round below the true bound.
    bound = gamma(count) * records * row_norm_squared + records * _UNDERFLOW_PER_RECORD
    return math.nextafter(bound * (1.0 + 4 * FLOAT_UNIT_ROUNDOFF), math.inf)
