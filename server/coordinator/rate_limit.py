"""A sliding-window limit on how often one caller may do one thing.

Register writes a row to the store and an audit entry; a holder of any site
certificate could call it in a loop. The limit is per
authenticated identity, so one site's loop never delays another site, and
memory is bounded by the number of identities the CA issued times the burst.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable


class RateLimit:
    """At most ``burst`` events per key in any ``window_s`` seconds."""

    def __init__(self, burst: int, window_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if burst < 1 or not window_s > 0:
            raise ValueError(f"need burst >= 1 and window_s > 0, got {burst}, {window_s}")
        self.burst = burst
        self.window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()
        self._events: dict[str, deque[float]] = {}

    def allow(self, key: str) -> float:
        """Record an event for ``key`` and return 0, or return how many
        seconds to wait before the next one is allowed (nothing recorded)."""
        now = self._clock()
        with self._lock:
            events = self._events.setdefault(key, deque())
            while events and events[0] <= now - self.window_s:
                events.popleft()
            if len(events) >= self.burst:
                return events[0] + self.window_s - now
            events.append(now)
            return 0.0
