"""The site side of a round (client/daemon/worker.py) without gRPC: three real
sites with certificates from a test CA, the test playing the coordinator."""

from __future__ import annotations

from pathlib import Path

import grpc
import numpy as np
import pytest

from privadapt.client.daemon import worker as worker_module
from privadapt.client.daemon.round_progress import RoundProgress
from privadapt.client.daemon.worker import SiteIdentity, SiteWorker
from privadapt.common.federation import Query
from privadapt.common.kernels import get_kernel
from privadapt.common.mechanisms import Adjacency, GaussianMechanism, NoNoise
from privadapt.common.numerics.fixed_point import FixedPointCodec
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.secure import certs
from privadapt.common.wire.messages import query_to_proto, tensor_from_proto

NAMES = ("site-a", "site-b", "site-c")
JOB = "job-w"
DIM = 3


class Calls:
    """Records what a site sends to the coordinator."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, object]] = []

    def _record(self, kind: str, request: object) -> pb.Ack:
        self.sent.append((kind, request))
        return pb.Ack()

    def PublishKey(self, request, timeout):
        return self._record("key", request)

    def SubmitShare(self, request, timeout):
        return self._record("share", request)

    def Refuse(self, request, timeout):
        return self._record("refusal", request)

    def ReportPrivacy(self, request, timeout):
        return self._record("report", request)

    def only(self, kind: str):
        found = [r for k, r in self.sent if k == kind]
        assert len(found) == 1, self.sent
        return found[0]


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("pki")
    certs.init_ca(directory)
    for name in NAMES:
        certs.issue_certificate(directory, "site", name)
    certs.init_ca(directory / "other")
    certs.issue_certificate(directory / "other", "site", "site-c")
    return directory


def make_worker(make_site, pki: Path, tmp_path: Path, name: str, **policy) -> SiteWorker:
    site = make_site(name=name, num_records=40, dim=DIM, seed=NAMES.index(name), **policy)
    identity = SiteIdentity(name, (pki / f"{name}.crt").read_bytes(),
                            certs.load_private_key(pki / f"{name}.key"),
                            (pki / "ca.crt").read_bytes())
    return SiteWorker(site, identity, RoundProgress(site.ledger.path))


def announcement(round: int, mechanism=None, params=None) -> pb.WorkItem:
    mechanism = mechanism or GaussianMechanism.single(2.0, 4.0, Adjacency.REPLACE_ONE)
    params = params or {"weights": np.zeros(DIM), "loss": "logistic", "clip_norm": 1.0}
    query = Query(JOB, f"s1-r{round}", "linear_gradient", params, mechanism)
    return pb.WorkItem(round_announcement=pb.RoundAnnouncement(
        job_id=JOB, round=round, query_id=query.query_id, query=query_to_proto(query, round),
        fractional_bits=query.fractional_bits))


def roster_of(keys: list[pb.KeyAnnouncement], round: int = 1) -> pb.WorkItem:
    return pb.WorkItem(roster=pb.Roster(job_id=JOB, round=round, query_id=f"s1-r{round}",
                                        keys=keys))


def test_masked_shares_of_three_sites_sum_to_their_plain_shares(make_site, pki, tmp_path):
    workers = [make_worker(make_site, pki, tmp_path, n, epsilon_cap=float("inf"))
               for n in NAMES]
    calls = [Calls() for _ in NAMES]
    exact = NoNoise((2.0,), Adjacency.REPLACE_ONE)
    for worker, call in zip(workers, calls, strict=True):
        worker.handle(announcement(1, exact), call)
    keys = [call.only("key") for call in calls]
    for worker, call in zip(workers, calls, strict=True):
        worker.handle(roster_of(keys), call)
    masked = [tensor_from_proto(call.only("share").blocks[0]) for call in calls]
    codec = FixedPointCodec()
    total = codec.decode(codec.add(masked))
    params = {"weights": np.zeros(DIM), "loss": "logistic", "clip_norm": 1.0}
    kernel = get_kernel("linear_gradient")
    typed = kernel.Params.from_wire(params, DIM)
    plain = sum(codec.decode(codec.encode(kernel.compute(w.site._data, typed, {})[0]))
                for w in workers)
    np.testing.assert_allclose(total, plain, rtol=0, atol=1e-9)
    # What the coordinator sees of one site looks nothing like its share.
    assert not np.allclose(codec.decode(masked[0]), plain / 3, atol=1.0)


def test_bad_signature_in_roster_is_refused_and_nothing_is_released(make_site, pki, tmp_path):
    workers = [make_worker(make_site, pki, tmp_path, n) for n in NAMES]
    calls = [Calls() for _ in NAMES]
    for worker, call in zip(workers, calls, strict=True):
        worker.handle(announcement(1), call)
    keys = [call.only("key") for call in calls]
    keys[2].signature = bytes(len(keys[2].signature))
    workers[0].handle(roster_of(keys), calls[0])
    refusal = calls[0].only("refusal")
    assert refusal.reason == pb.Refusal.ROSTER_INVALID
    assert "site-c" in refusal.message and "signature" in refusal.message
    assert workers[0].site.ledger.charges() == []


def test_roster_with_a_certificate_from_another_ca_is_refused(make_site, pki, tmp_path):
    workers = [make_worker(make_site, pki, tmp_path, n) for n in NAMES]
    calls = [Calls() for _ in NAMES]
    for worker, call in zip(workers, calls, strict=True):
        worker.handle(announcement(1), call)
    keys = [call.only("key") for call in calls]
    keys[2].certificate_pem = (pki / "other" / "site-c.crt").read_bytes()
    workers[0].handle(roster_of(keys), calls[0])
    assert calls[0].only("refusal").reason == pb.Refusal.ROSTER_INVALID


def test_roster_smaller_than_the_policy_minimum_is_refused(make_site, pki, tmp_path):
    worker = make_worker(make_site, pki, tmp_path, "site-a", min_participants=3)
    peer = make_worker(make_site, pki, tmp_path, "site-b")
    calls, peer_calls = Calls(), Calls()
    worker.handle(announcement(1), calls)
    peer.handle(announcement(1), peer_calls)
    worker.handle(roster_of([calls.only("key"), peer_calls.only("key")]), calls)
    refusal = calls.only("refusal")
    assert refusal.reason == pb.Refusal.ROSTER_INVALID
    assert "at least 3" in refusal.message
    assert worker.site.ledger.charges() == []


def test_stale_announcement_is_refused_as_replay(make_site, pki, tmp_path):
    worker = make_worker(make_site, pki, tmp_path, "site-a")
    calls = Calls()
    worker.handle(announcement(5), calls)
    worker.handle(announcement(5), calls)  # at-least-once delivery: ignored
    worker.handle(announcement(4), calls)
    assert len([k for k, _ in calls.sent if k == "key"]) == 1
    assert calls.only("refusal").reason == pb.Refusal.REPLAY


def test_budget_exhausted_refusal_names_site_and_cap(make_site, pki, tmp_path):
    worker = make_worker(make_site, pki, tmp_path, "site-a", epsilon_cap=0.1)
    calls = Calls()
    worker.handle(announcement(1, GaussianMechanism.single(2.0, 1.0, Adjacency.REPLACE_ONE)),
                  calls)
    worker.handle(roster_of([calls.only("key")]), calls)
    refusal = calls.only("refusal")
    assert refusal.reason == pb.Refusal.BUDGET_EXHAUSTED
    assert "site-a" in refusal.message and "0.1" in refusal.message


def test_malformed_query_is_refused_and_the_worker_goes_on(make_site, pki, tmp_path):
    worker = make_worker(make_site, pki, tmp_path, "site-a")
    calls = Calls()
    bad = announcement(1)
    bad.round_announcement.query.params["clip_norm"].double_value = float("nan")
    worker.handle(bad, calls)
    assert calls.only("refusal").reason == pb.Refusal.POLICY
    worker.handle(announcement(2), calls)
    assert calls.only("key").round == 2


def test_privacy_report_comes_from_the_sites_own_ledger(make_site, pki, tmp_path):
    worker = make_worker(make_site, pki, tmp_path, "site-a")
    calls = Calls()
    worker.handle(announcement(1), calls)
    worker.handle(roster_of([calls.only("key")]), calls)
    calls.only("share")
    request = pb.WorkItem(privacy_report_request=pb.PrivacyReportRequest(job_id=JOB,
                                                                         delta=1e-6))
    worker.handle(request, calls)
    report = calls.only("report")
    expected = worker.site.ledger.spent_by_job(JOB, 1e-6)
    assert report.job_epsilon == pytest.approx(expected.epsilon)
    assert report.total_delta == worker.site.policy.delta_cap
    assert len(report.mechanisms) == 1


def test_worker_refuses_a_certificate_for_another_site(make_site, pki, tmp_path):
    site = make_site(name="site-a", dim=DIM)
    identity = SiteIdentity("site-b", b"", certs.load_private_key(pki / "site-b.key"), b"")
    with pytest.raises(ValueError, match="certificate is for 'site-b'"):
        SiteWorker(site, identity, RoundProgress(site.ledger.path))


def test_low_order_key_in_roster_is_refused_before_any_charge(make_site, pki, tmp_path):
    from cryptography.hazmat.primitives.asymmetric import x25519

    from privadapt.common.secure.roster import sign_round_key

    workers = [make_worker(make_site, pki, tmp_path, n) for n in NAMES[:2]]
    calls = [Calls(), Calls()]
    for worker, call in zip(workers, calls, strict=True):
        worker.handle(announcement(1), call)
    keys = [call.only("key") for call in calls]
    # site-c, a genuine member, signs a low-order point as its round key.
    zero = sign_round_key(
        x25519.X25519PublicKey.from_public_bytes(bytes(32)),
        x25519.X25519PrivateKey.generate().public_key(), site_name="site-c", job_id=JOB,
        round=1, query_digest=keys[0].query_digest,
        certificate_pem=(pki / "site-c.crt").read_bytes(),
        signing_key=certs.load_private_key(pki / "site-c.key"),
        ca_certificate_pem=(pki / "ca.crt").read_bytes())
    keys.append(pb.KeyAnnouncement(job_id=JOB, round=1, query_id="s1-r1", site_name="site-c",
                                   public_key=zero.public_key, signature=zero.signature,
                                   certificate_pem=zero.certificate_pem,
                                   query_digest=zero.query_digest,
                                   check_public_key=zero.check_public_key))
    workers[0].handle(roster_of(keys), calls[0])
    refusal = calls[0].only("refusal")
    assert refusal.reason == pb.Refusal.ROSTER_INVALID and "low-order" in refusal.message
    assert workers[0].site.ledger.charges() == []


def test_roster_member_outside_the_policy_peers_is_refused(make_site, pki, tmp_path):
    workers = [make_worker(make_site, pki, tmp_path, "site-a", peers=frozenset({"site-b"}))]
    workers += [make_worker(make_site, pki, tmp_path, n) for n in ("site-b", "site-c")]
    calls = [Calls() for _ in NAMES]
    for worker, call in zip(workers, calls, strict=True):
        worker.handle(announcement(1), call)
    workers[0].handle(roster_of([call.only("key") for call in calls]), calls[0])
    refusal = calls[0].only("refusal")
    assert refusal.reason == pb.Refusal.ROSTER_INVALID
    assert "'site-c' is not among this site's peers" in refusal.message
    assert workers[0].site.ledger.charges() == []


# --- the split-query attack -------------------------------------------------------------------


def split_query_round(make_site, pki, tmp_path):
    """A coordinator sends site-a the real query and site-b and site-c the same
    query id with a clip norm of 1e-9, then publishes every key in one roster."""
    workers = [make_worker(make_site, pki, tmp_path, n) for n in NAMES]
    calls = [Calls() for _ in NAMES]
    real = {"weights": np.zeros(DIM), "loss": "logistic", "clip_norm": 1.0}
    tiny = {**real, "clip_norm": 1e-9}
    for worker, call, params in zip(workers, calls, (real, tiny, tiny), strict=True):
        worker.handle(announcement(1, params=params), call)
    keys = [call.only("key") for call in calls]
    for worker, call in zip(workers, calls, strict=True):
        worker.handle(roster_of(keys), call)
    return workers, calls


def test_split_query_is_refused_by_every_site_and_nobody_is_charged(make_site, pki, tmp_path):
    workers, calls = split_query_round(make_site, pki, tmp_path)
    for name, worker, call in zip(NAMES, workers, calls, strict=True):
        refusal = call.only("refusal")
        assert refusal.reason == pb.Refusal.ROSTER_INVALID
        assert "different queries under one query id" in refusal.message
        # The message names a site whose key commits to another query.
        disagreeing = {"site-a": ("site-b", "site-c")}.get(name, ("site-a",))
        assert any(f"site {other!r}" in refusal.message for other in disagreeing)
        assert not [r for k, r in call.sent if k == "share"]
        assert worker.site.ledger.charges() == []


def test_keys_of_one_round_commit_to_the_query_each_site_was_shown(make_site, pki, tmp_path):
    _, calls = split_query_round(make_site, pki, tmp_path)
    digests = [call.only("key").query_digest for call in calls]
    assert len(digests[0]) == 32
    assert digests[1] == digests[2] != digests[0]


def test_a_digest_swapped_into_another_sites_key_breaks_its_signature(make_site, pki, tmp_path):
    workers = [make_worker(make_site, pki, tmp_path, n) for n in NAMES]
    calls = [Calls() for _ in NAMES]
    tiny = {"weights": np.zeros(DIM), "loss": "logistic", "clip_norm": 1e-9}
    workers[0].handle(announcement(1), calls[0])
    for worker, call in zip(workers[1:], calls[1:], strict=True):
        worker.handle(announcement(1, params=tiny), call)
    keys = [call.only("key") for call in calls]
    for key in keys[1:]:  # the coordinator relabels the other sites' keys
        key.query_digest = keys[0].query_digest
    workers[0].handle(roster_of(keys), calls[0])
    refusal = calls[0].only("refusal")
    assert refusal.reason == pb.Refusal.ROSTER_INVALID and "signature" in refusal.message
    assert workers[0].site.ledger.charges() == []


def test_open_rounds_are_bounded_over_every_job_and_the_excess_refused(
        make_site, pki, tmp_path, monkeypatch):
    # Announcements without rosters, round after round: the site keeps at
    # most MAX_OPEN_ROUNDS of them (and their bytes), refusing the rest.
    monkeypatch.setattr(worker_module, "MAX_OPEN_ROUNDS", 3)
    worker, calls = make_worker(make_site, pki, tmp_path, "site-a"), Calls()
    for round in range(1, 5):
        worker.handle(announcement(round), calls)
    kinds = [kind for kind, _ in calls.sent]
    assert kinds == ["key", "key", "key", "refusal"]
    refusal = calls.sent[-1][1]
    assert refusal.reason == pb.Refusal.POLICY and refusal.round == 4
    assert "holds 3 rounds open" in refusal.message and "the most it keeps open, 3 rounds" \
        in refusal.message
    # An abort closes one; the next announcement is served.
    abort = pb.RoundAbort(job_id=JOB, round=1, query_id="s1-r1")
    worker.handle(pb.WorkItem(round_abort=abort), calls)
    worker.handle(announcement(5), calls)
    assert calls.sent[-1][0] == "key"


def test_open_rounds_are_bounded_by_their_announcements_bytes(make_site, pki, tmp_path,
                                                               monkeypatch):
    size = announcement(1).ByteSize()  # the work item's: what the site received
    monkeypatch.setattr(worker_module, "MAX_OPEN_ROUND_BYTES", 2 * size + size // 2)
    worker, calls = make_worker(make_site, pki, tmp_path, "site-a"), Calls()
    for round in range(1, 4):
        worker.handle(announcement(round), calls)
    assert [kind for kind, _ in calls.sent] == ["key", "key", "refusal"]
    assert f"({2 * size} bytes of announcements)" in calls.sent[-1][1].message


def test_rounds_without_a_paid_answer_are_bounded_then_refused_once_then_ignored(
        make_site, pki, tmp_path):
    # Keys made, signed and published for rounds the coordinator then aborts:
    # CPU at no price. Past max_unpaid_rounds the site says so once, then
    # ignores announcements, so that even refusing costs it nothing.
    worker, calls = make_worker(make_site, pki, tmp_path, "site-a", max_unpaid_rounds=2), Calls()
    for round in (1, 2):
        worker.handle(announcement(round), calls)
        abort = pb.RoundAbort(job_id=JOB, round=round, query_id=f"s1-r{round}")
        worker.handle(pb.WorkItem(round_abort=abort), calls)
    for round in (3, 4, 5):
        worker.handle(announcement(round), calls)
    assert [kind for kind, _ in calls.sent] == ["key", "key", "refusal"]
    refusal = calls.sent[-1][1]
    assert refusal.reason == pb.Refusal.POLICY and refusal.round == 3
    assert "opened 2 rounds that ended without a paid answer" in refusal.message
    assert "max_unpaid_rounds (2)" in refusal.message


def test_rounds_refused_for_want_of_room_count_toward_the_unpaid_bound(
        make_site, pki, tmp_path, monkeypatch):
    # Keys are made before the open-round bound is checked: refused rounds
    # that were not counted let a coordinator holding the open rounds full
    # have keys made without end.
    monkeypatch.setattr(worker_module, "MAX_OPEN_ROUNDS", 1)
    worker, calls = make_worker(make_site, pki, tmp_path, "site-a", max_unpaid_rounds=3), Calls()
    for round in range(1, 9):
        worker.handle(announcement(round), calls)
    assert [kind for kind, _ in calls.sent] == ["key", "refusal", "refusal", "refusal"]
    assert "max_unpaid_rounds (3)" in calls.sent[-1][1].message


def test_past_the_unpaid_bound_announcements_stay_ignored_when_earlier_rounds_are_paid(
        make_site, pki, tmp_path):
    # The refusal says the site ignores further rounds until restarted; rosters
    # of rounds opened before it, answered at a price, must not make it false.
    workers = [make_worker(make_site, pki, tmp_path, n, epsilon_cap=100.0, max_unpaid_rounds=2)
               for n in NAMES]
    calls = [Calls() for _ in NAMES]
    for round in (1, 2, 3):
        for worker, call in zip(workers, calls, strict=True):
            worker.handle(announcement(round), call)
    for round in (1, 2):
        keys = [call.sent[round - 1][1] for call in calls]
        for worker, call in zip(workers, calls, strict=True):
            worker.handle(roster_of(keys, round), call)
    for worker, call in zip(workers, calls, strict=True):
        worker.handle(announcement(4), call)
    for call in calls:
        assert [kind for kind, _ in call.sent] == ["key", "key", "refusal", "share", "share"]


class FailingSubmissions(Calls):
    """A coordinator that answers every share with an error (the round was
    aborted while the site computed it)."""

    def SubmitShare(self, request, timeout):
        self._record("share", request)
        raise Aborted()


class Aborted(grpc.RpcError):
    def code(self):
        return grpc.StatusCode.FAILED_PRECONDITION

    def details(self):
        return "the round was aborted"


@pytest.mark.parametrize("coordinator", [Calls, FailingSubmissions],
                         ids=["share-acknowledged", "share-answered-with-an-error"])
def test_paid_rounds_do_not_count_toward_the_unpaid_bound(make_site, pki, tmp_path, coordinator):
    # Paid once charged: a round aborted while the site computed its share was paid.
    workers = [make_worker(make_site, pki, tmp_path, n, epsilon_cap=100.0, max_unpaid_rounds=1)
               for n in NAMES]
    calls = [coordinator() for _ in NAMES]
    for round in (1, 2, 3):
        for worker, call in zip(workers, calls, strict=True):
            worker.handle(announcement(round), call)
        keys = [call.sent[-1][1] for call in calls]
        for worker, call in zip(workers, calls, strict=True):
            worker.handle(roster_of(keys, round), call)
    for call in calls:
        assert [kind for kind, _ in call.sent] == ["key", "share"] * 3
