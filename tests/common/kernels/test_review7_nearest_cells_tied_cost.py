"""Adversarial review 7: the grouped nearest-target search's cost (time and
memory) on records that tie many targets grows by O(m) per tied record, so
it depends on the private records far more than the k-d tree it replaced.

A hostile coordinator sends m targets on a circle of radius 0.9 about a point
p it picks (here the origin; every target's squared distance to p is equal
within the filter's margin, a few ulps of S). A record exactly at p (a zero
row, a lattice point: common in real data) is then "close" to all m targets,
and the rule is run on all m pairs: :func:`canonical_nearest` gathers,
differences, squares and lexsorts 256 x m pairs for a block of such records.
Measured on the review machine through the kernel's search, d = 2,
m = 2^16, 5,000 records: 4.6 s with none at p, 21 s with 256 at p, 64 s with
1,024 (about 65 ms per tied record; the k-d tree it replaced visited the same
m targets in C, well under a millisecond), and peak RSS 395 MB against
1,864 MB: one block of tied records allocates several arrays of 256 m
entries, although :data:`SEARCH_RECORDS` is documented to bound the working
memory. So (a) the answer's duration reveals how many private records sit
at a coordinator-chosen point, and (b) a site with many identical rows can
be pushed out of memory (a failure that depends on the data) or into hours
of work (2^20 records at p: about 19 hours).

Fixed: near-ties are now decided by :func:`rule_among` in passes of at
most 2^20 (record, target) entries, one dense D over the kept columns per
pass, so a tied record costs one brute-force scan of the m targets (O(m d),
vectorised) and memory stays bounded. This test pins the memory
(deterministic: traced peak 436 MB before the fix against 64 MB in general
position at m = 2^14, 256 records; within 2x after it). The time is not
asserted (timings are benchmarks, not tests): on one block of 256 records at
m = 2^14 it went from 2.4 s to 0.044 s, against 0.0066 s in general
position. That residual difference (about 0.15 ms per tied record, like a
brute-force nearest-neighbour query) is the data-dependent time every
nearest-neighbour search has, the k-d tree included (review 7, info).
"""

from __future__ import annotations

import tracemalloc

import numpy as np

from privadapt.common.kernels.nearest_cells import TargetIndex, nearest_targets

TARGETS = 2**14
RECORDS = 256


def circle_targets() -> np.ndarray:
    angles = np.arange(TARGETS) * 2 * np.pi / TARGETS
    return 0.9 * np.column_stack([np.cos(angles), np.sin(angles)])


def general_records() -> np.ndarray:
    rng = np.random.default_rng(7)
    records = rng.normal(size=(RECORDS, 2))
    return records * 0.5 * np.sqrt(rng.random((RECORDS, 1))) / np.linalg.norm(
        records, axis=1, keepdims=True)


def peak_memory(records: np.ndarray, index: TargetIndex) -> int:
    tracemalloc.start()
    try:
        nearest_targets(records, index)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_review7_records_tied_at_a_chosen_point_do_not_blow_up_the_memory():
    index = TargetIndex(circle_targets())
    general = peak_memory(general_records(), index)
    tied = peak_memory(np.zeros((RECORDS, 2)), index)
    assert tied <= 2 * general, (f"peak traced memory {tied / 2**20:.0f} MB with the records "
                                 f"at the chosen point, {general / 2**20:.0f} MB otherwise")
