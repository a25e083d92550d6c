"""A certificate holder cannot take the coordinator's call slots:
"mallory", holding a genuine site certificate from the CA, opens
many calls whose request it never sends. On grpc's synchronous server each
took a thread and a slot before any role check, and the operator and honest
sites then got RESOURCE_EXHAUSTED. Now the excess is refused to mallory
alone, naming the limit; an operator's calls and a whole job of honest sites
are served while mallory's calls stay open; a request that never arrives is
ended at the arrival deadline and gives its slot back."""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.secure import tls
from privadapt.common.wire.messages import params_to_proto
from privadapt.server.coordinator.call_limits import PER_CALLER_LIMITS, method_group
from tests.network_callers import HalfSentCalls, four_site_coordinator, wait_until
from tests.network_harness import (
    ThreadSites,
    make_pki,
    operator_stub,
    watch_until_done,
    write_site,
)
from tests.synthetic_data import synthetic_dataset

SITES = ("site-a", "site-b", "site-c")
MALLORY = "mallory"
TIMEOUT = 20
# Half-sent calls per method: together far more than the old server's slots
# (max_sites + 32 = 36 here) and than mallory's own budget.
FLOOD = {"/privadapt.v1.FederationService/Register": 60,
         "/privadapt.v1.FederationService/SubmitShare": 60,
         "/privadapt.v1.OperatorService/Status": 60,
         "/privadapt.v1.FederationService/Connect": 60}


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"), (*SITES, MALLORY))


def _health(pki, port: int) -> int:
    credentials = tls.channel_credentials(pki / "operator.crt", pki / "operator.key",
                                          pki / "ca.crt")
    with grpc.secure_channel(f"127.0.0.1:{port}", credentials) as channel:
        request = health_pb2.HealthCheckRequest(service="privadapt.v1.OperatorService")
        return health_pb2_grpc.HealthStub(channel).Check(request, timeout=TIMEOUT).status


def test_a_flood_of_half_sent_calls_leaves_operators_and_sites_served(tmp_path, pki):
    coordinator = four_site_coordinator(tmp_path, pki, round_timeout_s=TIMEOUT)
    flood = HalfSentCalls(pki, coordinator.port, MALLORY)
    sites = ThreadSites()
    try:
        for method, count in FLOOD.items():
            flood.open(method, count)
        budget = sum(PER_CALLER_LIMITS[method_group(m)] for m in FLOOD)
        wait_until(lambda: len(flood.refusals()) == sum(FLOOD.values()) - budget, TIMEOUT)
        assert coordinator.limits.open_calls(MALLORY) == budget
        assert coordinator.limits.busy_slots() == 0  # waiting for a request takes no thread
        for code, details in flood.refusals():
            assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "'mallory' already has" in details and "the most one caller may" in details

        operator = operator_stub(pki, coordinator.port)
        assert operator.Status(pb.StatusRequest(), timeout=TIMEOUT).jobs == []
        assert _health(pki, coordinator.port) == health_pb2.HealthCheckResponse.SERVING
        for k, name in enumerate(SITES):
            sites.start(write_site(tmp_path, pki, name, synthetic_dataset(60, 4, seed=k),
                                   coordinator.port))
        spec = pb.JobSpec(algorithm="noisy_gd", epsilon=1.0, delta=1e-6, sites=SITES)
        params_to_proto({"loss": "logistic", "iterations": 3, "learning_rate": 1.0,
                         "radius": 5.0, "clip_norm": 1.0}, spec.hyperparameters)
        job_id = operator.Launch(pb.LaunchRequest(spec=spec), timeout=TIMEOUT).job_id
        status = watch_until_done(operator, job_id, timeout=3 * TIMEOUT)
        assert status.state == pb.JOB_STATE_SUCCEEDED, status.message
        assert len(status.rounds) == 3 and not any(r.aborted for r in status.rounds)
        # Mallory's calls were open throughout.
        assert coordinator.limits.open_calls(MALLORY) == budget
    finally:
        sites.stop()
        flood.close()
        coordinator.stop(grace=0.5)


def test_a_request_that_never_arrives_is_ended_at_the_deadline(tmp_path, pki):
    coordinator = four_site_coordinator(tmp_path, pki, round_timeout_s=1.0)
    flood = HalfSentCalls(pki, coordinator.port, MALLORY)
    try:
        flood.open("/privadapt.v1.FederationService/Register", 3)
        wait_until(lambda: coordinator.limits.open_calls(MALLORY) == 3, TIMEOUT)
        wait_until(lambda: len(flood.refusals()) == 3, TIMEOUT)
        # The detail names the wait the server applied: the 1 s arrival
        # deadline, not TIMEOUT (the sites' wait) nor the client's own end.
        for code, details in flood.refusals():
            assert code == grpc.StatusCode.DEADLINE_EXCEEDED
            assert "did not arrive within 1 s" in details
        wait_until(lambda: coordinator.limits.open_calls(MALLORY) == 0, TIMEOUT)
    finally:
        flood.close()
        coordinator.stop(grace=0.5)
