"""A registered site's own certificate, in a compromised site's hands,
cannot starve the coordinator: "site-mallory" registers and connects as a
site daemon would, which lets it use the call slots reserved for operators
and the sites of jobs, and then floods it: half-sent calls past its budget in
every group, and whole share calls whose handler is slow, each holding a
server-wide slot and a pool thread. It holds at most the slots open to all
(its Connect stream among them); the reserve stays for the others, so the
operator's calls are served and a job of the three other sites runs all its
rounds while the flood holds.

Real gRPC over loopback mutual TLS with certificates made at test time; only
the slowness is made up (the share handler waits on an event for mallory's
calls and serves everyone else's as usual). No wall clock is asserted: the
test waits on counts, events and the coordinator's own state, with deadlines
that only guard against a hang."""

from __future__ import annotations

import threading

import grpc
import pytest

from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.wire.messages import params_to_proto
from privadapt.server.coordinator.call_limits import PER_CALLER_LIMITS, method_group
from privadapt.server.coordinator.federation_service import FederationServicer
from privadapt.server.coordinator.main import Coordinator
from tests.network_callers import (
    Counter,
    HalfSentCalls,
    ShareFlood,
    four_site_coordinator,
    refused_outside_the_reserve,
    site_stub,
    wait_until,
)
from tests.network_harness import (
    ThreadSites,
    make_pki,
    operator_stub,
    wait_for_sites,
    watch_until_done,
    write_site,
)
from tests.synthetic_data import synthetic_dataset

SITES = ("site-a", "site-b", "site-c")
MALLORY, EVE = "site-mallory", "eve"
TIMEOUT = 20
# Half-sent calls per method, each past mallory's budget for its group.
HALF_SENT = {"/privadapt.v1.FederationService/Register": 12,
             "/privadapt.v1.OperatorService/Status": 40,
             "/privadapt.v1.OperatorService/Watch": 20,
             "/grpc.health.v1.Health/Check": 12}
SHARE = "/privadapt.v1.FederationService/SubmitShare"


@pytest.fixture
def slow_mallory_shares(monkeypatch):
    """SubmitShare made slow for mallory alone: its handler, on a pool
    thread holding a slot, waits until the test releases it; every other
    site's shares are delivered as usual."""
    entered, release = Counter(TIMEOUT), threading.Event()
    deliver = FederationServicer.SubmitShare

    def slow_for_mallory(self, request, context):
        if request.site_name != MALLORY:
            return deliver(self, request, context)
        entered.add()
        release.wait(3 * TIMEOUT)
        return pb.Ack(job_id=request.job_id)

    monkeypatch.setattr(FederationServicer, "SubmitShare", slow_for_mallory)
    yield entered, release
    release.set()


def _register_and_connect(coordinator: Coordinator, stub) -> grpc.Future:
    """Mallory's registration and Connect stream, as its daemon would open
    them; returns once the coordinator has attached the stream."""
    session = stub.Register(pb.RegisterRequest(site_name=MALLORY, num_records=60,
                                               num_features=4), timeout=TIMEOUT).session_id
    stream = stub.Connect(pb.ConnectRequest(site_name=MALLORY, session_id=session),
                          timeout=3 * TIMEOUT)
    wait_until(lambda: coordinator.registry.session(MALLORY) is not None, TIMEOUT)
    return stream


def _noisy_gd_spec() -> pb.JobSpec:
    spec = pb.JobSpec(algorithm="noisy_gd", epsilon=1.0, delta=1e-6, sites=SITES)
    params_to_proto({"loss": "logistic", "iterations": 3, "learning_rate": 1.0,
                     "radius": 5.0, "clip_norm": 1.0}, spec.hyperparameters)
    return spec


def test_a_registered_sites_flood_leaves_operators_and_the_other_sites_served(
        tmp_path, slow_mallory_shares):
    entered, release = slow_mallory_shares
    pki = make_pki(tmp_path / "pki", (*SITES, MALLORY, EVE))
    coordinator = four_site_coordinator(tmp_path, pki, round_timeout_s=TIMEOUT)
    limits = coordinator.limits
    open_to_all = limits.capacity - limits.reserve  # 20 of 36 here
    budget = PER_CALLER_LIMITS["round"]  # mallory's own budget for shares: 32
    assert open_to_all < budget  # the slot cap, not the budget, is what stops it
    sites, channels = ThreadSites(), []
    half_sent = HalfSentCalls(pki, coordinator.port, MALLORY)
    try:
        operator = operator_stub(pki, coordinator.port)
        for k, name in enumerate(SITES):
            sites.start(write_site(tmp_path, pki, name, synthetic_dataset(60, 4, seed=k),
                                   coordinator.port))
        wait_for_sites(operator, SITES, timeout_s=TIMEOUT)
        channel, mallory = site_stub(pki, coordinator.port, MALLORY)
        channels.append(channel)
        stream = _register_and_connect(coordinator, mallory)
        assert limits.busy_slots() == len(SITES) + 1  # each Connect stream holds one

        # Half-sent calls: each group's budget, then refusals naming it.
        for method, count in HALF_SENT.items():
            half_sent.open(method, count)
        held = sum(PER_CALLER_LIMITS[method_group(m)] for m in HALF_SENT)
        wait_until(lambda: len(half_sent.refusals()) == sum(HALF_SENT.values()) - held,
                   TIMEOUT)
        assert limits.busy_slots() == len(SITES) + 1  # a call waiting for its request holds none
        for code, details in half_sent.refusals():
            assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert f"{MALLORY!r} already has" in details
            assert "the most one caller may" in details

        # Whole slow share calls: every slot one caller may hold, its Connect
        # stream counted; the rest refused naming that cap, not the reserve
        # (past the slots open to all, only a privileged caller gets this far).
        flood = ShareFlood(mallory, MALLORY, budget, TIMEOUT)
        entered.wait_for(open_to_all - 1)
        flood.ended.wait_for(budget - (open_to_all - 1))
        assert entered.value == open_to_all - 1
        for future in flood.outcomes:
            assert future.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert (f"{MALLORY!r} already holds {open_to_all} of the coordinator's "
                    f"{limits.capacity} call slots, the most one caller may") in future.details()
        # With the honest sites' streams, more slots are busy than are open
        # to all: whatever comes next is served from the reserve or not at all.
        assert limits.busy_slots() == open_to_all + len(SITES)

        # A certificate holder that is not a registered site gets nothing.
        refusal = refused_outside_the_reserve(pki, coordinator.port, EVE)
        assert refusal.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "kept for operators and registered sites" in refusal.details()

        # The operator and the other sites are served while the flood holds.
        assert operator.Status(pb.StatusRequest(), timeout=TIMEOUT).jobs == []
        listed = {s.site_name: s.connected for s in
                  operator.ListSites(pb.ListSitesRequest(), timeout=TIMEOUT).sites}
        assert listed == {**dict.fromkeys(SITES, True), MALLORY: True}
        job_id = operator.Launch(pb.LaunchRequest(spec=_noisy_gd_spec()),
                                 timeout=TIMEOUT).job_id
        status = watch_until_done(operator, job_id, timeout=3 * TIMEOUT)
        assert status.state == pb.JOB_STATE_SUCCEEDED, status.message
        assert len(status.rounds) == 3 and not any(r.aborted for r in status.rounds)
        # Mallory held its slow calls and its registration throughout.
        assert entered.value == open_to_all - 1
        assert flood.still_open()
        assert coordinator.registry.session(MALLORY) is not None and not stream.done()
    finally:
        release.set()
        sites.stop()
        half_sent.close()
        for channel in channels:
            channel.close()
        coordinator.stop(grace=0.5)
