"""A C-coreset of the public target (seed 001, Section 6 and Appendix B).

Seed 001 shrinks the target before sanitising (NAS's noise grows with the
number of target points the sites answer for) to a subset T' such that every
x in T is within C of a point of T' (Corollary B.1: the cost guarantee of
Theorem 5.5 then holds with n' = |T'| plus an additive C), built "using
Bentley & Friedman (1979) with a termination condition of C = 0.05".

Here: a k-d tree split (the cell's widest coordinate, at the median position)
until every cell's bounding box has diagonal at most C, so any two points of a
cell are within C; each cell keeps one point, the member nearest the cell's
mean. Equal coordinates stay on one side of a split, so copies of a point
share a cell. The target is public: no privacy is involved.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privadapt.server.algorithms.source_target_clustering.distances import as_points

#: Seed 001's termination condition (Section 6).
DEFAULT_DIAMETER = 0.05


@dataclass(frozen=True)
class Coreset:
    """``indices``: the kept target points (one per cell, ascending);
    ``cells``: for every target point, the position in ``indices`` of its
    cell's representative (within ``diameter`` of it)."""

    indices: np.ndarray
    cells: np.ndarray
    diameter: float

    @property
    def weights(self) -> np.ndarray:
        """How many target points each kept point stands for."""
        return np.bincount(self.cells, minlength=len(self.indices))


def target_coreset(target: np.ndarray, diameter: float = DEFAULT_DIAMETER) -> Coreset:
    """The k-d tree coreset of ``target`` with cells of diameter <= ``diameter``."""
    points = as_points(target, "target")
    if not (np.isfinite(diameter) and diameter >= 0):
        raise ValueError(f"diameter must be finite and >= 0, got {diameter!r}")
    representatives: list[int] = []
    cells = np.empty(len(points), dtype=np.int64)
    stack = [np.arange(len(points))] if len(points) else []
    while stack:
        members = stack.pop()
        box = points[members]
        widths = box.max(axis=0) - box.min(axis=0)
        if np.linalg.norm(widths) <= diameter or len(members) == 1:
            centre = box.mean(axis=0)
            cells[members] = len(representatives)
            representatives.append(int(members[np.argmin(((box - centre) ** 2).sum(axis=1))]))
            continue
        values = box[:, int(np.argmax(widths))]
        # Split at the median value, equal values on one side (a cell of one
        # location is never split); the widest coordinate varies, so both
        # sides are non-empty.
        median = np.sort(values)[len(values) // 2]
        below = values < median
        if not below.any():
            below = values <= median
        stack.extend((members[~below], members[below]))
    indices = np.array(representatives, dtype=np.int64)
    ascending = np.argsort(indices, kind="stable")
    rank = np.empty_like(ascending)
    rank[ascending] = np.arange(len(ascending))
    return Coreset(indices[ascending], rank[cells], float(diameter))
