"""A charge's one durable write is its commit: the head file is synced in
the background, never leaving more than its newest slot unsynced, so a
power cut leaves the one-behind case the ledger repairs. A ledger that never
syncs keeps every check and the chain, and only a simulation site opens one."""

import itertools
import os
import sqlite3

import pytest

from privadapt.client.ledger import chain
from privadapt.client.ledger.chain import head_file
from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.common.errors import BudgetExceededError, ConfigError, ReplayError
from privadapt.common.mechanisms import GaussianMechanism

GAUSS = GaussianMechanism.single(1.0, 20.0)


def policy(**options):
    return SitePolicy("st-mary", 5.0, 1e-5, **options)


@pytest.fixture
def db(tmp_path):
    return tmp_path / "site.db"


def test_a_power_cut_losing_the_newest_unsynced_head_is_repaired(db):
    with PrivacyLedger(db, policy(), create=True) as ledger:
        for i in range(3):
            ledger.charge("job", f"q{i}", GAUSS)
        synced = head_file(db).read_bytes()
        ledger.charge("job", "q-last", GAUSS)  # returned; its head slot may not be on disk
        head_file(db).write_bytes(synced)  # the page the power cut lost
    with PrivacyLedger(db, policy()) as ledger:
        assert len(ledger.charges()) == 4
    assert "in agreement" in PrivacyLedger.open_readonly(db).verify()


def test_each_head_is_synced_before_the_next_is_written(db, monkeypatch):
    events = []
    write, sync = os.pwrite, os.fdatasync

    def recorded_write(fd, data, offset):
        if data.startswith(b"privadapt-ledger-head"):
            events.append("write")
        return write(fd, data, offset)

    def recorded_sync(fd):
        events.append("sync")
        return sync(fd)

    PrivacyLedger(db, policy(), create=True).close()
    monkeypatch.setattr(chain.os, "pwrite", recorded_write)
    monkeypatch.setattr(chain.os, "fdatasync", recorded_sync)
    with PrivacyLedger(db, policy()) as ledger:
        for i in range(6):
            ledger.charge("job", f"q{i}", GAUSS)
    writes = [k for k, event in enumerate(events) if event == "write"]
    assert len(writes) == 6
    assert all("sync" in events[a:b] for a, b in itertools.pairwise(writes))
    assert events[-1] == "sync"  # closing waits for the last head's sync


def test_a_deployed_site_refuses_a_ledger_that_does_not_sync(db):
    deployed = policy(simulation=False, min_participants=2, allow_per_site_releases=False)
    with pytest.raises(ConfigError, match="simulation sites only"):
        PrivacyLedger(db, deployed, create=True, durable=False)
    assert not db.exists()


def test_a_simulation_ledger_keeps_every_check_and_the_chain(db):
    with PrivacyLedger(db, policy(), create=True, durable=False) as ledger:
        assert ledger._connection().execute("PRAGMA synchronous").fetchone() == (0,)
        with ledger.reservation("job", "q0", GAUSS) as checked:
            ledger.charge("job", "q0", GAUSS, checked=checked)
        assert ledger._connection().execute("PRAGMA synchronous").fetchone() == (0,)
        with pytest.raises(ReplayError):
            ledger.charge("job", "q0", GAUSS)
        with pytest.raises(BudgetExceededError):
            ledger.charge("job", "q1", GaussianMechanism.single(1.0, 0.01))
    with PrivacyLedger(db, policy(), durable=False) as ledger:
        assert len(ledger.charges()) == 1
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("UPDATE charges SET query_id = 'forged'")
    conn.close()
    with pytest.raises(ConfigError, match=r"does not match its head file|corrupted or edited"):
        PrivacyLedger(db, policy(), durable=False)
