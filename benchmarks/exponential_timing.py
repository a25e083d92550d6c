"""The fixed-work exponential sampler's time on tied against spread scores
(a timing channel if they differ): the ratio of the medians, interleaved in one
run, should stay near 1 whatever the scores' gap bits.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/exponential_timing.py``.
"""

from __future__ import annotations

import time
from fractions import Fraction

import numpy as np

from privadapt.common.mechanisms.fixed_work_exponential import (
    factor_table,
    fixed_work_exponential_index,
)

REPEATS = 31


def median_times(utilities: dict[str, np.ndarray], coefficient: Fraction) -> dict[str, float]:
    factor_table(coefficient)  # the public constants, once
    times: dict[str, list[float]] = {name: [] for name in utilities}
    for _ in range(REPEATS):
        for name, values in utilities.items():  # interleaved: load drifts hit both
            start = time.perf_counter()
            fixed_work_exponential_index(values, coefficient)
            times[name].append(time.perf_counter() - start)
    return {name: float(np.median(t)) for name, t in times.items()}


def main() -> None:
    rng = np.random.default_rng(7)
    print(f"{'c':>8} {'K':>6} {'tied ms':>9} {'spread ms':>10} {'ratio':>6}")
    for exponent in (10, 20, 38):
        for count in (4096, 20_000):
            utilities = {"tied": np.zeros(count, dtype=np.int64),
                         "spread": -rng.integers(0, 30 * 2**32, count)}
            medians = median_times(utilities, Fraction(1, 2**exponent))
            ratio = max(medians.values()) / min(medians.values())
            print(f"{'2^-' + str(exponent):>8} {count:>6} {medians['tied'] * 1e3:>9.2f} "
                  f"{medians['spread'] * 1e3:>10.2f} {ratio:>6.3f}")


if __name__ == "__main__":
    main()
