"""The coordinator's call admission: what holds a server-wide slot."""

import asyncio
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from privadapt.server.coordinator.call_admission import AdmissionInterceptor
from privadapt.server.coordinator.call_limits import CallLimits


async def _idle_watches_then_check(watches: int) -> tuple[int, bool]:
    executor = futures.ThreadPoolExecutor(max_workers=10)
    limits = CallLimits(capacity=10, reserve=4)
    server = grpc.aio.server(migration_thread_pool=executor, interceptors=[
        AdmissionInterceptor(limits, lambda identity: False, executor, 5.0)])
    servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    await servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    stub = health_pb2_grpc.HealthStub(channel)
    streams = [stub.Watch(health_pb2.HealthCheckRequest(service="")) for _ in range(watches)]
    try:
        for stream in streams:
            await stream.read()  # the first status: the stream is open, and idle
        busy = limits.busy_slots()
        try:
            await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
            answered = True
        except grpc.aio.AioRpcError as err:
            answered = err.code() != grpc.StatusCode.RESOURCE_EXHAUSTED
        return busy, answered
    finally:
        for stream in streams:
            stream.cancel()
        await channel.close()
        await server.stop(None)
        executor.shutdown(wait=False)


def test_idle_watch_streams_hold_no_slot_and_starve_nobody():
    # 6 idle health Watch streams once held every unreserved slot
    # (coroutines: no pool thread), so the next caller, in
    # production a new site's Register, was refused.
    busy, answered = asyncio.run(_idle_watches_then_check(6))
    assert busy == 0 and answered
