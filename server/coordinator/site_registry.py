"""The coordinator's view of its sites: who is registered, who is connected,
and the outbound queue of each site's Connect stream.

Sites dial out (they sit behind firewalls), so the coordinator reaches a site
only through the server stream the site opened (proto ``FederationService.Connect``).
Each registration gets a :class:`SiteSession` whose ``outbox`` feeds that stream;
pushing work is putting a message in a queue, and the stream's handler thread
blocks on the queue -- no polling, no sleeps. A session closed by either side
gets a ``None`` sentinel that ends its stream.

Listeners (the round engine) are told when a site disconnects, so a round
waiting on that site is aborted at once rather than at its deadline.
"""

from __future__ import annotations

import itertools
import logging
import queue
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from privadapt.common.proto import federation_pb2 as pb

logger = logging.getLogger(__name__)

DisconnectListener = Callable[[str], None]

# A connected session heard from within this many seconds is live: a site
# heartbeats every 10 s (federation_service.HEARTBEAT_INTERVAL_S), so three
# missed heartbeats mark a session whose stream died unnoticed as stale.
LIVE_SESSION_S = 35.0


class IdentityInUseError(ValueError):
    """A second daemon registered with the identity of a site whose session is
    live. The first keeps its session: replacing it made the two daemons evict
    each other every 200 ms, neither able to finish a round."""


@dataclass
class SiteSession:
    """One registration of a site: what it declared and its work queue."""

    name: str
    session_id: str
    registration: pb.RegisterRequest
    outbox: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)
    connected: bool = False
    closed: bool = False
    last_seen: float = field(default_factory=time.time)
    # Highest round the site says it has closed, per job (from ConnectRequest):
    # a resumed job starts above it, so no site ever sees a round number twice.
    closed_rounds: dict[str, int] = field(default_factory=dict)
    # The site's budget as its ledger last stated it (Register, then every
    # Heartbeat); None if it sent none. Shown, and used only to refuse launches.
    budget: pb.SiteBudget | None = None
    _sequence: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def send(self, **item: object) -> bool:
        """Queue one work item (``job_start=...``, ``roster=...``); False if
        the session is no longer connected."""
        if self.closed or not self.connected:
            return False
        self.outbox.put(pb.WorkItem(sequence=next(self._sequence), **item))
        return True

    def stream(self) -> Iterator[pb.WorkItem]:
        """The items of the Connect stream, until the session closes."""
        while True:
            item = self.outbox.get()
            if item is None:
                return
            yield item

    def close(self) -> None:
        self.closed = True
        self.connected = False
        self.outbox.put(None)


class SiteRegistry:
    """Registered sites by name; thread-safe, shared by every gRPC handler."""

    def __init__(self, live_session_s: float = LIVE_SESSION_S) -> None:
        self._live_session_s = live_session_s
        self._changed = threading.Condition()
        self._sessions: dict[str, SiteSession] = {}
        self._listeners: list[DisconnectListener] = []

    def add_disconnect_listener(self, listener: DisconnectListener) -> None:
        self._listeners.append(listener)

    def register(self, name: str, request: pb.RegisterRequest) -> SiteSession:
        """A new session for ``name``; an older one (a restarted site) is closed.

        :class:`IdentityInUseError` if the older one is connected and was heard
        from within ``live_session_s``: another daemon is running as this site.
        """
        session = SiteSession(name, secrets.token_hex(16), request,
                              budget=request.budget if request.HasField("budget") else None)
        with self._changed:
            old = self._sessions.get(name)
            if old is not None and old.connected and not old.closed:
                quiet = time.time() - old.last_seen
                if quiet < self._live_session_s:
                    raise IdentityInUseError(
                        f"site {name!r} is already connected (its session was heard from "
                        f"{quiet:.0f} s ago): another privadapt-site runs with this site's "
                        "certificate. Stop one of the two daemons; this registration is "
                        f"refused while the other one's session lives (it is replaced "
                        f"{self._live_session_s:g} s after that daemon falls silent)")
            self._sessions[name] = session
            self._changed.notify_all()
        if old is not None:
            self._close(old)
        return session

    def attach(self, name: str, session_id: str, jobs: Iterable[pb.JobProgress]) -> SiteSession:
        """Mark the session connected (its Connect stream is open). ``KeyError``
        if ``session_id`` is not the current session of ``name``."""
        with self._changed:
            session = self._sessions.get(name)
            if session is None or session.session_id != session_id or session.closed:
                raise KeyError(session_id)
            if session.connected:
                # One stream per session: each holds a server thread, so a site
                # opening many could starve everyone else.
                raise ValueError(f"session {session_id!r} of site {name!r} already has its "
                                 "Connect stream open")
            session.closed_rounds = {j.job_id: j.last_closed_round for j in jobs}
            session.connected = True
            session.last_seen = time.time()
            self._changed.notify_all()
        logger.info("site=%s connected", name)
        return session

    def detach(self, session: SiteSession) -> None:
        """The session's stream ended (the site went away or the server stops)."""
        with self._changed:
            was_connected = session.connected
            session.connected = False
            self._changed.notify_all()
        if was_connected:
            self._close(session)

    def _close(self, session: SiteSession) -> None:
        session.close()
        logger.info("site=%s disconnected", session.name)
        for listener in self._listeners:
            listener(session.name)

    def touch(self, name: str, session_id: str, budget: pb.SiteBudget | None = None) -> bool:
        """Heartbeat: True if ``session_id`` is the live session of ``name``;
        its ``budget``, if sent, replaces the one it stated before."""
        with self._changed:
            session = self._sessions.get(name)
            if session is None or session.session_id != session_id or session.closed:
                return False
            session.last_seen = time.time()
            if budget is not None:
                session.budget = budget
            return True

    def note_spent(self, report: pb.SitePrivacyReport) -> None:
        """A site's end-of-job privacy report states its total over every job
        at its cap's delta, as its ledger reads after the job: it replaces the
        spent figure its last heartbeat stated (which can be a whole job old),
        when it is on the same terms (delta, accounting) and not smaller, so a
        dry run right after a job previews against what is really left."""
        with self._changed:
            session = self._sessions.get(report.site_name)
            budget = None if session is None else session.budget
            if (budget is None or report.total_delta != budget.delta_cap
                    or report.total_method != budget.accounting
                    or not report.total_epsilon >= budget.epsilon_spent):
                return
            refreshed = pb.SiteBudget()
            refreshed.CopyFrom(budget)
            refreshed.epsilon_spent = report.total_epsilon
            session.budget = refreshed

    def budgets(self) -> dict[str, pb.SiteBudget]:
        """Each registered site's last stated budget (sites that stated one)."""
        with self._changed:
            return {name: s.budget for name, s in self._sessions.items()
                    if s.budget is not None}

    def is_registered(self, name: str) -> bool:
        """``name`` holds a live registration (connected or about to connect)."""
        with self._changed:
            session = self._sessions.get(name)
            return session is not None and not session.closed

    def session(self, name: str) -> SiteSession | None:
        """The connected session of ``name``, if any."""
        with self._changed:
            session = self._sessions.get(name)
            return session if session is not None and session.connected else None

    def sessions(self) -> list[SiteSession]:
        with self._changed:
            return list(self._sessions.values())

    def connected_names(self) -> set[str]:
        with self._changed:
            return {name for name, s in self._sessions.items() if s.connected}

    def wait_until(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Block until ``predicate()`` holds (re-checked whenever a site
        registers, connects or leaves, or :meth:`wake` is called) or
        ``timeout`` seconds pass."""
        with self._changed:
            return self._changed.wait_for(predicate, timeout)

    def wake(self) -> None:
        """Re-check every waiter's predicate (a job was cancelled)."""
        with self._changed:
            self._changed.notify_all()

    def close_all(self) -> None:
        for session in self.sessions():
            session.close()
