"""Opening a ledger re-derives only the rows after its newest checkpoint,
whatever its history; a checkpoint is bound into the hash chain, so an
edited or removed one is refused like an edited row."""

import sqlite3

import pytest

from privadapt.client.ledger import checkpoints
from privadapt.client.ledger.accounting import exact_report, mechanism_json
from privadapt.client.ledger.chain import head_file
from privadapt.client.ledger.opening import rebuild
from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.ledger.totals import LedgerTotals
from privadapt.client.policy import SitePolicy
from privadapt.common.errors import ConfigError
from privadapt.common.mechanisms import GaussianMechanism, LaplaceMechanism
from privadapt.common.transactions import transaction

INTERVAL = 8
GAUSS = GaussianMechanism.single(1.0, 200.0)
LAPLACE = LaplaceMechanism(1.0, 2000.0)


def policy():
    return SitePolicy("st-mary", 50.0, 1e-5)


@pytest.fixture(autouse=True)
def short_interval(monkeypatch):
    monkeypatch.setattr(checkpoints, "CHECKPOINT_INTERVAL", INTERVAL)


@pytest.fixture
def db(tmp_path):
    return tmp_path / "site.db"


def charge(path, first, count, create=False):
    with PrivacyLedger(path, policy(), create=create) as ledger:
        for i in range(first, first + count):
            ledger.charge("job", f"q{i}", GAUSS if i % 3 else LAPLACE)


def execute(path, sql, *args):
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(sql, args)
    conn.close()


def test_opening_rederives_no_more_rows_after_a_longer_history(db):
    charge(db, 0, 13, create=True)
    with PrivacyLedger(db, policy()) as ledger:
        short = ledger.rows_rederived
    charge(db, 13, 90)
    with PrivacyLedger(db, policy()) as ledger:
        long = ledger.rows_rederived
        spent = ledger.spent().epsilon
    assert short < INTERVAL and long < INTERVAL
    history = {mechanism_json(GAUSS): 68, mechanism_json(LAPLACE): 35}  # i % 3 == 0: Laplace
    assert spent == exact_report(history, policy()).epsilon
    assert "103 charges" in PrivacyLedger.open_readonly(db).verify()


def test_a_ledger_from_before_checkpoints_opens_and_gets_one(db, monkeypatch):
    monkeypatch.setattr(checkpoints, "CHECKPOINT_INTERVAL", 10**9)
    charge(db, 0, 30, create=True)
    execute(db, "DROP TABLE checkpoints")
    execute(db, "UPDATE meta SET value = '4' WHERE key = 'schema_version'")
    monkeypatch.setattr(checkpoints, "CHECKPOINT_INTERVAL", INTERVAL)
    with PrivacyLedger(db, policy()) as ledger:
        assert ledger.rows_rederived == 30
    with PrivacyLedger(db, policy()) as ledger:
        assert ledger.rows_rederived == 0
        assert len(ledger.charges()) == 30
    assert "in agreement" in PrivacyLedger.open_readonly(db).verify()


@pytest.mark.parametrize("edit", [
    # fewer charges of a mechanism, in the checkpoint and the derived tables alike
    "UPDATE checkpoints SET groups_json = replace(groups_json, ', 5]', ', 1]')",
    "UPDATE checkpoints SET head = '" + "0" * 64 + "'",
    "UPDATE checkpoints SET last_id = last_id - 1",
    "DELETE FROM checkpoints",
])
def test_an_edited_or_removed_checkpoint_is_refused(db, edit):
    charge(db, 0, 12, create=True)  # a checkpoint at 8: 5 Gaussians, 3 Laplaces
    execute(db, edit)
    with pytest.raises(ConfigError, match=r"corrupted or edited|does not match its head file"):
        PrivacyLedger(db, policy())


def test_a_row_edited_before_the_checkpoint_is_refused_by_verification(db):
    charge(db, 0, 12, create=True)
    execute(db, "UPDATE charges SET query_id = 'forged' WHERE id = 2")
    with pytest.raises(ConfigError, match="corrupted or edited"):
        PrivacyLedger.open_readonly(db).verify()


def test_a_crash_before_the_head_file_of_a_checkpointing_charge_is_repaired(db):
    charge(db, 0, INTERVAL - 1, create=True)
    behind = head_file(db).read_bytes()
    charge(db, INTERVAL - 1, 1)  # writes the checkpoint with its row
    head_file(db).write_bytes(behind)
    with PrivacyLedger(db, policy()) as ledger:
        assert len(ledger.charges()) == INTERVAL and ledger.rows_rederived == 0
    assert "in agreement" in PrivacyLedger.open_readonly(db).verify()


def test_a_crash_before_the_head_file_of_a_first_checkpoint_is_repaired(db, monkeypatch):
    monkeypatch.setattr(checkpoints, "CHECKPOINT_INTERVAL", 10**9)
    charge(db, 0, 20, create=True)
    behind = head_file(db).read_bytes()
    monkeypatch.setattr(checkpoints, "CHECKPOINT_INTERVAL", INTERVAL)
    PrivacyLedger(db, policy()).close()  # writes the ledger's first checkpoint
    head_file(db).write_bytes(behind)
    with PrivacyLedger(db, policy()) as ledger:
        assert ledger.rows_rederived == 0
    assert "in agreement" in PrivacyLedger.open_readonly(db).verify()


def test_a_checkpoint_written_by_another_ledger_object_is_caught_up(db):
    charge(db, 0, 3, create=True)
    with PrivacyLedger(db, policy()) as first, PrivacyLedger(db, policy()) as second:
        for i in range(3, 3 + 2 * INTERVAL):
            (first if i % 2 else second).charge("job", f"q{i}", GAUSS)
        assert first.spent() == second.spent()
    with PrivacyLedger(db, policy()) as ledger:
        assert ledger.rows_rederived < INTERVAL
        assert len(ledger.charges()) == 3 + 2 * INTERVAL


def test_an_open_from_a_checkpoint_composes_the_same_bits_as_one_from_every_row(db):
    charge(db, 0, 30, create=True)
    with PrivacyLedger(db, policy()) as ledger:
        assert 0 < ledger.rows_rederived < INTERVAL
        pure, rdp = ledger._totals.stored_sums()
        every = LedgerTotals(ledger.policy.adjacency, track_pld=False)
        with transaction(ledger._connection(), write=False) as conn:
            rebuild(conn, "st-mary", every, from_checkpoint=False)
    assert pure == every.stored_sums()[0]
    assert rdp.tobytes() == every.stored_sums()[1].tobytes()
