"""Malformed requests are the caller's error: INVALID_ARGUMENT, not INTERNAL.

gRPC Python decodes a request with the handler's ``request_deserializer``
before any handler runs; when the bytes do not parse it logs "Exception
deserializing message!" with a traceback and answers INTERNAL (issue 17,
section 2), so anyone able to connect could fill the coordinator's log and
the status said the fault was the server's. This interceptor swaps in a
deserializer that never raises: bytes that do not parse become a
:class:`MalformedRequest`, and the call is answered INVALID_ARGUMENT naming
the message type and the parser's complaint, logged at most as one line.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import DecodeError

logger = logging.getLogger(__name__)

#: Characters of the parser's complaint echoed back.
MAX_DETAIL_CHARS = 200


@dataclass(frozen=True)
class MalformedRequest:
    """Stands in for a request whose bytes did not parse."""

    message_type: str
    error: str


def _tolerant(deserializer: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    message_type = getattr(getattr(deserializer, "__self__", None), "__name__", "request")

    def deserialize(data: bytes) -> Any:
        try:
            return deserializer(data)
        except (DecodeError, ValueError, TypeError) as err:  # whatever the parser says
            return MalformedRequest(message_type, str(err)[:MAX_DETAIL_CHARS])

    return deserialize


def _refusing(behavior: Callable[[Any, grpc.ServicerContext], Any], method: str
              ) -> Callable[[Any, grpc.ServicerContext], Any]:
    def handle(request: Any, context: grpc.ServicerContext) -> Any:
        if isinstance(request, MalformedRequest):
            logger.info("%s: malformed %s from %s: %s", method, request.message_type,
                        context.peer(), request.error)
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"malformed {request.message_type}: {request.error}")
        return behavior(request, context)

    return handle


class MalformedRequestInterceptor(grpc.ServerInterceptor):
    """Answers requests that do not parse with INVALID_ARGUMENT (unary and
    server-streaming methods: every method privadapt serves takes one request)."""

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None or handler.request_streaming or handler.request_deserializer is None:
            return handler
        method = handler_call_details.method
        kind = "unary_stream" if handler.response_streaming else "unary_unary"
        return handler._replace(**{
            "request_deserializer": _tolerant(handler.request_deserializer),
            kind: _refusing(getattr(handler, kind), method),
        })
