"""A site daemon's process dying mid-round never lets it answer that round
twice (client/daemon/round_progress.py, client/daemon/worker.py).

Round progress commits without its own sync (``synchronous=NORMAL``); the
ledger's charge syncs the shared WAL before a share leaves. These tests kill a
real worker process (``os._exit``, no cleanup) right after it published its
key, and right after its charge committed but before its share was sent, then
restart a worker on the same database and check that it refuses the round as
a replay, that the re-sent query is refused by the ledger, and that exactly
the one charge is there (the ledger and its head file still open)."""

import json
import subprocess
import sys
import textwrap

import pytest

from privadapt.client.daemon.round_progress import RoundProgress
from privadapt.client.daemon.worker import SiteIdentity, SiteWorker
from privadapt.common.secure import certs

_WORKER = textwrap.dedent("""
    import json, os, sys
    from pathlib import Path
    import numpy as np
    from privadapt.client.ledger.privacy_ledger import PrivacyLedger
    from privadapt.client.policy import SitePolicy
    from privadapt.client.daemon.round_progress import RoundProgress
    from privadapt.client.site import Site
    from privadapt.client.daemon.worker import SiteIdentity, SiteWorker
    from privadapt.common.secure import certs
    from privadapt.common.data.dataset import Dataset
    from privadapt.common.federation import Query
    from privadapt.common.mechanisms import Adjacency, GaussianMechanism
    from privadapt.common.proto import federation_pb2 as pb
    from privadapt.common.wire.messages import query_to_proto

    directory, pki, stage = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    JOB, DIM = "job-crash", 3
    db = directory / "site.db"
    policy = SitePolicy("site-a", 10.0, 1e-5)
    ledger = PrivacyLedger(db, policy, create=not db.exists())
    rng = np.random.default_rng(0)
    data = Dataset(rng.normal(size=(20, DIM)) / 2, np.where(rng.random(20) < 0.5, -1.0, 1.0),
                   tuple(f"x{i}" for i in range(DIM)))
    identity = SiteIdentity("site-a", (pki / "site-a.crt").read_bytes(),
                            certs.load_private_key(pki / "site-a.key"),
                            (pki / "ca.crt").read_bytes())
    worker = SiteWorker(Site(data, policy, ledger), identity, RoundProgress(db))

    def announcement(round, query_id):
        mechanism = GaussianMechanism.single(2.0, 4.0, Adjacency.REPLACE_ONE)
        params = {"weights": np.zeros(DIM), "loss": "logistic", "clip_norm": 1.0}
        query = Query(JOB, query_id, "linear_gradient", params, mechanism)
        return pb.WorkItem(round_announcement=pb.RoundAnnouncement(
            job_id=JOB, round=round, query_id=query_id, query=query_to_proto(query, round),
            fractional_bits=query.fractional_bits))

    class Calls:
        def __init__(self, die_at=None):
            self.sent, self.die_at = [], die_at
        def _send(self, kind, request):
            if kind == self.die_at:
                os._exit(3)  # the process dies before this message leaves
            self.sent.append((kind, request))
            return pb.Ack()
        def PublishKey(self, request, timeout): return self._send("key", request)
        def SubmitShare(self, request, timeout): return self._send("share", request)
        def Refuse(self, request, timeout): return self._send("refusal", request)
        def ReportPrivacy(self, request, timeout): return self._send("report", request)

    if stage in ("announced", "charged"):
        calls = Calls(die_at="share")
        worker.handle(announcement(1, "s1-r1"), calls)
        if stage == "announced":
            os._exit(3)  # the key left; the roster never came
        (key,) = [r for k, r in calls.sent if k == "key"]
        worker.handle(pb.WorkItem(roster=pb.Roster(job_id=JOB, round=1, query_id="s1-r1",
                                                   keys=[key])), calls)
        sys.exit("the worker sent its share")  # not reached: it dies at SubmitShare

    # stage "restart": the same round again, then the same query in a new round
    calls = Calls()
    worker.handle(announcement(1, "s1-r1"), calls)
    worker.handle(announcement(2, "s1-r1"), calls)
    keys = [r for k, r in calls.sent if k == "key"]
    if keys:
        worker.handle(pb.WorkItem(roster=pb.Roster(job_id=JOB, round=2, query_id="s1-r1",
                                                   keys=keys)), calls)
    print(json.dumps({
        "sent": [[k, pb.Refusal.Reason.Name(r.reason), r.last_round] if k == "refusal"
                 else [k, None, None] for k, r in calls.sent],
        "charges": [[c.job_id, c.query_id] for c in ledger.charges()],
        "last_round": worker.progress.last_round(JOB),
    }))
""")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    directory = tmp_path_factory.mktemp("pki")
    certs.init_ca(directory)
    certs.issue_certificate(directory, "site", "site-a")
    return directory


def _run(tmp_path, pki, stage: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _WORKER, str(tmp_path), str(pki), stage],
                          capture_output=True, text=True, timeout=60)


def _restart(tmp_path, pki) -> dict:
    done = _run(tmp_path, pki, "restart")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_a_site_killed_after_publishing_its_key_refuses_that_round_after_restart(
        tmp_path, pki):
    died = _run(tmp_path, pki, "announced")
    assert died.returncode == 3, died.stderr
    after = _restart(tmp_path, pki)
    assert after["sent"][0] == ["refusal", "REPLAY", 1]  # REPLAY, last round 1: no key for round 1
    assert after["charges"] == [["job-crash", "s1-r1"]]  # round 2 answers once, as s1-r1
    assert after["last_round"] == 2


def test_a_site_killed_between_its_charge_and_its_share_never_answers_again(tmp_path, pki):
    died = _run(tmp_path, pki, "charged")
    assert died.returncode == 3, died.stderr
    after = _restart(tmp_path, pki)
    kinds = [kind for kind, _, _ in after["sent"]]
    # Round 1 is refused at its announcement; round 2 gets a key (a new round)
    # but its query was charged already: refused by the ledger, nothing sent.
    assert after["sent"][0] == ["refusal", "REPLAY", 1]
    assert kinds == ["refusal", "key", "refusal"] and after["sent"][2][1] == "REPLAY"
    assert after["charges"] == [["job-crash", "s1-r1"]]


def test_round_progress_must_live_in_the_ledgers_database(make_site, pki, tmp_path):
    site = make_site(name="site-a")
    identity = SiteIdentity("site-a", (pki / "site-a.crt").read_bytes(),
                            certs.load_private_key(pki / "site-a.key"),
                            (pki / "ca.crt").read_bytes())
    with pytest.raises(ValueError, match="ledger's database"):
        SiteWorker(site, identity, RoundProgress(tmp_path / "elsewhere.db"))
