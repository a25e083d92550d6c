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
5. Per unit of *composed* epsilon: the most paid releases a coordinator can
   buy for a total epsilon of 1 at the cap's delta is (mu_1 / mu_floor)^2,
   Gaussian releases each priced at ``min_query_epsilon`` (mu-GDP composes
   exactly: mu^2 adds), times the longest query.
6. A work-item flood: the CPU of one round announcement (key pair, signature,
   the round's progress committed in the ledger database), which no epsilon
   pays for, and the memory the daemon's bounds let work items hold
   (client/daemon/job_lanes.py, client/daemon/worker.py).
7. The closing table: for each attack, what a hostile coordinator can still
   cost the site at most, in CPU seconds and MiB, and per unit of epsilon.

Run: ``OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/site_compute_bounds.py``
(``--policy FILE`` for another site's policy). CPU time is process time, the
one-core figure on a shared machine.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import numpy as np
from scipy.optimize import brentq
from scipy.stats import norm

from privadapt.client.daemon.job_lanes import MAX_LANES, MAX_QUEUED_BYTES
from privadapt.client.daemon.round_progress import RoundProgress
from privadapt.client.daemon.worker import MAX_OPEN_ROUND_BYTES, SiteIdentity, SiteWorker
from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.client.site import Site
from privadapt.common.accounting.cases import release_epsilon_lower_bound
from privadapt.common.data.dataset import Dataset
from privadapt.common.federation import Query
from privadapt.common.kernels import get_kernel
from privadapt.common.kernels.regularized_erm import MAX_ITERATIONS
from privadapt.common.mechanisms import Adjacency, GaussianMechanism
from privadapt.common.noise.certified_laws import FoldedDiscreteGaussian
from privadapt.common.noise.table_inversion import TableCache
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.secure import certs
from privadapt.common.wire.messages import MAX_MESSAGE_BYTES, query_to_proto

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


def peak_bytes(run: Callable[[], object]) -> int:
    """The most bytes ``run`` held at once beyond what was held before it."""
    tracemalloc.start()
    run()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def seconds_per_unit(data: Dataset, rng: np.random.Generator
                     ) -> tuple[dict[str, float], dict[str, int]]:
    """Each kernel case's CPU seconds per work unit, and its peak bytes (a
    second run, traced)."""
    rates, peaks = {}, {}
    for label, (name, wire) in kernel_cases(data.dim, rng).items():
        kernel = get_kernel(name)
        params = kernel.Params.from_wire(wire, data.dim)
        work = kernel.work(params, data.dim, data.num_records)
        seconds = cpu_seconds(lambda k=kernel, p=params: k.compute(data, p, {}))
        rates[label] = seconds / work
        peaks[label] = peak_bytes(lambda k=kernel, p=params: k.compute(data, p, {}))
        print(f"  {label:<44} {work:10.3g} units {seconds:7.3f} s CPU "
              f"{work / seconds:10.3g} units/s {peaks[label] / MIB:7.1f} MiB peak")
    return rates, peaks


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
    # A second build, traced (tracing slows it several times).
    peak = peak_bytes(lambda: TableCache().table(law, 64))
    return seconds, cache.held_bytes, peak


def gaussian_mu(epsilon: float, delta: float) -> float:
    """The mu of the mu-GDP Gaussian release whose (epsilon, delta) curve
    passes through (``epsilon``, ``delta``)."""
    def excess(mu: float) -> float:
        return (norm.cdf(-epsilon / mu + mu / 2)
                - math.exp(epsilon) * norm.cdf(-epsilon / mu - mu / 2) - delta)

    return brentq(excess, 1e-9, 100.0)


def floor_releases_per_epsilon(policy: SitePolicy) -> float:
    """How many Gaussian releases, each priced at exactly min_query_epsilon,
    compose to epsilon 1 at the cap's delta."""
    floor = gaussian_mu(policy.min_query_epsilon, policy.delta_cap)
    return (gaussian_mu(1.0, policy.delta_cap) / floor) ** 2


def announcement_seconds(count: int = 200) -> float:
    """CPU seconds a site spends on one round announcement (and its abort)."""
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        certs.init_ca(root)
        certs.issue_certificate(root, "site", "bench")
        policy = SitePolicy("bench", 10.0, 1e-5)
        site = Site(Dataset(np.zeros((10, 3)), np.zeros(10), ("a", "b", "c")), policy,
                    PrivacyLedger(root / "site.db", policy, create=True))
        identity = SiteIdentity("bench", (root / "bench.crt").read_bytes(),
                                certs.load_private_key(root / "bench.key"),
                                (root / "ca.crt").read_bytes())
        worker = SiteWorker(site, identity, RoundProgress(site.ledger.path))
        calls = _DiscardedCalls()
        params = {"weights": np.zeros(3), "loss": "logistic", "clip_norm": 1.0}
        mechanism = GaussianMechanism.single(2.0, 4.0, Adjacency.REPLACE_ONE)
        items = []
        for round in range(1, count + 1):
            query = Query("flood", f"q{round}", "linear_gradient", params, mechanism)
            items.append((pb.WorkItem(round_announcement=pb.RoundAnnouncement(
                job_id="flood", round=round, query_id=query.query_id,
                query=query_to_proto(query, round), fractional_bits=query.fractional_bits)),
                pb.WorkItem(round_abort=pb.RoundAbort(job_id="flood", round=round,
                                                      query_id=query.query_id))))

        def flood() -> None:
            for announce, abort in items:
                worker.handle(announce, calls)
                worker.handle(abort, calls)

        seconds = cpu_seconds(flood)
        site.ledger.close()
    return seconds / count


class _DiscardedCalls:
    """The coordinator's side of a site's calls, answering every one."""

    def __getattr__(self, name: str):
        return lambda request, timeout: pb.Ack()


def print_table(policy: SitePolicy, worst: float, per_query: float, table_s: float,
                peak: int, announce_s: float, query_peak: int) -> None:
    """The closing table: each attack, at most, in CPU seconds and MiB."""
    releases = floor_releases_per_epsilon(policy)
    floor = policy.min_query_epsilon
    held = (MAX_QUEUED_BYTES + MAX_OPEN_ROUND_BYTES + (MAX_LANES + 1) * MAX_MESSAGE_BYTES)
    bits = math.log2(policy.max_certificates + 1) if policy.max_certificates else math.inf
    rows = [
        ("long query at worthless epsilon",
         f"<= {policy.max_query_work * worst:.1f} s a query; <= "
         f"{policy.max_unpaid_work * worst:.0f} s per daemon run over every job",
         f"{query_peak / MIB:.0f} a query (kernels work in chunks, not in n)",
         f"~0 charged: the {policy.max_unpaid_work:.3g}-unit unpaid pool"),
        ("per-job compute",
         f"<= {policy.max_job_work * worst:.0f} s a job", f"{query_peak / MIB:.0f} a query",
         f"<= {per_query / floor:.3g} s per unit of per-release epsilon; "
         f"<= {releases * per_query:.3g} s per unit of composed epsilon "
         f"({releases:.3g} floor-priced releases)"),
        ("a second job stalled by a long query",
         f"0 s of waiting for a lane of its own; with all {MAX_LANES} lanes busy, at most one "
         f"item ({per_query:.1f} s of CPU) before its turn", "-", "as the rows above"),
        ("sampler-table memory",
         f"<= {table_s:.1f} s a new noise parameter",
         f"<= {policy.max_sampler_table_bytes / MIB:.0f} kept + {peak / MIB:.0f} building",
         f"<= {table_s / floor:.3g} s per unit of per-release epsilon"),
        ("work-item flood",
         f"{announce_s * 1e3:.2f} ms an announcement; <= {policy.max_unpaid_rounds} unpaid "
         f"rounds a daemon run (max_unpaid_rounds): <= "
         f"{policy.max_unpaid_rounds * announce_s:.1f} s",
         f"<= {held / MIB:.0f} held by queued items, open rounds and items in hand",
         f"unpaid: the pool is its bound; paid: <= {announce_s / floor:.3g} s per unit of "
         "per-release epsilon"),
        ("certificate latch",
         "fixed work: no operation spread (benchmarks/certificate_timing.py: wall clock)",
         "-", f"uncharged: <= {bits:.0f} bits per clearing (max_certificates "
              f"{policy.max_certificates})"),
    ]
    print("\n| attack | CPU at most | MiB at most | per unit of epsilon charged |")
    print("|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


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
    rates, peaks = seconds_per_unit(data, rng)
    worst = max(rates.values())
    query_peak = max(peaks.values())
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
    announce_s = announcement_seconds()
    print(f"  one announcement:   {announce_s * 1e3:8.2f} ms CPU (key pair, signature, progress "
          "committed), unpaid")
    print_table(policy, worst, per_query, table_s, peak, announce_s, query_peak)


if __name__ == "__main__":
    main()
