"""Coordinator and site daemons as processes on this machine, started from
the files :mod:`privadapt.simulation.local_deployment` writes, and stopped
together (``privadapt simulate``, networked experiments, the tests).

The coordinator runs ``python -m MODULE`` with this interpreter, unbuffered,
with single-threaded BLAS (a machine runs many processes), and its stderr in a
log; a site daemon is forked from a process that has already imported it
(:mod:`privadapt.simulation.forked_sites`), or started the same way as the
coordinator where the program itself is under test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from privadapt.common.blas_threads import SINGLE_THREADED_BLAS
from privadapt.common.errors import ConfigError
from privadapt.simulation.forked_sites import SITE_MODULE, ForkedSite, fork_site

STOP_TIMEOUT_S = 15.0
COORDINATOR_MODULE = "privadapt.server.coordinator.main"
#: What the helpers below start and stop: a program or a forked site.
RunningProcess = subprocess.Popen | ForkedSite


def start_module(args: Sequence[str], log: Path, stdout: int | None = None) -> subprocess.Popen:
    """``python -m *args`` with stderr (and stdout, unless ``stdout`` is given,
    e.g. ``subprocess.PIPE``) appended to ``log``."""
    with open(log, "ab") as handle:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            [sys.executable, "-m", *args], stdout=stdout or handle, stderr=handle,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **SINGLE_THREADED_BLAS},
        )


def start_coordinator(config: Path, log: Path) -> subprocess.Popen:
    """A coordinator process; its stdout is a pipe for :func:`await_coordinator`."""
    return start_module([COORDINATOR_MODULE, "--config", str(config)], log,
                        stdout=subprocess.PIPE)


def await_coordinator(process: subprocess.Popen, log: Path) -> int:
    """Block until the coordinator prints that it serves, and return its port
    (its listen port may have been 0); ``ConfigError`` with the end of its log
    if it exits instead."""
    assert process.stdout is not None, "start the coordinator with start_coordinator"
    line = process.stdout.readline().decode()  # blocks until serving (or exit)
    if "serving on port" not in line:
        tail = log.read_text()[-2000:] if log.exists() else ""
        raise ConfigError(f"the coordinator did not start; its log ends:\n{tail}")
    return int(line.rsplit(" ", 1)[1])


def start_site(config: Path, log: Path, *extra_args: str, fork: bool = True) -> RunningProcess:
    """A site daemon process for the site configuration ``config``: forked
    from the fork server (a start in milliseconds), or with ``fork=False``
    the program ``python -m privadapt.client.daemon.main`` itself."""
    if fork:
        return fork_site(config, log, *extra_args)
    return start_module([SITE_MODULE, "--config", str(config), *extra_args], log)


def terminate(processes: Sequence[RunningProcess], timeout: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM every process still running (a clean shutdown), then wait for
    all of them together for up to ``timeout`` and kill those still running."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for process in processes:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def proportional_memory_mib(pid: int) -> float | None:
    """The proportional set size of live process ``pid`` in MiB (Linux; None
    where it cannot be read): its private pages plus each page it shares
    divided by the number of processes sharing it. Sites forked from the fork
    server share the pages of everything it imported, which their peak
    resident memory counts once per site; summed over the sites and the
    server, these sizes are the memory they take together."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    return None


@dataclass
class Processes:
    """Named processes started together and stopped together, last first."""

    started: list[tuple[str, RunningProcess]] = field(default_factory=list)

    def add(self, name: str, process: RunningProcess) -> RunningProcess:
        self.started.append((name, process))
        return process

    def peak_memory_mib(self) -> dict[str, float]:
        """Peak resident memory (VmHWM) of each live process, in MiB (Linux)."""
        peaks = {}
        for name, process in self.started:
            status = Path(f"/proc/{process.pid}/status")
            if process.poll() is None and status.exists():
                for line in status.read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        peaks[name] = int(line.split()[1]) / 1024
        return peaks

    def proportional_memory_mib(self) -> dict[str, float]:
        """Proportional set size (:func:`proportional_memory_mib`) of each live
        process, in MiB (Linux)."""
        sizes = {}
        for name, process in self.started:
            if process.poll() is None:
                size = proportional_memory_mib(process.pid)
                if size is not None:
                    sizes[name] = size
        return sizes

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time (user + system) each live process has used so far (Linux)."""
        tick = os.sysconf("SC_CLK_TCK")
        used = {}
        for name, process in self.started:
            stat = Path(f"/proc/{process.pid}/stat")
            if process.poll() is None and stat.exists():
                # Fields after the parenthesised command name; utime and stime are 14 and 15.
                fields = stat.read_text().rsplit(")", 1)[1].split()
                used[name] = (int(fields[11]) + int(fields[12])) / tick
        return used

    def stop(self) -> None:
        terminate([process for _, process in reversed(self.started)])
        self.started.clear()
