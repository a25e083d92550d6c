"""The wire codec: what goes in comes out exactly, and malformed messages are
refused with an error naming the field (privadapt.common.wire.messages)."""

from __future__ import annotations

import math
from concurrent import futures

import grpc
import numpy as np
import pytest

from privadapt.common.data.record_parts import RecordPart
from privadapt.common.errors import PrivadaptError
from privadapt.common.federation import Query
from privadapt.common.mechanisms import (
    MECHANISM_KINDS,
    Adjacency,
    DiscreteLaplaceMechanism,
    DistributedDiscreteGaussianMechanism,
    GaussianBlock,
    GaussianMechanism,
    LaplaceMechanism,
    NoNoise,
    PureDpEvent,
    ZCdpEvent,
)
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.proto import federation_pb2_grpc as pb_grpc
from privadapt.common.secure.query_digest import query_digest
from privadapt.common.wire.messages import (
    MAX_MESSAGE_BYTES,
    WireError,
    channel_options,
    ensure_fits,
    fill_tensor,
    mechanism_from_proto,
    mechanism_to_proto,
    param_from_proto,
    param_to_proto,
    params_from_proto,
    query_from_proto,
    query_to_proto,
    tensor_from_proto,
    tensor_to_proto,
)

MECHANISMS = [
    GaussianMechanism((GaussianBlock(1.0, 2.5), GaussianBlock(0.0, 1e-3))),
    GaussianMechanism.single(0.5, 1.7, Adjacency.ADD_REMOVE_ONE),
    GaussianMechanism.single(0.5, 1.7, Adjacency.ADD_REMOVE_ONE, sampling_rate=0.01),
    LaplaceMechanism(2.0, 0.25),
    LaplaceMechanism(0.0, 1.0, Adjacency.ADD_REMOVE_ONE),
    DiscreteLaplaceMechanism(2.0, 1024.5, 10),
    DiscreteLaplaceMechanism(0.0, 2.0**-20, 48, Adjacency.ADD_REMOVE_ONE),
    DistributedDiscreteGaussianMechanism(2.0, 1024.5, 3, 10),
    DistributedDiscreteGaussianMechanism(0.0, 0.25, 1, 48, Adjacency.ADD_REMOVE_ONE),
    PureDpEvent(0.3),
    PureDpEvent(0.0, Adjacency.ADD_REMOVE_ONE),
    ZCdpEvent(0.125),
    NoNoise(),
    NoNoise((0.0, 3.0), Adjacency.ADD_REMOVE_ONE),
]


def assert_same_array(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()  # bit-exact, including -0.0


# ------------------------------------------------------------------ tensors


@pytest.mark.parametrize(
    "array",
    [
        np.array([1.5, -0.0, 1e-300, -1e300]),
        np.arange(12, dtype=np.int64).reshape(3, 4) - 6,
        np.array([0, 1, 2**64 - 1], dtype=np.uint64),
        np.float64(3.25) * np.ones(()),  # 0-d
        np.zeros((0, 5)),
        np.random.default_rng(0).normal(size=(2, 3, 4)),
    ],
    ids=["float64", "int64-2d", "uint64-full-range", "scalar", "empty", "3d"],
)
def test_tensor_round_trips_exactly(array: np.ndarray) -> None:
    assert_same_array(tensor_from_proto(tensor_to_proto(array)), array)


def test_tensor_of_1e5_floats_round_trips_as_raw_little_endian_bytes() -> None:
    array = np.random.default_rng(1).normal(size=100_000)
    msg = tensor_to_proto(array)
    assert msg.dtype == "float64" and list(msg.shape) == [100_000]
    assert msg.data == array.astype("<f8").tobytes()  # 8 bytes a value, no varints
    assert_same_array(tensor_from_proto(msg), array)


def test_big_endian_input_is_sent_little_endian() -> None:
    array = np.array([1.0, 2.0], dtype=">f8")
    msg = tensor_to_proto(array)
    assert msg.data == np.array([1.0, 2.0], dtype="<f8").tobytes()
    assert tensor_from_proto(msg).tolist() == [1.0, 2.0]


def test_decoded_tensor_is_writeable() -> None:
    decoded = tensor_from_proto(tensor_to_proto(np.ones(3)))
    decoded[0] = 5.0  # frombuffer alone would be read-only
    assert decoded[0] == 5.0


def test_a_tensor_decoded_for_reading_only_has_the_same_values_and_cannot_be_changed() -> None:
    values = np.arange(12, dtype=np.float64).reshape(3, 4)
    decoded = tensor_from_proto(tensor_to_proto(values), writeable=False)
    assert decoded.dtype == np.float64 and np.array_equal(decoded, values)
    with pytest.raises(ValueError, match="read-only"):
        decoded[0, 0] = 5.0


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_tensor_decoded_for_reading_only_is_checked_as_any_other(bad: float) -> None:
    msg = pb.Tensor(dtype="float64", shape=[2], data=np.array([1.0, bad]).tobytes())
    with pytest.raises(WireError, match="NaN or infinite"):
        tensor_from_proto(msg, field="share", writeable=False)


def test_a_query_decoded_for_reading_only_digests_as_the_writeable_one() -> None:
    query = Query("job", "q", "linear_gradient", {"weights": np.linspace(-1, 1, 7), "n": 3},
                  MECHANISMS[0])
    encoded = query_to_proto(query, 4)
    read_only, round_ = query_from_proto(encoded, writeable=False)
    writeable, _ = query_from_proto(encoded)
    assert not read_only.params["weights"].flags.writeable
    assert query_digest(read_only, round_) == query_digest(writeable, 4)


@pytest.mark.parametrize("dtype", [np.float32, np.bool_, np.int32, object])
def test_tensor_to_proto_refuses_dtype_outside_allow_list(dtype: type) -> None:
    with pytest.raises(WireError, match=r"weights: cannot send dtype .*allowed: float64"):
        tensor_to_proto(np.zeros(2, dtype=dtype), field="weights")


def test_tensor_from_proto_refuses_unknown_dtype_naming_the_field() -> None:
    msg = pb.Tensor(dtype="float32", shape=[2], data=b"\0" * 8)
    with pytest.raises(WireError, match=r"share\[0\]: dtype 'float32' is not allowed"):
        tensor_from_proto(msg, field="share[0]")


def test_tensor_from_proto_refuses_unexpected_dtype() -> None:
    msg = tensor_to_proto(np.ones(2))
    with pytest.raises(WireError, match="blocks: expected dtype uint64, got float64"):
        tensor_from_proto(msg, expected_dtype=np.uint64, field="blocks")


def test_tensor_from_proto_refuses_data_length_that_does_not_match_shape() -> None:
    msg = pb.Tensor(dtype="float64", shape=[3, 4], data=b"\0" * 88)
    with pytest.raises(WireError, match=r"x: shape \(3, 4\) of float64 needs 96 bytes.*carries 88"):
        tensor_from_proto(msg, field="x")


def test_tensor_from_proto_refuses_negative_dimension() -> None:
    msg = pb.Tensor(dtype="int64", shape=[-1], data=b"")
    with pytest.raises(WireError, match="negative dimension"):
        tensor_from_proto(msg)


def test_a_tensor_of_more_dimensions_than_any_is_refused_without_echoing_them() -> None:
    msg = pb.Tensor(dtype="float64", shape=[1] * 100_000, data=b"\0" * 8)
    with pytest.raises(WireError, match="100000 dimensions, more than the 32") as refused:
        tensor_from_proto(msg, field="x")
    assert len(str(refused.value)) < 200


def test_tensor_from_proto_refuses_unexpected_shape() -> None:
    msg = tensor_to_proto(np.zeros((3, 4)))
    assert tensor_from_proto(msg, expected_shape=(None, 4)).shape == (3, 4)
    with pytest.raises(WireError, match=r"gradient: expected shape \(\*, 5\), got \(3, 4\)"):
        tensor_from_proto(msg, expected_shape=(None, 5), field="gradient")
    with pytest.raises(WireError, match="expected shape"):
        tensor_from_proto(msg, expected_shape=(12,))


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_tensor_from_proto_refuses_non_finite_floats(bad: float) -> None:
    values = np.array([[1.0, 2.0], [bad, 4.0]])
    msg = pb.Tensor(dtype="float64", shape=[2, 2], data=values.astype("<f8").tobytes())
    with pytest.raises(
        WireError, match=r"share: 1 NaN or infinite value\(s\), first at index \(1, 0\)"
    ):
        tensor_from_proto(msg, field="share")


def test_tensor_to_proto_refuses_non_finite_floats() -> None:
    with pytest.raises(WireError, match="weights: 2 NaN or infinite"):
        tensor_to_proto(np.array([np.nan, 0.0, np.inf]), field="weights")


def test_wire_error_is_a_user_facing_value_error() -> None:
    assert issubclass(WireError, PrivadaptError) and issubclass(WireError, ValueError)


# ------------------------------------------------------------------ params


@pytest.mark.parametrize(
    "value",
    [0.1, -1e-308, 7, -(2**63), 2**63 - 1, "logistic", "", True, False],
)
def test_scalar_param_round_trips_with_its_type(value: object) -> None:
    back = param_from_proto(param_to_proto(value))
    assert back == value and type(back) is type(value)


def test_numpy_scalars_travel_as_python_numbers() -> None:
    assert param_from_proto(param_to_proto(np.float64(0.5))) == 0.5
    assert type(param_from_proto(param_to_proto(np.int64(3)))) is int
    assert param_from_proto(param_to_proto(np.bool_(True))) is True


@pytest.mark.parametrize(
    "value, message",
    [
        ([1.0, 2.0], "cannot send a list.*numpy.asarray"),
        ((1, 2), "cannot send a tuple"),
        (None, "cannot send a NoneType"),
        (math.nan, "nan is not finite"),
        (math.inf, "inf is not finite"),
        (2**63, r"integer \d+ does not fit in int64"),
        (np.uint64(2**64 - 1), r"integer \d+ does not fit in int64"),
    ],
)
def test_param_to_proto_refuses_unsupported_values(value: object, message: str) -> None:
    with pytest.raises(WireError, match=f"params\\['w'\\]: {message}"):
        param_to_proto(value, field="params['w']")


def test_param_from_proto_refuses_empty_and_non_finite_values() -> None:
    with pytest.raises(WireError, match="p: no value set"):
        param_from_proto(pb.ParamValue(), field="p")
    with pytest.raises(WireError, match="p: nan is not finite"):
        param_from_proto(pb.ParamValue(double_value=math.nan), field="p")


# ------------------------------------------------------------------ mechanisms


@pytest.mark.parametrize("mechanism", MECHANISMS, ids=lambda m: type(m).__name__)
def test_mechanism_round_trips(mechanism: object) -> None:
    msg = mechanism_to_proto(mechanism)
    assert mechanism_from_proto(pb.Mechanism.FromString(msg.SerializeToString())) == mechanism


def test_mechanism_kinds_cover_every_kind() -> None:
    kinds = {mechanism_to_proto(m).WhichOneof("kind") for m in MECHANISMS}
    assert kinds == {"gaussian", "poisson_sampled_gaussian", "laplace", "discrete_laplace",
                     "distributed_discrete_gaussian",
                     "pure_dp", "zcdp", "no_noise"}


def test_every_mechanism_kind_has_its_oneof_field() -> None:
    oneof = pb.Mechanism.DESCRIPTOR.oneofs_by_name["kind"]
    assert {f.name for f in oneof.fields} == set(MECHANISM_KINDS)


def test_local_blocks_cross_the_wire() -> None:
    mechanism = GaussianMechanism((GaussianBlock(1.0, 2.0),),
                                  local_blocks=(GaussianBlock(0.5, 3.0),))
    msg = pb.Mechanism.FromString(mechanism_to_proto(mechanism).SerializeToString())
    assert len(msg.gaussian.local_blocks) == 1
    assert mechanism_from_proto(msg) == mechanism


def with_unknown_field(msg: pb.Mechanism, kind: str, number: int) -> pb.Mechanism:
    """``msg`` with a double field ``number`` its ``kind`` message does not
    declare, as a newer sender (or the pre-oneof flat form) would send it."""
    body = getattr(msg, kind)
    raw = body.SerializeToString() + bytes([number << 3 | 1]) + b"\x00" * 8
    body.ParseFromString(raw)
    return msg


# The pre-oneof flat form (kind = 1, adjacency = 2, blocks = 3, ...), as an old
# coordinator sends it: a string kind "laplace", then sensitivity 1.0 and scale 2.0.
FLAT_LAPLACE = (
    b"\x0a\x07laplace"  # field 1, length-delimited
    + b"\x12\x0breplace_one"  # field 2
    + b"\x21" + np.float64(1.0).tobytes()  # field 4, 64-bit
    + b"\x29" + np.float64(2.0).tobytes()  # field 5
)


@pytest.mark.parametrize(
    "msg, message",
    [
        (pb.Mechanism(adjacency="replace_one"), "unknown mechanism kind"),
        (pb.Mechanism.FromString(FLAT_LAPLACE), "unknown mechanism kind"),
        (pb.Mechanism(adjacency="replace_one", laplace=pb.LaplaceMechanism(sensitivity=1.0)),
         "malformed"),
        (pb.Mechanism(adjacency="neighbours", zcdp=pb.ZCdpEvent(rho=0.1)), "neighbours"),
        (pb.Mechanism(adjacency="", zcdp=pb.ZCdpEvent(rho=0.1)), "Adjacency"),
        (pb.Mechanism(adjacency="replace_one", gaussian=pb.GaussianMechanism()),
         "at least one block"),
        (pb.Mechanism(adjacency="replace_one",
                      laplace=pb.LaplaceMechanism(sensitivity=1, scale=-1)), "scale"),
        (pb.Mechanism(adjacency="replace_one", pure_dp=pb.PureDpEvent(epsilon=math.nan)),
         "epsilon"),
        (pb.Mechanism(adjacency="add_remove_one",
                      poisson_sampled_gaussian=pb.PoissonSampledGaussianMechanism(
                          blocks=[pb.GaussianBlock(sensitivity=1, sigma=1)])),
         "malformed"),
        (
            with_unknown_field(pb.Mechanism(adjacency="replace_one", zcdp=pb.ZCdpEvent(rho=0.1)),
                               "zcdp", 6),
            "do not belong to kind 'zcdp'",
        ),
        (
            with_unknown_field(
                pb.Mechanism(adjacency="replace_one", gaussian=pb.GaussianMechanism(
                    blocks=[pb.GaussianBlock(sensitivity=1, sigma=1)])),
                "gaussian", 9,
            ),
            "do not belong",
        ),
    ],
    ids=[
        "no-kind",
        "pre-oneof-flat-form",
        "missing-scale",
        "bad-adjacency",
        "missing-adjacency",
        "no-blocks",
        "negative-scale",
        "nan-epsilon",
        "sampled-without-rate",
        "foreign-field",
        "foreign-field-in-gaussian",
    ],
)
def test_malformed_mechanism_is_refused(msg: pb.Mechanism, message: str) -> None:
    with pytest.raises(WireError, match=f"^mechanism: .*{message}"):
        mechanism_from_proto(msg)


# ------------------------------------------------------------------ queries


def make_query(**params: object) -> Query:
    return Query(
        job_id="job-1",
        query_id="q000007",
        kernel="linear_gradient",
        params=params,
        mechanism=MECHANISMS[0],
        collusion_tolerance=2,
    )


def test_query_round_trips_with_every_param_type_and_its_round() -> None:
    rng = np.random.default_rng(2)
    params = {
        "weights": rng.normal(size=100_000),
        "counts": np.arange(5, dtype=np.int64),
        "share": np.array([2**64 - 1, 0], dtype=np.uint64),
        "matrix": rng.normal(size=(4, 3)),
        "clip_norm": 1.5,
        "iterations": 30,
        "loss": "logistic",
        "project": True,
    }
    query = make_query(**params)
    msg = pb.Query.FromString(query_to_proto(query, round=12).SerializeToString())
    assert (msg.job_id, msg.round, msg.query_id) == ("job-1", 12, "q000007")
    back, round_ = query_from_proto(msg)
    assert round_ == 12
    assert (back.job_id, back.query_id, back.kernel) == (
        query.job_id,
        query.query_id,
        "linear_gradient",
    )
    assert back.mechanism == query.mechanism and back.collusion_tolerance == 2
    assert back.params.keys() == params.keys()
    for key, value in params.items():
        if isinstance(value, np.ndarray):
            assert_same_array(back.params[key], value)
        else:
            assert back.params[key] == value and type(back.params[key]) is type(value)


def test_query_for_each_mechanism_kind_round_trips() -> None:
    for mechanism in MECHANISMS:
        query = Query("j", "q", "record_count", {}, mechanism)
        back, _ = query_from_proto(query_to_proto(query, round=1))
        assert back == query


def test_query_with_nan_param_names_query_and_param() -> None:
    msg = query_to_proto(make_query(weights=np.zeros(3)), round=1)
    msg.params["weights"].tensor_value.data = np.array([0.0, np.nan, 0.0]).tobytes()
    with pytest.raises(
        WireError, match=r"query 'q000007' of job 'job-1' params\['weights'\]: 1 NaN"
    ):
        query_from_proto(msg)


def test_query_with_wrong_length_tensor_is_refused() -> None:
    msg = query_to_proto(make_query(weights=np.zeros(3)), round=1)
    msg.params["weights"].tensor_value.shape[:] = [4]
    with pytest.raises(WireError, match=r"params\['weights'\]: shape \(4,\) .* needs 32 bytes"):
        query_from_proto(msg)


@pytest.mark.parametrize("field", ["job_id", "query_id", "kernel", "mechanism"])
def test_query_without_required_field_is_refused(field: str) -> None:
    msg = query_to_proto(make_query(), round=1)
    msg.ClearField(field)
    with pytest.raises(WireError, match=f"{field} is (empty|missing)"):
        query_from_proto(msg)


def test_query_to_proto_refuses_list_param_and_negative_round() -> None:
    with pytest.raises(WireError, match=r"params\['weights'\]: cannot send a list"):
        query_to_proto(make_query(weights=[1.0, 2.0]), round=1)
    with pytest.raises(WireError, match="round must be an integer >= 0"):
        query_to_proto(make_query(), round=-1)


# ------------------------------------------------------------------ message size


def test_message_limit_is_64_mib_on_send_and_receive() -> None:
    assert MAX_MESSAGE_BYTES == 64 * 2**20
    assert dict(channel_options()) == {
        "grpc.max_send_message_length": MAX_MESSAGE_BYTES,
        "grpc.max_receive_message_length": MAX_MESSAGE_BYTES,
    }


def _share_of(num_values: int) -> pb.MaskedShare:
    blocks = [tensor_to_proto(np.zeros(num_values, dtype=np.uint64))]
    return pb.MaskedShare(job_id="j", round=1, query_id="q", site_name="a", blocks=blocks)


def test_ensure_fits_refuses_a_share_over_the_limit_with_advice() -> None:
    small = _share_of(1000)
    assert ensure_fits(small, "share") == small.ByteSize()
    with pytest.raises(
        WireError, match=r"share of q is \d+ bytes, over the 8000-byte .*RESOURCE_EXHAUSTED"
    ):
        ensure_fits(small, "share of q", max_bytes=8000)
    # Just over the real limit: 8 Mi uint64 values are exactly 64 MiB of data.
    with pytest.raises(WireError, match=f"over the {MAX_MESSAGE_BYTES}-byte"):
        ensure_fits(_share_of(MAX_MESSAGE_BYTES // 8), "share")


class _Coordinator(pb_grpc.FederationServiceServicer):
    def __init__(self) -> None:
        self.received: list[int] = []

    def SubmitShare(self, request: pb.MaskedShare, context: grpc.ServicerContext) -> pb.Ack:  # noqa: N802 - gRPC method name
        self.received.append(request.ByteSize())
        return pb.Ack(job_id=request.job_id, round=request.round, query_id=request.query_id)


def test_grpc_rejects_oversize_share_with_resource_exhausted_and_handler_never_runs() -> None:
    """What the limit means in practice: a share just under 64 MiB gets through
    (gRPC's 4 MiB default would refuse it), one over is refused by the receiver
    -- or already by a sender using channel_options -- and nothing is handled."""
    coordinator = _Coordinator()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), options=channel_options())
    pb_grpc.add_FederationServiceServicer_to_server(coordinator, server)
    port = server.add_insecure_port("127.0.0.1:0")  # loopback only, test of the size limit
    server.start()
    try:
        under = _share_of((MAX_MESSAGE_BYTES - 1024) // 8)
        over = _share_of(MAX_MESSAGE_BYTES // 8)
        # A sender without our options: the server's receive limit refuses it.
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.FederationServiceStub(channel)
            assert stub.SubmitShare(under, timeout=30).query_id == "q"
            with pytest.raises(grpc.RpcError) as refused:
                stub.SubmitShare(over, timeout=30)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        # A sender with channel_options: refused before it leaves.
        with grpc.insecure_channel(f"127.0.0.1:{port}", options=channel_options()) as channel:
            stub = pb_grpc.FederationServiceStub(channel)
            with pytest.raises(grpc.RpcError) as refused:
                stub.SubmitShare(over, timeout=30)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert coordinator.received == [under.ByteSize()]
    finally:
        server.stop(grace=None)


def test_params_from_proto_reads_a_map_field() -> None:
    spec = pb.JobSpec(algorithm="noisy_gd")
    spec.hyperparameters["steps"].int_value = 10
    spec.hyperparameters["radius"].double_value = 2.0
    assert params_from_proto(spec.hyperparameters) == {"radius": 2.0, "steps": 10}


def test_query_carries_its_fixed_point_grid() -> None:
    query = Query("job", "q1", "record_count", {}, NoNoise((0.0,)), fractional_bits=20)
    decoded, _ = query_from_proto(query_to_proto(query, 3))
    assert decoded.fractional_bits == 20


def test_tensor_with_an_unusable_shape_is_a_wire_error():
    from privadapt.common.errors import WireError
    from privadapt.common.proto import federation_pb2 as pb_
    from privadapt.common.wire.messages import tensor_from_proto as decode

    with pytest.raises(WireError, match="not usable"):
        decode(pb_.Tensor(dtype="float64", shape=[2**62, 2**62, 0], data=b""))


def test_fill_tensor_writes_what_tensor_to_proto_returns():
    array = np.arange(6, dtype=np.uint64).reshape(2, 3)
    share = pb.MaskedShare()
    fill_tensor(share.blocks.add(), array, "share block 0")
    assert share.blocks[0] == tensor_to_proto(array)
    with pytest.raises(WireError, match="share block 1: 1 NaN"):
        fill_tensor(share.blocks.add(), np.array([np.nan]), "share block 1")


# --------------------------------------------------------------- record parts


def test_a_query_on_every_record_sends_no_record_part() -> None:
    msg = query_to_proto(make_query(), round=1)
    assert not msg.HasField("records")  # old sites read it as before
    assert query_from_proto(msg)[0].records == RecordPart.ALL


@pytest.mark.parametrize("part, fraction, salt, message", [
    ("holdout", 0.25, "s", "part must be one of"),
    ("validation", math.nan, "s", "validation_fraction"),
    ("validation", 0.0, "s", "validation_fraction"),
    ("train", 0.75, "s", "validation_fraction"),
    ("validation", 0.25, "s" * 10_000, "salt must be printable ASCII"),
    ("validation", 0.25, "\x1b[2J", "salt must be printable ASCII"),
])
def test_a_malformed_record_part_is_a_wire_error(part, fraction, salt, message) -> None:
    msg = query_to_proto(make_query(), round=1)
    msg.records.CopyFrom(pb.RecordPart(part=part, validation_fraction=fraction, salt=salt))
    with pytest.raises(WireError, match=f"query 'q000007' of job 'job-1': records: {message}"):
        query_from_proto(msg)


def test_a_record_part_named_all_is_every_record_whatever_else_it_says() -> None:
    msg = query_to_proto(make_query(), round=1)
    msg.records.CopyFrom(pb.RecordPart(part="all", validation_fraction=math.nan, salt="\x00"))
    assert query_from_proto(msg)[0].records == RecordPart.ALL
