"""Round latency of the networked federation versus in-process.

For K in {1, 3, 10} sites and vectors of {1e3, 1e5} float64, one query is one
round: the coordinator pushes the query, every site publishes a signed X25519
key, the coordinator pushes the roster, every site verifies it, runs the
kernel (``linear_gradient`` on a few records of dimension d), draws its
Gaussian noise share from the CSPRNG, charges its SQLite ledger, masks with
K - 1 pairwise ChaCha20 streams and submits; the coordinator sums and decodes.
Sites are separate processes (``privadapt-site``) on 127.0.0.1 over mutual TLS;
the coordinator runs in this process. The in-process column runs the same
``Site`` code (noise, ledger, fixed point) through ``LocalFederation``, without
network, TLS or masks; the ratio is what the network costs.

Also printed: the CPU time one round costs, summed over the site processes
and in the coordinator's process, and the time from starting the site
processes to their first finished round, and the sites' peak resident memory
(each site's own) and proportional set size (PSS: the sites and their fork
server together, each shared page counted once).
The CPU column is what to read on a shared machine: the sites and the
coordinator run at once, so with C cores a round cannot take less than
(sites + coordinator CPU) / C, and a machine busy with other work stretches
the wall-clock medians but hardly the CPU per round.

The speed bar (1e5 floats, 3 sites, a quiet 2-core machine): 27 ms a round,
aiming at 15 ms. Measured with this benchmark, alternating runs of the two
versions compared, never asserted in a test.

Run: ``.venv/bin/python benchmarks/network_round.py`` (about a minute);
``--sites 3 --floats 100000`` runs one case of the table (the speed bar's).
Medians and 90th percentiles over 20 rounds (``--rounds``) after 2 warm-up
rounds, in one run: compare ratios, not absolute milliseconds across machines.
"""

from __future__ import annotations

# isort: off
import federation_processes  # noqa: F401 -- single-threaded BLAS, before numpy loads
# isort: on
import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from federation_processes import networked_federation

from privadapt import Dataset, LocalFederation
from privadapt.common.mechanisms import Adjacency, GaussianMechanism

SITE_COUNTS = (1, 3, 10)
SIZES = (1_000, 100_000)
RECORDS_PER_SITE = 4
ROUNDS, WARM_UP = 20, 2
MECHANISM = GaussianMechanism.single(2.0, 50.0, Adjacency.REPLACE_ONE)


def _dataset(dim: int, seed: int) -> Dataset:
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(RECORDS_PER_SITE, dim)) / np.sqrt(dim)
    labels = np.where(rng.random(RECORDS_PER_SITE) < 0.5, -1.0, 1.0)
    return Dataset(features, labels, tuple(f"x{i}" for i in range(dim)))


def _params(dim: int) -> dict:
    return {"weights": np.zeros(dim), "loss": "logistic", "clip_norm": 1.0}


def _percentiles(times: list[float]) -> tuple[float, float]:
    return 1e3 * float(np.median(times)), 1e3 * float(np.percentile(times, 90))


def _time_rounds(federation, dim: int, rounds: int,
                 site_cpu=None) -> tuple[list[float], float, float]:
    """Round times, then the CPU seconds per round of the sites (``site_cpu``:
    their total CPU so far, if they are processes) and of this process."""
    params = _params(dim)
    for _ in range(WARM_UP):
        federation.query("linear_gradient", params, MECHANISM)
    times = []
    sites_before, own_before = site_cpu() if site_cpu else 0.0, time.process_time()
    for _ in range(rounds):
        started = time.perf_counter()
        federation.query("linear_gradient", params, MECHANISM)
        times.append(time.perf_counter() - started)
    sites = (site_cpu() - sites_before) / rounds if site_cpu else 0.0
    return times, sites, (time.process_time() - own_before) / rounds


def networked(workdir: Path, num_sites: int, dim: int, rounds: int = ROUNDS) -> dict:
    started = time.perf_counter()
    datasets = [_dataset(dim, k) for k in range(num_sites)]
    with networked_federation(workdir, datasets) as (federation, pool):
        federation.query("linear_gradient", _params(dim), MECHANISM)
        first_round = time.perf_counter() - started
        times, site_cpu, coordinator_cpu = _time_rounds(
            federation, dim, rounds, lambda: sum(pool.cpu_seconds().values()))
        memory = sum(pool.peak_memory_mib().values())
        shared = sum(pool.proportional_memory_mib().values())
    return {"times": times, "first_round": first_round, "memory": memory, "shared": shared,
            "site_cpu": site_cpu, "coordinator_cpu": coordinator_cpu}


def in_process(workdir: Path, num_sites: int, dim: int, rounds: int = ROUNDS) -> list[float]:
    datasets = [_dataset(dim, k) for k in range(num_sites)]
    with LocalFederation.from_datasets(datasets, epsilon_cap=1e6, delta_cap=1e-5,
                                       ledger_dir=workdir / "local") as federation:
        return _time_rounds(federation, dim, rounds)[0]


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sites", type=int, nargs="+", default=list(SITE_COUNTS))
    parser.add_argument("--floats", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--rounds", type=int, default=ROUNDS,
                        help="timed rounds per case (more: steadier CPU figures on a busy machine)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    arguments = _arguments(sys.argv[1:] if argv is None else argv)
    print(__doc__.split("\n\n")[0])
    print(f"\n{'sites':>5} {'floats':>8} | {'network median':>14} {'p90':>8} | "
          f"{'in-process median':>17} {'p90':>8} | {'ratio':>6} | "
          f"{'CPU/round sites + coord.':>24} | {'first round':>11} {'site memory':>11} "
          f"{'PSS':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for num_sites in arguments.sites:
            for dim in arguments.floats:
                case = root / f"k{num_sites}-d{dim}"
                case.mkdir()
                net = networked(case, num_sites, dim, arguments.rounds)
                local = in_process(case, num_sites, dim, arguments.rounds)
                net_median, net_p90 = _percentiles(net["times"])
                local_median, local_p90 = _percentiles(local)
                print(f"{num_sites:>5} {dim:>8} | {net_median:>11.1f} ms {net_p90:>5.1f} ms | "
                      f"{local_median:>14.1f} ms {local_p90:>5.1f} ms | "
                      f"{net_median / local_median:>6.2f} | "
                      f"{1e3 * net['site_cpu']:>10.1f} + {1e3 * net['coordinator_cpu']:>5.1f} ms | "
                      f"{net['first_round']:>9.2f} s "
                      f"{net['memory']:>7.0f} MiB {net['shared']:>4.0f} MiB", flush=True)
    print("\nTargets: a round of 1e5 floats under 27 ms at 3 sites on a quiet 2-core machine "
          "(aim: 15 ms) and under 200 ms at 10; first round within 2 s of launch; under "
          "400 MiB for 3 sites.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
