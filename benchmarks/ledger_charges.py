"""Ledger charges per second against the size of its history.

    .venv/bin/python benchmarks/ledger_charges.py [--sizes 100 10000 100000]
        [--charges 300] [--dir DIR ...] [--history-ratio]

For each stored history size N and each directory (default: the system's
temporary directory, on disk, and /dev/shm, in memory, when it exists), a
ledger is given N charges of a mixed history, then timed over ``--charges``
more charges, each committed (SQLite ``synchronous=FULL``) and its head file
synced before the next. Two policies: *PLD* (Gaussian, Poisson-sampled
Gaussian, Laplace and pure-epsilon events, accounted by PLD) and *RDP* (the
same and zCDP events, which the accountant can account only by RDP). A
selection mechanism kind joins ``_HISTORY`` once it
exists.

How the big histories are built: the rows are written with SQLite
``executemany`` (their chain computed by the ledger's own
:mod:`privadapt.client.ledger.chain`, their ``epsilon_after`` left at 0,
with the checkpoints a site's charges would have linked into it,
:mod:`privadapt.client.ledger.checkpoints`), then the derived state is written by the ledger's own
:func:`privadapt.client.ledger.opening.write_derived` and the head file by
``write_head_file``. Opening the ledger then rebuilds everything from the
rows after its newest checkpoint and checks it, as every open does ("open"
column).

``--history-ratio``: the one figure that says whether a charge's cost grows
with the site's history: the site's ledger work for one round (budget check
with its reservation, charge, the job's spend for the share: what
``Site.answer`` and the site worker do) timed on a ledger holding 10 past
charges and on one holding 10,000, in alternating blocks, as CPU and wall
time per round and their ratio (about 1 when the work is O(1) in the past
charges; the B-tree lookups are O(log n)).

"recomputed": |spent() - full recomputation| / recomputation, where the
recomputation composes every stored charge, one by one, in a fresh
:class:`PrivacyAccountant`; "bound/exact": the last charge's recorded
epsilon (the admitting upper bound) over the exact figure.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

from privadapt.client.ledger import checkpoints
from privadapt.client.ledger.accounting import mechanism_json
from privadapt.client.ledger.chain import extend, genesis, head_file, row_bytes, write_head_file
from privadapt.client.ledger.opening import Rebuilt, write_derived
from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.ledger.schema import ROW_COLUMNS
from privadapt.client.ledger.totals import LedgerTotals
from privadapt.client.policy import SitePolicy
from privadapt.common.accounting.accountant import PrivacyAccountant
from privadapt.common.mechanisms import (
    Adjacency,
    GaussianMechanism,
    LaplaceMechanism,
    PureDpEvent,
    ZCdpEvent,
)

AR = Adjacency.ADD_REMOVE_ONE
DELTA = 1e-5
CAP = 1e4  # far above what the histories cost: the benchmark times admitted charges
_HISTORY = {
    "pld": (
        GaussianMechanism.single(1.0, 200.0, AR),
        GaussianMechanism.single(1.0, 2.0, AR, sampling_rate=0.001),
        LaplaceMechanism(1.0, 2000.0, AR),
        PureDpEvent(0.0005, AR),
        # A selection kind goes here.
    ),
}
_HISTORY["rdp"] = (*_HISTORY["pld"], ZCdpEvent(1e-6, AR))


def _policy(name: str) -> SitePolicy:
    return SitePolicy(name, CAP, DELTA, adjacency=AR)


def build_history(path: Path, policy: SitePolicy, size: int, mechanisms) -> None:
    """A ledger of ``size`` charges cycling through ``mechanisms``, with the
    checkpoints its charges would have written (module docstring)."""
    PrivacyLedger(path, policy, create=True).close()
    texts = [mechanism_json(m) for m in mechanisms]
    head = genesis(policy.site_name)
    rows, groups, start = [], Counter(), time.time() - size
    marks = []
    for i in range(size):
        row = (f"history-{i // 1000}", f"q{i}", texts[i % len(texts)], 0.0, "pld", start + i,
               "bench")
        head = extend(head, row_bytes(*row))
        rows.append(row)
        groups[row[2]] += 1
        if (i + 1) % checkpoints.CHECKPOINT_INTERVAL == 0:
            mark = checkpoints.Checkpoint(head, i + 1, dict(groups))
            marks.append(mark)
            head = mark.linked()
    totals = LedgerTotals.from_groups(groups, policy.adjacency, track_pld=False)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(f"INSERT INTO charges ({ROW_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
        for mark in marks:
            checkpoints.write(conn, mark)
        write_derived(conn, Rebuilt(head, totals, size, 0.0, "pld"), policy.adjacency.value)
        conn.execute("COMMIT")
    finally:
        conn.close()
    write_head_file(head_file(path), head)


def open_seconds(directory: Path, size: int) -> tuple[float, int]:
    """Seconds to open a ledger of ``size`` past charges, and the rows the
    open re-derived (those after its newest checkpoint)."""
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        path = Path(tmp) / "site.db"
        build_history(path, _policy("bench"), size, _HISTORY["pld"])
        started = time.perf_counter()
        ledger = PrivacyLedger(path, _policy("bench"))
        seconds = time.perf_counter() - started
        ledger.close()
    return seconds, ledger.rows_rederived


def measure(directory: Path, size: int, method: str, charges: int) -> dict[str, float]:
    mechanisms = _HISTORY[method]
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        path = Path(tmp) / "site.db"
        policy = _policy("bench")
        build_history(path, policy, size, mechanisms)
        opened = time.perf_counter()
        ledger = PrivacyLedger(path, policy)
        open_s = time.perf_counter() - opened
        # The first charge of each mechanism builds its terms (once per process).
        for k, mechanism in enumerate(mechanisms):
            ledger.charge("warm", f"w{k}", mechanism)
        started = time.perf_counter()
        for i in range(charges):
            last = ledger.charge("bench", f"b{i}", mechanisms[i % len(mechanisms)])
        per_s = charges / (time.perf_counter() - started)
        exact = ledger.spent().epsilon
        accountant = PrivacyAccountant(AR, policy.accounting)
        for charge in ledger.charges():
            accountant.compose(charge.mechanism)
        recomputed = accountant.report(DELTA).epsilon
        ledger.close()
    return {"per_s": per_s, "open_s": open_s, "exact": exact,
            "recomputed": abs(exact - recomputed) / recomputed,
            "bound_ratio": last.epsilon_after / exact}


ROUND_MECHANISM = GaussianMechanism.single(2.0, 50.0, AR)  # network_round.py's


def _site_rounds(ledger: PrivacyLedger, job: str, first: int, count: int) -> None:
    """``count`` rounds of a site's ledger work (client/site.py, site_worker.py)."""
    for i in range(first, first + count):
        with ledger.reservation(job, f"r{i}", ROUND_MECHANISM) as checked:
            ledger.charge(job, f"r{i}", ROUND_MECHANISM, checked=checked, kernel="bench")
        ledger.spent_by_job(job)


def history_ratio(directory: Path, small: int = 10, large: int = 10_000,
                  rounds: int = 100, blocks: int = 5) -> dict[str, float]:
    """Seconds of CPU and wall per round of a site's ledger work on ledgers of
    ``small`` and ``large`` past charges (alternating blocks; medians)."""
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        ledgers = {}
        for size in (small, large):
            path = Path(tmp) / f"site-{size}.db"
            build_history(path, _policy("bench"), size, _HISTORY["pld"])
            ledgers[size] = PrivacyLedger(path, _policy("bench"))
            _site_rounds(ledgers[size], "bench", 0, 5)  # warm: terms, job groups
        cpu: dict[int, list[float]] = {small: [], large: []}
        wall: dict[int, list[float]] = {small: [], large: []}
        for block in range(blocks):
            for size in (small, large) if block % 2 == 0 else (large, small):
                started, used = time.perf_counter(), time.process_time()
                _site_rounds(ledgers[size], "bench", 5 + block * rounds, rounds)
                cpu[size].append((time.process_time() - used) / rounds)
                wall[size].append((time.perf_counter() - started) / rounds)
        for ledger in ledgers.values():
            ledger.close()
    result = {f"{kind}_{size}": statistics.median(values[size])
              for kind, values in (("cpu", cpu), ("wall", wall)) for size in (small, large)}
    result["cpu_ratio"] = result[f"cpu_{large}"] / result[f"cpu_{small}"]
    result["wall_ratio"] = result[f"wall_{large}"] / result[f"wall_{small}"]
    return result


def print_history_ratio(directory: Path) -> None:
    r = history_ratio(directory)
    print(f"site ledger work per round (check, charge, job spend) in {directory}: "
          f"10 past charges {1e3 * r['cpu_10']:.2f} ms CPU / {1e3 * r['wall_10']:.2f} ms wall, "
          f"10,000 past charges {1e3 * r['cpu_10000']:.2f} / {1e3 * r['wall_10000']:.2f} ms; "
          f"ratio 10,000 : 10 = {r['cpu_ratio']:.2f} CPU, {r['wall_ratio']:.2f} wall")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history-ratio", action="store_true",
                        help="only the site's ledger work per round at 10 vs 10,000 past "
                             "charges, as a ratio")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 10_000, 100_000])
    parser.add_argument("--charges", type=int, default=300)
    default_dirs = [Path(tempfile.gettempdir())]
    if os.path.isdir("/dev/shm"):
        default_dirs.append(Path("/dev/shm"))
    parser.add_argument("--dir", type=Path, nargs="+", default=default_dirs, dest="dirs")
    args = parser.parse_args()
    if args.history_ratio:
        for directory in args.dirs:
            print_history_ratio(directory)
        return 0
    print(f"{'directory':<10} {'method':<6} {'stored':>8} {'charges/s':>10} {'open s':>7} "
          f"{'epsilon':>9} {'recomputed':>10} {'bound/exact':>11}")
    for directory in args.dirs:
        for method in ("pld", "rdp"):
            for size in args.sizes:
                r = measure(directory, size, method, args.charges)
                print(f"{directory!s:<10} {method:<6} {size:>8} {r['per_s']:>10.0f} "
                      f"{r['open_s']:>7.2f} {r['exact']:>9.4g} {r['recomputed']:>10.1e} "
                      f"{r['bound_ratio']:>11.3f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
