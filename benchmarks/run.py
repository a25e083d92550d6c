"""``make bench``: the Foundation benchmarks, printed as a table.

* gradient kernel throughput: clipped logistic gradients, d = 100, n = 1e6
  (chunked, so memory stays bounded), records per second;
* calibration: time to calibrate a Gaussian noise multiplier for T = 1,000
  releases at (epsilon, delta) = (1, 1e-5);
* ledger: committed charges per second into a SQLite (WAL) ledger that already
  holds 1,000 charges, cap checked by PLD on every charge;
* ledger history: a site's ledger work for one round (check, charge, job
  spend) on a ledger of 10,000 past charges over the same on one of 10, in
  CPU time (``ledger_charges.py --history-ratio``): about 1 when no cost grows
  with the site's history;
* CSV load: a site's data file of 50,000 rows and 15 columns (4 in the
  schema) read, checked and encoded, over the csv module reading the same
  file alone.

Numbers are medians over repeats within one run; compare ratios across rows
or against a baseline recorded in the same run, never absolute seconds across
machines.
"""

from __future__ import annotations

import csv
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from ledger_charges import history_ratio
from timing import median_seconds

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.common.accounting.calibration import calibrate_noise_multiplier
from privadapt.common.data.dataset import Dataset, Schema, load_dataset
from privadapt.common.kernels import get_kernel
from privadapt.common.mechanisms import GaussianMechanism


def gradient_throughput(num_records: int = 1_000_000, dim: int = 100) -> tuple[str, float, str]:
    rng = np.random.default_rng(0)
    features = rng.normal(size=(num_records, dim)) / np.sqrt(dim)
    data = Dataset(features, np.sign(rng.normal(size=num_records)),
                   tuple(f"x{i}" for i in range(dim)))
    kernel = get_kernel("linear_gradient")
    params = kernel.Params.from_wire(
        {"weights": rng.normal(size=dim), "loss": "logistic", "clip_norm": 0.5}, dim)
    naive = median_seconds(lambda: features.T @ (features @ params.weights), 3)
    seconds = median_seconds(lambda: kernel.compute(data, params, {}), 3)
    return ("gradient kernel, d=100, n=1e6", num_records / seconds,
            f"records/s ({seconds * 1e3:.0f} ms/pass; {seconds / naive:.1f}x two plain matvecs)")


def calibration_time() -> tuple[str, float, str]:
    seconds = median_seconds(lambda: calibrate_noise_multiplier(1.0, 1e-5, 1000), 3)
    return ("calibration, T=1000 Gaussian releases", seconds * 1e3, "ms")


def ledger_rate(prefill: int = 1000, timed: int = 200) -> tuple[str, float, str]:
    mechanism = GaussianMechanism.single(2.0, 50.0)
    with tempfile.TemporaryDirectory() as directory:
        policy = SitePolicy("bench-site", 1e6, 1e-5)
        ledger = PrivacyLedger(Path(directory) / "ledger.db", policy, create=True)
        for i in range(prefill):
            ledger.charge("prefill", f"q{i}", mechanism)
        started = time.perf_counter()
        for i in range(timed):
            ledger.charge("timed", f"q{i}", mechanism)
        seconds = time.perf_counter() - started
        ledger.close()
    return (f"ledger charges (after {prefill})", timed / seconds, "charges/s, each committed")


def ledger_history_ratio() -> tuple[str, float, str]:
    r = history_ratio(Path(tempfile.gettempdir()))
    return ("ledger round, 10,000 vs 10 past charges", r["cpu_ratio"],
            f"x CPU per round ({1e3 * r['cpu_10000']:.2f} vs {1e3 * r['cpu_10']:.2f} ms; "
            f"wall {r['wall_ratio']:.2f}x)")


def csv_load_ratio(num_records: int = 50_000) -> tuple[str, float, str]:
    schema = Schema(label="income", numeric=("age", "gain"),
                    categorical={"color": ("red", "green", "blue")},
                    label_map={">50K": 1.0, "<=50K": -1.0},
                    numeric_scale={"age": (10.0, 90.0), "gain": (0.0, 999.0)},
                    log1p_columns=("gain",), intercept=True)
    rng = np.random.default_rng(0)
    colors = np.array(["red", "green", "blue"])[rng.integers(0, 3, num_records)]
    extra = ",".join(["1.5"] * 11)
    lines = ["age,gain,color,income," + ",".join(f"extra{i}" for i in range(11))]
    lines += [f"{a:.3f},{g},{c},>50K,{extra}" for a, g, c in zip(
        rng.uniform(10, 90, num_records), rng.integers(0, 999, num_records), colors,
        strict=True)]
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "site.csv"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")

        def read_alone() -> None:
            with open(path, newline="", encoding="utf-8") as handle:
                list(csv.reader(handle))

        floor = median_seconds(read_alone, 5, warm_up=True)
        seconds = median_seconds(lambda: load_dataset(path, schema), 5, warm_up=True)
    return (f"CSV load, {num_records:,} rows x 15 columns", seconds / floor,
            f"x the csv module alone ({seconds * 1e3:.0f} vs {floor * 1e3:.0f} ms)")


def main() -> int:
    rows = []
    for bench in (gradient_throughput, calibration_time, ledger_rate, ledger_history_ratio,
                  csv_load_ratio):
        print(f"running {bench.__name__} ...", file=sys.stderr, flush=True)
        rows.append(bench())
    print(f"\n{'benchmark':<40} {'value':>14}  unit")
    for name, value, unit in rows:
        print(f"{name:<40} {value:>14,.1f}  {unit}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
