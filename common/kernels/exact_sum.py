"""Sums over records that are exact, so one record moves a kernel's sum by its
own term and nothing else (a floating-point attack on a kernel reads the rest).

A float sum of n terms (or a BLAS product X^T Y) carries a rounding error that
depends on every record and grows with n and with the terms' size: one changed
record can move it by far more than the record's own clipped term, which is
all the sensitivity charges. Here each record's term is first rounded *toward
zero* onto a fixed grid tied to a public bound on its entries (so it never
grows: its clipped norm still holds), and the rounded terms are added in
integers, which is exact in any order. The sum is then the exact sum of
per-record terms, each within its clip bound, and the only rounding left is
the one conversion of that exact integer to float64 (at most half an ulp,
i.e. 2^-53 times a public bound on the sum: :func:`conversion_error`).

The grid is 2^-84 of the bound's power of two, held as two int64 limbs of
42 bits each, so a term 2^30 below its bound still keeps every bit a float64
has. Products of two per-record rows (z z^T, x r^T) are formed per record in
float64 first: that rounding is the record's own (a relative ulp, within
:func:`clip_slack`), not the sum's.
"""

from __future__ import annotations

import math

import numpy as np

# Each limb holds _LIMB_BITS bits (two limbs: 2^-84 of the bound); a chunk of
# 2^12 terms sums below 2^54 units per limb.
_LIMB_BITS = 42
_TERM_CHUNK = 2**12
# int64 partial totals (chunk sums below 2^54 units) are flushed to Python
# integers before they could wrap: 128 x 2^54 = 2^61.
_FLUSH_EVERY = 128
FLOAT_UNIT_ROUNDOFF = 2.0**-53


def conversion_error(magnitude: float) -> float:
    """A bound on what converting an exact sum of magnitude at most ``magnitude``
    to float64 moves it by (half an ulp)."""
    return FLOAT_UNIT_ROUNDOFF * magnitude


def clip_slack(term_bound: float, size: int) -> float:
    """A bound on how far above ``term_bound`` a float-clipped per-record term
    of ``size`` entries can be (its norm is computed to within (size + 8) ulps)."""
    return 2.0 * FLOAT_UNIT_ROUNDOFF * (size + 8) * term_bound


def power_of_two_above(bound: float) -> float:
    """The least power of two >= ``bound`` (> 0, finite)."""
    if not (math.isfinite(bound) and bound > 0):
        raise ValueError(f"an exact sum needs a finite positive bound, got {bound!r}")
    mantissa, exponent = math.frexp(bound)
    return math.ldexp(1.0, exponent - 1 if mantissa == 0.5 else exponent)


def _limbs(terms: np.ndarray, top: float) -> tuple[tuple[float, np.ndarray], ...]:
    """``terms`` (entries within ``top``, a power of two) as two int64 limbs,
    (unit, limb) pairs whose sum of unit x limb is each entry rounded toward
    zero onto top 2^-84."""
    high_unit, low_unit = top * 2.0**-_LIMB_BITS, top * 2.0 ** (-2 * _LIMB_BITS)
    per_high_unit, limb = 1.0 / high_unit, 2.0**_LIMB_BITS  # powers of two: exact
    # A clipped copy: an entry over the bound (float rounding) is cut back to
    # it, and a non-finite one (a term that cannot be computed) counts as 0.
    raw = np.asarray(terms, float)
    values = np.clip(raw, -top, top)
    values[~np.isfinite(raw)] = 0.0
    # In units of high_unit, |scaled| <= 2^42: the integer part is the high
    # limb, the fraction (exact: a float minus its truncation) times 2^42 the
    # low limb, both rounded toward zero: trunc(v / U) and trunc((v - high U)
    # / (U 2^-42)).
    scaled = values * per_high_unit
    high = np.trunc(scaled)
    low = np.trunc((scaled - high) * limb)
    return (high_unit, high.astype(np.int64)), (low_unit, low.astype(np.int64))


class ExactSum:
    """An exact running sum of per-record terms of shape ``shape``."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape
        self._parts: dict[float, np.ndarray] = {}  # unit -> Python-int totals
        self._pending: dict[float, tuple[np.ndarray, int]] = {}  # unit -> (int64, chunks)

    def add_terms(self, terms: np.ndarray, bound: float) -> None:
        """Add ``terms`` (records along axis 0), each entry at most ``bound`` in
        magnitude, rounded toward zero onto 2^-84 of ``bound``'s power of two
        (an entry over the bound, by float rounding, is cut back to it)."""
        top = power_of_two_above(bound)
        for start in range(0, len(terms), _TERM_CHUNK):
            for unit, limbs in _limbs(terms[start:start + _TERM_CHUNK], top):
                self._accumulate(unit, limbs.sum(axis=0))

    def add_grouped_terms(self, terms: np.ndarray, groups: np.ndarray, bound: float) -> None:
        """Add each row of ``terms`` (shape (r, e)) to row ``groups[i]`` of this
        sum (shape (g, e)): a scatter-add, exact like :meth:`add_terms`, with
        the same rounding of each entry toward zero onto 2^-84 of ``bound``'s
        power of two. Each group's total is the exact sum of its own rows'
        rounded terms, so rows of other groups never touch it."""
        top = power_of_two_above(bound)
        num_groups, width = self.shape
        for start in range(0, len(terms), _TERM_CHUNK):
            flat = (np.asarray(groups[start:start + _TERM_CHUNK], np.int64)[:, None] * width
                    + np.arange(width)).reshape(-1)
            for unit, limbs in _limbs(terms[start:start + _TERM_CHUNK], top):
                # Integer scatter-add: exact (a chunk's group total < 2^54 units).
                total = np.zeros(num_groups * width, np.int64)
                np.add.at(total, flat, limbs.reshape(-1))
                self._accumulate(unit, total)

    def value(self) -> np.ndarray:
        """The float64 nearest the exact sum (in one rounding, half an ulp)."""
        fast = self._value_from_two_limbs()
        if fast is not None:
            return fast
        for unit in list(self._pending):
            self._flush(unit)
        exact = np.zeros(self.shape, dtype=object)
        finest = min(self._parts, default=1.0)
        for unit, part in self._parts.items():
            exact = exact + part * round(unit / finest)  # unit / finest: power of two
        # int -> float is correctly rounded; multiplying by a power of two is exact.
        return np.array([float(v) for v in exact.reshape(-1)],
                        dtype=np.float64).reshape(self.shape) * finest

    def _value_from_two_limbs(self) -> np.ndarray | None:
        """The same correctly rounded value without Python integers, when the
        sum is still two int64 limbs (one bound, fewer than 2^19 records) each
        at most 2^53 in magnitude: then the high limb times a power of two and
        the low limb are exact float64s, and one float addition rounds their
        exact sum once, to nearest (IEEE 754). A round with 1e5 entries spent
        30 ms in the general path's object arrays."""
        if self._parts or len(self._pending) != 2:
            return None
        (high_unit, (high, _)), (low_unit, (low, _)) = sorted(
            self._pending.items(), key=lambda item: item[0], reverse=True)
        limit = 2**53
        if np.any(np.abs(high) > limit) or np.any(np.abs(low) > limit):
            return None
        ratio = high_unit / low_unit  # a power of two: the scaling is exact
        return (high.astype(np.float64) * ratio + low.astype(np.float64)) * low_unit

    def _accumulate(self, unit: float, chunk: np.ndarray) -> None:
        total, count = self._pending.get(unit, (np.zeros(self.shape, np.int64), 0))
        self._pending[unit] = (total + chunk.reshape(self.shape), count + 1)
        if count + 1 >= _FLUSH_EVERY:
            self._flush(unit)

    def _flush(self, unit: float) -> None:
        total, _ = self._pending.pop(unit)
        part = self._parts.get(unit, np.zeros(self.shape, dtype=object))
        self._parts[unit] = part + total.astype(object)
