"""Seconds per 1,000 DP Frank-Wolfe iterations at d = 200, n = 10,000 (seed 002),
in-process and through three real site daemons, as ratios within one run.

    .venv/bin/python benchmarks/dp_frank_wolfe.py [--iterations 1000]
        [--networked-iterations 200] [--dir DIR]

Runs of ``dp_frank_wolfe`` on the same records:

* in-process: the single holder's selection route (one report-noisy-min
  selection per iteration, only the index leaves the site) and three sites'
  secure-sum route (one Gaussian release of the infinity-clipped gradient per
  iteration), ``LocalFederation``;
* networked, processes: the secure-sum route over three ``privadapt-site``
  processes on 127.0.0.1 (mutual TLS, secure aggregation), the coordinator in
  this process (api/simulation/process_federation.py), and the selection route over
  one such process;
* networked, threads: the same three daemons (``SiteDaemon``, real gRPC over
  mutual TLS) run as threads of this process, so that their ledgers can be
  timed; they share this process's interpreter with the coordinator, so their
  ms per iteration is not the deployment's (the processes row is).

The calibration is done before the clock starts (it is cached per
(epsilon, delta, T)). Every timed site's ``ledger.charge`` is wrapped with a
timer: the table gives the share of the loop's time spent in the ledger
(summed over the sites: in-process and threads they charge one after the
other, so the sum is on the loop's critical path), and that share over the
first and the last tenth of the iterations: it must not grow with the
iteration count. Ledgers go to ``--dir`` (default the system's
temporary directory, on disk: every charge is committed and synced).
"""

from __future__ import annotations

# isort: off
import federation_processes  # noqa: F401 -- single-threaded BLAS, before numpy loads
# isort: on
import argparse
import contextlib
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
from federation_processes import networked_federation

from privadapt import Dataset, LocalFederation
from privadapt.client.daemon.config import SiteConfig
from privadapt.client.daemon.main import SiteDaemon
from privadapt.client.site import Site
from privadapt.common.federation import Federation
from privadapt.server.algorithms.frank_wolfe.dp_frank_wolfe import (
    dp_frank_wolfe,
    selection_multiplier,
)
from privadapt.server.coordinator.main import Coordinator, CoordinatorConfig
from privadapt.server.federation.network import NetworkFederation, NetworkJob
from privadapt.simulation.local_deployment import LOCALHOST, LocalDeployment, free_port, write_pki
from privadapt.simulation.process_federation import SitePolicyTerms

DIM, RECORDS, EPSILON, DELTA, CAP = 200, 10_000, 1.0, 1e-6, 10.0


def records(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    features = rng.uniform(-1, 1, size=(RECORDS, DIM))
    beta = np.zeros(DIM)
    beta[:10] = 0.5
    return features, features @ beta + 0.5 * rng.normal(size=RECORDS)


def parts(num_sites: int) -> list[Dataset]:
    features, labels = records()
    names = tuple(f"x{i}" for i in range(DIM))
    return [Dataset(features[rows], labels[rows], names)
            for rows in np.array_split(np.arange(RECORDS), num_sites)]


class ChargeTimer:
    """Wraps each site's ``ledger.charge`` and keeps the seconds of each call."""

    def __init__(self, sites: Sequence[Site]) -> None:
        self.seconds: list[float] = []
        self._lock = threading.Lock()
        for site in sites:
            charge = site.ledger.charge

            def timed(*args, _charge=charge, **kwargs):
                started = time.perf_counter()
                try:
                    return _charge(*args, **kwargs)
                finally:
                    with self._lock:
                        self.seconds.append(time.perf_counter() - started)

            site.ledger.charge = timed


@contextlib.contextmanager
def in_process(workdir: Path, num_sites: int) -> Iterator[tuple[Federation, list[Site]]]:
    with LocalFederation.from_datasets(parts(num_sites), epsilon_cap=CAP, delta_cap=1e-4,
                                       noise_seed=0, ledger_dir=workdir) as federation:
        yield federation, list(federation.sites)


@contextlib.contextmanager
def site_processes(workdir: Path, num_sites: int) -> Iterator[tuple[Federation, list[Site]]]:
    """Site processes: their ledgers are out of reach (no timer)."""
    with networked_federation(workdir, parts(num_sites), epsilon_cap=CAP) as (federation, _):
        yield federation, []


@contextlib.contextmanager
def site_threads(workdir: Path, num_sites: int) -> Iterator[tuple[Federation, list[Site]]]:
    """A coordinator and ``num_sites`` site daemons, all in this process,
    over mutual-TLS gRPC on 127.0.0.1; the daemons' sites are returned."""
    deployment = LocalDeployment(workdir, write_pki(workdir / "pki"))
    address = f"{LOCALHOST}:{free_port()}"
    coordinator = Coordinator(CoordinatorConfig.from_toml(deployment.write_coordinator(address)))
    coordinator.start()
    names = tuple(f"thread-site-{k}" for k in range(num_sites))
    daemons = [SiteDaemon(SiteConfig.from_toml(deployment.write_site(
        SitePolicyTerms(epsilon_cap=CAP).policy(name), data, address)))
        for name, data in zip(names, parts(num_sites), strict=True)]
    threads = [threading.Thread(target=d.run, daemon=True) for d in daemons]
    try:
        for thread in threads:
            thread.start()
        coordinator.store.create_job("bench", "bench", "{}", 0)
        federation = NetworkFederation(
            NetworkJob("bench", names, min_participants=num_sites, round_timeout=120.0),
            coordinator.registry, coordinator.hub, coordinator.store, coordinator.reports)
        federation.wait_for_sites()
        yield federation, [d.site for d in daemons]
    finally:
        for daemon in daemons:
            daemon.stop()
        for thread in threads:
            thread.join(timeout=10)
        coordinator.stop(grace=0.5)


def run(federation: Federation, sites: list[Site], route: str, iterations: int) -> dict:
    timer = ChargeTimer(sites)
    stamps: list[float] = []
    started = time.perf_counter()
    dp_frank_wolfe(federation, dim=DIM, radius=6.0, clip_norm=2.0, epsilon=EPSILON,
                   delta=DELTA, iterations=iterations, loss="squared",
                   calibration="accountant", route=route,
                   progress=lambda *_: stamps.append(time.perf_counter()))
    total = time.perf_counter() - started
    row = {"ms_per_iteration": total / iterations * 1000}
    if not sites:
        return row
    tenth = max(1, iterations // 10)
    per_iteration = np.diff([started, *stamps])
    ledger = np.asarray(timer.seconds).reshape(iterations, len(sites)).sum(axis=1)
    return {**row,
            "ledger_share": float(ledger.sum() / total),
            "ledger_share_first_tenth": float(ledger[:tenth].sum() / per_iteration[:tenth].sum()),
            "ledger_share_last_tenth": float(ledger[-tenth:].sum() / per_iteration[-tenth:].sum()),
            "ms_per_charge_first_tenth": float(np.median(ledger[:tenth]) / len(sites) * 1000),
            "ms_per_charge_last_tenth": float(np.median(ledger[-tenth:]) / len(sites) * 1000)}


CASES = (
    ("selection, 1 site", "in-process", in_process, "selection", 1),
    ("secure sum, 3 sites", "in-process", in_process, "secure_sum", 3),
    ("selection, 1 site", "processes", site_processes, "selection", 1),
    ("secure sum, 3 sites", "processes", site_processes, "secure_sum", 3),
    ("secure sum, 3 sites", "threads", site_threads, "secure_sum", 3),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=1000, help="in-process runs")
    parser.add_argument("--networked-iterations", type=int, default=200,
                        help="runs through site daemons (each iteration is a round)")
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    for iterations in {args.iterations, args.networked_iterations}:
        selection_multiplier(EPSILON, DELTA, iterations)  # calibrated before the clock
    rows = []
    with tempfile.TemporaryDirectory(dir=args.dir) as scratch:
        for number, (name, where, federation_of, route, num_sites) in enumerate(CASES):
            iterations = args.iterations if where == "in-process" else args.networked_iterations
            workdir = Path(scratch) / f"case-{number}"
            workdir.mkdir()
            with federation_of(workdir, num_sites) as (federation, sites):
                rows.append((name, where, iterations, run(federation, sites, route, iterations)))
            print(f"done: {name}, {where}", flush=True)
    base = {name: row["ms_per_iteration"] for name, where, _, row in rows
            if where == "in-process"}
    print(f"\nDP Frank-Wolfe, d = {DIM}, n = {RECORDS}; ratio: ms per iteration against the "
          "same route in-process in this run")
    print("ledger: share of the loop (summed over the sites); first/last: the first and last "
          "tenth of the iterations (share, and median ms per charge)")
    print(f"{'route':<21}{'sites':<12}{'T':>6}{'ms / it':>9}{'ratio':>7}{'ledger':>8}"
          f"{'first':>8}{'last':>8}{'ms first':>10}{'ms last':>9}")
    for name, where, iterations, row in rows:
        ledger = ("" if "ledger_share" not in row else
                  f"{row['ledger_share']:>8.1%}{row['ledger_share_first_tenth']:>8.1%}"
                  f"{row['ledger_share_last_tenth']:>8.1%}"
                  f"{row['ms_per_charge_first_tenth']:>10.2f}"
                  f"{row['ms_per_charge_last_tenth']:>9.2f}")
        ledger = ledger or "   (ledgers in the site processes)"
        print(f"{name:<21}{where:<12}{iterations:>6}{row['ms_per_iteration']:>9.1f}"
              f"{row['ms_per_iteration'] / base[name]:>7.2f}{ledger}")


if __name__ == "__main__":
    main()
