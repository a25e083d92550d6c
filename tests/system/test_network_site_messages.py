"""Every field a site sends the coordinator is bounded:
attacks from a wire client holding a genuine site certificate, built from the
generated stubs alone, against an in-process coordinator."""

from __future__ import annotations

import logging

import grpc
import pytest

from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.proto import federation_pb2_grpc as rpc
from privadapt.common.secure import tls
from privadapt.common.wire.messages import channel_options
from privadapt.server.coordinator.site_messages import (
    MAX_KERNEL_NAME_CHARS,
    MAX_KERNELS,
    MAX_RECORDS,
)
from tests.network_harness import in_process_coordinator, make_pki, write_coordinator_config

TIMEOUT = 10
REGISTER = "/privadapt.v1.FederationService/Register"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"), ("site-a",))


@pytest.fixture
def coordinator(tmp_path, pki):
    config = write_coordinator_config(tmp_path, pki, round_timeout_s=5, site_wait_timeout_s=5)
    with in_process_coordinator(config) as running:
        yield running


def _channel(pki, port) -> grpc.Channel:
    credentials = tls.channel_credentials(pki / "site-a.crt", pki / "site-a.key",
                                          pki / "ca.crt")
    return grpc.secure_channel(f"127.0.0.1:{port}", credentials, options=channel_options())


@pytest.fixture
def stub(pki, coordinator):
    channel = _channel(pki, coordinator.port)
    yield rpc.FederationServiceStub(channel)
    channel.close()


def _refused(call) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as failed:
        call()
    assert failed.value.code() == grpc.StatusCode.INVALID_ARGUMENT, failed.value.details()
    return failed.value


def _register(stub, **fields) -> pb.RegisterResponse:
    request = pb.RegisterRequest(**{"site_name": "site-a", "num_features": 4,
                                    "kernels": ["linear_gradient"], **fields})
    return stub.Register(request, timeout=TIMEOUT)


def test_record_counts_above_the_exact_float_range_are_refused(stub, coordinator):
    # 2^64 - 1 once raised OverflowError out of SQLite, a raw exception.
    for records in (2**64 - 1, 2**63, MAX_RECORDS + 1):
        error = _refused(lambda r=records: _register(stub, num_records=r))
        assert "num_records" in error.details() and "2^53" in error.details()
    assert coordinator.store.sites() == []
    assert _register(stub, num_records=MAX_RECORDS).session_id
    assert coordinator.store.sites()[0].num_records == MAX_RECORDS


def test_kernel_lists_are_bounded_in_count_length_and_form(stub, coordinator):
    # 38 MiB of kernel names once made every `privadapt sites` reply too large,
    # forever (the registration is stored).
    too_many = [f"kernel_{k}" for k in range(MAX_KERNELS + 1)]
    too_long = ["k" * (MAX_KERNEL_NAME_CHARS + 1)]
    flood = ["x" * 1000] * 38_000
    for kernels in (too_many, too_long, flood, ["Linear Gradient"], ["a\nb"], [""]):
        request = pb.RegisterRequest(site_name="site-a", num_records=10, num_features=4,
                                     kernels=kernels)
        error = _refused(lambda r=request: stub.Register(r, timeout=TIMEOUT))
        assert "kernel" in error.details() and len(error.details()) < 400
    assert coordinator.store.sites() == []


def test_other_registration_fields_are_bounded(stub, coordinator):
    for fields in ({"policy_version": "v" * 10_000}, {"software_version": "\x00"},
                   {"adjacency": "anything"}, {"num_features": 2**32 - 1}):
        _refused(lambda f=fields: _register(stub, num_records=10, **f))
    assert coordinator.store.sites() == []


def test_a_round_beyond_the_coordinators_range_is_refused_at_connect(stub, coordinator):
    # last_closed_round 2^63 - 1 once made the next round 2^63, which SQLite
    # cannot store: the job failed with a raw OverflowError.
    session = _register(stub, num_records=10).session_id
    for last in (2**63 - 1, 2**64 - 1):
        request = pb.ConnectRequest(site_name="site-a", session_id=session,
                                    jobs=[pb.JobProgress(job_id="j", last_closed_round=last)])
        error = _refused(lambda r=request: next(iter(stub.Connect(r, timeout=TIMEOUT))))
        assert "last_closed_round" in error.details()
    assert "site-a" not in coordinator.registry.connected_names()
    many = pb.ConnectRequest(site_name="site-a", session_id=session,
                             jobs=[pb.JobProgress(job_id=f"j{k}") for k in range(100_000)])
    _refused(lambda: next(iter(stub.Connect(many, timeout=TIMEOUT))))


def test_refusal_rounds_beyond_the_range_are_refused(stub):
    refusal = pb.Refusal(job_id="j", round=1, query_id="q", site_name="site-a",
                         reason=pb.Refusal.REPLAY, last_round=2**64 - 1)
    assert "last_round" in _refused(lambda: stub.Refuse(refusal, timeout=TIMEOUT)).details()
    refusal.last_round, refusal.round = 0, 2**64 - 1
    _refused(lambda: stub.Refuse(refusal, timeout=TIMEOUT))
    share = pb.MaskedShare(job_id="j" * 10_000, round=1, query_id="q", site_name="site-a")
    _refused(lambda: stub.SubmitShare(share, timeout=TIMEOUT))


def test_malformed_protobuf_is_invalid_argument_without_a_traceback(pki, coordinator, stub,
                                                                    caplog):
    channel = _channel(pki, coordinator.port)
    raw = channel.unary_unary(REGISTER)  # bytes in, bytes out: no serialiser
    with caplog.at_level(logging.DEBUG):
        for garbage in (b"\xff\xff\xff", b"\x0a\x05ab", b"\x08" + b"\xff" * 11, b"\x0a\x01\xff"):
            error = _refused(lambda g=garbage: raw(g, timeout=TIMEOUT))
            assert "RegisterRequest" in error.details()
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    channel.close()
    assert _register(stub, num_records=10).session_id  # still serving


def test_a_share_of_many_empty_blocks_is_refused_before_it_is_parsed(pki, coordinator, stub):
    """Two million empty tensors are 4 MB on the wire and would parse to
    hundreds of MB: the coordinator refuses them unparsed, as malformed."""
    channel = _channel(pki, coordinator.port)
    submit = channel.unary_unary("/privadapt.v1.FederationService/SubmitShare")
    share = pb.MaskedShare(job_id="j", round=1, query_id="q", site_name="site-a")
    data = share.SerializeToString() + b"\x2a\x00" * 2_000_000  # blocks = 5, empty
    error = _refused(lambda: submit(data, timeout=TIMEOUT))
    assert "MaskedShare" in error.details() and "submessages" in error.details()
    channel.close()
    assert _register(stub, num_records=10).session_id  # still serving


def test_a_registration_loop_is_refused_per_identity(stub, coordinator):
    from privadapt.server.coordinator.federation_service import REGISTER_BURST

    for _ in range(REGISTER_BURST):
        assert _register(stub).session_id
    with pytest.raises(grpc.RpcError) as refused:
        _register(stub)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "site-a" in refused.value.details() and "retry in" in refused.value.details()
    audit = [e for e in coordinator.store.audit_log() if e.event == "site_registered"]
    assert len(audit) == REGISTER_BURST  # the refused call wrote nothing
