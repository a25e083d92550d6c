"""The daemon's lanes (client/daemon/job_lanes.py): one job's items in order,
different jobs at once, so a long query of one job never stalls the rounds
of another at the same site. Ordered by events, never by timing: a wait's
timeout only keeps a broken scheduler from hanging the suite."""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np

from privadapt.client.daemon.job_lanes import JobLanes
from privadapt.common.federation import Query
from privadapt.common.mechanisms import Adjacency, GaussianMechanism
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.wire.messages import query_to_proto
from tests.client.daemon.test_site_worker import (  # noqa: F401 -- pki is a fixture
    DIM,
    Calls,
    make_worker,
    pki,
)
from tests.common.wire.test_bounded_parse import empty_keys
from tests.network_callers import wait_until

# Only a failsafe: every wait below is released by an event of the test.
FAILSAFE_S = 60.0


def report_item(job: str, sequence: int) -> pb.WorkItem:
    return pb.WorkItem(sequence=sequence,
                       privacy_report_request=pb.PrivacyReportRequest(job_id=job))


def test_the_items_of_one_job_run_one_at_a_time_in_the_order_they_came():
    seen: list[int] = []
    inside = threading.Semaphore(1)
    finished = threading.Event()

    def handle(item: pb.WorkItem, wire_size: int) -> None:
        assert inside.acquire(blocking=False), "two items of one job ran at once"
        seen.append(item.sequence)
        inside.release()
        if item.sequence == 52:
            finished.set()

    lanes = JobLanes(handle)
    for sequence in range(1, 51):
        lanes.submit(report_item("job-a", sequence))
    lanes.submit(pb.WorkItem(sequence=51, job_end=pb.JobEnd(job_id="job-a")))
    lanes.submit(report_item("job-a", 52))
    assert finished.wait(FAILSAFE_S)
    lanes.close()
    assert seen == list(range(1, 53))


def test_a_second_job_runs_while_the_first_jobs_item_is_in_hand():
    b_done, a_done, a_saw_b = threading.Event(), threading.Event(), []

    def handle(item: pb.WorkItem, wire_size: int) -> None:
        if item.privacy_report_request.job_id == "job-a":
            a_saw_b.append(b_done.wait(FAILSAFE_S))
            a_done.set()
        else:
            b_done.set()

    lanes = JobLanes(handle)
    lanes.submit(report_item("job-a", 1))
    lanes.submit(report_item("job-b", 2))
    assert a_done.wait(2 * FAILSAFE_S)
    lanes.close()
    assert a_saw_b == [True]


def test_jobs_beyond_the_lane_limit_wait_their_turn_in_arrival_order():
    order: list[int] = []
    release_first, all_ran = threading.Event(), threading.Event()

    def handle(item: pb.WorkItem, wire_size: int) -> None:
        order.append(item.sequence)
        if item.sequence == 1:
            release_first.wait(FAILSAFE_S)
        if len(order) == 4:
            all_ran.set()

    lanes = JobLanes(handle, max_lanes=1)
    lanes.submit(report_item("job-a", 1))
    lanes.submit(report_item("job-b", 2))
    lanes.submit(report_item("job-c", 3))
    lanes.submit(report_item("job-a", 4))
    release_first.set()
    assert all_ran.wait(FAILSAFE_S)
    lanes.close()
    # job-a's second item steps back behind the jobs that were waiting.
    assert order == [1, 2, 3, 4]


def test_lane_threads_stay_for_later_items_and_are_never_more_than_max_lanes():
    # A site's ledger keeps a connection per thread: a thread per item made a
    # connection and its statements again every round.
    threads: list[int] = []  # the number of the thread that ran each item
    ran, local = threading.Semaphore(0), threading.local()

    def handle(item: pb.WorkItem, wire_size: int) -> None:
        if not hasattr(local, "number"):  # a thread's first item
            local.number = len(set(threads))
        threads.append(local.number)
        ran.release()

    lanes = JobLanes(handle, max_lanes=2)
    for sequence in range(1, 21):  # one at a time, of two jobs in turn
        lanes.submit(report_item(f"job-{sequence % 2}", sequence))
        assert ran.acquire(timeout=FAILSAFE_S)
    for sequence in range(21, 41):  # many at once, of four jobs
        lanes.submit(report_item(f"job-{sequence % 4}", sequence))
    for _ in range(21, 41):
        assert ran.acquire(timeout=FAILSAFE_S)
    lanes.close()
    # A thread per lane run would number 20 or more; whether the first 20 took
    # one thread or two depends on how soon a lane goes idle, not on the rule.
    assert len(set(threads)) <= 2, threads


def test_close_drops_the_items_not_started_and_finishes_the_one_in_hand():
    started, release, ran = threading.Event(), threading.Event(), []

    def handle(item: pb.WorkItem, wire_size: int) -> None:
        ran.append(item.sequence)
        started.set()
        release.wait(FAILSAFE_S)

    lanes = JobLanes(handle)
    lanes.submit(report_item("job-a", 1))
    lanes.submit(report_item("job-a", 2))
    assert started.wait(FAILSAFE_S)
    closing = threading.Thread(target=lanes.close)
    closing.start()
    release.set()
    closing.join(FAILSAFE_S)
    assert not closing.is_alive() and ran in ([1], [1, 2])


def abort_item(job: str, sequence: int, padding: int = 1000) -> pb.WorkItem:
    return pb.WorkItem(sequence=sequence,
                       round_abort=pb.RoundAbort(job_id=job, round=1, reason="x" * padding))


def test_waiting_items_are_bounded_by_their_wire_size_and_the_reader_is_held_back():
    # Counting items alone let 1,024 of the largest messages wait (64 GiB).
    entered, release, ran = threading.Event(), threading.Event(), []

    def handle(item: pb.WorkItem, wire_size: int) -> None:
        ran.append(item.sequence)
        entered.set()
        release.wait(FAILSAFE_S)

    size = abort_item("job-a", 2).ByteSize()
    lanes = JobLanes(handle, max_queued_bytes=3 * size + size // 2)
    lanes.submit(abort_item("job-a", 1))
    assert entered.wait(FAILSAFE_S)  # item 1 in hand, no longer waiting
    submitted: list[int] = []

    def read_stream() -> None:
        for sequence in range(2, 11):
            lanes.submit(abort_item("job-a", sequence))
            submitted.append(sequence)

    reader = threading.Thread(target=read_stream)
    reader.start()
    wait_until(lambda: lanes.held_back == 1, FAILSAFE_S)
    assert submitted == [2, 3, 4] and lanes.queued_bytes == 3 * size
    release.set()
    reader.join(FAILSAFE_S)
    wait_until(lambda: len(ran) == 10, FAILSAFE_S)
    lanes.close()
    assert ran == list(range(1, 11)) and lanes.held_back == 0


class ThreadSafeCalls(Calls):
    """The coordinator's side of the calls, from several lanes, with an event
    per (kind, job)."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: dict[tuple[str, str], object] = {}
        self.events: dict[tuple[str, str], threading.Event] = {}
        self._lock = threading.Lock()

    def event(self, kind: str, job: str) -> threading.Event:
        with self._lock:
            return self.events.setdefault((kind, job), threading.Event())

    def _record(self, kind: str, request) -> pb.Ack:
        with self._lock:
            self.sent[(kind, request.job_id)] = request
        self.event(kind, request.job_id).set()
        return pb.Ack()


def _announcement(job: str) -> pb.WorkItem:
    mechanism = GaussianMechanism.single(2.0, 4.0, Adjacency.REPLACE_ONE)
    params = {"weights": np.zeros(DIM), "loss": "logistic", "clip_norm": 1.0}
    query = Query(job, "q1", "linear_gradient", params, mechanism)
    return pb.WorkItem(round_announcement=pb.RoundAnnouncement(
        job_id=job, round=1, query_id="q1", query=query_to_proto(query, 1),
        fractional_bits=query.fractional_bits))


def _round(lanes: JobLanes, calls: ThreadSafeCalls, job: str) -> None:
    lanes.submit(_announcement(job))
    assert calls.event("key", job).wait(FAILSAFE_S)
    key = calls.sent[("key", job)]
    lanes.submit(pb.WorkItem(roster=pb.Roster(job_id=job, round=1, query_id="q1", keys=[key])))


def test_a_second_jobs_round_is_answered_while_a_long_query_of_the_first_runs(
        make_site, pki, tmp_path):  # noqa: F811 -- pki is the fixture
    worker = make_worker(make_site, pki, tmp_path, "site-a")
    calls = ThreadSafeCalls()
    a_running, b_answered_meanwhile = threading.Event(), []
    answer = worker.site.answer

    def long_answer(query, num_participants):
        if query.job_id == "job-a":  # the long query: runs until job-b's share left
            a_running.set()
            b_answered_meanwhile.append(calls.event("share", "job-b").wait(FAILSAFE_S))
        return answer(query, num_participants)

    worker.site.answer = long_answer
    lanes = JobLanes(lambda item, size: worker.handle(item, calls, size))
    _round(lanes, calls, "job-a")
    assert a_running.wait(FAILSAFE_S)
    _round(lanes, calls, "job-b")
    assert calls.event("share", "job-a").wait(FAILSAFE_S)
    lanes.close()
    assert b_answered_meanwhile == [True]
    assert not any(kind == "refusal" for kind, _ in calls.sent)
    assert {job for kind, job in calls.sent if kind == "share"} == {"job-a", "job-b"}


# Reads a work item's wire bytes as the daemon's stream does
# (client/daemon/main.py: read_work_item) in a fresh process, and prints the
# wire size the lanes would count, the process's peak memory growth in bytes,
# and whether the reader refused it.
_PARSE_AND_MEASURE = """
import resource, sys
from privadapt.client.daemon.main import read_work_item
from privadapt.common.errors import WireError
data = sys.stdin.buffer.read()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    read_work_item(data)
    refused = 0
except WireError:
    refused = 1
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
print(len(data), grown, refused)
"""


def test_a_work_item_in_memory_is_within_a_small_multiple_of_the_wire_size_counted():
    """A 4 MB roster of two million empty keys parsed to 200 MB and more (a
    64 MiB one to several GB) before any lane saw it; the daemon's reader
    refuses it before parsing, holding at most a few times its size."""
    data = empty_keys(2_000_000)
    measured = subprocess.run([sys.executable, "-c", _PARSE_AND_MEASURE], input=data,
                              capture_output=True, check=True, timeout=FAILSAFE_S)
    counted, grown, refused = (int(word) for word in measured.stdout.split())
    assert counted == len(data) and refused == 1
    assert grown <= 8 * counted, f"{grown / counted:.0f} times the {counted} bytes counted"
