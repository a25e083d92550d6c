"""The digest of the exact query a site answers in a round.

Why it exists (the split-query attack): a coordinator could send site A the
real query and every other site the same query id with, say, a clip norm of
1e-9. The rosters would agree, the masks cancel, and the decoded sum would
carry only A's noise share, so A's true privacy loss would be that of noise
sigma / sqrt(K) while its ledger charged sigma. So each site signs this digest
into its round key (:func:`privadapt.common.roster.sign_round_key`), checks
that every roster entry carries the same one, and its masks are derived under
it (it is part of :attr:`privadapt.common.roster.Roster.digest`): sites shown
different queries refuse the round before anything is computed or charged.

The digest is computed from the :class:`~privadapt.common.federation.Query`
the site will actually answer (after decoding it from the wire), over every
field that changes the answer: job id, round, query id, kernel, every
parameter, the mechanism (its :func:`mechanism_to_dict` description),
collusion tolerance t, fractional bits, the release form (secure sum
or per site: a site must not be shown one form while another is shown the
other, since only the secure sum hides each site's answer) and the record
part (:mod:`privadapt.common.record_parts`: sites shown different parts, or
the same part under different salts or fractions, would sum statistics of
different records, and one of them could be shown a part where its
records are few). The encoding is canonical: every
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

QUERY_DIGEST_BYTES = 32
"""Length of a query digest (SHA-256)."""

_QUERY_DIGEST_TAG = b"privadapt/secagg/v1/query"


def query_digest(query: Query, round: int) -> bytes:
    """SHA-256 of the canonical encoding of ``query`` as answered in ``round``.

    ``TypeError`` for a parameter of a type with no canonical encoding (what
    the wire decodes -- bool, int, float, str, numpy arrays -- always has one).
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
        "records": query.records.to_dict(),
    }
    return hashlib.sha256(_QUERY_DIGEST_TAG + canonical_encoding(fields)).digest()


def canonical_encoding(value: Any) -> bytes:
    """One unambiguous byte string per value: a one-byte type tag, an 8-byte
    length, then the payload (containers hold their items' encodings)."""
    tag, payload = _tagged(value)
    return tag + struct.pack(">Q", len(payload)) + payload


def _tagged(value: Any) -> tuple[bytes, bytes]:
    # Order matters: numpy scalars before float (np.float64 subclasses float),
    # bool before int (bool subclasses int).
    if value is None:
        return b"n", b""
    if isinstance(value, np.ndarray | np.generic):
        return b"a", _array_payload(np.asarray(value))
    if isinstance(value, bool):
        return b"?", b"\x01" if value else b"\x00"
    if isinstance(value, int):
        return b"i", value.to_bytes(value.bit_length() // 8 + 1, "big", signed=True)
    if isinstance(value, float):
        return b"f", struct.pack(">d", value)
    if isinstance(value, str):
        return b"s", value.encode("utf-8")
    if isinstance(value, bytes):
        return b"b", value
    if isinstance(value, Mapping):
        if not all(isinstance(key, str) for key in value):
            raise TypeError("canonical encoding needs string keys in every mapping")
        items = sorted(value.items())
        return b"m", b"".join(canonical_encoding(k) + canonical_encoding(v) for k, v in items)
    if isinstance(value, list | tuple):
        return b"l", b"".join(canonical_encoding(item) for item in value)
    raise TypeError(f"no canonical encoding for a {type(value).__name__}")


def _array_payload(array: np.ndarray) -> bytes:
    if array.dtype.kind not in "biuf":
        raise TypeError(f"no canonical encoding for an array of dtype {array.dtype}")
    little = array.astype(array.dtype.newbyteorder("<"), copy=False)
    return (canonical_encoding(little.dtype.str) + canonical_encoding(list(array.shape))
            + canonical_encoding(little.tobytes(order="C")))
