"""How a site daemon schedules the work items of several jobs.

The coordinator pushes every job's work items down one stream. The daemon's
reading thread does no work itself: it puts each item in its job's *lane*, a
first-in first-out queue, and returns to the stream. Each lane with items is
served by a lane thread, one item at a time (a lane thread serves one lane at
a time, and stays for the next: at most ``max_lanes`` of them), so

* the items of one job run one after another, in the order they came (an
  announcement before its roster, a roster before the job's end), as the
  worker's round logic needs;
* the items of different jobs run at once: a query that takes seconds in one
  job (up to the policy's ``max_query_work``, client/compute_budget.py) never
  holds up the rounds of another job at the same site. The site's ledger
  reserves each query's budget before it runs (client/ledger/), so queries of
  different jobs can neither overspend the cap together nor see each other's
  reservation as their own.

Bounds, so that a coordinator cannot turn lanes into unbounded threads or
memory: at most ``max_lanes`` lanes run at once, the others wait their turn,
first come first served, and a running lane with items left steps back
behind the waiting ones after each item (round robin); at most
``max_queued`` items, and at most ``max_queued_bytes`` of them (their wire
size), wait in all, beyond which the reading thread waits, so the stream's
own flow control holds a flooding coordinator back. Counting items alone let
1,024 items of up to 64 MiB each (the message limit) wait: 64 GiB. Now what
a coordinator can make a site hold in work items is at most
``max_queued_bytes`` waiting, plus one item in hand per running lane and one
being read: 256 MiB + 9 x 64 MiB at the defaults, whatever the jobs, of wire
size. Parsed, an item holds a few times its wire size at most: the daemon's
stream refuses, before parsing, one of more submessages than its size pays
for (common/wire/bounded_parse.py; a roster of empty keys held 50-80 times).

On :meth:`close` (the stream ended or the daemon stops) items not started are
dropped, the items in hand finish: an announcement never started published no
key, a roster never started charged nothing (the coordinator's round times
out and is retried), and the ledger commits every charge before its share
leaves.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable

from privadapt.common.proto import federation_pb2 as pb

logger = logging.getLogger(__name__)

#: Lanes that may run at once: a few more than the jobs a site usually serves.
MAX_LANES = 8
#: Items waiting in all lanes together before the reading thread waits.
MAX_QUEUED = 1024
#: Their wire size together: four of the largest messages.
MAX_QUEUED_BYTES = 256 * 2**20


def job_of(item: pb.WorkItem) -> str:
    """The job an item belongs to ("" for an item of no known kind)."""
    kind = item.WhichOneof("item")
    return "" if kind is None else getattr(item, kind).job_id


class JobLanes:
    """Runs ``handle(item, wire size)`` on work items, one lane per job
    (module docstring). ``handle`` must not raise (``SiteWorker.handle``
    never does); an exception that escapes it anyway is logged and the lane
    goes on."""

    def __init__(self, handle: Callable[[pb.WorkItem, int], None], max_lanes: int = MAX_LANES,
                 max_queued: int = MAX_QUEUED,
                 max_queued_bytes: int = MAX_QUEUED_BYTES) -> None:
        if max_lanes < 1 or max_queued < 1 or max_queued_bytes < 1:
            raise ValueError("a daemon needs at least one lane and one queued item")
        self._handle = handle
        self.max_lanes, self.max_queued = max_lanes, max_queued
        self.max_queued_bytes = max_queued_bytes
        self._queues: dict[str, deque[tuple[pb.WorkItem, int]]] = {}
        self._waiting: deque[str] = deque()  # jobs with items and no running lane
        self._running: set[str] = set()
        self._queued = 0
        self._queued_bytes = 0
        #: Submits waiting for room (the reading thread held back).
        self.held_back = 0
        self._closed = False
        self._changed = threading.Condition()
        self._threads = 0  # lane threads, at most max_lanes
        self._idle = 0  # of them, those serving no lane now

    @property
    def queued_bytes(self) -> int:
        """The wire size of the items waiting in all lanes."""
        with self._changed:
            return self._queued_bytes

    def _has_room(self, size: int) -> bool:
        # An item alone always fits (it is within the message limit already).
        return self._queued < self.max_queued and (
            self._queued == 0 or self._queued_bytes + size <= self.max_queued_bytes)

    def submit(self, item: pb.WorkItem, wire_size: int | None = None) -> None:
        """Queue ``item`` in its job's lane (waits while ``max_queued`` items,
        or ``max_queued_bytes`` of them, wait). ``wire_size``: the bytes it
        was read from, if the caller has them (else its serialised size)."""
        job = job_of(item)
        size = item.ByteSize() if wire_size is None else wire_size
        with self._changed:
            if not (self._closed or self._has_room(size)):
                self.held_back += 1
                self._changed.notify_all()
                self._changed.wait_for(lambda: self._closed or self._has_room(size))
                self.held_back -= 1
            if self._closed:
                return
            queue = self._queues.setdefault(job, deque())
            queue.append((item, size))
            self._queued += 1
            self._queued_bytes += size
            if job not in self._running and job not in self._waiting:
                self._waiting.append(job)
            self._start_lanes()

    def close(self) -> None:
        """Drop the items not started and wait for those in hand to finish."""
        with self._changed:
            self._closed = True
            self._queues.clear()
            self._waiting.clear()
            self._queued = self._queued_bytes = 0
            self._changed.notify_all()
            self._changed.wait_for(lambda: not self._running)

    def _start_lanes(self) -> None:
        """Have waiting lanes served while fewer than ``max_lanes`` run (lock
        held): by an idle lane thread, or a new one while there are fewer
        than ``max_lanes``. The threads stay for the next items, so that what
        each keeps per thread (its ledger connection and prepared statements,
        about 0.4 ms of CPU a round to make again) is made once."""
        waiting = min(len(self._waiting), self.max_lanes - len(self._running))
        while waiting > self._idle and self._threads < self.max_lanes:
            self._threads += 1
            self._idle += 1
            threading.Thread(target=self._lane_thread, name="job-lane", daemon=True).start()
        if waiting:
            self._changed.notify_all()

    def _lane_thread(self) -> None:
        """Serve waiting lanes, one at a time, until the lanes are closed."""
        with self._changed:
            self._changed.wait_for(self._may_start)
            while not self._closed:
                job = self._waiting.popleft()
                self._running.add(job)
                self._idle -= 1
                self._serve(job)  # idle again once it returns (_stop_lane)
                self._changed.wait_for(self._may_start)
            self._threads -= 1
            self._idle -= 1

    def _may_start(self) -> bool:
        return self._closed or bool(self._waiting and len(self._running) < self.max_lanes)

    def _serve(self, job: str) -> None:
        """Run ``job``'s items (lock held, released while each runs) until its
        queue is empty or it steps back behind waiting lanes."""
        while True:
            queue = self._queues.get(job)
            if not queue:
                self._queues.pop(job, None)
                self._stop_lane(job)
                return
            item, size = queue.popleft()
            self._queued -= 1
            self._queued_bytes -= size
            self._changed.notify_all()
            self._changed.release()
            try:
                self._handle(item, size)
            except Exception:
                logger.exception("work item %d of job %r failed", item.sequence, job)
            finally:
                self._changed.acquire()
            if self._queues.get(job) and self._waiting:
                # Others wait for a lane: step back behind them.
                self._waiting.append(job)
                self._stop_lane(job)
                return

    def _stop_lane(self, job: str) -> None:
        """End ``job``'s lane, whose thread is idle from now, and let a
        waiting lane start (lock held)."""
        self._running.discard(job)
        self._idle += 1
        if not self._closed:
            self._start_lanes()
        self._changed.notify_all()
