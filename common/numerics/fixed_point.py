"""Fixed-point encoding for aggregation: float64 <-> integers modulo 2^64.

Every federation, in-process or networked, sums site shares through this codec,
so rounding is identical on both (DESIGN.md section 3). Secure aggregation adds
pairwise masks modulo 2^64 on top of these integers; the masks cancel in the
sum and the decoded value is exactly the sum of the encoded shares.

A value v is encoded as round(v * 2^f) taken modulo 2^64 and decoded as a
two's-complement int64 divided by 2^f. The sum of K shares decodes correctly as
long as its magnitude stays below 2^(63 - f); :meth:`FixedPointCodec.check_sum_bound`
says so before a job starts, and :meth:`encode` refuses a single share that could
not fit.

A site encodes what its kernel computed from private records with
:meth:`encode_saturating`, never with :meth:`encode`: an error raised after the
kernel ran is an uncharged output whose occurrence depends on the records
(a public offset once put the encoding limit between two
neighbouring datasets and a binary search read a private score from the errors).
Saturation is a 1-Lipschitz map of each coordinate, so it never increases the
distance between neighbours' outputs: the charged sensitivity still bounds it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

DEFAULT_FRACTIONAL_BITS = 32
# A share's magnitude in grid steps stays below 2^62: one bit of headroom
# below int64's 2^63, so shares can be summed.
_SHARE_LIMIT_STEPS = 2.0**62
# What encode_saturating clamps to: the largest double below that limit that
# is a multiple of 2^10 (doubles near 2^62 are spaced 2^10 apart), so it
# converts to int64 exactly.
_SATURATION = _SHARE_LIMIT_STEPS - 2.0**10


@dataclass(frozen=True)
class FixedPointCodec:
    """Encoding with ``fractional_bits`` bits after the binary point: resolution
    2^-f, representable sums in (-2^(63-f), 2^(63-f))."""

    fractional_bits: int = DEFAULT_FRACTIONAL_BITS

    def __post_init__(self) -> None:
        if not 0 <= self.fractional_bits <= 52:
            raise ValueError(f"fractional_bits must be in [0, 52], got {self.fractional_bits}")

    @property
    def scale(self) -> float:
        return float(2**self.fractional_bits)

    @property
    def max_abs_sum(self) -> float:
        """Largest magnitude a decoded sum may have without wrapping."""
        return float(2 ** (63 - self.fractional_bits))

    def check_sum_bound(self, bound: float, where: str = "the aggregate") -> None:
        """Raise ``OverflowError`` when a sum bounded by ``bound`` could wrap."""
        if not bound < self.max_abs_sum:
            raise OverflowError(
                f"{where} can reach {bound:.3g} in magnitude but fixed-point encoding with "
                f"{self.fractional_bits} fractional bits wraps at {self.max_abs_sum:.3g}: "
                "lower the clipping bounds or the noise, or use fewer fractional bits"
            )

    def encode(self, values: np.ndarray) -> np.ndarray:
        """uint64 encoding of float values; non-finite or too-large values raise."""
        values = np.asarray(values, dtype=np.float64)
        if not np.all(np.isfinite(values)):
            raise ValueError("cannot encode NaN or infinite values")
        with np.errstate(over="ignore"):  # an overflow to inf is refused just below
            scaled = np.rint(values * self.scale)
        # Keep one bit of headroom: a share this large leaves no room to sum.
        if scaled.size and np.max(np.abs(scaled)) >= _SHARE_LIMIT_STEPS:
            raise OverflowError(
                f"a share of magnitude {np.max(np.abs(values)):.3g} does not fit the "
                f"fixed-point range of {self.fractional_bits} fractional bits "
                f"(|sum| < {self.max_abs_sum:.3g}): lower the clipping bounds or the noise"
            )
        return scaled.astype(np.int64).view(np.uint64)

    @property
    def max_abs_share(self) -> float:
        """Largest magnitude one share may have (:meth:`encode` keeps a bit of headroom)."""
        return _SHARE_LIMIT_STEPS / self.scale

    def check_share_bound(self, bound: float, where: str = "one share") -> None:
        """Raise ``OverflowError`` when a share bounded by ``bound`` could pass
        the share range (a K = 1 sum may reach 2^(63-f), a share only 2^(62-f))."""
        if not bound < self.max_abs_share:
            raise OverflowError(
                f"{where} can reach {bound:.3g} in magnitude but a share with "
                f"{self.fractional_bits} fractional bits must stay below "
                f"{self.max_abs_share:.3g}: lower the clipping bounds, the offsets or the "
                "noise, or use fewer fractional bits"
            )

    def encode_saturating(self, values: np.ndarray) -> np.ndarray:
        """uint64 encoding of a value computed from private records, each
        coordinate clamped to the share range instead of raising (module
        docstring). Only NaN still raises: no kernel computes one from
        clipped records, and no number stands for it honestly."""
        values = np.asarray(values, dtype=np.float64)
        if np.isnan(values).any():
            raise ValueError("cannot encode NaN values")
        with np.errstate(over="ignore"):  # +-inf clamps like any large value
            scaled = np.rint(values * self.scale)
        np.clip(scaled, -_SATURATION, _SATURATION, out=scaled)
        return scaled.astype(np.int64).view(np.uint64)

    def decode(self, encoded: np.ndarray) -> np.ndarray:
        """Float values of a uint64 encoding (of one share or a sum of shares)."""
        encoded = np.asarray(encoded, dtype=np.uint64)
        return encoded.view(np.int64).astype(np.float64) / self.scale

    @staticmethod
    def add(encoded: Iterable[np.ndarray]) -> np.ndarray:
        """Sum of encodings modulo 2^64 (numpy uint64 arithmetic wraps)."""
        total: np.ndarray | None = None
        for part in encoded:
            part = np.asarray(part, dtype=np.uint64)
            total = part.copy() if total is None else np.add(total, part, out=total)
        if total is None:
            raise ValueError("nothing to add")
        return total
