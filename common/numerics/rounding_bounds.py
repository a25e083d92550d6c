"""Proved floating-point bounds for a posteriori certificates: outward-rounded
scalars, gamma_k, and matrix products with an entrywise error bound far
below the classical gamma_m |A| |B| (a kernel's rounding error must
be a checked fact).

Model (the one assumption, as :mod:`privadapt.common.kernels.blocked_gram`):
IEEE double, round to nearest, u = 2^-53; each entry of a BLAS product of
inner length m satisfies |fl(a^T b) - a^T b| <= gamma_m |a|^T |b|,
gamma_m = m u / (1 - m u), whatever the order of its sum (Higham, *Accuracy
and Stability*, 2nd ed., eqs. (3.5), (3.12)-(3.13); an FMA only tightens
it); no Strassen-like product. Underflow (or flushing it to zero) errs by at
most 2^-1022 absolute per operation; :func:`accurate_product` adds
(m + 2) 2^-1000 per entry for it.

Error-free splitting (the idea of Ozaki, Ogita, Oishi and Rump, "Error-free
transformations of matrix multiplication", Numer. Algorithms 59, 2012). Row
i of A is split as A_hi + A_lo with A_hi on the grid 2^(e_i - b), |A_hi| <=
2^e_i and |A_lo| <= 2^(e_i - b - 1), where 2^e_i bounds the row's largest
entry (and B's columns likewise, exponents f_j). Every product of an A_hi
and a B_hi entry is then a multiple of 2^(e_i + f_j - 2b) below 2^(e_i + f_j)
in magnitude, so every partial sum of m of them is an integer multiple of
that grain of at most m 2^(2b) <= 2^53 grains: exactly representable, so
fl(A_hi B_hi) = A_hi B_hi, in any summation order. The rest, A_hi B_lo +
A_lo B, is 2^-b smaller, and its gamma_m bound with it:
    |fl(A B) - A B| <= gamma_m (||A_hi,i||_1 2^(f_j - b - 1) + 2^(e_i - b - 1) ||B_j||_1)
                       + u |S| + u |fl(A B)|,
S the rounded rest (each of the two final additions rounds once).
"""

from __future__ import annotations

import math

import numpy as np

UNIT = 2.0**-53
# Per entry, covers underflow in a product of inner length m: (m + 2) times this.
_UNDERFLOW = 2.0**-1000


def up(value: float) -> float:
    """The next float above a computed ``value``: at least the exact result of
    the one rounded operation that gave it (round to nearest)."""
    return math.nextafter(value, math.inf)


def down(value: float) -> float:
    """The next float below: at most the exact result of that operation."""
    return math.nextafter(value, -math.inf)


def gamma(length: int) -> float:
    """gamma_k = k u / (1 - k u), rounded up."""
    return up(up(length * UNIT) / down(1.0 - length * UNIT))


def grow(value: float | np.ndarray, operations: int) -> float | np.ndarray:
    """An upper bound on a non-negative quantity that ``value`` computed in
    float with at most ``operations`` roundings of non-negative terms:
    (1 - u)^-k <= 1 + 2 k u, and the multiplication rounds once more."""
    factor = up(1.0 + 2.0 * (operations + 2) * UNIT)
    if isinstance(value, np.ndarray):
        return value * factor
    return up(value * factor)


def split_bits(length: int) -> int:
    """b with length 2^(2b) <= 2^52: products of split parts sum exactly."""
    return (52 - math.ceil(math.log2(max(length, 1)))) // 2


def split_rows(array: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(hi, lo, scale): ``array`` = hi + lo exactly, row i of hi on the grid
    scale_i 2^-bits with |hi| <= scale_i and |lo| <= scale_i 2^(-bits-1),
    scale_i a power of two above the row's largest magnitude (module docstring)."""
    peak = np.abs(array).max(axis=1)
    exponents = np.frexp(peak)[1]  # peak < 2^e (a zero row: e = 0, all parts zero)
    hi = np.ldexp(np.round(np.ldexp(array, (bits - exponents)[:, None])),
                  (exponents - bits)[:, None])
    return hi, array - hi, np.ldexp(1.0, exponents)


def accurate_product(left: np.ndarray, right: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(fl(left @ right), an entrywise upper bound on its error): ``left`` is
    p x m, ``right`` m x q or a vector of length m (module docstring)."""
    vector = right.ndim == 1
    right = right[:, None] if vector else right
    length = left.shape[1]
    bits = split_bits(length)
    left_hi, left_lo, left_scale = split_rows(left, bits)
    right_hi, right_lo, right_scale = split_rows(right.T, bits)
    exact = left_hi @ right_hi.T  # no rounding (module docstring)
    rest = left_hi @ right_lo.T + left_lo @ right
    value = exact + rest
    tail = 2.0**(-bits - 1)
    rest_bound = (np.outer(np.abs(left_hi).sum(axis=1), right_scale * tail)
                  + np.outer(left_scale * tail, np.abs(right).sum(axis=0)))
    bound = grow(gamma(length) * rest_bound + UNIT * (np.abs(rest) + np.abs(value)),
                 length + 8) + (length + 2) * _UNDERFLOW
    if vector:
        return value[:, 0], bound[:, 0]
    return value, bound
