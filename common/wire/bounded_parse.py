"""Parsing a message whose memory in hand stays a small multiple of its size.

gRPC bounds a message's wire size (:data:`~privadapt.common.wire.messages.
MAX_MESSAGE_BYTES`), but not what it becomes once parsed: every submessage is
an object of its own, so a message of many empty submessages (two bytes each
on the wire: a roster of empty keys, a mechanism of empty blocks) parses to
50-80 times its size, and a 64 MiB one to several GB before anything could
look at it. :func:`parse_bounded` first walks the raw bytes against the
message's descriptor, counting submessages without building any, and refuses
one that holds more than :func:`submessage_budget` of them: each must pay for
itself with :data:`WIRE_BYTES_PER_SUBMESSAGE` bytes on the wire, beyond a
small allowance every honest message fits in. What a refusal depends on is
the message's own bytes only.

The walk reads each field's tag and length and skips scalars and byte
strings whole (a tensor's megabytes cost one step), so its work is the
number of fields it visits: about half a microsecond each in Python, where
protobuf's own parser takes a hundredth of that. A message of nothing but
two-byte scalar or unknown fields would keep a walk of 64 MiB busy for
seconds (on the coordinator, its whole event loop), so fields are budgeted
too (:func:`field_budget`: one per :data:`WIRE_BYTES_PER_FIELD` bytes beyond
:data:`FIELD_ALLOWANCE`); honest messages carry their bulk in byte strings
and packed repeated doubles, one field each. A packed repeated varint (a
tensor's shape) costs a field per byte: each byte may be an element, parsed
to 8 bytes and read in a step.
"""

from __future__ import annotations

from typing import TypeVar

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message

from privadapt.common.errors import WireError

#: Wire bytes each submessage must account for beyond the allowance: a parsed
#: submessage holds about 100 bytes, so a message of them parses to at most a
#: few times its size.
WIRE_BYTES_PER_SUBMESSAGE = 64
#: Submessages any message may hold whatever its size (an honest work item
#: holds tens: a query's tensors and blocks, a roster's keys).
SUBMESSAGE_ALLOWANCE = 4096
#: Wire bytes each field visited must account for beyond its allowance:
#: bounds the walk's work to about a second for the largest message.
WIRE_BYTES_PER_FIELD = 64
#: Fields any message may hold whatever its size (a roster of a thousand keys
#: holds about 8000, a mechanism of 6000 blocks 18000).
FIELD_ALLOWANCE = 65536
#: Nesting deeper than any message of the protocol (protobuf's own limit is 100).
MAX_DEPTH = 32

MessageT = TypeVar("MessageT", bound=Message)

_VARINT_TYPES = frozenset({
    FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT32,
    FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_BOOL, FieldDescriptor.TYPE_ENUM})


def submessage_budget(wire_bytes: int) -> int:
    """How many submessages a message of ``wire_bytes`` may hold."""
    return SUBMESSAGE_ALLOWANCE + wire_bytes // WIRE_BYTES_PER_SUBMESSAGE


def field_budget(wire_bytes: int) -> int:
    """How many fields (submessages included) a message of ``wire_bytes`` may hold."""
    return FIELD_ALLOWANCE + wire_bytes // WIRE_BYTES_PER_FIELD


class _Budget:
    """What the walk may still visit: submessages and fields."""

    def __init__(self, wire_bytes: int) -> None:
        self.submessages = submessage_budget(wire_bytes)
        self.fields = field_budget(wire_bytes)


def _varint(data: memoryview, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while pos < end:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            break
    raise WireError("malformed message: a varint is truncated or too long")


def _count(data: memoryview, start: int, end: int, descriptor: Descriptor | None,
           budget: _Budget, depth: int) -> bool:
    """Whether the fields and submessages of ``data[start:end]`` fit in
    ``budget``, which is spent on them."""
    if depth > MAX_DEPTH:
        raise WireError(f"malformed message: nested deeper than {MAX_DEPTH}")
    pos = start
    while pos < end:
        budget.fields -= 1
        if budget.fields < 0:
            return False
        field_start = pos
        key, pos = _varint(data, pos, end)
        number, wire_type = key >> 3, key & 7
        length = 0
        if wire_type == 0:
            _, pos = _varint(data, pos, end)
        elif wire_type == 2:
            length, pos = _varint(data, pos, end)
        elif wire_type not in (1, 5):  # groups (3, 4) are not in proto3; 6, 7 are not wire types
            raise WireError(f"malformed message: wire type {wire_type}")
        # Varints are read a byte a step: a field's beyond its first 4 bytes
        # (padded keys and values, up to 20) cost a field per 4 more.
        budget.fields -= (pos - field_start - 1) // 4
        if budget.fields < 0:
            return False
        if wire_type == 1:
            pos += 8
        elif wire_type == 5:
            pos += 4
        elif wire_type == 2:
            if pos + length > end:
                break
            field = None if descriptor is None else descriptor.fields_by_number.get(number)
            if field is not None and field.type == FieldDescriptor.TYPE_MESSAGE:
                budget.submessages -= 1
                if budget.submessages < 0 or not _count(
                        data, pos, pos + length, field.message_type, budget, depth + 1):
                    return False
            elif field is not None and field.type in _VARINT_TYPES:
                # Packed: up to one 8-byte element per wire byte, which reading
                # them (a tensor's shape into a tuple) costs a step each.
                budget.fields -= length
                if budget.fields < 0:
                    return False
            pos += length
    if pos != end:
        raise WireError("malformed message: a field runs past its end")
    return True


def parse_bounded(message_class: type[MessageT], data: bytes) -> MessageT:
    """``message_class`` parsed from ``data``, or ``WireError`` if it holds
    more submessages than :func:`submessage_budget` or more fields than
    :func:`field_budget` allow for its size, or is malformed (module docstring)."""
    budget = _Budget(len(data))
    if not _count(memoryview(data), 0, len(data), message_class.DESCRIPTOR, budget, 0):
        name, size = message_class.DESCRIPTOR.name, len(data)
        if budget.submessages < 0:
            raise WireError(
                f"a {name} of {size} bytes holds more than {submessage_budget(size)} "
                f"submessages ({SUBMESSAGE_ALLOWANCE} plus one per "
                f"{WIRE_BYTES_PER_SUBMESSAGE} bytes): refused before parsing, since it would "
                "take many times its size in memory")
        raise WireError(
            f"a {name} of {size} bytes holds more than {field_budget(size)} fields "
            f"({FIELD_ALLOWANCE} plus one per {WIRE_BYTES_PER_FIELD} bytes): refused "
            "before parsing, since reading them would take seconds")
    try:
        return message_class.FromString(data)
    except DecodeError as err:
        raise WireError(f"malformed {message_class.DESCRIPTOR.name}: {err}") from None
