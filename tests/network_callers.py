"""Hostile callers of the coordinator for network tests: calls whose request
is never sent, calls made as a site's certificate, and a count that tests
wait on (a Condition, never a sleep-and-poll)."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc

from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.proto import federation_pb2_grpc as rpc
from privadapt.common.secure import tls
from privadapt.common.wire.messages import channel_options
from privadapt.server.coordinator.event_loop_thread import EventLoopThread
from privadapt.server.coordinator.main import Coordinator, CoordinatorConfig
from tests.network_harness import write_coordinator_config


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


def four_site_coordinator(workdir: Path, pki: Path, round_timeout_s: float) -> Coordinator:
    """A started coordinator for at most 4 sites: 36 call slots, the last 16
    kept for operators and registered sites (20 open to all)."""
    path = write_coordinator_config(workdir, pki, round_timeout_s=round_timeout_s,
                                    site_wait_timeout_s=round_timeout_s)
    coordinator = Coordinator(dataclasses.replace(CoordinatorConfig.from_toml(path),
                                                  max_sites=4))
    coordinator.start()
    return coordinator


class ShareFlood:
    """``count`` whole SubmitShare calls by ``name`` at once, and those that
    ended (refused), as they end."""

    def __init__(self, stub: rpc.FederationServiceStub, name: str, count: int,
                 timeout: float) -> None:
        self.ended = Counter(timeout)
        self.outcomes: list[grpc.Future] = []
        share = pb.MaskedShare(job_id="no-such-job", round=1, query_id="q", site_name=name)
        self.calls = [stub.SubmitShare.future(share, timeout=3 * timeout) for _ in range(count)]
        for call in self.calls:
            call.add_done_callback(self._finished)

    def _finished(self, call: grpc.Future) -> None:
        self.outcomes.append(call)
        self.ended.add()

    def still_open(self) -> bool:
        """Every call that was not refused is still open."""
        return not any(call.done() for call in self.calls if call not in self.outcomes)


def refused_outside_the_reserve(pki: Path, port: int, name: str) -> grpc.RpcError:
    """The refusal of one call by ``name``, a certificate holder that may not
    use the reserve, while every slot open to all is taken."""
    channel, stub = site_stub(pki, port, name)
    try:
        stub.Heartbeat(pb.HeartbeatRequest(site_name=name, session_id="x"), timeout=20)
    except grpc.RpcError as refusal:
        return refusal
    finally:
        channel.close()
    raise AssertionError(f"{name!r} was served from the reserve")
