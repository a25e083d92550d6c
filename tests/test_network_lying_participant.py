"""A participant that lies in its integrity check (issue 17, section 2): it
used to abort every attempt of a step, five times, with every honest site
charged for each, and the message blamed "different rosters or keys". Now
the coordinator asks every site for its check key, recomputes each check,
names the liar and leaves it out of the job, so the honest sites pay for one
aborted round and the job goes on without it."""

from __future__ import annotations

import numpy as np
import pytest

from privadapt.client import site_worker
from privadapt.common.mechanisms import Adjacency, GaussianMechanism
from tests.conftest import synthetic_dataset
from tests.network_harness import (
    ThreadSites,
    direct_federation,
    in_process_coordinator,
    make_pki,
    write_coordinator_config,
    write_site,
)

SITES = ("site-a", "site-b", "site-c")
LIAR = "site-c"
DIM = 4


@pytest.fixture
def lying_federation(tmp_path, monkeypatch):
    honest_check = site_worker.mask_integrity_check

    def lying_check(keys, roster, *args):
        check = honest_check(keys, roster, *args)
        return check + np.uint64(12345) if roster.own_name == LIAR else check

    monkeypatch.setattr(site_worker, "mask_integrity_check", lying_check)
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
    assert LIAR in rounds[0].abort_reason and "integrity check" in rounds[0].abort_reason
    # Each honest site: one charge for the aborted round, one per answered step.
    assert {name: len(sites[name].ledger.charges("liar")) for name in SITES} == {
        "site-a": 4, "site-b": 4, LIAR: 1}
    audit = [e for e in coordinator.store.audit_log("liar") if e.event == "site_blamed"]
    assert [e.site_name for e in audit] == [LIAR]
