"""Hostile callers of the coordinator for network tests: calls whose request
is never sent, calls made as a site's certificate, and a count that tests
wait on (a Condition, never a sleep-and-poll)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc

from privadapt.common.proto import federation_pb2_grpc as rpc
from privadapt.common.secure import tls
from privadapt.common.wire.messages import channel_options
from privadapt.server.coordinator.event_loop_thread import EventLoopThread


class Counter:
    """A count that waiters can wait on, up to ``timeout`` seconds (a guard
    against hangs, not a timing assertion)."""

    def __init__(self, timeout: float) -> None:
        self._condition = threading.Condition()
        self._timeout = timeout
        self.value = 0

    def add(self) -> None:
        with self._condition:
            self.value += 1
            self._condition.notify_all()

    def wait_for(self, value: int) -> None:
        with self._condition:
            assert self._condition.wait_for(lambda: self.value >= value, self._timeout), \
                f"waited for {value}, got {self.value}"


def wait_until(predicate: Callable[[], bool], timeout: float) -> None:
    """Until ``predicate()`` holds, for state no event announces (a refusal
    on the far end of a call, a session the coordinator attached); the
    deadline guards against a hang."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


class HalfSentCalls:
    """Calls by ``name`` whose request is never sent (grpc.aio, so that
    holding them costs the test no thread either); one connection per
    method, each under the server's 100 HTTP/2 streams per connection."""

    def __init__(self, pki: Path, port: int, name: str) -> None:
        self._loop = EventLoopThread(f"{name}-calls")
        self._target = f"127.0.0.1:{port}"
        self._files = (pki / f"{name}.crt", pki / f"{name}.key", pki / "ca.crt")
        self._channels: list = []
        self.calls: list = []

    def open(self, method: str, count: int) -> None:
        async def start():
            credentials = tls.channel_credentials(*self._files)
            channel = grpc.aio.secure_channel(self._target, credentials,
                                              options=channel_options())
            self._channels.append(channel)
            for _ in range(count):
                # A request stream that is never written to nor closed.
                self.calls.append(channel.stream_unary(method)())
            await asyncio.sleep(0)

        self._loop.run(start())

    def refusals(self) -> list[tuple[grpc.StatusCode, str]]:
        async def finished():
            return [(await call.code(), await call.details()) for call in self.calls
                    if call.done()]

        return self._loop.run(finished())

    def close(self) -> None:
        async def close_all():
            for channel in self._channels:
                await channel.close()

        self._loop.run(close_all())
        self._loop.close()


def site_stub(pki: Path, port: int, name: str) -> tuple[grpc.Channel, rpc.FederationServiceStub]:
    """A federation stub calling as ``name``'s certificate, and its channel."""
    credentials = tls.channel_credentials(pki / f"{name}.crt", pki / f"{name}.key",
                                          pki / "ca.crt")
    channel = grpc.secure_channel(f"127.0.0.1:{port}", credentials, options=channel_options())
    return channel, rpc.FederationServiceStub(channel)
