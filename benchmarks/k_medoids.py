"""Accelerated k-medoids (AkM) against plain PAM on source-target clustering
(seed 001): seconds and Cost(T, S, T_k) at |T| = 8,000, |S| = 5,000, d = 20,
k = 20.

Data: the target is a mixture of 40 Gaussian clusters, the source a mixture of
25 clusters of which 10 share the target's centres (the overlap a good choice
should leave to the source). One run each (PAM is deterministic; AkM at seed 0).

Run: ``.venv/bin/python benchmarks/k_medoids.py`` (``--small`` for a quick
1,000 / 600 look). PAM is the slow row: minutes at full size.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from privadapt.server.algorithms.source_target_clustering import (
    accelerated_k_medoids,
    pam_k_medoids,
    stc_cost,
)


def instance(num_target: int, num_source: int, dim: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-1, 1, size=(40, dim))
    target = centres[rng.integers(0, 40, num_target)] + 0.15 * rng.normal(size=(num_target, dim))
    source_centres = np.vstack([centres[:10], rng.uniform(-1, 1, size=(15, dim))])
    source = source_centres[rng.integers(0, 25, num_source)] \
        + 0.15 * rng.normal(size=(num_source, dim))
    return target, source


def main(argv: list[str]) -> None:
    small = "--small" in argv
    n, m, d, k = (1000, 600, 20, 20) if small else (8000, 5000, 20, 20)
    target, source = instance(n, m, d)
    print(f"|T| = {n}, |S| = {m}, d = {d}, k = {k}")
    print(f"{'solver':<28}{'seconds':>10}{'cost':>12}")
    rows = [("AkM", lambda: accelerated_k_medoids(target, k, source=source, seed=0)),
            ("PAM (BUILD + SWAP)", lambda: pam_k_medoids(target, k, source=source)),
            ("ClusterT (AkM, no source)", lambda: accelerated_k_medoids(target, k, seed=0))]
    for name, solve in rows:
        start = time.perf_counter()
        chosen = solve()
        seconds = time.perf_counter() - start
        print(f"{name:<28}{seconds:>10.2f}{stc_cost(target, source, target[chosen]):>12.5f}")


if __name__ == "__main__":
    main(sys.argv[1:])
