"""The coordinator's round engine (server/federation/rounds.py) without gRPC: fake site
sessions in a real SiteRegistry, the test playing the sites."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from privadapt.common.federation import Query
from privadapt.common.mechanisms import Adjacency, GaussianMechanism
from privadapt.common.numerics.fixed_point import FixedPointCodec
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.wire.messages import tensor_to_proto
from privadapt.server.coordinator.site_registry import SiteRegistry
from privadapt.server.federation.rounds import DeliveryError, RoundFailedError, RoundHub

SITES = ("site-a", "site-b", "site-c")
JOB = "job-1"
CODEC = FixedPointCodec()


class Harness:
    def __init__(self, sites=SITES) -> None:
        self.registry = SiteRegistry()
        self.hub = RoundHub(self.registry)
        self.sessions = {}
        for name in sites:
            session = self.registry.register(name, pb.RegisterRequest(site_name=name))
            self.registry.attach(name, session.session_id, [])
            self.sessions[name] = session
        self.hub.open_job(JOB, 0)
        self.result = None
        self.error = None

    def query(self, round: int) -> Query:
        mechanism = GaussianMechanism.single(2.0, 5.0, Adjacency.REPLACE_ONE)
        return Query(JOB, f"s1-r{round}", "linear_gradient", {"clip_norm": 1.0}, mechanism)

    def start(self, round: int = 1, timeout: float = 5.0, sites=SITES) -> threading.Thread:
        def run() -> None:
            try:
                self.result = self.hub.run_round(self.query(round), round, sites, timeout)
            except RoundFailedError as err:
                self.error = err

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    def next_item(self, name: str) -> pb.WorkItem:
        item = self.sessions[name].outbox.get(timeout=5)
        assert item is not None
        return item

    def publish_key(self, name: str, round: int = 1) -> None:
        self.hub.deliver_key(pb.KeyAnnouncement(
            job_id=JOB, round=round, query_id=f"s1-r{round}", site_name=name,
            public_key=bytes([len(name)]) * 32, signature=b"sig", certificate_pem=b"pem"))

    def share(self, name: str, values, round: int = 1, roster=SITES,
              check: int = 1) -> pb.MaskedShare:
        """An unmasked share (the engine needs no keys) with its integrity
        check, which is 1 when the masks cancel."""
        encoded = CODEC.encode(np.asarray(values, dtype=float))
        blocks = [tensor_to_proto(encoded), tensor_to_proto(np.array([check], np.uint64))]
        return pb.MaskedShare(job_id=JOB, round=round, query_id=f"s1-r{round}",
                              site_name=name, blocks=blocks,
                              fractional_bits=CODEC.fractional_bits, roster_sites=roster,
                              job_epsilon=0.5)

    def through_roster(self, sites=SITES, round: int = 1) -> None:
        for name in sites:
            assert self.next_item(name).WhichOneof("item") == "round_announcement"
            self.publish_key(name, round)
        for name in sites:
            roster = self.next_item(name)
            assert [k.site_name for k in roster.roster.keys] == list(sites)


def test_round_decodes_the_exact_sum_of_the_shares():
    h = Harness()
    thread = h.start()
    h.through_roster()
    values = {"site-a": [1.5, -2.0], "site-b": [0.25, 4.0], "site-c": [-3.0, 1e-3]}
    for name, value in values.items():
        h.hub.deliver_share(h.share(name, value))
    thread.join(5)
    expected = CODEC.decode(CODEC.add(CODEC.encode(np.asarray(v)) for v in values.values()))
    np.testing.assert_array_equal(h.result.blocks[0], expected)
    assert h.result.participants == SITES
    assert h.result.job_epsilon == 0.5


def test_site_leaving_mid_round_aborts_it_and_tells_the_others():
    h = Harness()
    thread = h.start()
    h.through_roster()
    h.hub.deliver_share(h.share("site-a", [1.0, 1.0]))
    h.registry.detach(h.sessions["site-c"])
    thread.join(5)
    assert h.error is not None and h.error.missing == ("site-c",)
    abort = h.next_item("site-a")
    assert abort.WhichOneof("item") == "round_abort"
    assert list(abort.round_abort.missing_sites) == ["site-c"]


def test_round_misses_its_deadline_naming_the_silent_site():
    h = Harness()
    thread = h.start(timeout=0.5)
    for name in SITES:
        h.next_item(name)
    h.publish_key("site-a")
    h.publish_key("site-b")
    thread.join(5)
    assert h.error.missing == ("site-c",)
    assert "deadline passed waiting for keys from site-c" in str(h.error)


def test_refusal_aborts_with_the_sites_message():
    h = Harness()
    thread = h.start()
    h.next_item("site-b")
    h.hub.deliver_refusal(pb.Refusal(job_id=JOB, round=1, query_id="s1-r1", site_name="site-b",
                                     reason=pb.Refusal.BUDGET_EXHAUSTED, message="cap 1 spent"))
    thread.join(5)
    assert h.error.refusals[0].site_name == "site-b"
    assert "cap 1 spent" in str(h.error)


@pytest.mark.parametrize("mangle, code", [
    (lambda s: s.blocks[0].__setattr__("data", s.blocks[0].data[:-8]), "INVALID_ARGUMENT"),
    (lambda s: s.blocks[0].CopyFrom(pb.Tensor(dtype="float64", shape=[2],
                                              data=np.array([np.nan, 1.0]).tobytes())),
     "INVALID_ARGUMENT"),
    (lambda s: s.__setattr__("fractional_bits", 20), "INVALID_ARGUMENT"),
    (lambda s: s.__setattr__("job_epsilon", float("nan")), "INVALID_ARGUMENT"),
    (lambda s: s.roster_sites.pop(), "INVALID_ARGUMENT"),
    (lambda s: s.__setattr__("site_name", "site-z"), "PERMISSION_DENIED"),
    (lambda s: s.__setattr__("query_id", "s9-r1"), "FAILED_PRECONDITION"),
    (lambda s: s.__setattr__("job_id", "unknown-job"), "NOT_FOUND"),
    (lambda s: s.blocks.pop(), "INVALID_ARGUMENT"),
    (lambda s: s.blocks[-1].CopyFrom(tensor_to_proto(np.ones(2, np.uint64))), "INVALID_ARGUMENT"),
])
def test_bad_share_is_refused_and_the_round_still_completes(mangle, code):
    h = Harness()
    thread = h.start()
    h.through_roster()
    bad = h.share("site-a", [1.0, 2.0])
    mangle(bad)
    with pytest.raises(DeliveryError) as refused:
        h.hub.deliver_share(bad)
    assert refused.value.code == code
    for name in SITES:
        h.hub.deliver_share(h.share(name, [1.0, 2.0]))
    thread.join(5)
    assert h.error is None
    np.testing.assert_allclose(h.result.blocks[0], [3.0, 6.0])


def test_second_share_and_closed_round_are_replays():
    h = Harness()
    thread = h.start()
    h.through_roster()
    h.hub.deliver_share(h.share("site-a", [1.0]))
    with pytest.raises(DeliveryError) as twice:
        h.hub.deliver_share(h.share("site-a", [1.0]))
    assert twice.value.code == "ALREADY_EXISTS"
    for name in ("site-b", "site-c"):
        h.hub.deliver_share(h.share(name, [1.0]))
    thread.join(5)
    with pytest.raises(DeliveryError) as stale:
        h.hub.deliver_share(h.share("site-a", [1.0]))
    assert stale.value.code == "FAILED_PRECONDITION"
    with pytest.raises(ValueError, match="already closed"):
        h.hub.run_round(h.query(1), 1, SITES, 1.0)


def test_shares_of_different_shapes_abort_the_round():
    h = Harness()
    thread = h.start()
    h.through_roster()
    h.hub.deliver_share(h.share("site-a", [1.0, 2.0]))
    h.hub.deliver_share(h.share("site-b", [1.0, 2.0]))
    h.hub.deliver_share(h.share("site-c", [1.0, 2.0, 3.0]))
    thread.join(5)
    assert "different shapes" in str(h.error)


def test_cancel_ends_a_waiting_round():
    h = Harness()
    thread = h.start(timeout=30)
    h.next_item("site-a")
    h.hub.cancel(JOB, "operator said so")
    thread.join(5)
    assert not thread.is_alive()
    assert "operator said so" in str(h.error)


def test_site_not_connected_at_announcement_fails_the_round_at_once():
    h = Harness()
    h.registry.detach(h.sessions["site-b"])
    thread = h.start(timeout=30)
    thread.join(5)
    assert h.error.missing == ("site-b",)


def test_coordinator_refuses_a_key_whose_signature_does_not_verify(tmp_path):
    from privadapt.common.secure import certs

    certs.init_ca(tmp_path)
    h = Harness()
    h.hub._ca_pem = (tmp_path / "ca.crt").read_bytes()
    thread = h.start(timeout=0.5)
    h.next_item("site-a")
    with pytest.raises(DeliveryError) as refused:
        h.publish_key("site-a")
    assert refused.value.code == "INVALID_ARGUMENT"
    thread.join(5)


def test_share_of_the_wrong_shape_is_refused_on_arrival():
    h = Harness()
    thread = threading.Thread(target=lambda: setattr(h, "result", h.hub.run_round(
        h.query(1), 1, SITES, 5.0, expected_shapes=[(2,)])))
    thread.start()
    h.through_roster()
    with pytest.raises(DeliveryError, match="the kernel releases"):
        h.hub.deliver_share(h.share("site-a", [1.0, 2.0, 3.0]))
    for name in SITES:
        h.hub.deliver_share(h.share(name, [1.0, 2.0]))
    thread.join(5)
    np.testing.assert_allclose(h.result.blocks[0], [3.0, 6.0])


def test_refusal_after_every_share_is_in_does_not_abort_the_round():
    h = Harness()
    thread = h.start()
    h.through_roster()
    with h.hub._lock:
        active = h.hub._active[(JOB, 1)]
    with active.condition:  # hold the round while everything arrives at once
        for name in SITES:
            active.shares[name] = h.share(name, [1.0])
            active.share_blocks[name] = (CODEC.encode(np.array([1.0])), np.ones(1, np.uint64))
        active.refusals["site-a"] = pb.Refusal(site_name="site-a")
        active.condition.notify_all()
    thread.join(5)
    assert h.error is None and h.result.blocks[0][0] == 3.0


def test_round_whose_masks_do_not_cancel_is_aborted_instead_of_decoded():
    h = Harness()
    thread = h.start()
    h.through_roster()
    # What a site masking under another roster leaves in the check: a
    # pseudo-random difference of two keystreams instead of 0.
    checks = {"site-a": 1, "site-b": 1, "site-c": 0x9E3779B97F4A7C15}
    for name, check in checks.items():
        h.hub.deliver_share(h.share(name, [1.0, 2.0], check=check))
    # Without a CA to verify the roster against (this harness), no one is blamed.
    thread.join(5)
    assert h.result is None
    assert "did not cancel" in str(h.error) and h.error.blamed == ()
    for name in SITES:
        assert h.next_item(name).WhichOneof("item") == "round_abort"
