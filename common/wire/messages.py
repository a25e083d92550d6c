"""Conversions between privadapt's domain objects and the v1 wire messages.

The contract itself is ``proto/privadapt/v1/federation.proto``; its generated
code lives in :mod:`privadapt.common.proto`. This module is the only place a
domain object (``Query``, ``Mechanism``, a numpy array) becomes a message or
back, so validation of what arrives from the network happens once, here, at
the edge (STYLE.md section 3): a malformed message raises :class:`WireError`
naming the field, before any kernel runs or any ledger is charged.

Tensors are raw little-endian bytes with a dtype from a small allow-list
(float64, int64, uint64) and a shape; floating tensors must be finite. The
wire never carries repeated doubles (8 bytes per value, no per-element
parsing, uint64 masked shares keep all 64 bits).

Message size: :data:`MAX_MESSAGE_BYTES` (64 MiB). Both the coordinator and the
site daemons create their channels and servers with :func:`channel_options`,
which sets gRPC's send and receive limits to it (gRPC's own default receive
limit, 4 MiB, would reject a d = 1000 second-moment matrix). A message above
the limit is rejected by gRPC with status ``RESOURCE_EXHAUSTED`` -- by the
sender's channel before it leaves, or by the receiver before any handler
runs -- so nothing is processed or charged. :func:`ensure_fits` lets a sender
fail earlier with an actionable message.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

import numpy as np
from google.protobuf.timestamp_pb2 import Timestamp

from privadapt.common.accounting.accountant import AccountingMethod, EpsilonReport
from privadapt.common.data.record_parts import MAX_SALT_CHARS, RecordPart
from privadapt.common.errors import WireError
from privadapt.common.federation import Query, ReleaseForm, SitePrivacy
from privadapt.common.mechanisms import (
    MECHANISM_KINDS,
    Mechanism,
    mechanism_from_dict,
    mechanism_to_dict,
)
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.secure.roster import SignedKey

__all__ = [
    "ALLOWED_DTYPES",
    "MAX_MESSAGE_BYTES",
    "WireError",
    "channel_options",
    "ensure_fits",
    "fill_tensor",
    "mechanism_from_proto",
    "mechanism_to_proto",
    "param_from_proto",
    "param_to_proto",
    "params_from_proto",
    "params_to_proto",
    "query_from_proto",
    "query_to_proto",
    "tensor_from_proto",
    "tensor_to_proto",
]

#: Largest message either side sends or accepts, in bytes (64 MiB): about 8
#: million float64/uint64 values. Above it gRPC fails the call with
#: RESOURCE_EXHAUSTED (see the module docstring).
MAX_MESSAGE_BYTES = 64 * 1024 * 1024

#: dtype names a Tensor may carry. Everything privadapt sends is one of these:
#: float64 statistics and parameters, uint64 fixed-point masked shares, int64
#: counts and indices. Anything else (float32, bool, object) is refused rather
#: than converted, so a round trip is always exact.
ALLOWED_DTYPES = ("float64", "int64", "uint64")
#: Dimensions a Tensor may have (the protocol's have at most 3): a shape of
#: millions, one wire byte each, took seconds to read into a tuple and was
#: echoed whole in the error.
MAX_TENSOR_DIMS = 32

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def channel_options(max_bytes: int = MAX_MESSAGE_BYTES) -> list[tuple[str, int]]:
    """gRPC options for every channel and server of privadapt (both sides must
    agree, or the smaller default limit wins)."""
    return [
        ("grpc.max_send_message_length", max_bytes),
        ("grpc.max_receive_message_length", max_bytes),
    ]


def ensure_fits(message: Any, what: str, max_bytes: int = MAX_MESSAGE_BYTES) -> int:
    """Return the serialised size of ``message``; raise :class:`WireError` if
    gRPC would refuse it, so the sender learns why instead of a bare
    RESOURCE_EXHAUSTED from the transport."""
    size = message.ByteSize()
    if size > max_bytes:
        raise WireError(
            f"{what} is {size} bytes, over the {max_bytes}-byte message limit "
            "(gRPC would reject it with RESOURCE_EXHAUSTED): split it into smaller "
            "queries or reduce the dimension"
        )
    return size


# --------------------------------------------------------------------------- tensors


def tensor_to_proto(array: Any, field: str = "tensor") -> pb.Tensor:
    """Encode an array as a Tensor (C order, little-endian). Refuses dtypes
    outside :data:`ALLOWED_DTYPES` and non-finite floats, naming ``field``."""
    msg = pb.Tensor()
    fill_tensor(msg, array, field)
    return msg


def fill_tensor(target: pb.Tensor, array: Any, field: str = "tensor") -> None:
    """:func:`tensor_to_proto` written into ``target``, a field of the message
    being built (``share.blocks.add()``): a nested message assigned whole is
    copied again, 0.8 MB a copy for 1e5 floats."""
    arr = np.asarray(array)
    if arr.dtype.name not in ALLOWED_DTYPES:
        raise WireError(
            f"{field}: cannot send dtype {arr.dtype.name}; allowed: {', '.join(ALLOWED_DTYPES)} "
            "(convert with numpy's astype first)"
        )
    if arr.dtype.kind == "f":
        _check_finite(arr, field)
    little = arr.astype(arr.dtype.newbyteorder("<"), copy=False)
    target.dtype = arr.dtype.name
    target.shape[:] = arr.shape
    target.data = little.tobytes(order="C")


def tensor_from_proto(
    msg: pb.Tensor,
    expected_dtype: str | np.dtype | type | None = None,
    expected_shape: Sequence[int | None] | None = None,
    field: str = "tensor",
    writeable: bool = True,
) -> np.ndarray:
    """Decode a Tensor into a new, writeable, native-endian array.

    ``expected_shape`` may use ``None`` for a dimension of any length. Raises
    :class:`WireError` naming ``field`` for a dtype outside the allow-list or
    other than ``expected_dtype``, a shape that does not match the data length
    or ``expected_shape``, or NaN/infinite floats.

    ``writeable=False``: a read-only array over the one copy of the tensor's
    bytes that reading the field makes (no second copy on a little-endian
    machine), for a reader that only reads it (a digest, a sum, a check that
    copies what it keeps): 0.8 MB less copied per 1e5 floats.
    """
    dtype_name = msg.dtype
    if dtype_name not in ALLOWED_DTYPES:
        raise WireError(
            f"{field}: dtype {dtype_name!r} is not allowed on the wire; "
            f"expected one of {', '.join(ALLOWED_DTYPES)}"
        )
    if expected_dtype is not None and np.dtype(expected_dtype).name != dtype_name:
        raise WireError(
            f"{field}: expected dtype {np.dtype(expected_dtype).name}, got {dtype_name}"
        )
    if len(msg.shape) > MAX_TENSOR_DIMS:
        raise WireError(f"{field}: {len(msg.shape)} dimensions, more than the "
                        f"{MAX_TENSOR_DIMS} a tensor may have")
    shape = tuple(msg.shape)
    if any(dim < 0 for dim in shape):
        raise WireError(f"{field}: shape {shape} has a negative dimension")
    dtype = np.dtype(dtype_name).newbyteorder("<")
    needed = math.prod(shape) * dtype.itemsize
    data = msg.data  # read once: each read of a bytes field copies it (0.8 MB for 1e5 floats)
    if len(data) != needed:
        raise WireError(
            f"{field}: shape {shape} of {dtype_name} needs {needed} bytes, "
            f"but the tensor carries {len(data)}"
        )
    if expected_shape is not None:
        expected = tuple(expected_shape)
        if len(expected) != len(shape) or any(
            want is not None and want != got for want, got in zip(expected, shape, strict=True)
        ):
            shown = ", ".join("*" if d is None else str(d) for d in expected)
            raise WireError(f"{field}: expected shape ({shown}), got {shape}")
    # The field's bytes are this reader's own copy, never changed (immutable):
    # a view of them is a snapshot. astype copies it into a writeable array.
    arr = np.frombuffer(data, dtype=dtype)
    if writeable or not arr.dtype.isnative:
        arr = arr.astype(dtype.newbyteorder("="))
        arr.setflags(write=writeable)
    try:
        arr = arr.reshape(shape)
    except ValueError as err:  # e.g. (2^62, 2^62, 0): no bytes, but too many dimensions
        raise WireError(f"{field}: shape {shape} is not usable: {err}") from None
    if arr.dtype.kind == "f":
        _check_finite(arr, field)
    return arr


def _check_finite(arr: np.ndarray, field: str) -> None:
    bad = ~np.isfinite(arr)
    if np.any(bad):
        first = tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), arr.shape))
        raise WireError(
            f"{field}: {int(bad.sum())} NaN or infinite value(s), first at index {first}; "
            "floating tensors on the wire must be finite"
        )


# --------------------------------------------------------------------------- params


def param_to_proto(value: Any, field: str = "param") -> pb.ParamValue:
    """Encode one public parameter: bool, int (int64 range), finite float,
    str, or a numpy array. Lists and other types are refused, so what a site
    receives has exactly the type the coordinator sent."""
    msg = pb.ParamValue()
    _fill_param(msg, value, field)
    return msg


def _fill_param(target: pb.ParamValue, value: Any, field: str) -> None:
    """:func:`param_to_proto` written into ``target`` (no copy of a tensor)."""
    if isinstance(value, bool | np.bool_):
        target.bool_value = bool(value)
        return
    if isinstance(value, numbers.Integral):
        number = int(value)
        if not _INT64_MIN <= number <= _INT64_MAX:
            raise WireError(f"{field}: integer {number} does not fit in int64")
        target.int_value = number
        return
    if isinstance(value, numbers.Real):
        number = float(value)
        if not math.isfinite(number):
            raise WireError(f"{field}: {number} is not finite; parameters must be finite")
        target.double_value = number
        return
    if isinstance(value, str):
        target.string_value = value
        return
    if isinstance(value, np.ndarray):
        fill_tensor(target.tensor_value, value, field)
        return
    raise WireError(
        f"{field}: cannot send a {type(value).__name__}; parameters are bool, int, float, "
        "str or numpy arrays (wrap sequences with numpy.asarray)"
    )


def param_from_proto(msg: pb.ParamValue, field: str = "param", writeable: bool = True) -> Any:
    """Decode one parameter to bool, int, float, str or numpy array (read-only
    unless ``writeable``: :func:`tensor_from_proto`)."""
    kind = msg.WhichOneof("value")
    if kind is None:
        raise WireError(f"{field}: no value set")
    if kind == "tensor_value":
        return tensor_from_proto(msg.tensor_value, field=field, writeable=writeable)
    value = getattr(msg, kind)
    if kind == "double_value" and not math.isfinite(value):
        raise WireError(f"{field}: {value} is not finite; parameters must be finite")
    return value


def params_to_proto(
    params: Mapping[str, Any],
    target: MutableMapping[str, pb.ParamValue],
    field: str = "params",
) -> None:
    """Fill a message's ``map<string, ParamValue>`` field from ``params``."""
    for key, value in params.items():
        if not isinstance(key, str):
            raise WireError(f"{field}: keys must be strings, got {key!r}")
        _fill_param(target[key], value, f"{field}[{key!r}]")


def params_from_proto(source: Mapping[str, pb.ParamValue], field: str = "params",
                      writeable: bool = True) -> dict[str, Any]:
    """A plain dict from a message's ``map<string, ParamValue>`` field."""
    return {key: param_from_proto(source[key], f"{field}[{key!r}]", writeable)
            for key in sorted(source)}


# --------------------------------------------------------------------------- mechanisms

# The kinds the wire contract has a message for (the Mechanism oneof).
_WIRE_KINDS = frozenset(
    field.name for field in pb.Mechanism.DESCRIPTOR.oneofs_by_name["kind"].fields)

def mechanism_to_proto(mechanism: Mechanism) -> pb.Mechanism:
    """Encode via :func:`mechanism_to_dict`, which stays the single description
    of a mechanism's fields: its kind names the oneof field, and every other
    key the field of that kind's message with the same name (a repeated
    message field, such as ``GaussianBlock``, from a list of tuples of its
    fields in declaration order). Nothing here names a mechanism: a new one
    needs only its message in the oneof."""
    data = mechanism_to_dict(mechanism)
    if data["kind"] not in _WIRE_KINDS:
        raise WireError(f"mechanism kind {data['kind']!r} has no message in the wire contract: "
                        "add it to the Mechanism oneof of proto/privadapt/v1/federation.proto")
    msg = pb.Mechanism(adjacency=data["adjacency"])
    body = getattr(msg, data["kind"])
    body.SetInParent()  # an empty kind's message still says which kind it is
    for name, value in data.items():
        if name in ("kind", "adjacency"):
            continue
        field = body.DESCRIPTOR.fields_by_name[name]
        if field.message_type is not None:  # repeated messages, e.g. GaussianBlock
            names = [sub.name for sub in field.message_type.fields]
            for item in value:
                getattr(body, name).add(**dict(zip(names, item, strict=True)))
        elif field.is_repeated:
            getattr(body, name).extend(value)
        else:
            setattr(body, name, value)
    return msg


def mechanism_from_proto(msg: pb.Mechanism, field: str = "mechanism") -> Mechanism:
    """Decode and validate a mechanism; no kind (or one this reader does not
    know), a missing field, an unknown field or an invalid value raises
    :class:`WireError`."""
    kind = msg.WhichOneof("kind")
    if kind is None:
        raise WireError(
            f"{field}: no kind set (or an unknown mechanism kind from a newer sender); "
            f"known: {sorted(MECHANISM_KINDS)}"
        )
    body = getattr(msg, kind)
    data: dict[str, Any] = {"kind": kind, "adjacency": msg.adjacency}
    for descriptor in body.DESCRIPTOR.fields:
        name, value = descriptor.name, getattr(body, descriptor.name)
        if descriptor.message_type is not None:  # repeated messages, e.g. GaussianBlock
            names = [sub.name for sub in descriptor.message_type.fields]
            data[name] = [tuple(getattr(item, sub) for sub in names) for item in value]
        elif descriptor.is_repeated:
            data[name] = list(value)
        elif body.HasField(name):
            data[name] = value
    try:
        mechanism = mechanism_from_dict(data)
    except ValueError as err:
        raise WireError(f"{field}: {err}") from err
    # Re-encoding must give the message back: catches unknown fields (a newer
    # sender's, or the pre-oneof flat form's) that the dict form would ignore.
    if mechanism_to_proto(mechanism) != msg:
        raise WireError(
            f"{field}: fields that do not belong to kind {kind!r}: "
            f"expected {mechanism_to_dict(mechanism)}"
        )
    return mechanism


# --------------------------------------------------------------------------- times


def timestamp_to_proto(seconds: float) -> Timestamp:
    """A ``time.time()`` value as a protobuf Timestamp."""
    stamp = Timestamp()
    stamp.FromNanoseconds(int(seconds * 1e9))
    return stamp


# --------------------------------------------------------------------------- round keys


def signed_key_to_proto(key: SignedKey, query_id: str) -> pb.KeyAnnouncement:
    """A site's signed round key as published for the round carrying ``query_id``."""
    return pb.KeyAnnouncement(
        job_id=key.job_id, round=key.round, query_id=query_id, site_name=key.site_name,
        public_key=key.public_key, signature=key.signature,
        certificate_pem=key.certificate_pem, query_digest=key.query_digest,
        check_public_key=key.check_public_key,
    )


def signed_key_from_proto(msg: pb.KeyAnnouncement) -> SignedKey:
    """A roster entry as received; verification is ``roster.verify_roster``'s job."""
    return SignedKey(msg.site_name, msg.job_id, msg.round, msg.public_key, msg.signature,
                     msg.certificate_pem, msg.query_digest, msg.check_public_key)


# --------------------------------------------------------------------------- privacy reports


def site_privacy_to_proto(privacy: SitePrivacy, job_id: str) -> pb.SitePrivacyReport:
    """A site's own ledger figures for ``job_id``, as it reports them."""
    return pb.SitePrivacyReport(
        job_id=job_id, site_name=privacy.site_name,
        job_epsilon=privacy.job.epsilon, delta=privacy.job.delta,
        method=privacy.job.method.value,
        total_epsilon=privacy.total.epsilon, total_delta=privacy.total.delta,
        total_method=privacy.total.method.value, cap_epsilon=privacy.cap_epsilon,
        mechanisms=[mechanism_to_proto(m) for m in privacy.mechanisms],
    )


def site_privacy_from_proto(msg: pb.SitePrivacyReport) -> SitePrivacy:
    """The domain object of a site's report; ``ValueError`` (or WireError) for
    an unknown accounting method or a malformed mechanism."""
    return SitePrivacy(
        site_name=msg.site_name,
        job=EpsilonReport(msg.job_epsilon, msg.delta, AccountingMethod(msg.method)),
        total=EpsilonReport(msg.total_epsilon, msg.total_delta,
                            AccountingMethod(msg.total_method or msg.method)),
        cap_epsilon=msg.cap_epsilon,
        mechanisms=tuple(mechanism_from_proto(m) for m in msg.mechanisms),
    )


# --------------------------------------------------------------------------- queries


def query_to_proto(query: Query, round: int) -> pb.Query:
    """Encode a query of ``round`` (params, mechanism and collusion tolerance)."""
    if isinstance(round, bool) or not isinstance(round, numbers.Integral) or round < 0:
        raise WireError(f"query {query.query_id!r}: round must be an integer >= 0, got {round!r}")
    msg = pb.Query(
        job_id=query.job_id,
        round=int(round),
        query_id=query.query_id,
        kernel=query.kernel,
        mechanism=mechanism_to_proto(query.mechanism),
        collusion_tolerance=query.collusion_tolerance,
        fractional_bits=query.fractional_bits,
        form=str(query.form),
    )
    if not query.records.is_all:  # absent means every record (and old senders)
        msg.records.CopyFrom(pb.RecordPart(
            part=query.records.part, validation_fraction=query.records.validation_fraction,
            salt=query.records.salt))
    params_to_proto(query.params, msg.params, f"query {query.query_id!r} params")
    return msg


def query_from_proto(msg: pb.Query, writeable: bool = True) -> tuple[Query, int]:
    """Decode a query and its round; raises :class:`WireError` for a missing
    id, kernel or mechanism, or any malformed parameter. ``writeable=False``:
    its array parameters are read-only (:func:`tensor_from_proto`), for a
    reader that digests them or copies them before any use (a site's
    admission takes its own copy of every parameter)."""
    where = f"query {msg.query_id!r} of job {msg.job_id!r}"
    for name in ("job_id", "query_id", "kernel"):
        if not getattr(msg, name):
            raise WireError(f"{where}: {name} is empty")
    if not msg.HasField("mechanism"):
        raise WireError(f"{where}: mechanism is missing")
    try:
        # Empty: a sender from before release forms, whose queries were all sums.
        form = ReleaseForm(msg.form or ReleaseForm.SECURE_SUM)
    except ValueError:
        raise WireError(f"{where}: unknown release form {msg.form[:64]!r}; known: "
                        f"{[f.value for f in ReleaseForm]}") from None
    query = Query(
        job_id=msg.job_id,
        query_id=msg.query_id,
        kernel=msg.kernel,
        params=params_from_proto(msg.params, f"{where} params", writeable),
        mechanism=mechanism_from_proto(msg.mechanism, f"{where} mechanism"),
        collusion_tolerance=msg.collusion_tolerance,
        fractional_bits=msg.fractional_bits,
        form=form,
        records=record_part_from_proto(msg, where),
    )
    return query, msg.round


def record_part_from_proto(msg: pb.Query, where: str) -> RecordPart:
    """The query's record part (every record when absent or "all"), range
    checked: :class:`WireError` for an unknown part, a fraction outside
    [1/64, 1/2] or NaN, or a salt that is too long or not printable ASCII."""
    if not msg.HasField("records") or msg.records.part in ("", "all"):
        return RecordPart.ALL
    records = msg.records
    try:
        return RecordPart(records.part[:64], records.validation_fraction,
                          records.salt[:MAX_SALT_CHARS + 1])
    except ValueError as err:
        raise WireError(f"{where}: {err}") from None
