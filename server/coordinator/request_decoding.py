"""A call's one request: it must arrive in time, and bytes that do not parse
are the caller's error (INVALID_ARGUMENT), not the server's (INTERNAL).

gRPC Python decodes a request with the handler's ``request_deserializer``;
when the bytes do not parse it logs "Exception deserializing message!" with a
traceback and answers INTERNAL, so anyone able to
connect could fill the coordinator's log and the status said the fault was the
server's. :func:`tolerant` wraps a deserializer so that it never raises: bytes
that do not parse become a :class:`MalformedRequest`, and
:func:`receive_request` answers INVALID_ARGUMENT naming the message type and
the parser's complaint, logged at most as one line.

:func:`receive_request` also bounds how long a caller may take to send its
request: a call whose request never comes holds a slot of the caller's
budget (``call_limits``) and is ended when its time is up.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import DecodeError, Message

from privadapt.common.wire.bounded_parse import parse_bounded

logger = logging.getLogger(__name__)

#: Characters of the parser's complaint echoed back.
MAX_DETAIL_CHARS = 200


@dataclass(frozen=True)
class MalformedRequest:
    """Stands in for a request whose bytes did not parse."""

    message_type: str
    error: str


def tolerant(deserializer: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    """``deserializer``, returning a :class:`MalformedRequest` where it would
    raise. A generated ``Message.FromString`` parses through
    :func:`~privadapt.common.wire.bounded_parse.parse_bounded`: a request of
    more submessages than its size pays for (which would take many times its
    size in memory) is malformed too."""
    message_class = getattr(deserializer, "__self__", None)
    message_type = getattr(message_class, "__name__", "request")
    if isinstance(message_class, type) and issubclass(message_class, Message):
        bounded = message_class

        def parse(data: bytes) -> Any:
            return parse_bounded(bounded, data)
    else:
        parse = deserializer

    def deserialize(data: bytes) -> Any:
        try:
            return parse(data)
        except (DecodeError, ValueError, TypeError) as err:  # whatever the parser says
            return MalformedRequest(message_type, str(err)[:MAX_DETAIL_CHARS])

    return deserialize


async def receive_request(context: grpc.aio.ServicerContext, method: str,
                          timeout: float) -> Any:
    """The call's request (read with a :func:`tolerant` deserializer), or the
    call aborted: DEADLINE_EXCEEDED if it has not arrived within ``timeout``
    seconds, INVALID_ARGUMENT if it is missing or does not parse."""
    read = asyncio.ensure_future(context.read())
    done, _ = await asyncio.wait({read}, timeout=timeout)
    if not done:
        # Not cancelled: the read ends by itself once the call is finished.
        read.add_done_callback(_discard_outcome)
        await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED,
                            f"the request of {method} did not arrive within {timeout:g} s")
    request = read.result()
    if request is grpc.aio.EOF:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{method} needs a request message")
    if isinstance(request, MalformedRequest):
        logger.info("%s: malformed %s from %s: %s", method, request.message_type,
                    context.peer(), request.error)
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                            f"malformed {request.message_type}: {request.error}")
    return request


def _discard_outcome(task: asyncio.Future) -> None:
    if not task.cancelled():
        task.exception()
