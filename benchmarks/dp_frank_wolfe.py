"""Seconds per 1,000 DP Frank-Wolfe iterations at d = 200, n = 10,000 (seed 002).

    .venv/bin/python benchmarks/dp_frank_wolfe.py [--iterations 1000] [--dir DIR]

Two in-process runs of ``dp_frank_wolfe`` on the same records: the single
holder's selection route (one report-noisy-min selection per iteration, only
the index leaves the site) and three sites' secure-sum route (one Gaussian
release of the infinity-clipped gradient per iteration). The calibration is
done before the clock starts (it is cached per (epsilon, delta, T)). Every
site's ``ledger.charge`` is wrapped with a timer, so the table gives the share
of the loop's time spent in the ledger, and that share over the first and the
last tenth of the iterations: it must not grow with the iteration count
(issue 16). Ledgers go to ``--dir`` (default the system's temporary directory,
on disk: every charge is committed and synced).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from privadapt import Dataset, LocalFederation
from privadapt.server.algorithms.dp_frank_wolfe import dp_frank_wolfe, selection_multiplier

DIM, RECORDS, EPSILON, DELTA = 200, 10_000, 1.0, 1e-6


def records(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    features = rng.uniform(-1, 1, size=(RECORDS, DIM))
    beta = np.zeros(DIM)
    beta[:10] = 0.5
    return features, features @ beta + 0.5 * rng.normal(size=RECORDS)


class ChargeTimer:
    """Wraps each site's ``ledger.charge`` and keeps the seconds of each call."""

    def __init__(self, federation: LocalFederation) -> None:
        self.seconds: list[float] = []
        for site in federation.sites:
            charge = site.ledger.charge

            def timed(*args, _charge=charge, **kwargs):
                started = time.perf_counter()
                try:
                    return _charge(*args, **kwargs)
                finally:
                    self.seconds.append(time.perf_counter() - started)

            site.ledger.charge = timed


def run(route: str, num_sites: int, iterations: int, ledger_dir: Path) -> dict[str, float]:
    features, labels = records()
    names = tuple(f"x{i}" for i in range(DIM))
    parts = [Dataset(features[rows], labels[rows], names)
             for rows in np.array_split(np.arange(RECORDS), num_sites)]
    with LocalFederation.from_datasets(parts, epsilon_cap=10.0, delta_cap=1e-4, noise_seed=0,
                                       ledger_dir=ledger_dir / route) as federation:
        timer = ChargeTimer(federation)
        stamps: list[float] = []
        started = time.perf_counter()
        dp_frank_wolfe(federation, dim=DIM, radius=6.0, clip_norm=2.0, epsilon=EPSILON,
                       delta=DELTA, iterations=iterations, route=route,
                       progress=lambda *_: stamps.append(time.perf_counter()))
        total = time.perf_counter() - started
    tenth = max(1, iterations // 10)
    per_iteration = np.diff([started, *stamps])
    ledger = np.asarray(timer.seconds).reshape(iterations, num_sites).sum(axis=1)
    return {
        "seconds_per_1000": total / iterations * 1000,
        "ledger_share": float(ledger.sum() / total),
        "ledger_share_first_tenth": float(ledger[:tenth].sum() / per_iteration[:tenth].sum()),
        "ledger_share_last_tenth": float(ledger[-tenth:].sum() / per_iteration[-tenth:].sum()),
        "ms_per_charge_first_tenth": float(np.median(ledger[:tenth]) / num_sites * 1000),
        "ms_per_charge_last_tenth": float(np.median(ledger[-tenth:]) / num_sites * 1000),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    selection_multiplier(EPSILON, DELTA, args.iterations)  # calibrated before the clock
    with tempfile.TemporaryDirectory(dir=args.dir) as scratch:
        rows = [("selection, 1 site", run("selection", 1, args.iterations, Path(scratch))),
                ("secure sum, 3 sites", run("secure_sum", 3, args.iterations, Path(scratch)))]
    print(f"DP Frank-Wolfe, d = {DIM}, n = {RECORDS}, {args.iterations} iterations, in-process")
    print("ledger: share of the loop; first/last: the first and last tenth of the iterations "
          "(share, and median ms per charge)")
    print(f"{'route':<22}{'s / 1000 it':>12}{'ledger':>8}{'first':>8}{'last':>8}"
          f"{'ms first':>10}{'ms last':>9}")
    for name, row in rows:
        print(f"{name:<22}{row['seconds_per_1000']:>12.2f}{row['ledger_share']:>8.1%}"
              f"{row['ledger_share_first_tenth']:>8.1%}{row['ledger_share_last_tenth']:>8.1%}"
              f"{row['ms_per_charge_first_tenth']:>10.2f}{row['ms_per_charge_last_tenth']:>9.2f}")


if __name__ == "__main__":
    main()
