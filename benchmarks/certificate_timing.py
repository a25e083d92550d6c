"""The wall-clock spread of the self-certifying kernels on neighbouring
datasets: what a coordinator timing a site's replies could read of the
certificate's work beyond the shapes (client/ledger/latches.py).

The operations are the same on neighbours (tests/client/test_certificate_work_spread.py
counts them); what may still vary is inside the numerical libraries (LAPACK's
eigh deflates by the values). For each kernel that certifies its own error and
each neighbouring pair (one record replaced by an extreme one, one added, the
empty site against one record, and for exact_discrepancy the near-degenerate
pair whose re-solve once ran on one side only), the two datasets' computes
are timed interleaved, ``--repeats`` times each; printed: each side's median,
the spread between the medians, and the noise floor (the spread between two
halves of the first side's own samples, the same data). A spread within the
floor is nothing a coordinator can read from one reply.

Run: ``OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/certificate_timing.py``
(``--records``, ``--dim``, ``--repeats``).
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np

from privadapt.common.data.dataset import Dataset
from privadapt.common.kernels import get_kernel

MICRO = 1e6


def kernel_params(dim: int, rng: np.random.Generator) -> dict[str, dict]:
    points = rng.normal(size=(8, dim))
    points /= np.maximum(1.0, np.linalg.norm(points, axis=1))[:, None]
    return {
        "exact_discrepancy": {"feature_norm": 1.0, "label_bound": 1.0, "radius": 3.0,
                              "public_moments": np.diag([0.5 / dim] * dim + [0.5])},
        "smoothed_discrepancy_gradient": {"feature_norm": 1.0, "source_points": points,
                                          "weights": np.full(8, 1 / 8), "mu": 2.0},
    }


def neighbour_pairs(records: int, dim: int, rng: np.random.Generator
                    ) -> dict[str, tuple[Dataset, Dataset]]:
    names = tuple(f"x{i}" for i in range(dim))
    features = rng.normal(size=(records, dim))
    features /= np.maximum(1.0, np.linalg.norm(features, axis=1))[:, None]
    labels = np.clip(rng.normal(size=records) * 0.5, -1, 1)
    extreme = np.zeros(dim)
    extreme[0] = 1.0
    replaced_x, replaced_y = features.copy(), labels.copy()
    replaced_x[0], replaced_y[0] = extreme, -1.0
    base = Dataset(features, labels, names)
    return {
        "replace one": (base, Dataset(replaced_x, replaced_y, names)),
        "add one": (base, Dataset(np.vstack([features, extreme]), np.append(labels, -1.0),
                                  names)),
        "empty / one": (Dataset(np.zeros((0, dim)), np.zeros(0), names),
                        Dataset(features[:1], labels[:1], names)),
    }


def degenerate_pair() -> tuple[dict, tuple[Dataset, Dataset]]:
    """The exact_discrepancy pair whose reply times once differed (1.80 ms
    against 0.63 ms): twelve records x = 0.5, y = 0, and one label 0.5."""
    features, labels = np.full((12, 1), 0.5), np.zeros(12)
    other = labels.copy()
    other[0] = 0.5
    params = {"feature_norm": 1.0, "label_bound": 1.0, "radius": 69.3,
              "public_moments": np.array([[1.0, 3e-11], [3e-11, 0.5]])}
    return params, (Dataset(features, labels, ("x0",)), Dataset(features, other, ("x0",)))


def timed(kernel, params, pair: tuple[Dataset, Dataset], repeats: int
          ) -> tuple[list[float], list[float]]:
    """Wall-clock seconds of each side's compute, interleaved."""
    typed = kernel.Params.from_wire(params, pair[0].dim)
    samples: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for side, data in enumerate(pair):
            start = time.perf_counter()
            kernel.compute(data, typed, {})
            samples[side].append(time.perf_counter() - start)
    return samples


def report(label: str, samples: tuple[list[float], list[float]]) -> float:
    first, second = samples
    median_a, median_b = statistics.median(first), statistics.median(second)
    floor = abs(statistics.median(first[0::2]) - statistics.median(first[1::2]))
    spread = abs(median_a - median_b)
    print(f"  {label:<46} {median_a * MICRO:9.1f} {median_b * MICRO:9.1f} "
          f"{spread * MICRO:8.1f} {floor * MICRO:8.1f}")
    return spread


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--dim", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    params = kernel_params(args.dim, rng)
    pairs = neighbour_pairs(args.records, args.dim, rng)
    print(f"n = {args.records}, d = {args.dim}, {args.repeats} interleaved runs a side; "
          "microseconds of wall clock")
    print(f"  {'kernel / neighbours':<46} {'median A':>9} {'median B':>9} {'spread':>8} "
          f"{'floor':>8}")
    worst = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for name, wire in params.items():
            kernel = get_kernel(name)
            for label, pair in pairs.items():
                worst = max(worst, report(f"{name}, {label}", timed(kernel, wire, pair,
                                                                     args.repeats)))
        wire, pair = degenerate_pair()
        worst = max(worst, report("exact_discrepancy, near-degenerate (n = 12)",
                                  timed(get_kernel("exact_discrepancy"), wire, pair,
                                        args.repeats)))
    print(f"largest spread between neighbours' medians: {worst * MICRO:.1f} microseconds")


if __name__ == "__main__":
    main()
