"""Seconds per iteration of PCnvxAdap (seed 000, Alg. 1), in-process and networked.

Synthetic data at the paper's Gas sizes (m = 7,300 public records, d = 133) with
n = 600 and n = 35,000 private records split over 3 sites. In-process: the
sites are ``Site`` objects behind ``LocalFederation``. Networked: the same
algorithm over ``NetworkFederation`` with the coordinator in this process and
3 ``privadapt-site`` processes on 127.0.0.1 (mutual TLS, secure aggregation).
Each iteration is one query (w-gradient, two aggregates of the sites' u, and
the sites' local u-update). The ratio networked / in-process is the figure to
compare; absolute seconds depend on the machine.

Run: ``.venv/bin/python benchmarks/pcnvx_adap.py`` (under a minute).
"""

from __future__ import annotations

# isort: off
import federation_processes  # noqa: F401 -- single-threaded BLAS, before numpy loads
# isort: on
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from federation_processes import networked_federation

from privadapt import Dataset, LocalFederation, PCnvxAdap

NUM_PUBLIC, DIM, NUM_SITES = 7_300, 133, 3
PRIVATE_SIZES = (600, 35_000)
ITERATIONS = 20
MODEL = PCnvxAdap(alpha=0.5, k1=0.01, k2=0.01, kinf=0.01, mu=100.0, discrepancy=0.05,
                  feature_norm=1.0, label_bound=1.0, radius=5.0, epsilon=5.0, delta=1e-5,
                  iterations=ITERATIONS)


def _sample(num_records: int, shift: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    features = rng.normal(shift, 1.0, size=(num_records, DIM))
    features /= np.maximum(1.0, np.linalg.norm(features, axis=1))[:, None]
    labels = np.clip(features @ np.linspace(-1, 1, DIM) + 0.1 * rng.normal(size=num_records),
                     -1, 1)
    return features, labels


def _site_data(num_private: int) -> list[Dataset]:
    features, labels = _sample(num_private, 0.05, seed=1)
    names = tuple(f"x{i}" for i in range(DIM))
    return [Dataset(features[part], labels[part], names)
            for part in np.array_split(np.arange(num_private), NUM_SITES)]


def _run(federation, public) -> float:
    started = time.perf_counter()
    MODEL.fit(federation, public)
    return (time.perf_counter() - started) / ITERATIONS


def in_process(workdir: Path, public, num_private: int) -> float:
    with LocalFederation.from_datasets(_site_data(num_private), epsilon_cap=100.0,
                                       delta_cap=1e-5, ledger_dir=workdir / "local") as federation:
        return _run(federation, public)


def networked(workdir: Path, public, num_private: int) -> float:
    with networked_federation(workdir, _site_data(num_private), epsilon_cap=100.0) \
            as (federation, _):
        return _run(federation, public)


def main() -> int:
    print(__doc__.split("\n\n")[0])
    public = _sample(NUM_PUBLIC, 0.0, seed=0)
    print(f"\n{'m':>6} {'n':>7} {'d':>4} | {'in-process s/iter':>17} | "
          f"{'networked s/iter':>16} | {'ratio':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for num_private in PRIVATE_SIZES:
            case = root / f"n{num_private}"
            case.mkdir()
            local = in_process(case, public, num_private)
            network = networked(case, public, num_private)
            print(f"{NUM_PUBLIC:>6} {num_private:>7} {DIM:>4} | {local:>17.4f} | "
                  f"{network:>16.4f} | {network / local:>6.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
