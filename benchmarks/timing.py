"""Timing shared by the benchmark scripts: medians over repeats in one run."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_seconds(action: Callable[[], object], repeats: int, warm_up: bool = False) -> float:
    """Median wall time of ``action`` over ``repeats`` calls (after one untimed
    call if ``warm_up``, to keep lazy imports and caches out of the figure)."""
    if warm_up:
        action()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times)
