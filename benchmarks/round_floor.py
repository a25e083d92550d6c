"""The performance table of privadapt, each row against its floor, in one run.

Rows, each measured here and divided by a floor timed in the same run on the
same machine (so the ratio, not the milliseconds, is what compares across
machines and loads):

* a networked round, 3 and 10 sites, 1e5 floats, mutual TLS and secure
  aggregation (``network_round.py``'s), against the primitives it is made
  of: K concurrent gRPC echoes of the share's bytes (8e5 each way) over
  mutual TLS, the K(K-1) ChaCha20 keystreams of the pairwise masks, numpy
  Gaussians and sums of K vectors, and one SQLite commit with fsync (the
  sites' commits run in parallel, so one is on the critical path);
* launch to the first finished round at 10 sites, against starting one
  Python process that imports what a site cannot do without (grpc, numpy,
  cryptography);
* memory per site daemon (peak resident), against that same process's;
* the import of the ``privadapt-site`` entry point alone, CPU and peak
  resident memory, against that same process's (how much of the launch is
  Python loading the site's modules);
* opening a site ledger of 100,000 charges, against opening one of 100
  (the ratio is 1 when opening is flat in history), with the rows the open
  re-derived;
* in-process ``LocalFederation``, 1,000 sites of 20 records, one NoisyGD
  iteration at d = 100 (the sites and their ledgers made before the clock
  starts), wall and CPU, against the same arithmetic in numpy alone (each
  site's clipped gradient sum and Gaussian share).

Run: ``.venv/bin/python benchmarks/round_floor.py`` (a few minutes; ``--quick``:
fewer rounds and a 200-site federation, for trying it). Never asserted in a
test.
"""

from __future__ import annotations

# isort: off
import federation_processes  # noqa: F401 -- single-threaded BLAS, before numpy loads
# isort: on
import argparse
import concurrent.futures
import importlib.util
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from ledger_charges import open_seconds
from network_round import networked
from timing import median_seconds

import privadapt.client.site
from privadapt import Dataset, LocalFederation, NoisyGD
from privadapt.common.secure.certs import init_ca, issue_certificate
from privadapt.common.secure.tls import channel_credentials, server_credentials

FLOATS = 100_000
LOCAL_SITES, LOCAL_RECORDS, LOCAL_DIM = 1_000, 20, 100
_ECHO = "/floor.Echo/Echo"
_SITE_IMPORTS = "import grpc, numpy, cryptography.hazmat.primitives.ciphers"
_SITE_ENTRY_POINT = "import privadapt.client.daemon.main"


# -- the floor's primitives ----------------------------------------------------


class EchoServer:
    """A gRPC server over mutual TLS that returns the bytes it is sent."""

    def __init__(self, workdir: Path) -> None:
        init_ca(workdir)
        server_files = issue_certificate(workdir, "coordinator", "floor-server")
        client_files = issue_certificate(workdir, "site", "floor-client")
        options = [("grpc.max_send_message_length", 64 << 20),
                   ("grpc.max_receive_message_length", 64 << 20)]
        self._server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=16),
                                   options=options)
        handler = grpc.unary_unary_rpc_method_handler(lambda request, context: request)
        self._server.add_generic_rpc_handlers(
            [grpc.method_handlers_generic_handler("floor.Echo", {"Echo": handler})])
        port = self._server.add_secure_port(
            "127.0.0.1:0",
            server_credentials(server_files.cert, server_files.key, server_files.ca_cert))
        self._server.start()
        credentials = channel_credentials(client_files.cert, client_files.key,
                                          client_files.ca_cert)
        self._channels = []
        self._target, self._credentials, self._options = (
            f"localhost:{port}", credentials, options)

    def stubs(self, count: int) -> list:
        """``count`` echo callables, each on its own channel (one per site)."""
        while len(self._channels) < count:
            channel = grpc.secure_channel(self._target, self._credentials, self._options)
            self._channels.append(channel)
        return [channel.unary_unary(_ECHO) for channel in self._channels[:count]]

    def close(self) -> None:
        for channel in self._channels:
            channel.close()
        self._server.stop(None)


def echo_seconds(server: EchoServer, sites: int, payload: bytes, repeats: int) -> float:
    """Median seconds for ``sites`` concurrent echoes of ``payload``."""
    stubs = server.stubs(sites)

    def round_trip() -> None:
        calls = [stub.future(payload) for stub in stubs]
        for call in calls:
            call.result()

    return median_seconds(round_trip, repeats, warm_up=True)


def keystream_seconds(streams: int, floats: int, repeats: int) -> float:
    """Median seconds for ``streams`` ChaCha20 keystreams of ``floats`` words
    added into a uint64 vector (one site's masks, summed over the sites)."""
    zeros = bytes(8 * floats)
    total = np.zeros(floats, dtype=np.uint64)

    def masks() -> None:
        for k in range(streams):
            key = k.to_bytes(32, "little")
            stream = Cipher(algorithms.ChaCha20(key, bytes(16)), mode=None).encryptor()
            np.add(total, np.frombuffer(stream.update(zeros), dtype=np.uint64), out=total)

    return median_seconds(masks, repeats, warm_up=True)


def arithmetic_seconds(sites: int, floats: int, repeats: int) -> float:
    """Median seconds for ``sites`` Gaussian vectors of ``floats`` and their sum."""
    rng = np.random.default_rng(0)
    total = np.zeros(floats)

    def shares() -> None:
        total[:] = 0.0
        for _ in range(sites):
            np.add(total, rng.standard_normal(floats), out=total)

    return median_seconds(shares, repeats, warm_up=True)


def commit_seconds(directory: Path, repeats: int) -> float:
    """Median seconds for one SQLite commit (WAL, synchronous=FULL)."""
    conn = sqlite3.connect(directory / "floor.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE t (x BLOB)")

    def commit() -> None:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t VALUES (?)", (os.urandom(200),))
        conn.execute("COMMIT")

    try:
        return median_seconds(commit, repeats, warm_up=True)
    finally:
        conn.close()


def round_floor(server: EchoServer, directory: Path, sites: int, repeats: int) -> dict:
    parts = {
        "echo": echo_seconds(server, sites, bytes(8 * FLOATS), repeats),
        "chacha20": keystream_seconds(sites * (sites - 1), FLOATS, repeats),
        "numpy": arithmetic_seconds(sites, FLOATS, repeats),
        "commit": commit_seconds(directory, repeats),
    }
    return {"total": sum(parts.values()), **parts}


def interpreter_floor() -> tuple[float, float]:
    """Seconds to start a Python process importing what a site needs, and
    its peak resident memory in MiB."""
    seconds, _, memory = python_process(_SITE_IMPORTS)
    return seconds, memory


def python_process(imports: str) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds and peak resident MiB of a Python process
    that runs ``imports`` and exits."""
    started, before = time.perf_counter(), os.times()
    result = subprocess.run(
        [sys.executable, "-c", imports + "; print(next(line.split()[1] for line in "
         "open('/proc/self/status') if line.startswith('VmHWM')))"],
        check=True, capture_output=True, text=True)
    seconds, after = time.perf_counter() - started, os.times()
    cpu = (after.children_user - before.children_user
           + after.children_system - before.children_system)
    # VmHWM, not ru_maxrss: Linux keeps a forked parent's peak across exec in the latter.
    return seconds, cpu, int(result.stdout.strip()) / 1024


def site_import() -> dict:
    """The ``privadapt-site`` entry point's import (the launch's share that is
    Python start-up) against the floor process, each the median of 5 runs,
    CPU seconds and peak MiB; and whether this interpreter reads privadapt's
    bytecode from a cache (PYTHONDONTWRITEBYTECODE with no cache written
    makes every site compile privadapt's modules from source at start)."""
    runs = {name: tuple(statistics.median(column) for column in
                        zip(*(python_process(code) for _ in range(5)), strict=True))
            for name, code in (("site", _SITE_ENTRY_POINT), ("floor", _SITE_IMPORTS))}
    cached = importlib.util.cache_from_source(privadapt.client.site.__file__)
    return {**runs, "bytecode_cached": Path(cached).exists()}


# -- the measured rows ---------------------------------------------------------


def local_federation(sites: int) -> dict:
    """One NoisyGD iteration on ``sites`` in-process sites (the federation is
    built first, off the clock), and the same arithmetic in numpy alone."""
    rng = np.random.default_rng(0)
    datasets = [Dataset(rng.normal(size=(LOCAL_RECORDS, LOCAL_DIM)) / np.sqrt(LOCAL_DIM),
                        np.where(rng.random(LOCAL_RECORDS) < 0.5, -1.0, 1.0))
                for _ in range(sites)]
    estimator = NoisyGD(loss="logistic", epsilon=1.0, delta=1e-6, iterations=1,
                        learning_rate=1.0, radius=10.0, clip_norm=1.0)
    with LocalFederation.from_datasets(datasets, epsilon_cap=10.0,
                                       delta_cap=1e-5) as federation:
        started, used = time.perf_counter(), time.process_time()
        estimator.fit(federation)
        wall, cpu = time.perf_counter() - started, time.process_time() - used
    weights = np.zeros(LOCAL_DIM)

    def arithmetic() -> None:
        total = np.zeros(LOCAL_DIM)
        for data in datasets:
            margins = data.labels * (data.features @ weights)
            total += (data.features * (-data.labels / (1 + np.exp(margins)))[:, None]).sum(0)
            total += rng.standard_normal(LOCAL_DIM)

    return {"wall": wall, "cpu": cpu, "floor": median_seconds(arithmetic, 3, warm_up=True)}


def _row(name: str, measured: float, floor: float, unit: str, goal: str, note: str = "") -> None:
    scale = 1e3 if unit == "ms" else 1.0
    print(f"{name:<44} {scale * measured:>10.3g} {unit:<3} {scale * floor:>10.3g} {unit:<3} "
          f"{measured / floor:>7.1f}x  {goal:<14} {note}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="5 rounds a case and 200 in-process sites (a trial, not the table)")
    arguments = parser.parse_args(argv)
    rounds = 5 if arguments.quick else 20
    local_sites = 200 if arguments.quick else LOCAL_SITES
    print(__doc__.split("\n\n")[0])
    print(f"\n{'row':<44} {'measured':>14} {'floor':>14} {'ratio':>8}  {'goal':<14} floor parts")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        server = EchoServer(root)
        first_round = memory = shared = 0.0
        try:
            for sites in (3, 10):
                case = root / f"k{sites}"
                case.mkdir()
                net = networked(case, sites, FLOATS, rounds)
                floor = round_floor(server, case, sites, rounds)
                parts = ", ".join(f"{name} {1e3 * seconds:.2f}" for name, seconds in floor.items()
                                  if name != "total")
                _row(f"round, {sites} sites, 1e5 floats, mTLS + secagg",
                     float(np.median(net["times"])), floor["total"], "ms",
                     "<= 15 ms" if sites == 3 else "<= 60 ms", f"({parts} ms)")
                if sites == 10:
                    first_round, memory = net["first_round"], net["memory"] / sites
                    shared = net["shared"] / sites
        finally:
            server.close()
        start_floor, memory_floor = interpreter_floor()
        _row("launch to first finished round, 10 sites", first_round, start_floor, "s",
             "<= 1 s", "(floor: one python importing grpc, numpy, cryptography)")
        _row("memory per site daemon (peak RSS, MiB)", memory, memory_floor, "", "<= 80 MiB",
             "(floor: that process's peak RSS)")
        _row("memory per forked site, 10 sites (PSS, MiB)", shared, memory_floor, "", "",
             "(the sites and their fork server's PSS over 10; floor as above)")
        imported = site_import()
        _row("privadapt-site import, CPU", imported["site"][1], imported["floor"][1], "s", "",
             f"(floor: the same python; bytecode cached: {imported['bytecode_cached']})")
        _row("privadapt-site import, peak RSS (MiB)", imported["site"][2],
             imported["floor"][2], "", "", "(floor: that process's peak RSS)")
        opened, rederived = open_seconds(root, 100_000)
        small, _ = open_seconds(root, 100)
        _row("ledger open, 100,000 charges (disk)", opened, small, "s", "<= 0.2 s, flat",
             f"(floor: a ledger of 100 charges; {rederived} rows re-derived)")
        local = local_federation(local_sites)
        _row(f"LocalFederation, {local_sites} sites, 1 NoisyGD iter", local["wall"],
             local["floor"], "s", "<= 1 s",
             f"(CPU {local['cpu']:.2f} s; floor: the sites' numpy arithmetic)")
    own = resource.getrusage(resource.RUSAGE_SELF)
    print(f"\nThis process used {own.ru_utime + own.ru_stime:.1f} s of CPU. On a loaded "
          "machine read the ratios: each floor was timed in this run, on this machine.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
