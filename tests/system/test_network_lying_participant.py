"""A participant that breaks rounds on purpose. Two
ways used to abort every attempt of a step, five times, with every honest
site charged for each: a wrong integrity check (and the message blamed
"different rosters or keys"), and a replay refusal sent after the roster,
once the others had answered. Now the coordinator names the site (every share
carries the key that masked its check, so each check is verified; an honest
site never publishes a key for a round it would refuse as a replay) and
leaves it out of the job, so the honest sites pay for one aborted round and
the job goes on without it."""

from __future__ import annotations

import time

import numpy as np
import pytest

from privadapt.client.daemon import worker as site_worker
from privadapt.common.mechanisms import Adjacency, GaussianMechanism
from privadapt.common.proto import federation_pb2 as pb
from tests.network_harness import (
    ThreadSites,
    direct_federation,
    in_process_coordinator,
    make_pki,
    write_coordinator_config,
    write_site,
)
from tests.synthetic_data import synthetic_dataset

SITES = ("site-a", "site-b", "site-c")
LIAR = "site-c"
DIM = 4


def _lie_in_the_check(monkeypatch) -> None:
    honest_check = site_worker.mask_integrity_check

    def lying_check(keys, roster, *args):
        check = honest_check(keys, roster, *args)
        return check + np.uint64(12345) if roster.own_name == LIAR else check

    monkeypatch.setattr(site_worker, "mask_integrity_check", lying_check)


def _refuse_as_a_replay_after_the_roster(monkeypatch) -> None:
    honest_on_roster = site_worker.SiteWorker._on_roster

    def on_roster(self, message, calls):
        if self.site.name != LIAR:
            return honest_on_roster(self, message, calls)
        time.sleep(0.3)  # the honest sites answer (and charge) first
        self._refuse(calls, message.job_id, message.round, message.query_id,
                     pb.Refusal.REPLAY, "replay")

    monkeypatch.setattr(site_worker.SiteWorker, "_on_roster", on_roster)


@pytest.fixture(params=[_lie_in_the_check, _refuse_as_a_replay_after_the_roster])
def lying_federation(request, tmp_path, monkeypatch):
    request.param(monkeypatch)
    pki = make_pki(tmp_path / "pki", SITES)
    sites = ThreadSites()
    with in_process_coordinator(write_coordinator_config(tmp_path, pki)) as coordinator:
        for k, name in enumerate(SITES):
            sites.start(write_site(tmp_path, pki, name, synthetic_dataset(40, DIM, seed=k),
                                   coordinator.port, epsilon_cap=100.0))
        try:
            yield coordinator, {d.site.name: d.site for d in sites.daemons}
        finally:
            sites.stop()


def test_the_liar_is_named_and_left_out_and_honest_sites_pay_one_aborted_round(
        lying_federation):
    coordinator, sites = lying_federation
    federation = direct_federation(coordinator, "liar", SITES)
    federation.wait_for_sites()
    mechanism = GaussianMechanism.single(2.0, 10.0, Adjacency.REPLACE_ONE)
    params = {"weights": np.zeros(DIM), "loss": "logistic", "clip_norm": 1.0}
    for _ in range(3):
        answer = federation.query("linear_gradient", params, mechanism)
        assert answer.participants == ("site-a", "site-b")
    rounds = coordinator.store.rounds("liar")
    assert [r.aborted for r in rounds] == [True, False, False, False]
    # Each honest site: one charge for the aborted round, one per answered step.
    honest = {name: len(sites[name].ledger.charges("liar")) for name in SITES if name != LIAR}
    assert honest == {"site-a": 4, "site-b": 4}
    audit = [e for e in coordinator.store.audit_log("liar") if e.event == "site_blamed"]
    assert [e.site_name for e in audit] == [LIAR]
