"""An asyncio event loop on a thread of its own, for the coordinator's server.

The coordinator is synchronous (job threads, the store, the CLI's ``start``,
``stop`` and ``wait``); only its gRPC server runs on ``grpc.aio``, whose
objects must be made and driven on one running loop. This thread owns that
loop, and :meth:`EventLoopThread.run` is how synchronous code reaches it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class EventLoopThread:
    """A running event loop; :meth:`close` stops it and joins its thread."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()
        self.loop.close()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coroutine`` on the loop and return its result (from any other thread)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def close(self) -> None:
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join()
