"""What the networked federation refuses, and that it keeps serving after:
identities (CA, expiry, plaintext, roles, names), an exhausted budget, bad
messages; and what the coordinator sees of one site's share."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import grpc
import numpy as np
import pytest
from scipy import stats

from privadapt.client.daemon.round_progress import RoundProgress
from privadapt.common.mechanisms import Adjacency, GaussianMechanism
from privadapt.common.numerics.fixed_point import FixedPointCodec
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.proto import federation_pb2_grpc as rpc
from privadapt.common.secure import certs, tls
from privadapt.common.wire.messages import MAX_MESSAGE_BYTES, channel_options, params_to_proto
from tests.network_harness import (
    ThreadSites,
    direct_federation,
    in_process_coordinator,
    make_pki,
    operator_stub,
    wait_for_sites,
    watch_until_done,
    write_coordinator_config,
    write_site,
)
from tests.synthetic_data import synthetic_dataset

SITES = ("site-a", "site-b", "site-c")
DIM = 4
TIMEOUT = 10


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    directory = make_pki(tmp_path_factory.mktemp("pki"), SITES)
    now = datetime.now(UTC)
    certs.issue_certificate(directory, "site", "expired", not_valid_before=now - timedelta(days=9),
                            not_valid_after=now - timedelta(days=1))
    other = directory / "other"
    certs.init_ca(other)
    certs.issue_certificate(other, "site", "site-a")
    return directory


@pytest.fixture
def coordinator(tmp_path, pki):
    config = write_coordinator_config(tmp_path, pki, round_timeout_s=5, site_wait_timeout_s=5)
    with in_process_coordinator(config) as running:
        yield running


@pytest.fixture
def sites(tmp_path, pki, coordinator):
    started = ThreadSites()

    def start(caps=None) -> ThreadSites:
        caps = caps or {}
        for k, name in enumerate(SITES):
            config = write_site(tmp_path, pki, name, synthetic_dataset(60, DIM, seed=k),
                                coordinator.port, epsilon_cap=caps.get(name, 10.0))
            started.start(config)
        return started

    yield start
    started.stop()


def _site_stub(pki, port, name, directory=None, ca=None) -> rpc.FederationServiceStub:
    directory = directory or pki
    credentials = tls.channel_credentials(directory / f"{name}.crt", directory / f"{name}.key",
                                          ca or pki / "ca.crt")
    channel = grpc.secure_channel(f"127.0.0.1:{port}", credentials, options=channel_options())
    return rpc.FederationServiceStub(channel)


def _register(stub, name="site-a"):
    return stub.Register(pb.RegisterRequest(site_name=name, num_records=1, num_features=DIM),
                         timeout=TIMEOUT)


def _code(call) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as failed:
        call()
    return failed.value.code()


def test_certificate_from_an_unknown_ca_is_refused(pki, coordinator):
    stub = _site_stub(pki, coordinator.port, "site-a", directory=pki / "other")
    assert _code(lambda: _register(stub)) == grpc.StatusCode.UNAVAILABLE


def test_expired_certificate_is_refused(pki, coordinator):
    stub = _site_stub(pki, coordinator.port, "expired")
    assert _code(lambda: _register(stub, "expired")) == grpc.StatusCode.UNAVAILABLE


def test_plaintext_connection_is_refused(coordinator):
    channel = grpc.insecure_channel(f"127.0.0.1:{coordinator.port}")
    stub = rpc.FederationServiceStub(channel)
    assert _code(lambda: _register(stub)) == grpc.StatusCode.UNAVAILABLE


def test_site_certificate_cannot_use_the_operator_api(pki, coordinator):
    stub = operator_stub(pki, coordinator.port, name="site-a")
    assert _code(lambda: stub.Status(pb.StatusRequest(), timeout=TIMEOUT)) == \
        grpc.StatusCode.PERMISSION_DENIED


def test_operator_certificate_cannot_act_as_a_site(pki, coordinator):
    stub = _site_stub(pki, coordinator.port, "operator")
    assert _code(lambda: _register(stub, "operator")) == grpc.StatusCode.PERMISSION_DENIED


def test_a_site_cannot_register_for_another(pki, coordinator):
    stub = _site_stub(pki, coordinator.port, "site-a")
    assert _code(lambda: _register(stub, "site-b")) == grpc.StatusCode.PERMISSION_DENIED


def test_bad_messages_get_clear_errors_and_the_coordinator_keeps_serving(pki, coordinator,
                                                                          sites):
    stub = _site_stub(pki, coordinator.port, "site-a")
    share = pb.MaskedShare(job_id="no-such-job", round=1, query_id="q", site_name="site-a")
    with pytest.raises(grpc.RpcError) as unknown:
        stub.SubmitShare(share, timeout=TIMEOUT)
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
    assert "no-such-job" in unknown.value.details()
    huge = pb.MaskedShare(job_id="x", round=1, query_id="q", site_name="site-a")
    huge.blocks.add(dtype="uint64", shape=[MAX_MESSAGE_BYTES // 8 + 1],
                    data=bytes(MAX_MESSAGE_BYTES + 8))
    assert _code(lambda: stub.SubmitShare(huge, timeout=TIMEOUT)) == \
        grpc.StatusCode.RESOURCE_EXHAUSTED
    session = _register(stub)
    assert _code(lambda: next(iter(stub.Connect(pb.ConnectRequest(
        site_name="site-a", session_id="forged"), timeout=TIMEOUT)))) == grpc.StatusCode.NOT_FOUND
    assert session.session_id
    # Still serving: a whole job runs afterwards.
    sites()
    operator = operator_stub(pki, coordinator.port)
    spec = pb.JobSpec(algorithm="noisy_gd", epsilon=1.0, delta=1e-6, sites=SITES)
    params_to_proto({"loss": "logistic", "iterations": 3, "learning_rate": 1.0, "radius": 5.0,
                     "clip_norm": 1.0}, spec.hyperparameters)
    job_id = operator.Launch(pb.LaunchRequest(spec=spec), timeout=TIMEOUT).job_id
    assert watch_until_done(operator, job_id).state == pb.JOB_STATE_SUCCEEDED


def test_budget_exhausted_at_one_site_fails_the_job_naming_the_site_and_cap(pki, coordinator,
                                                                           sites, monkeypatch):
    sites(caps={"site-b": 0.5})
    operator = operator_stub(pki, coordinator.port)
    # The preview reads only the budgets of sites that have reported one.
    wait_for_sites(operator, SITES)
    spec = pb.JobSpec(algorithm="noisy_gd", epsilon=2.0, delta=1e-6, sites=SITES)
    params_to_proto({"loss": "logistic", "iterations": 20, "learning_rate": 1.0, "radius": 5.0,
                     "clip_norm": 1.0}, spec.hyperparameters)
    # The coordinator's preview of the reported budgets refuses it up front ...
    with pytest.raises(grpc.RpcError) as refused:
        operator.Launch(pb.LaunchRequest(spec=spec), timeout=TIMEOUT)
    assert "site 'site-b' has epsilon 0.5 left of its cap 0.5" in refused.value.details()
    # ... but the site's ledger is the authority: with that check skipped (a
    # coordinator that does not make it), the ledger still refuses mid-job.
    monkeypatch.setattr("privadapt.server.jobs.manager.refuse_over_budget", lambda previews: None)
    job_id = operator.Launch(pb.LaunchRequest(spec=spec), timeout=TIMEOUT).job_id
    status = watch_until_done(operator, job_id)
    assert status.state == pb.JOB_STATE_FAILED
    assert "site-b" in status.message and "0.5" in status.message
    assert any(r.aborted for r in status.rounds) and not all(r.aborted for r in status.rounds)
    # No model, but what each site was charged for the rounds it answered.
    result = operator.Result(pb.ResultRequest(job_id=job_id), timeout=TIMEOUT)
    report = json.loads(result.privacy_report_json)
    assert not result.model and report["outcome"] == "failed"
    assert sorted(report["sites"]) == sorted(SITES)
    assert 0 < report["sites"]["site-b"]["total_epsilon"] <= 0.5


def test_one_sites_masked_share_looks_uniform_to_the_coordinator(coordinator, sites):
    seen: list[pb.MaskedShare] = []
    deliver = coordinator.hub.deliver_share

    def spy(message: pb.MaskedShare) -> None:
        seen.append(message)
        deliver(message)

    coordinator.hub.deliver_share = spy
    sites()
    federation = direct_federation(coordinator, "uniform", SITES, round_timeout=TIMEOUT)
    federation.wait_for_sites()
    mechanism = GaussianMechanism.single(2.0, 10.0, Adjacency.REPLACE_ONE)
    params = {"weights": np.zeros(DIM), "loss": "logistic", "clip_norm": 1.0}
    for _ in range(40):
        federation.query("linear_gradient", params, mechanism)
    from privadapt.common.wire.messages import tensor_from_proto

    masked = np.concatenate([tensor_from_proto(m.blocks[0]) for m in seen
                             if m.site_name == "site-a"])
    assert masked.size == 40 * DIM
    # Top byte of each uint64: uniform over 256 values if masked; an unmasked
    # fixed-point share of small numbers has only 0x00 or 0xff there.
    counts = np.bincount((masked >> np.uint64(56)).astype(int), minlength=256)
    assert stats.chisquare(counts).pvalue > 1e-4
    plain = FixedPointCodec().encode(np.linspace(-30, 30, masked.size))
    plain_counts = np.bincount((plain >> np.uint64(56)).astype(int), minlength=256)
    assert stats.chisquare(plain_counts).pvalue < 1e-12
    report = federation.privacy_spent(1e-6)
    assert sorted(report) == list(SITES)
    assert json.dumps({k: v.job.epsilon for k, v in report.items()})


def test_second_stream_on_one_session_is_refused(pki, coordinator):
    stub = _site_stub(pki, coordinator.port, "site-a")
    session = _register(stub)
    first = stub.Connect(pb.ConnectRequest(site_name="site-a", session_id=session.session_id))
    coordinator.registry.wait_until(lambda: "site-a" in coordinator.registry.connected_names(),
                                    TIMEOUT)
    second = stub.Connect(pb.ConnectRequest(site_name="site-a", session_id=session.session_id),
                          timeout=TIMEOUT)
    assert _code(lambda: next(iter(second))) == grpc.StatusCode.ALREADY_EXISTS
    first.cancel()


def test_unsolicited_privacy_report_is_refused(pki, coordinator):
    stub = _site_stub(pki, coordinator.port, "site-a")
    report = pb.SitePrivacyReport(job_id="j", site_name="site-a", method="pld",
                                  total_method="pld")
    assert _code(lambda: stub.ReportPrivacy(report, timeout=TIMEOUT)) == \
        grpc.StatusCode.FAILED_PRECONDITION
    report.method = "bogus"
    assert _code(lambda: stub.ReportPrivacy(report, timeout=TIMEOUT)) == \
        grpc.StatusCode.INVALID_ARGUMENT


def test_a_connected_site_that_stops_answering_is_left_out_not_retried(tmp_path, pki):
    config = write_coordinator_config(tmp_path, pki, round_timeout_s=1, site_wait_timeout_s=5)
    started = ThreadSites()
    with in_process_coordinator(config) as running:
        try:
            for k, name in enumerate(SITES):
                started.start(write_site(tmp_path, pki, name, synthetic_dataset(60, DIM, seed=k),
                                         running.port))
            # site-c stays connected but never submits a share.
            silent = started.daemons[2].worker
            silent._on_roster = lambda message, calls: None
            federation = direct_federation(running, "slow", SITES, min_participants=2,
                                           round_timeout=1.0)
            federation.wait_for_sites()
            mechanism = GaussianMechanism.single(2.0, 10.0, Adjacency.REPLACE_ONE)
            params = {"weights": np.zeros(DIM), "loss": "logistic", "clip_norm": 1.0}
            answers = [federation.query("linear_gradient", params, mechanism) for _ in range(4)]
            rounds = running.store.rounds("slow")
            # The honest sites paid for exactly one aborted attempt.
            charges = len(started.daemons[0].site.ledger.charges("slow"))
        finally:
            started.stop()
    assert [a.participants for a in answers] == [("site-a", "site-b")] * 4
    assert [r.aborted for r in rounds] == [True, False, False, False, False]
    assert charges == 5


def test_job_id_reused_after_a_lost_database_goes_above_the_sites_last_round(
        tmp_path, coordinator, sites):
    # The sites took part in a job "reused" up to round 12 and saw it end (so
    # they do not report it when they connect); the coordinator that ran it
    # lost its database, so this one counts from 1.
    for name in SITES:
        (tmp_path / name).mkdir()
        progress = RoundProgress(tmp_path / name / "site.db")
        progress.enter_round("reused", 12)
        progress.finish("reused")
        progress.close()
    sites()
    federation = direct_federation(coordinator, "reused", SITES)
    federation.wait_for_sites()
    mechanism = GaussianMechanism.single(2.0, 10.0, Adjacency.REPLACE_ONE)
    params = {"weights": np.zeros(DIM), "loss": "logistic", "clip_norm": 1.0}
    answer = federation.query("linear_gradient", params, mechanism)
    assert answer.participants == SITES
    rounds = coordinator.store.rounds("reused")
    assert [(r.round, r.aborted) for r in rounds] == [(1, True), (13, False)]
    assert "not above round 12" in rounds[0].abort_reason
