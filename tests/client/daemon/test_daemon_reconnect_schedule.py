"""The site daemon's reconnect schedule: after the k-th failed session in a
row it waits a uniform time between 0.2 s and min(30 s, 0.2 s x 2^(k-1));
a session that held (STABLE_SESSION_S) starts the schedule again, one the
coordinator ends at once does not; and it never gives up,
however long the coordinator refuses, until it is stopped. The waits are read
from a fake clock (the daemon's stop event, which it waits on instead of
sleeping), and the jitter's window from random.uniform's arguments."""

from __future__ import annotations

import logging
import random
import socket
import threading
from concurrent import futures
from types import SimpleNamespace

import grpc
import pytest

import privadapt.client.daemon.main as daemon_main
from privadapt.client.daemon import worker as worker_module
from privadapt.client.daemon.main import SiteDaemon
from privadapt.common.data.schema_digest import SchemaDigest
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.proto import federation_pb2_grpc as rpc
from tests.client.daemon.test_site_worker import (  # noqa: F401 -- pki is a fixture
    announcement,
    make_worker,
    pki,
)

INITIAL, CAP = 0.2, 30.0


class _Clock:
    """Stands in for the daemon's stop event: records each wait instead of
    sleeping, and stops the daemon after ``limit`` waits."""

    def __init__(self, limit: int) -> None:
        self.waits: list[float] = []
        self.limit = limit
        self._stopped = False

    def is_set(self) -> bool:
        return self._stopped

    def set(self) -> None:
        self._stopped = True

    def wait(self, timeout: float | None = None) -> bool:
        assert timeout is not None, "the daemon waits with a timeout, never for ever"
        self.waits.append(timeout)
        self._stopped = len(self.waits) >= self.limit
        return self._stopped


class _Coordinator(rpc.FederationServiceServicer):
    """Refuses Register except at the sessions listed in ``accept`` (1-based),
    where it registers the site and ends the Connect stream at once."""

    def __init__(self, accept: set[int]) -> None:
        self.accept = accept
        self.sessions = 0

    def Register(self, request, context):  # noqa: N802 (the gRPC method name)
        self.sessions += 1
        if self.sessions not in self.accept:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "too many registrations")
        return pb.RegisterResponse(session_id="s1", coordinator_name="test")

    def Connect(self, request, context):  # noqa: N802
        return iter(())


def _daemon(make_site, port: int, waits: int) -> SiteDaemon:
    """A daemon dialling 127.0.0.1:``port`` that stops after ``waits`` waits."""
    # Built without __init__: no certificates or configuration files.
    daemon = SiteDaemon.__new__(SiteDaemon)
    daemon.site = make_site(name="site-a", num_records=20, dim=3)
    daemon.schema_digest = SchemaDigest.of(None, daemon.site.dim)
    daemon.progress = SimpleNamespace(unfinished=dict, close=lambda: None)
    daemon.worker = SimpleNamespace(session_ended=lambda: None)
    daemon.config = SimpleNamespace(coordinator=f"127.0.0.1:{port}", ca=None)
    daemon._insecure, daemon._credentials = True, None
    daemon._lock, daemon._stream = threading.Lock(), None
    daemon._registered_once = False
    daemon._stop = _Clock(waits)
    return daemon


def _windows(make_site, monkeypatch, accept: set[int], waits: int):
    """Run a daemon against a coordinator that accepts the sessions ``accept``
    for ``waits`` reconnect waits; the jitter windows, the waits and how many
    sessions the coordinator saw."""
    windows: list[tuple[float, float]] = []

    def uniform(low: float, high: float) -> float:
        windows.append((low, high))
        return high

    coordinator = _Coordinator(accept)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    rpc.add_FederationServiceServicer_to_server(coordinator, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    daemon = _daemon(make_site, port, waits)
    clock = daemon._stop
    monkeypatch.setattr(random, "uniform", uniform)
    try:
        assert daemon.run() == 0
    finally:
        server.stop(0)
    return windows, clock.waits, coordinator.sessions


def test_the_window_doubles_from_the_initial_wait_to_the_cap(make_site, monkeypatch):
    windows, waits, sessions = _windows(make_site, monkeypatch, accept=set(), waits=11)
    highs = [min(CAP, INITIAL * 2**k) for k in range(11)]
    assert windows == [(INITIAL, high) for high in highs]
    assert highs[-2:] == [CAP, CAP]
    assert waits == highs and sessions == 11


def test_a_session_that_held_starts_the_schedule_again(make_site, monkeypatch):
    # Every session "held": the fake coordinator's end at once counts as long.
    monkeypatch.setattr(daemon_main, "STABLE_SESSION_S", 0.0)
    windows, _, _ = _windows(make_site, monkeypatch, accept={3, 4}, waits=6)
    assert [high for _, high in windows] == pytest.approx(
        [INITIAL, 2 * INITIAL, INITIAL, INITIAL, 2 * INITIAL, 4 * INITIAL])
    assert all(low == INITIAL for low, _ in windows)


def test_a_session_the_coordinator_ends_at_once_does_not_restart_the_schedule(
        make_site, monkeypatch):
    # A coordinator that registers the site and ends its stream at once,
    # session after session, would otherwise have it dial every 0.2 s.
    windows, _, sessions = _windows(make_site, monkeypatch, accept={3, 4, 5, 6}, waits=6)
    assert sessions == 6
    assert [high for _, high in windows] == pytest.approx(
        [min(CAP, INITIAL * 2**k) for k in range(6)])


def test_the_daemon_never_gives_up_while_it_runs(make_site, monkeypatch):
    windows, waits, sessions = _windows(make_site, monkeypatch, accept=set(), waits=40)
    assert sessions == 40 and len(waits) == 40
    assert windows[-30:] == [(INITIAL, CAP)] * 30


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_coordinator_not_up_yet_is_news_at_start_and_a_warning_later(
        make_site, monkeypatch, caplog):
    """Sites often start before their coordinator: "connection refused"
    before the first registration and within the start-up grace is logged
    as waiting, at INFO; past the grace it is the warning with its diagnosis
    (a TLS or address mistake is a warning at once:
    tests/system/test_network_startup_checks.py)."""
    port = _closed_port()
    monkeypatch.setattr(daemon_main, "explain_unreachable",
                        lambda *_: "connection refused by 127.0.0.1: nothing listens there")
    caplog.set_level(logging.INFO, logger="privadapt.site")
    assert _daemon(make_site, port, waits=2).run() == 0
    waiting = [r for r in caplog.records if "waiting for its coordinator" in r.getMessage()]
    assert len(waiting) == 2 and {r.levelno for r in waiting} == {logging.INFO}
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]

    caplog.clear()
    monkeypatch.setattr(daemon_main, "STARTUP_GRACE_S", 0.0)
    assert _daemon(make_site, port, waits=1).run() == 0
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "UNAVAILABLE" in warning.getMessage() and "nothing listens there" in warning.getMessage()


class _AnnouncingCoordinator(_Coordinator):
    """Registers every session; its k-th Connect stream carries the k-th of
    ``items`` and ends (the session drops); records the keys and refusals."""

    def __init__(self, items: list[pb.WorkItem]) -> None:
        super().__init__(accept=set(range(1, len(items) + 1)))
        self.items, self.replies = items, []
        self._streams = 0
        self._answered = threading.Condition()

    def Connect(self, request, context):  # noqa: N802
        self._streams += 1
        yield self.items[self._streams - 1]
        # The stream ends once the item is answered (a lane's items not
        # started when the stream ends are dropped); the wait is a hang guard.
        with self._answered:
            self._answered.wait_for(lambda: len(self.replies) >= self._streams, 60.0)

    def _reply(self, kind: str, round: int) -> pb.Ack:
        with self._answered:
            self.replies.append((kind, round))
            self._answered.notify_all()
        return pb.Ack()

    def PublishKey(self, request, context):  # noqa: N802
        return self._reply("key", request.round)

    def Refuse(self, request, context):  # noqa: N802
        return self._reply("refusal", request.round)


def test_rounds_open_when_a_session_dropped_do_not_hold_the_open_round_bound(
        make_site, pki, tmp_path, monkeypatch):  # noqa: F811 -- pki is a fixture
    # The coordinator fails every round of a site whose session ended (a new
    # Register closes the old session), and the abort it sends goes to the
    # dead stream: a round open then never gets a roster. Kept open, enough
    # dropped sessions in rounds refused every announcement of every job
    # until that job ended.
    monkeypatch.setattr(worker_module, "MAX_OPEN_ROUNDS", 1)
    coordinator = _AnnouncingCoordinator([announcement(1), announcement(2)])
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    rpc.add_FederationServiceServicer_to_server(coordinator, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    daemon = _daemon(make_site, port, waits=2)
    daemon.worker = make_worker(make_site, pki, tmp_path, "site-a")
    daemon.progress = daemon.worker.progress
    try:
        assert daemon.run() == 0
    finally:
        server.stop(0)
    assert coordinator.replies == [("key", 1), ("key", 2)]
