"""Site daemons forked from the fork server: three of them holding the same
records and asked the same per-site release answer three different noisy
values (no random state is shared through the fork) and share the pages of
what the server imported, and they are stopped
like the program's processes: SIGTERM is a clean shutdown whose log says so,
a wait that times out says so the way subprocess does, and a site whose
configuration is refused exits with the program's code and message."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from privadapt.common.mechanisms import GaussianMechanism
from privadapt.simulation.forked_sites import (
    STOP_TIMEOUT_S,
    UNREPORTED_EXIT,
    ForkedSite,
    ForkServer,
    fork_site,
)
from privadapt.simulation.local_deployment import free_port
from privadapt.simulation.local_processes import Processes, terminate
from tests.network_callers import wait_until
from tests.network_harness import (
    direct_federation,
    in_process_coordinator,
    make_pki,
    write_coordinator_config,
    write_site,
)
from tests.synthetic_data import synthetic_dataset

SITES = ("site-a", "site-b", "site-c")
FAILSAFE_S = 60.0  # only turns a hang into a failure
SCORES = {"candidates": np.array([[1.0, -1.0, 0.5], [0.0, 0.0, 0.0]]), "loss": "logistic",
          "loss_bound": 4.0}


def test_forked_sites_with_the_same_records_draw_different_noise(tmp_path):
    pki = make_pki(tmp_path / "pki", SITES)
    same = synthetic_dataset(50, 3, seed=0)
    with in_process_coordinator(write_coordinator_config(tmp_path, pki)) as coordinator:
        sites = [fork_site(write_site(tmp_path, pki, name, same, coordinator.port,
                                      epsilon_cap=1e6), tmp_path / f"{name}.log")
                 for name in SITES]
        try:
            federation = direct_federation(coordinator, "forks", SITES)
            federation.wait_for_sites()
            mechanism = GaussianMechanism.single(math.sqrt(2) * 4.0, 1.0)
            answers = federation.query_per_site("validation_loss", SCORES, mechanism).answers
            running = Processes([(name, site) for name, site in zip(SITES, sites, strict=True)])
            resident, proportional = running.peak_memory_mib(), running.proportional_memory_mib()
        finally:
            terminate(sites)
    values = [tuple(np.asarray(answers[name][0]).ravel()) for name in SITES]
    assert len(set(values)) == len(SITES), values
    # The forks share the pages of what the server imported: each counts them
    # in full in its resident size and a third in its proportional one (0.39
    # of the resident sizes together here; 0.62 for three daemons started as
    # programs, which share only the libraries' file pages).
    assert set(proportional) == set(SITES)
    assert sum(proportional.values()) < 0.5 * sum(resident.values()), (proportional, resident)


def test_a_forked_site_stops_cleanly_on_sigterm_and_times_out_like_popen(tmp_path):
    pki = make_pki(tmp_path / "pki", ("site-a",))
    # Nothing listens on the port: the daemon waits for its coordinator.
    config = write_site(tmp_path, pki, "site-a", synthetic_dataset(20, 3, seed=1), free_port())
    log = tmp_path / "site-a.log"
    site = fork_site(config, log)
    assert site.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        site.wait(timeout=0.2)
    site.send_signal(signal.SIGTERM)
    assert site.wait(timeout=60) == 0 and site.returncode == 0
    assert "site=site-a stopped" in log.read_text()


def test_a_refused_configuration_exits_with_the_programs_code_and_message(tmp_path):
    config = tmp_path / "site.toml"
    config.write_text("[site]\nname = 3\n")
    log = tmp_path / "site.log"
    assert fork_site(config, log).wait(timeout=60) == 2
    assert log.read_text().startswith("privadapt-site: ")


# A parent that starts the fork server, forks a site per configuration and
# then waits to be killed: the server learns of its death only from its stdin.
_PARENT = """
import sys, time
from privadapt.simulation.forked_sites import ForkServer
server = ForkServer()
pids = [server.fork(["--config", config], config + ".log") for config in sys.argv[1:]]
print(server._process.pid, *pids, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_when_its_parent_dies_the_server_stops_every_site_and_exits_without_an_error(tmp_path):
    # The parent is gone, so the server's report of a site's exit meets a
    # closed pipe: that must not end the server before it has stopped (and,
    # after STOP_TIMEOUT_S, killed) every site.
    names = ("site-a", "site-b", "site-c")
    pki = make_pki(tmp_path / "pki", names)
    port = free_port()  # nothing listens: the daemons wait for their coordinator
    configs = [str(write_site(tmp_path, pki, name, synthetic_dataset(20, 3, seed=i), port))
               for i, name in enumerate(names)]
    parent = subprocess.Popen([sys.executable, "-c", _PARENT, *configs],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    pids: list[int] = []
    try:
        assert parent.stdout is not None
        pids = [int(word) for word in parent.stdout.readline().split()]
        parent.kill()
        parent.wait(timeout=60)
        deadline = time.monotonic() + STOP_TIMEOUT_S + 30
        while any(map(_alive, pids)) and time.monotonic() < deadline:
            time.sleep(0.1)
        stranded = [pid for pid in pids if _alive(pid)]
    finally:
        for pid in filter(_alive, pids):
            os.kill(pid, signal.SIGKILL)
    assert len(pids) == 1 + len(names) and stranded == []
    assert parent.stderr is not None
    assert b"Traceback" not in parent.stderr.read()


class ExitedTogether:
    """A fork server that reports a site's exit to two threads at the same
    moment, so both go on to close its handle."""

    def __init__(self) -> None:
        self.both_asked = threading.Barrier(2, timeout=5)

    def exit_code(self, pid: int) -> int:
        with contextlib.suppress(threading.BrokenBarrierError):
            self.both_asked.wait()
        return 0


def test_a_forked_sites_handle_is_closed_once_when_two_threads_poll_it():
    process = subprocess.Popen(["sleep", "30"])
    try:
        site = ForkedSite(process.pid, ExitedTogether())
        errors: list[BaseException] = []

        def poll() -> None:
            try:
                site.poll()
            except BaseException as err:  # collected for the assertion
                errors.append(err)

        threads = [threading.Thread(target=poll) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
    finally:
        process.kill()
        process.wait()


def test_a_site_whose_fork_server_died_stops_and_can_still_be_waited_for(tmp_path):
    """Nobody is left to report its exit code, but the site stops (SIGTERM
    from Linux when its parent dies) and its own handle says when."""
    pki = make_pki(tmp_path / "pki", ("site-a",))
    config = write_site(tmp_path, pki, "site-a", synthetic_dataset(20, 3, seed=1), free_port())
    log = tmp_path / "site.log"
    server = ForkServer()
    site = ForkedSite(server.fork(["--config", str(config)], str(log)), server)
    try:
        wait_until(lambda: log.exists() and "waiting for its coordinator" in log.read_text(),
                   FAILSAFE_S)
        server._process.kill()
        server._process.wait(timeout=60)
        assert site.wait(timeout=60) == UNREPORTED_EXIT and site.poll() == UNREPORTED_EXIT
        assert "site=site-a stopped" in log.read_text()  # a clean shutdown, by SIGTERM
    finally:
        if _alive(site.pid):
            os.kill(site.pid, signal.SIGKILL)
