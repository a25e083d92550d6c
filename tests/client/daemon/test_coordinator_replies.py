"""A site validates every field its coordinator sends, and no reply ends the
site daemon: a Register reply with heartbeat_interval
1e14 s crashed it (OverflowError out of run()), 1e12 s silently killed its
heartbeat thread; a round of 2^64 - 1 raised inside the worker."""

from __future__ import annotations

import threading
from concurrent import futures
from types import SimpleNamespace

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from privadapt.client.daemon import main as daemon_module
from privadapt.client.daemon.coordinator_replies import (
    DEFAULT_HEARTBEAT_S,
    check_register_response,
    check_work_item,
    heartbeat_interval,
)
from privadapt.client.daemon.main import SiteDaemon
from privadapt.common.data.schema_digest import SchemaDigest
from privadapt.common.errors import WireError
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.proto import federation_pb2_grpc as rpc
from tests.client.daemon.test_site_worker import Calls, announcement, make_worker, pki  # noqa: F401


@pytest.mark.parametrize("seconds", [10**14, 10**12, 10**5, -5])
def test_heartbeat_interval_out_of_range_is_a_wire_error(seconds):
    with pytest.raises(WireError, match="heartbeat_interval"):
        heartbeat_interval(Duration(seconds=seconds))


def test_heartbeat_interval_in_range_is_kept_and_unset_is_the_default():
    assert heartbeat_interval(Duration(seconds=10)) == 10.0
    assert heartbeat_interval(Duration(seconds=1, nanos=500_000_000)) == 1.5
    assert heartbeat_interval(Duration()) == DEFAULT_HEARTBEAT_S


@pytest.mark.parametrize("reply", [
    pb.RegisterResponse(session_id=""),
    pb.RegisterResponse(session_id="s" * 10_000),
    pb.RegisterResponse(session_id="s", coordinator_name="\x1b[2J"),
])
def test_register_reply_with_bad_ids_is_refused(reply):
    with pytest.raises(WireError):
        check_register_response(reply)


@pytest.mark.parametrize("item", [
    pb.WorkItem(roster=pb.Roster(job_id="j", round=2**64 - 1, query_id="q")),
    pb.WorkItem(round_abort=pb.RoundAbort(job_id="j", round=0, query_id="q")),
    pb.WorkItem(job_end=pb.JobEnd(job_id="j" * 100_000)),
    pb.WorkItem(privacy_report_request=pb.PrivacyReportRequest(job_id="j", delta=float("nan"))),
])
def test_work_item_out_of_range_is_refused(item):
    with pytest.raises(WireError):
        check_work_item(item)


def test_announcement_with_a_huge_round_is_dropped_and_the_worker_goes_on(make_site, pki,  # noqa: F811
                                                                       tmp_path):
    worker = make_worker(make_site, pki, tmp_path, "site-a")
    calls = Calls()
    huge = announcement(1)
    huge.round_announcement.round = 2**64 - 1
    worker.handle(huge, calls)
    assert calls.sent == []  # before: an OverflowError inside, turned into a refusal
    assert worker.progress.last_round("job-w") == 0
    worker.handle(announcement(1), calls)
    assert [kind for kind, _ in calls.sent] == ["key"]


class _HostileCoordinator(rpc.FederationServiceServicer):
    """Answers Register with a chosen heartbeat interval; counts registrations."""

    def __init__(self, seconds: int) -> None:
        self.seconds = seconds
        self.registrations = 0
        self.connects = 0
        self.registered = threading.Event()

    def Register(self, request, context):  # noqa: N802 (the gRPC method name)
        self.registrations += 1
        if self.registrations >= 2:
            self.registered.set()
        return pb.RegisterResponse(session_id="s1", coordinator_name="evil",
                                   heartbeat_interval=Duration(seconds=self.seconds))

    def Connect(self, request, context):  # noqa: N802
        self.connects += 1
        context.abort(grpc.StatusCode.UNAVAILABLE, "test coordinator has no work")


def _daemon_for(address: str, site) -> SiteDaemon:
    # Built without __init__: no certificates or configuration files, only
    # what run() uses.
    daemon = SiteDaemon.__new__(SiteDaemon)
    daemon.site = site
    daemon.schema_digest = SchemaDigest.of(None, site.dim)
    daemon.progress = SimpleNamespace(unfinished=dict, close=lambda: None)
    daemon.worker = None
    daemon.config = SimpleNamespace(coordinator=address)
    daemon._insecure, daemon._credentials = True, None
    daemon._stop, daemon._lock, daemon._stream = threading.Event(), threading.Lock(), None
    return daemon


@pytest.mark.parametrize("seconds", [10**14, 10**12])
def test_hostile_heartbeat_interval_never_ends_the_daemon(make_site, monkeypatch, seconds):
    monkeypatch.setattr(daemon_module.Backoff.__init__, "__defaults__", (0.01, 0.05))
    coordinator = _HostileCoordinator(seconds)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    rpc.add_FederationServiceServicer_to_server(coordinator, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    daemon = _daemon_for(f"127.0.0.1:{port}", make_site(name="site-a", num_records=20, dim=3))
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(daemon.run())
        except BaseException as err:  # what the test is about
            outcome.append(err)

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    try:
        # The daemon refuses the reply, backs off and registers again.
        assert coordinator.registered.wait(20), outcome
        assert runner.is_alive(), outcome
        assert coordinator.connects == 0  # nothing acted on the bad reply
    finally:
        daemon.stop()
        runner.join(10)
        server.stop(0)
    assert outcome == [0]
