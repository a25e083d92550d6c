"""NNA's site-side work (kernel ``nearest_target_sums``): seconds for 1e6
private points and 10,000 target points at d = 8 (issue 15's benchmark:
target under 5 s on one core), on clustered points (40 Gaussian clusters,
as real data after a random projection tends to be) and on one isotropic
Gaussian (the k-d tree's hardest case in 8 dimensions).

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/nna_kernel.py``.
"""

from __future__ import annotations

import time

import numpy as np

from privadapt.common.data import Dataset
from privadapt.common.geometry import clip_rows_to_norm
from privadapt.common.kernels import get_kernel
from privadapt.common.kernels.nearest_target_sums import NearestTargetParams

N, M, D = 1_000_000, 10_000, 8


def points(rng: np.random.Generator, count: int, clustered: bool) -> np.ndarray:
    if clustered:
        centres = rng.uniform(-0.3, 0.3, size=(40, D))
        raw = centres[rng.integers(0, 40, count)] + 0.03 * rng.normal(size=(count, D))
    else:
        raw = 0.15 * rng.normal(size=(count, D))
    return clip_rows_to_norm(raw, 0.5)


def main() -> None:
    kernel = get_kernel("nearest_target_sums")
    rng = np.random.default_rng(0)
    print(f"n = {N}, m = {M}, d = {D}")
    for clustered in (True, False):
        data = Dataset(points(rng, N, clustered), np.zeros(N), tuple(f"x{i}" for i in range(D)))
        params = NearestTargetParams(points(rng, M, clustered))
        start = time.perf_counter()
        kernel.compute(data, params, {})
        name = "clustered" if clustered else "isotropic Gaussian"
        print(f"{name:<20}{time.perf_counter() - start:>8.2f} s")


if __name__ == "__main__":
    main()
