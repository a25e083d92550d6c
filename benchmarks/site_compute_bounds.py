"""What a hostile coordinator can still cost a site, in CPU seconds and MiB,
under a site policy's compute and memory bounds (client/compute_budget.py,
client/policy.py).

1. The conversion from the kernels' declared work units (``Kernel.work``) to
   CPU seconds on this machine: each kernel's CPU seconds per unit, measured
   on n records of d features (default the shape of the attack that started
   this: n = 43,000, d = 16), the slowest being the one a coordinator picks.
2. The longest query the policy admits, run for real: regularized_erm with the
   most iterations ``max_query_work`` allows at that n and d, at noise
   multiplier 10^4 (an unpaid query, epsilon about 5e-4).
3. The largest sampler table: CPU to build it, its bytes and the build's peak.
4. The bounds those give at the policy's values (default: deploy/policy.toml):
   per query, per unit of (per-release) epsilon a paid query is charged, per
   job, and the unpaid work a coordinator gets for free, over every job.

Run: ``OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/site_compute_bounds.py``
(``--policy FILE`` for another site's policy). CPU time is process time, the
one-core figure on a shared machine.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import numpy as np

from privadapt.client.policy import SitePolicy
from privadapt.common.accounting.cases import release_epsilon_lower_bound
from privadapt.common.data.dataset import Dataset
from privadapt.common.kernels import get_kernel
from privadapt.common.kernels.regularized_erm import MAX_ITERATIONS
from privadapt.common.mechanisms import Adjacency
from privadapt.common.noise.certified_laws import FoldedDiscreteGaussian
from privadapt.common.noise.table_inversion import TableCache

POLICY = Path(__file__).resolve().parent.parent / "deploy" / "policy.toml"
MIB = 2**20


def kernel_cases(dim: int, rng: np.random.Generator) -> dict[str, tuple[str, dict]]:
    """(kernel, wire params) of a moderate query of each kind, at ``dim``."""
    weights = rng.normal(size=dim) * 0.1
    return {
        "regularized_erm": ("regularized_erm", {
            "loss": "logistic", "regularization": 2.0, "radius": 3.0, "clip_norm": 1.0,
            "label_bound": 1.0, "iterations": 40}),
        "linear_gradient": ("linear_gradient", {"weights": weights, "loss": "logistic",
                                                "clip_norm": 1.0}),
        "linf_gradient": ("linf_gradient", {"weights": weights, "loss": "squared",
                                            "clip_norm": 1.0}),
        "second_moments": ("second_moments", {"feature_norm": 1.0, "label_bound": 1.0}),
        "validation_loss (64 candidates)": ("validation_loss", {
            "candidates": rng.normal(size=(64, dim)), "loss": "squared", "loss_bound": 4.0}),
        "validation_loss (softmax, 8 x 10 classes)": ("validation_loss", {
            "candidates": rng.normal(size=(8, dim, 10)), "loss": "softmax_cross_entropy",
            "loss_bound": 4.0}),
        "nearest_target_sums (256 targets)": ("nearest_target_sums", {
            "targets": rng.uniform(-0.3, 0.3, size=(256, dim))}),
        "nearest_source_averages (64 x 16)": ("nearest_source_averages", {
            "targets": rng.uniform(-0.3, 0.3, size=(64, dim)), "t": 16}),
        "l1_vertex_scores": ("l1_vertex_scores", {"offset": np.zeros(dim), "radius": 1.0,
                                                  "clip_norm": 1.0, "loss": "squared"}),
        "exact_discrepancy": ("exact_discrepancy", {
            "feature_norm": 1.0, "label_bound": 1.0, "radius": 1.0,
            "public_moments": np.diag([0.5 / dim] * dim + [0.5])}),
    }


def cpu_seconds(run: Callable[[], object]) -> float:
    start = time.process_time()
    run()
    return time.process_time() - start


def seconds_per_unit(data: Dataset, rng: np.random.Generator) -> dict[str, float]:
    rates = {}
    for label, (name, wire) in kernel_cases(data.dim, rng).items():
        kernel = get_kernel(name)
        params = kernel.Params.from_wire(wire, data.dim)
        work = kernel.work(params, data.dim, data.num_records)
        seconds = cpu_seconds(lambda k=kernel, p=params: k.compute(data, p, {}))
        rates[label] = seconds / work
        print(f"  {label:<44} {work:10.3g} units {seconds:7.3f} s CPU "
              f"{work / seconds:10.3g} units/s")
    return rates


def longest_query(data: Dataset, policy: SitePolicy) -> tuple[float, float]:
    """(work, CPU seconds) of the longest regularized_erm query the policy
    admits (whether its steps certify the tolerance the site charges does not
    change what it costs)."""
    kernel = get_kernel("regularized_erm")
    steps = min(MAX_ITERATIONS, int(policy.max_query_work // (data.num_records * data.dim)))
    wire = {"loss": "logistic", "regularization": 2.0, "radius": 3.0, "clip_norm": 1.0,
            "label_bound": 1.0, "iterations": steps}
    params = kernel.Params.from_wire(wire, data.dim)
    work = kernel.work(params, data.dim, data.num_records)
    return work, cpu_seconds(lambda: kernel.compute(data, params, {}))


def unpaid_epsilon(policy: SitePolicy, dim: int) -> float:
    """The per-release epsilon of a linear_gradient release at noise multiplier 10^4."""
    kernel = get_kernel("linear_gradient")
    params = kernel.Params.from_wire({"weights": np.zeros(dim), "loss": "logistic",
                                      "clip_norm": 1.0}, dim)
    mechanism = kernel.mechanism(params, 1e4, Adjacency.REPLACE_ONE, dim=dim)
    return release_epsilon_lower_bound(mechanism, policy.delta_cap)


def largest_table() -> tuple[float, int, int]:
    """(CPU seconds, bytes, peak bytes while building) of a table near the
    samplers' largest (a discrete Gaussian of sigma 2.3e4 grid steps)."""
    cache = TableCache()
    law = FoldedDiscreteGaussian(Fraction(23_000) ** 2)
    seconds = cpu_seconds(lambda: cache.table(law, 64))
    tracemalloc.start()  # a second build, traced (tracing slows it several times)
    TableCache().table(law, 64)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return seconds, cache.held_bytes, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", default=str(POLICY))
    parser.add_argument("--records", type=int, default=43_000)
    parser.add_argument("--dim", type=int, default=16)
    args = parser.parse_args()
    policy = SitePolicy.from_toml(args.policy)
    rng = np.random.default_rng(0)
    features = rng.normal(size=(args.records, args.dim))
    features /= np.maximum(1.0, np.linalg.norm(features, axis=1))[:, None]
    data = Dataset(features, np.sign(rng.normal(size=args.records)),
                   tuple(f"x{i}" for i in range(args.dim)))
    print(f"CPU seconds per work unit at n = {args.records}, d = {args.dim}:")
    rates = seconds_per_unit(data, rng)
    worst = max(rates.values())
    print(f"slowest: {1 / worst:.3g} units/s ({max(rates, key=rates.get)})")
    work, seconds = longest_query(data, policy)
    print(f"longest admitted query: regularized_erm, {work:.3g} units, {seconds:.2f} s CPU")
    print(f"a release at noise multiplier 1e4 costs epsilon "
          f"{unpaid_epsilon(policy, args.dim):.2g}: unpaid under min_query_epsilon "
          f"{policy.min_query_epsilon:g}")
    table_s, table_bytes, peak = largest_table()
    print(f"largest sampler table: {table_s:.2f} s CPU, {table_bytes / MIB:.1f} MiB kept, "
          f"{peak / MIB:.1f} MiB at the build's peak")
    per_query = max(seconds, policy.max_query_work * worst)
    print(f"\nbounds under {args.policy}:")
    print(f"  one query:          <= {per_query:8.1f} s CPU")
    print(f"  per unit epsilon:   <= {per_query / policy.min_query_epsilon:8.3g} s CPU "
          f"(a paid query costs at least {policy.min_query_epsilon:g} of per-release "
          "epsilon)")
    print(f"  one job:            <= {policy.max_job_work * worst:8.1f} s CPU")
    print(f"  unpaid, every job:  <= {policy.max_unpaid_work * worst:8.1f} s CPU per daemon run, "
          "at epsilon about 0")
    print(f"  sampler tables:     <= {policy.max_sampler_table_bytes / MIB:8.1f} MiB kept, + "
          f"{peak / MIB:.1f} MiB while one builds; each new noise parameter "
          f"<= {table_s:.2f} s CPU")


if __name__ == "__main__":
    main()
