"""Checks on the identifiers and round numbers either side of the wire reads
from the other: a site reading a coordinator's reply
(``client/coordinator_replies``) and the coordinator reading a site's message
(``server/site_messages``) apply the same bounds and say the same sentence.

A peer's certificate is enough to send any value a protobuf field can hold;
these bounds keep such values out of logs, the SQLite store (signed 64-bit
integers) and arithmetic that would overflow.
"""

from __future__ import annotations

from privadapt.common.errors import WireError

#: Longest job id, query id, session id or peer name accepted from the wire.
MAX_NAME_CHARS = 256
#: Rounds are stored as SQLite INTEGERs (signed 64-bit).
MAX_ROUND = 2**63 - 1


def check_name(value: str, field: str, *, required: bool = True,
               max_chars: int = MAX_NAME_CHARS) -> str:
    """An identifier from the peer: non-empty (if ``required``), at most
    ``max_chars``, printable (it is logged and stored)."""
    if required and not value:
        raise WireError(f"{field} is empty")
    if len(value) > max_chars:
        raise WireError(f"{field} has {len(value)} characters (at most {max_chars})")
    if not value.isprintable():
        raise WireError(f"{field} holds unprintable characters")
    return value


def check_round(round: int, field: str = "round", *, low: int = 1,
                high: int = MAX_ROUND) -> int:
    """A round number within [low, high] (by default a real round: 1 and up)."""
    if not low <= round <= high:
        raise WireError(f"{field} {round} is outside [{low}, {_power_of_two(high)}]")
    return round


def _power_of_two(value: int) -> str:
    """``2^63 - 1`` for MAX_ROUND, else the number: bounds as an operator reads them."""
    for exponent in range(1, 64):
        if value == 2**exponent - 1:
            return f"2^{exponent} - 1"
        if value == 2**exponent:
            return f"2^{exponent}"
    return str(value)
