"""Admit each call on the coordinator's asyncio server before it costs a thread.

The handlers (``FederationServicer``, ``OperatorServicer``) are synchronous
and stay so: they share locks and queues with the job threads. On grpc's
synchronous server a call took a pool thread as soon as its headers arrived
and kept it while the request trickled in, and interceptors could not see the
caller's certificate, so about 240 half-sent calls by any certificate holder
took every slot. Here the server is ``grpc.aio``, and
:class:`AdmissionInterceptor` turns each one-request method into a handler
that, on the event loop and before a thread is involved:

1. names the caller from the TLS auth context (the certificate's common name;
   under ``--insecure`` nobody is named, and only the server-wide capacity
   applies: grpc shares one connection among a process's channels, so not
   even a connection stands for a caller);
2. admits the call within the caller's budget
   (:class:`~privadapt.server.coordinator.call_limits.CallLimits`), or answers
   RESOURCE_EXHAUSTED naming the limit, to that caller only;
3. reads the request within the arrival deadline, refusing malformed bytes
   (:func:`~privadapt.server.coordinator.request_decoding.receive_request`);
4. takes a server-wide slot (the reserve is for privileged callers), and only
   then runs the synchronous handler in the thread pool, with a
   :class:`ThreadContext` (streams: one ``next()`` per item in the pool).

The slot is given back when the call is over, however it ends.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import inspect
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from typing import Any

import grpc

from privadapt.common.secure.certcheck import CertificateError, Identity
from privadapt.common.secure.certs import certificate_from_pem, certificate_identity
from privadapt.server.coordinator.call_limits import CallLimits, method_group
from privadapt.server.coordinator.request_decoding import receive_request, tolerant

# Key grpc puts in the auth context for a verified client certificate.
_PEM_KEY = "x509_pem_cert"
_END = object()

#: Whether a named caller may use the reserve (``None``: nobody is named).
Privileged = Callable[[Identity | None], bool]


@functools.lru_cache(maxsize=1024)
def _caller_of_certificate(pem: bytes) -> tuple[str, Identity | None]:
    try:
        identity = certificate_identity(certificate_from_pem(pem))
    except CertificateError:
        # Counted by its digest; the handler's role check refuses it, with its message.
        return f"certificate sha256:{hashlib.sha256(pem).hexdigest()[:16]}", None
    return identity.name, identity


def caller_of(context: grpc.aio.ServicerContext) -> tuple[str | None, Identity | None]:
    """The name the caller's calls are counted under, and its identity if its
    certificate names one; (None, None) without a certificate (--insecure)."""
    pems = context.auth_context().get(_PEM_KEY) or []
    return _caller_of_certificate(pems[0]) if pems else (None, None)


class ThreadContext:
    """What a synchronous handler sees of its call, from a pool thread: the
    subset of ``grpc.ServicerContext`` privadapt's handlers use. Created on
    the event loop before the handler runs."""

    def __init__(self, context: grpc.aio.ServicerContext, loop: asyncio.AbstractEventLoop,
                 executor: Executor) -> None:
        self._context = context
        self._loop = loop
        self._executor = executor
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] | None = []
        context.add_done_callback(self._finished)

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        # Raises the call's AbortError here, which ends the handler as on grpc's own stack.
        asyncio.run_coroutine_threadsafe(self._context.abort(code, details), self._loop).result()

    def add_callback(self, callback: Callable[[], None]) -> bool:
        """Run ``callback`` in the pool once the call is over, however it ends
        (it releases what a stream's handler waits on); at once, here, if the
        call is over already. False in that case, as grpc's own context says."""
        with self._lock:
            if self._callbacks is not None:
                self._callbacks.append(callback)
                return True
        callback()
        return False

    def _finished(self, _context: object) -> None:
        with self._lock:
            callbacks, self._callbacks = self._callbacks or [], None
        for callback in callbacks:
            self._loop.run_in_executor(self._executor, callback)

    def auth_context(self) -> dict[str, list[bytes]]:
        return self._context.auth_context()

    def peer(self) -> str:
        return self._context.peer()

    def invocation_metadata(self) -> Any:
        return self._context.invocation_metadata()


class AdmissionInterceptor(grpc.aio.ServerInterceptor):
    """Wraps every one-request method as described in the module docstring."""

    def __init__(self, limits: CallLimits, privileged: Privileged, executor: Executor,
                 arrival_timeout_s: float) -> None:
        self._limits = limits
        self._privileged = privileged
        self._executor = executor
        self._arrival_timeout_s = arrival_timeout_s

    async def intercept_service(self, continuation, handler_call_details):
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_streaming or handler.request_deserializer is None:
            return handler
        method = handler_call_details.method
        if handler.response_streaming:
            return grpc.stream_stream_rpc_method_handler(
                functools.partial(self._stream, method, handler.unary_stream),
                request_deserializer=tolerant(handler.request_deserializer),
                response_serializer=handler.response_serializer)
        return grpc.stream_unary_rpc_method_handler(
            functools.partial(self._unary, method, handler.unary_unary),
            request_deserializer=tolerant(handler.request_deserializer),
            response_serializer=handler.response_serializer)

    async def _admit(self, method: str, context: grpc.aio.ServicerContext,
                     needs_thread: bool) -> Any:
        """The call's request, once the caller's budget admits it and, for a
        handler that runs on a pool thread (``needs_thread``), a server-wide
        slot is free. A handler that runs on the event loop (a coroutine or
        async generator, e.g. health's Watch) holds no thread, so it takes no
        slot: idle Watch streams, 4 per certificate, once held every
        slot and starved new registrations."""
        name, identity = caller_of(context)
        admission = self._limits.admit(name, method_group(method))
        if isinstance(admission, str):
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, admission)
        context.add_done_callback(lambda _: self._limits.release(admission))
        request = await receive_request(context, method, self._arrival_timeout_s)
        if needs_thread:
            refusal = self._limits.take_slot(admission, self._privileged(identity))
            if refusal is not None:
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, refusal)
        return request

    async def _unary(self, method: str, behavior, _requests, context: grpc.aio.ServicerContext):
        on_loop = inspect.iscoroutinefunction(behavior)
        request = await self._admit(method, context, needs_thread=not on_loop)
        if on_loop:
            return await behavior(request, context)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, behavior, request,
                                          ThreadContext(context, loop, self._executor))

    async def _stream(self, method: str, behavior, _requests, context: grpc.aio.ServicerContext):
        on_loop = inspect.iscoroutinefunction(behavior) or inspect.isasyncgenfunction(behavior)
        request = await self._admit(method, context, needs_thread=not on_loop)
        if inspect.iscoroutinefunction(behavior):  # writes its items itself
            await behavior(request, context)
            return
        if inspect.isasyncgenfunction(behavior):
            async for item in behavior(request, context):
                yield item
            return
        loop = asyncio.get_running_loop()
        items: Iterator[Any] = await loop.run_in_executor(
            self._executor, behavior, request, ThreadContext(context, loop, self._executor))
        while (item := await loop.run_in_executor(self._executor, next, items, _END)) is not _END:
            yield item
