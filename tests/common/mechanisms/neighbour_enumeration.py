"""Exact enumerations of neighbouring utility vectors, shared by the
selection mechanisms' privacy checks: the moves a neighbour may make, and the
log ratio of two exact probabilities."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from fractions import Fraction

import mpmath


def log_ratio(p: Fraction, q: Fraction) -> mpmath.mpf:
    """log(p / q) at mpmath's working precision, from the exact ratio."""
    r = p / q
    return mpmath.log(mpmath.mpf(r.numerator) / r.denominator)


def moves(count: int, delta: int, monotone: bool) -> Iterator[tuple[int, ...]]:
    """Every change of ``count`` utilities by at most ``delta`` each; for a
    monotone neighbour, all in one direction."""
    for move in itertools.product(range(-delta, delta + 1), repeat=count):
        if not monotone or all(x >= 0 for x in move) or all(x <= 0 for x in move):
            yield move
