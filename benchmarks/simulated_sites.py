"""LocalFederation at 1,000 and 10,000 simulated sites: in this process against Ray actors.

For each number of sites and each backend (``in-process``; ``ray``, the sites
in Ray actors, ``--actors`` of them, default one per CPU), the same sites of
20 records at d = 100 (``round_floor.py``'s simulation row), and:

* ``build``: making the federation (every site's policy, ledger and noise
  source; for Ray, shipping each actor its sites' records);
* ``1 iteration``: ``NoisyGD(iterations=1).fit``, set-up included (the
  plan's check of every site's budget statement) -- the table's row;
* ``per iteration``: the marginal time of one more NoisyGD iteration,
  (fit of ``--iterations`` minus fit of 1) / (``--iterations`` - 1), on the
  same sites under a new job.

Wall seconds, one run each (the figures are seconds long; on a shared machine
read them with its load average, printed first). Ray starts a local instance
with every CPU of this machine unless ``--ray-address`` (or ``RAY_ADDRESS``)
names a cluster (docs/how-to/simulate.md). Each simulated site holds four
open files (its SQLite ledger, the ledger's WAL and shared-memory files, and
its head file): 10,000 sites in one process need 40,000 file descriptors, so
the script raises its limit to the hard limit, gives Ray enough actors that
each stays under it (at least one per CPU) and skips a case that cannot.

Run: ``.venv/bin/python benchmarks/simulated_sites.py`` (about two minutes on
2 cores; ``--sites 1000`` for the smaller case alone). Needs the ray extra
(``pip install -e '.[ray]'``). Never asserted in a test.
"""

from __future__ import annotations

# isort: off
import federation_processes  # noqa: F401 -- single-threaded BLAS, before numpy loads
# isort: on
import argparse
import os
import resource
import sys
import time

import numpy as np

from privadapt import Dataset, LocalFederation, NoisyGD

RECORDS, DIM = 20, 100
# The ledger's database, its WAL and shared-memory files, and its head file
# (held open once the site has charged a release).
FILES_PER_SITE = 4
SPARE_FILES = 1024  # the process's own (libraries, Ray's sockets)


def site_datasets(count: int) -> list[Dataset]:
    rng = np.random.default_rng(0)
    return [Dataset(rng.normal(size=(RECORDS, DIM)) / np.sqrt(DIM),
                    np.where(rng.random(RECORDS) < 0.5, -1.0, 1.0)) for _ in range(count)]


def fit_seconds(federation: LocalFederation, iterations: int) -> float:
    estimator = NoisyGD(loss="logistic", epsilon=1.0, delta=1e-6, iterations=iterations,
                        learning_rate=1.0, radius=10.0, clip_norm=1.0)
    started = time.perf_counter()
    estimator.fit(federation)
    return time.perf_counter() - started


def measure(datasets: list[Dataset], backend: str, actors: int | None,
            iterations: int) -> dict[str, float]:
    started = time.perf_counter()
    federation = LocalFederation.from_datasets(datasets, epsilon_cap=100.0, delta_cap=1e-5,
                                               backend=backend, actors=actors)
    built = time.perf_counter() - started
    try:
        one = fit_seconds(federation, 1)
        more = fit_seconds(federation.new_job(), iterations)
    finally:
        federation.close()
    return {"build": built, "one": one, "per": (more - one) / (iterations - 1)}


def open_files_limit() -> int:
    """This process's open-file limit, raised to the hard limit (Ray's workers
    inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    return soft


def sites_one_process_holds(limit: int) -> int:
    return (limit - SPARE_FILES) // FILES_PER_SITE


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sites", type=int, nargs="+", default=[1_000, 10_000])
    parser.add_argument("--backends", nargs="+", default=["in-process", "ray"],
                        choices=["in-process", "ray"])
    parser.add_argument("--actors", type=int, default=None,
                        help="Ray actors (default: one per CPU of the Ray cluster)")
    parser.add_argument("--iterations", type=int, default=3,
                        help="the longer fit, for the per-iteration figure (at least 2)")
    parser.add_argument("--ray-address", default=None,
                        help="a running Ray cluster (default: RAY_ADDRESS, else a local "
                             "instance with every CPU here)")
    args = parser.parse_args(argv)
    if args.iterations < 2:
        parser.error("--iterations must be at least 2")
    limit = open_files_limit()
    cpus = os.cpu_count() or 1
    if "ray" in args.backends:
        import ray

        ray.init(address=args.ray_address, include_dashboard=False, log_to_driver=False)
        cpus = int(ray.cluster_resources().get("CPU", 1))
        print(f"Ray: {cpus} CPUs on {len(ray.nodes())} node(s)", file=sys.stderr)
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}, "
          f"{os.cpu_count()} cores, {limit} open files per process; sites of {RECORDS} "
          f"records, d = {DIM}, wall seconds")
    print(f"{'sites':>7} {'backend':<11} {'actors':>6} {'build':>8} {'1 iteration':>12} "
          f"{'per iteration':>14}")
    for count in args.sites:
        datasets = site_datasets(count)
        for backend in args.backends:
            actors = 1
            if backend == "ray":  # enough actors that each can keep its sites' files open
                actors = args.actors or max(cpus, -(-count // sites_one_process_holds(limit)))
            if count > actors * sites_one_process_holds(limit):
                print(f"{count:>7} {backend:<11} {actors:>6} skipped: "
                      f"{FILES_PER_SITE * count // actors} open files per process, over "
                      f"the limit of {limit}")
                continue
            figures = measure(datasets, backend, actors if backend == "ray" else None,
                              args.iterations)
            print(f"{count:>7} {backend:<11} {actors:>6} {figures['build']:>8.2f} "
                  f"{figures['one']:>12.2f} {figures['per']:>14.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
