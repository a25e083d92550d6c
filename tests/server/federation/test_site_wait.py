"""A job waiting for its sites says so at once and every NOTICE_INTERVAL_S
seconds, naming the absent sites, the time waited so far and the deadline, and
ends with an empty line; checked on a clock the test advances, not a real one."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from privadapt.server.federation import site_wait
from privadapt.server.federation.site_wait import NOTICE_INTERVAL_S, wait_saying_so

START = 1_000_000.0  # 13:46:40 UTC


class SteppedClock:
    """A clock that moves only when a registry wait makes it."""

    def __init__(self) -> None:
        self.now = START

    def time(self) -> float:
        return self.now


class Registry:
    """``wait_until`` as the site registry's, on the stepped clock: true at
    once if ``predicate()`` holds, else the wait lasts its whole timeout,
    unless the sites are all there at ``ready_at``."""

    def __init__(self, clock: SteppedClock, ready_at: float | None = None) -> None:
        self.clock, self.ready_at, self.waits = clock, ready_at, []

    def wait_until(self, predicate, timeout: float) -> bool:
        self.waits.append(timeout)
        if predicate():
            return True
        if self.ready_at is not None and self.clock.now + timeout >= self.ready_at:
            self.clock.now = self.ready_at
            return True
        self.clock.now += timeout
        return False


@pytest.fixture
def clock(monkeypatch) -> SteppedClock:
    stepped = SteppedClock()
    monkeypatch.setattr(site_wait, "time",
                        SimpleNamespace(time=stepped.time, strftime=time.strftime,
                                        gmtime=time.gmtime))
    return stepped


def _waited(lines: list[str]) -> list[str]:
    return [line.split(" for site")[0] for line in lines]


def test_a_wait_that_times_out_says_so_every_interval_then_ends_with_an_empty_line(clock):
    registry, lines = Registry(clock), []
    timeout = 2 * NOTICE_INTERVAL_S + 2.0
    assert not wait_saying_so(registry, lambda: False, timeout, lambda: ["site-c", "site-b"],
                              lines.append)
    assert _waited(lines) == ["waiting 0 s", f"waiting {NOTICE_INTERVAL_S:.0f} s",
                              f"waiting {2 * NOTICE_INTERVAL_S:.0f} s", ""]
    assert all(line.endswith(f"at most until 13:46:52 UTC ({timeout:.0f} s in all)")
               and "site(s) site-b, site-c (not taking part since 13:46:40 UTC)" in line
               for line in lines[:-1])
    assert registry.waits == [NOTICE_INTERVAL_S, NOTICE_INTERVAL_S, 2.0]
    assert clock.now == START + timeout


def test_a_wait_that_the_sites_end_stops_saying_so(clock):
    registry, lines = Registry(clock, ready_at=START + NOTICE_INTERVAL_S + 1.0), []
    assert wait_saying_so(registry, lambda: False, 60.0, lambda: ["site-c"], lines.append)
    assert _waited(lines) == ["waiting 0 s", f"waiting {NOTICE_INTERVAL_S:.0f} s", ""]


def test_sites_already_there_are_waited_for_without_a_word(clock):
    registry, lines = Registry(clock), []
    assert wait_saying_so(registry, lambda: True, 60.0, lambda: [], lines.append)
    assert lines == [] and registry.waits == [60.0]
