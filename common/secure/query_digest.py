"""The digest of the exact query a site answers in a round.

Why it exists (the split-query attack): a coordinator could send site A the
real query and every other site the same query id with, say, a clip norm of
1e-9. The rosters would agree, the masks cancel, and the decoded sum would
carry only A's noise share, so A's true privacy loss would be that of noise
sigma / sqrt(K) while its ledger charged sigma. So each site signs this digest
into its round key (:func:`privadapt.common.secure.roster.sign_round_key`), checks
that every roster entry carries the same one, and its masks are derived under
it (it is part of :attr:`privadapt.common.secure.roster.Roster.digest`): sites shown
different queries refuse the round before anything is computed or charged.

The digest is computed from the :class:`~privadapt.common.federation.Query`
the site will actually answer (after decoding it from the wire), over every
field that changes the answer: job id, round, query id, kernel, every
parameter, the mechanism (its :func:`mechanism_to_dict` description),
collusion tolerance t, fractional bits, the release form (secure sum
or per site: a site must not be shown one form while another is shown the
other, since only the secure sum hides each site's answer) and, for a query
not on every record, the record part (:mod:`privadapt.common.data.record_parts`:
sites shown different parts, or the same part under different salts or
fractions, would sum statistics of different records, and one of them could
be shown a part where its records are few). The encoding is canonical: every
value is tagged by type and length-prefixed; mappings are encoded in sorted
key order (independent of insertion order); floats by their exact IEEE-754
bits (so 0.1 and the next float differ, and so do 0.0 and -0.0); integers
exactly, whatever their size; arrays by dtype (little-endian), shape and
C-order bytes, so a float32 array and a float64 array of the same values, or
one shape and its transpose, differ. No protobuf serialisation is involved.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from privadapt.common.federation import Query
from privadapt.common.mechanisms import mechanism_to_dict

Buffer = bytes | memoryview
"""A piece of an encoding: bytes, or a view of an array's own memory."""

QUERY_DIGEST_BYTES = 32
"""Length of a query digest (SHA-256)."""

_QUERY_DIGEST_TAG = b"privadapt/secagg/v1/query"


def query_digest(query: Query, round: int) -> bytes:
    """SHA-256 of the canonical encoding of ``query`` as answered in ``round``.

    ``TypeError`` for a parameter of a type with no canonical encoding (what
    the wire decodes -- bool, int, float, str, numpy arrays -- always has one).
    The encoding is hashed piece by piece (:func:`_encode`): a parameter
    array's bytes go to the hash straight from the array, never copied into
    one joined string (the query of a 1e5-float round is 0.8 MB, digested by
    every site and by the coordinator every round).
    """
    fields = {
        "job_id": query.job_id,
        "round": round,
        "query_id": query.query_id,
        "kernel": query.kernel,
        "params": dict(query.params),
        "mechanism": mechanism_to_dict(query.mechanism),
        "collusion_tolerance": query.collusion_tolerance,
        "fractional_bits": query.fractional_bits,
        "form": str(query.form),
    }
    if not query.records.is_all:
        # Absent for every record, as before parts existed: such digests are
        # unchanged across versions (pinned in tests), and a mapping with the
        # key never encodes like one without it.
        fields["records"] = query.records.to_dict()
    hasher = hashlib.sha256(_QUERY_DIGEST_TAG)
    pieces: list[Buffer] = []
    _encode(fields, pieces)
    for piece in pieces:
        hasher.update(piece)
    return hasher.digest()


def canonical_encoding(value: Any) -> bytes:
    """One unambiguous byte string per value: a one-byte type tag, an 8-byte
    length, then the payload (containers hold their items' encodings)."""
    pieces: list[Buffer] = []
    _encode(value, pieces)
    return b"".join(pieces)


def _encode(value: Any, pieces: list[Buffer]) -> int:
    """Append the canonical encoding of ``value`` to ``pieces`` (as buffers
    whose concatenation it is); return its length in bytes."""
    header = len(pieces)
    pieces.append(b"")  # the tag and length, once the payload's length is known
    tag, length = _payload(value, pieces)
    pieces[header] = tag + struct.pack(">Q", length)
    return 1 + 8 + length


def _payload(value: Any, pieces: list[Buffer]) -> tuple[bytes, int]:
    """Append ``value``'s payload to ``pieces``; its type tag and length."""
    # Order matters: numpy scalars before float (np.float64 subclasses float),
    # bool before int (bool subclasses int).
    if value is None:
        return b"n", 0
    if isinstance(value, np.ndarray | np.generic):
        return b"a", _array_payload(np.asarray(value), pieces)
    if isinstance(value, bool):
        raw = b"\x01" if value else b"\x00"
        tag = b"?"
    elif isinstance(value, int):
        raw, tag = value.to_bytes(value.bit_length() // 8 + 1, "big", signed=True), b"i"
    elif isinstance(value, float):
        raw, tag = struct.pack(">d", value), b"f"
    elif isinstance(value, str):
        raw, tag = value.encode("utf-8"), b"s"
    elif isinstance(value, bytes):
        raw, tag = value, b"b"
    elif isinstance(value, Mapping):
        if not all(isinstance(key, str) for key in value):
            raise TypeError("canonical encoding needs string keys in every mapping")
        return b"m", sum(_encode(k, pieces) + _encode(v, pieces)
                         for k, v in sorted(value.items()))
    elif isinstance(value, list | tuple):
        return b"l", sum(_encode(item, pieces) for item in value)
    else:
        raise TypeError(f"no canonical encoding for a {type(value).__name__}")
    pieces.append(raw)
    return tag, len(raw)


def _array_payload(array: np.ndarray, pieces: list[Buffer]) -> int:
    """dtype (little-endian), shape, then the C-order bytes -- encoded as a
    ``bytes`` value, but appended as a view of a C-contiguous little-endian
    array (copied only when the array is not one already)."""
    if array.dtype.kind not in "biuf":
        raise TypeError(f"no canonical encoding for an array of dtype {array.dtype}")
    little = np.ascontiguousarray(array.astype(array.dtype.newbyteorder("<"), copy=False))
    length = _encode(little.dtype.str, pieces) + _encode(list(array.shape), pieces)
    pieces.append(b"b" + struct.pack(">Q", little.nbytes))
    pieces.append(little.reshape(-1).view(np.uint8).data)
    return length + 1 + 8 + little.nbytes
