"""NNA's site-side work (kernel ``nearest_target_sums``): seconds for 1e6
private points and 10,000 target points at d = 8 (the
target: under 5 s on one core), on three data sets:

* clustered: records and targets each in 40 Gaussian clusters (as real data
  after a random projection tends to be), the two sets' clusters at
  *different* random centres, so a record's nearest target is far (mean
  distance 0.28 for points of norm at most 1/2) and a search prunes little;
* isotropic Gaussian: records and targets from one Gaussian (the k-d tree's
  hard case in 8 dimensions; a record's nearest target at 0.15);
* overlapping clusters: records and targets in the *same* 40 clusters, as in
  seed 001's setting where the target T overlaps the source S and NNA sends
  a coreset of T (nearest target at 0.044 on average).

Each line prints the wall time and the process CPU time: on a shared machine
the CPU time is the one-core figure (wall time counts other jobs' turns).
Then a check that the cells equal scipy's k-d tree nearest neighbour on a
sample (random data has no ties, where the canonical rule and the tree agree).

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/nna_kernel.py``.
"""

from __future__ import annotations

import time

import numpy as np
from scipy.spatial import cKDTree

from privadapt.common.data.dataset import Dataset
from privadapt.common.kernels import get_kernel
from privadapt.common.kernels.nearest_cells import TargetIndex, nearest_targets
from privadapt.common.kernels.nearest_target_sums import NearestTargetParams
from privadapt.common.numerics.geometry import clip_rows_to_norm

N, M, D = 1_000_000, 10_000, 8
CHECKED_RECORDS = 10_000


def clusters(rng: np.random.Generator) -> np.ndarray:
    return rng.uniform(-0.3, 0.3, size=(40, D))


def points(rng: np.random.Generator, count: int, clustered: bool,
           centres: np.ndarray | None = None) -> np.ndarray:
    if clustered:
        centres = clusters(rng) if centres is None else centres
        raw = centres[rng.integers(0, 40, count)] + 0.03 * rng.normal(size=(count, D))
    else:
        raw = 0.15 * rng.normal(size=(count, D))
    return clip_rows_to_norm(raw, 0.5)


def cases(rng: np.random.Generator):
    """(name, records, targets), drawn in a fixed order from one generator."""
    for clustered in (True, False):
        records = points(rng, N, clustered)
        yield ("clustered" if clustered else "isotropic Gaussian"), records, points(
            rng, M, clustered)
    shared = clusters(rng)
    yield "overlapping clusters", points(rng, N, True, shared), points(rng, M, True, shared)


def main() -> None:
    kernel = get_kernel("nearest_target_sums")
    rng = np.random.default_rng(0)
    print(f"n = {N}, m = {M}, d = {D}{'':6}wall       cpu   cells = k-d tree on {CHECKED_RECORDS}")
    for name, records, targets in cases(rng):
        data = Dataset(records, np.zeros(N), tuple(f"x{i}" for i in range(D)))
        params = NearestTargetParams(targets)
        wall, cpu = time.perf_counter(), time.process_time()
        kernel.compute(data, params, {})
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        sample = records[:CHECKED_RECORDS]
        agrees = np.array_equal(nearest_targets(sample, TargetIndex(targets)),
                                cKDTree(targets).query(sample)[1])
        print(f"{name:<26}{wall:>8.2f} s{cpu:>8.2f} s   {agrees}")


if __name__ == "__main__":
    main()
