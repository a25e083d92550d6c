"""A message is parsed only if it cannot take many times its wire size in
memory: honest work items (a 1e5-float query, a roster of a thousand
certified keys) parse exactly as FromString does; one holding more
submessages than its size pays for (two million empty keys in 4 MB) is
refused before parsing, as is one of more fields than its size pays for
(whose walk alone would take seconds) and malformed input; and the daemon's
stream reads its work items this way."""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privadapt.client.daemon.main import (
    CONNECT_METHOD,
    _connect,
    _read_or_mark,
    _work_items,
    read_work_item,
)
from privadapt.common.errors import WireError
from privadapt.common.federation import Query
from privadapt.common.mechanisms import Adjacency, GaussianMechanism
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.proto import federation_pb2_grpc as rpc
from privadapt.common.wire.bounded_parse import (
    FIELD_ALLOWANCE,
    SUBMESSAGE_ALLOWANCE,
    WIRE_BYTES_PER_SUBMESSAGE,
    parse_bounded,
    submessage_budget,
)
from privadapt.common.wire.messages import query_to_proto


def announcement(dim: int) -> pb.WorkItem:
    mechanism = GaussianMechanism.single(2.0, 4.0, Adjacency.REPLACE_ONE)
    params = {"weights": np.linspace(-1, 1, dim), "loss": "logistic", "clip_norm": 1.0}
    query = Query("job", "q1", "linear_gradient", params, mechanism)
    return pb.WorkItem(round_announcement=pb.RoundAnnouncement(
        job_id="job", round=1, query_id="q1", query=query_to_proto(query, 1)))


def roster(keys: int) -> pb.WorkItem:
    key = pb.KeyAnnouncement(job_id="job", round=1, query_id="q1", site_name="site",
                             public_key=bytes(32), signature=bytes(64),
                             certificate_pem=b"-----BEGIN CERTIFICATE-----" + bytes(600))
    return pb.WorkItem(roster=pb.Roster(job_id="job", round=1, query_id="q1",
                                        keys=[key] * keys))


def many_blocks(blocks: int) -> pb.WorkItem:
    item = announcement(10)
    mechanism = item.round_announcement.query.mechanism
    mechanism.gaussian.Clear()
    mechanism.gaussian.blocks.extend([pb.GaussianBlock(sensitivity=1.0, sigma=2.0)] * blocks)
    return item


def share_of_many_sites(sites: int) -> pb.MaskedShare:
    share = pb.MaskedShare(job_id="job", round=1, query_id="q1", site_name="site-0000",
                           roster_sites=[f"site-{i:04d}" for i in range(sites)])
    share.blocks.add(dtype="uint64", shape=[1000], data=bytes(8000))
    return share


def empty_keys(count: int) -> bytes:
    """A roster of ``count`` empty keys: two bytes each on the wire."""
    inner = pb.Roster(job_id="job", round=1, query_id="q").SerializeToString()
    inner += b"\x22\x00" * count
    return b"\x22" + _varint(len(inner)) + inner  # WorkItem.roster = 4


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out + bytes([value]))


@pytest.mark.parametrize("item", [announcement(100_000), announcement(1_000_000), roster(1000),
                                  many_blocks(5000), pb.WorkItem()],
                         ids=["query-1e5-floats", "query-1e6-floats", "roster-1000-keys",
                              "mechanism-5000-blocks", "empty"])
def test_honest_work_items_parse_as_from_string_does(item):
    data = item.SerializeToString()
    assert parse_bounded(pb.WorkItem, data) == pb.WorkItem.FromString(data)
    assert read_work_item(data) == item


def test_a_share_naming_a_thousand_sites_parses():
    data = share_of_many_sites(1000).SerializeToString()
    assert parse_bounded(pb.MaskedShare, data) == pb.MaskedShare.FromString(data)


def test_many_scalar_fields_are_refused_before_walking_them():
    # Unknown varint fields of two bytes each: protobuf skips 4 MB of them in
    # milliseconds, a walk in Python would take most of a second (64 MiB: 12 s).
    data = b"\x78\x00" * 2_000_000
    with pytest.raises(WireError, match=r"more than \d+ fields"):
        parse_bounded(pb.WorkItem, data)
    within = b"\x78\x00" * (FIELD_ALLOWANCE // 2)
    assert parse_bounded(pb.WorkItem, within).SerializeToString() == within


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_arbitrary_bytes_parse_or_are_a_wire_error(data):
    with contextlib.suppress(WireError):
        parse_bounded(pb.WorkItem, data)


def test_many_empty_submessages_are_refused_before_parsing():
    data = empty_keys(2_000_000)
    with pytest.raises(WireError, match=r"more than \d+ submessages"):
        parse_bounded(pb.WorkItem, data)


def test_the_budget_is_an_allowance_plus_one_submessage_per_wire_bytes():
    # Just inside and just past the budget of a message of that size.
    for count, accepted in ((SUBMESSAGE_ALLOWANCE - 2, True), (3 * SUBMESSAGE_ALLOWANCE, False)):
        data = empty_keys(count)
        assert submessage_budget(len(data)) == (SUBMESSAGE_ALLOWANCE
                                                + len(data) // WIRE_BYTES_PER_SUBMESSAGE)
        if accepted:
            assert len(parse_bounded(pb.WorkItem, data).roster.keys) == count
        else:
            with pytest.raises(WireError):
                parse_bounded(pb.WorkItem, data)


@pytest.mark.parametrize("data", [b"\x22\x05\x0a", b"\x80", b"\x23", b"\x22" + b"\xff" * 11],
                         ids=["past-the-end", "truncated-varint", "group", "long-varint"])
def test_malformed_bytes_are_a_wire_error(data):
    with pytest.raises(WireError, match="malformed"):
        parse_bounded(pb.WorkItem, data)


def test_the_daemon_reads_connect_with_the_bounded_reader():
    """The path the daemon calls is the generated stub's own Connect."""
    class Recorder:
        def __init__(self) -> None:
            self.paths: list[str] = []

        def __getattr__(self, name):
            return lambda path, **_: self.paths.append(path)

    recorder = Recorder()
    rpc.FederationServiceStub(recorder)
    assert CONNECT_METHOD in recorder.paths


def test_a_work_item_refused_unread_ends_the_daemons_stream_with_the_reason():
    """Not gRPC's INTERNAL "Exception deserializing response!", which the
    daemon's log would blame on the coordinator's TLS."""
    sent = [pb.WorkItem(sequence=1).SerializeToString(), empty_keys(100_000),
            pb.WorkItem(sequence=3).SerializeToString()]
    handler = grpc.method_handlers_generic_handler("privadapt.v1.FederationService", {
        "Connect": grpc.unary_stream_rpc_method_handler(
            lambda request, context: iter(sent), request_deserializer=bytes,
            response_serializer=bytes)})
    server = grpc.server(ThreadPoolExecutor(1), handlers=[handler])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            received = []
            with pytest.raises(WireError, match=r"refused unread: .* more than \d+ submessages"):
                for item, _ in _work_items(_connect(channel)(pb.ConnectRequest(),
                                                             timeout=10)):
                    received.append(item.sequence)
            assert received == [1]
    finally:
        server.stop(None)


def test_a_packed_shape_of_millions_of_dimensions_is_refused_before_parsing():
    # One wire byte per element, 8 bytes each once parsed and a step each to read.
    data = pb.WorkItem(round_announcement=pb.RoundAnnouncement(query=pb.Query(params={
        "weights": pb.ParamValue(tensor_value=pb.Tensor(
            dtype="float64", shape=[1] * 4_000_000))}))).SerializeToString()
    with pytest.raises(WireError, match=r"more than \d+ fields"):
        parse_bounded(pb.WorkItem, data)


def test_fields_of_padded_varints_cost_a_field_per_four_bytes():
    # Unknown fields of a 5-byte key and a 10-byte value: a step per byte.
    padded = bytes([0xF8, *[0x80] * 3, 0x00]) + bytes([*[0x80] * 9, 0x00])
    assert pb.WorkItem.FromString(padded * 50_000)  # protobuf reads them: valid, unknown
    with pytest.raises(WireError, match=r"more than \d+ fields"):
        parse_bounded(pb.WorkItem, padded * 50_000)


def test_a_work_item_is_read_with_the_size_of_the_bytes_it_came_in():
    # The lanes and the open rounds are bounded by it (no second serialisation).
    data = pb.WorkItem(sequence=7, round_announcement=pb.RoundAnnouncement(
        job_id="j", query=pb.Query(params={"weights": pb.ParamValue(tensor_value=pb.Tensor(
            dtype="float64", shape=[4], data=bytes(32)))}))).SerializeToString()
    item, size = _read_or_mark(data)
    assert item == pb.WorkItem.FromString(data) and size == len(data)
