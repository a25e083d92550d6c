"""Waiting for a job's sites, saying so: while a job waits for sites that are
not connected, the operator is told every few seconds which sites, since
when, and how long the job will wait for them (``privadapt launch --follow``
prints it), instead of a silence that ends in a failure."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection

from privadapt.server.coordinator.site_registry import SiteRegistry

# How often a waiting job says so.
NOTICE_INTERVAL_S = 5.0

WaitListener = Callable[[str], None]


def wait_saying_so(registry: SiteRegistry, ready: Callable[[], bool], timeout: float,
                   absent: Callable[[], Collection[str]], notice: WaitListener | None) -> bool:
    """``registry.wait_until(ready, timeout)``; while it waits, ``notice``
    gets a line naming the ``absent()`` sites every :data:`NOTICE_INTERVAL_S`
    seconds (first at once), then ``""`` when the wait ends."""
    if notice is None or timeout <= 0 or ready():
        return registry.wait_until(ready, timeout)
    started = time.time()
    deadline = started + timeout
    try:
        while True:
            notice(waiting_line(absent(), started, time.time(), deadline))
            left = deadline - time.time()
            if registry.wait_until(ready, max(0.0, min(NOTICE_INTERVAL_S, left))):
                return True
            if time.time() >= deadline:
                return False
    finally:
        notice("")


def waiting_line(absent: Collection[str], started: float, now: float, deadline: float) -> str:
    """``waiting 15 s for site(s) site-c (not taking part since 12:00:01 UTC),
    at most until 12:02:01 UTC (120 s in all)``."""
    names = ", ".join(sorted(absent)) or "enough sites"
    return (f"waiting {now - started:.0f} s for site(s) {names} (not taking part since "
            f"{_clock(started)} UTC), at most until {_clock(deadline)} UTC "
            f"({deadline - started:.0f} s in all)")


def _clock(timestamp: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(timestamp))
