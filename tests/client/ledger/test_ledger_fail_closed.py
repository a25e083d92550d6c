"""A lost, emptied or replaced ledger never looks like a new one: each
attack is refused when the ledger opens, with how to recover."""

import shutil
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from privadapt.client.ledger.chain import head_file
from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.common.errors import ConfigError
from privadapt.common.mechanisms import GaussianMechanism, LaplaceMechanism

DELTA = 1e-5
GAUSS = GaussianMechanism.single(1.0, 20.0)


def policy(name="st-mary"):
    return SitePolicy(name, 5.0, DELTA)


@pytest.fixture
def db(tmp_path):
    return tmp_path / "site.db"


def charged(path, count=5, name="st-mary", job="job"):
    with PrivacyLedger(path, policy(name), create=True) as ledger:
        for i in range(count):
            ledger.charge(job, f"q{i}", GAUSS)
    return path


def remove_database(path):
    for suffix in ("", "-wal", "-shm"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)


def test_missing_ledger_is_refused_with_how_to_create_one(db):
    with pytest.raises(ConfigError, match=r"no such file.*privadapt ledger init"):
        PrivacyLedger(db, policy())
    assert not db.exists()


def test_empty_file_is_refused_without_create(db):
    db.touch()
    with pytest.raises(ConfigError, match=r"empty \(0 bytes\).*privadapt ledger init"):
        PrivacyLedger(db, policy())


def test_sqlite_file_that_is_not_a_ledger_is_refused_without_create(db):
    sqlite3.connect(db).execute("CREATE TABLE other (x)").connection.close()
    with pytest.raises(ConfigError, match="not a privadapt ledger"):
        PrivacyLedger(db, policy())


def test_ledger_truncated_to_zero_bytes_is_refused_even_with_create(db):
    charged(db)
    remove_database(db)
    db.write_bytes(b"")
    with pytest.raises(ConfigError, match="empty"):
        PrivacyLedger(db, policy())
    with pytest.raises(ConfigError, match="records 5 charges: the ledger was deleted or trunc"):
        PrivacyLedger(db, policy(), create=True)


def test_deleted_ledger_is_refused_even_with_create(db):
    charged(db)
    remove_database(db)
    with pytest.raises(ConfigError, match="no such file"):
        PrivacyLedger(db, policy())
    with pytest.raises(ConfigError, match="deleted or truncated"):
        PrivacyLedger(db, policy(), create=True)


_CRASHING_SITE = textwrap.dedent("""
    import os, sys
    from privadapt.client.ledger.privacy_ledger import PrivacyLedger
    from privadapt.client.policy import SitePolicy
    from privadapt.common.mechanisms import GaussianMechanism
    ledger = PrivacyLedger(sys.argv[1], SitePolicy("st-mary", 5.0, 1e-5))
    for i in range(int(sys.argv[2])):
        ledger.charge("job", f"late-{i}", GaussianMechanism.single(1.0, 20.0))
    os._exit(0)  # a crash: no close, no checkpoint; the charges live in the WAL
""")


def test_wal_deleted_after_a_crash_is_refused(db):
    charged(db, count=2)
    subprocess.run([sys.executable, "-c", _CRASHING_SITE, str(db), "6"], check=True)
    wal = db.with_name(db.name + "-wal")
    assert wal.stat().st_size > 0
    wal.unlink()
    db.with_name(db.name + "-shm").unlink(missing_ok=True)
    with pytest.raises(ConfigError, match=r"holds 2 charges but its head file .* records 8"):
        PrivacyLedger(db, policy())


def test_wal_kept_after_a_crash_recovers_every_charge(db):
    charged(db, count=2)
    subprocess.run([sys.executable, "-c", _CRASHING_SITE, str(db), "6"], check=True)
    with PrivacyLedger(db, policy()) as ledger:
        assert len(ledger.charges()) == 8


def test_older_copy_of_the_ledger_is_refused(db, tmp_path):
    charged(db, count=3)
    shutil.copy(db, tmp_path / "backup.db")
    with PrivacyLedger(db, policy()) as ledger:
        ledger.charge("job", "q-late", GAUSS)
    remove_database(db)
    shutil.copy(tmp_path / "backup.db", db)
    with pytest.raises(ConfigError, match=r"holds 3 charges but its head file .* records 4"):
        PrivacyLedger(db, policy())


def test_another_sites_ledger_is_refused(db, tmp_path):
    charged(db)
    other = charged(tmp_path / "other.db", name="st-joseph")
    remove_database(db)
    shutil.copy(other, db)
    with pytest.raises(ConfigError, match="belongs to site 'st-joseph'"):
        PrivacyLedger(db, policy())


def test_another_ledger_of_the_same_site_name_is_refused(db, tmp_path):
    charged(db, count=5)
    other = charged(tmp_path / "other.db", count=5, job="another-job")
    remove_database(db)
    shutil.copy(other, db)
    with pytest.raises(ConfigError, match="does not match its head file"):
        PrivacyLedger(db, policy())


def test_missing_head_file_is_refused(db):
    charged(db)
    head_file(db).unlink()
    with pytest.raises(ConfigError, match=r"head file .* is missing"):
        PrivacyLedger(db, policy())


def test_head_file_one_charge_behind_is_the_crash_case_and_is_repaired(db):
    charged(db, count=3)
    behind = head_file(db).read_bytes()
    with PrivacyLedger(db, policy()) as ledger:
        ledger.charge("job", "q-last", GAUSS)
    head_file(db).write_bytes(behind)  # as if the site died right after its commit
    with PrivacyLedger(db, policy()) as ledger:
        assert len(ledger.charges()) == 4
    assert "4 charges" in PrivacyLedger.open_readonly(db).verify()
    assert "in agreement" in PrivacyLedger.open_readonly(db).verify()


def test_head_file_two_charges_behind_is_refused(db):
    charged(db, count=3)
    behind = head_file(db).read_bytes()
    with PrivacyLedger(db, policy()) as ledger:
        ledger.charge("job", "q-a", GAUSS)
        ledger.charge("job", "q-b", GAUSS)
    head_file(db).write_bytes(behind)
    with pytest.raises(ConfigError, match="does not match its head file"):
        PrivacyLedger(db, policy())


def test_torn_head_file_slot_falls_back_to_the_previous_head(db):
    charged(db, count=3)
    data = bytearray(head_file(db).read_bytes())
    data[128 * (3 % 2) + 40] ^= 0xFF  # corrupt the slot holding the newest head
    head_file(db).write_bytes(bytes(data))
    with PrivacyLedger(db, policy()) as ledger:  # two behind? no: one behind, repaired
        assert len(ledger.charges()) == 3


@pytest.mark.parametrize(
    "edit",
    [
        "UPDATE charges SET mechanism_json = replace(mechanism_json, '20.0', '30.0') WHERE id = 2",
        "DELETE FROM charges WHERE id = 3",
        "UPDATE groups SET count = count - 1",
        "UPDATE ledger_state SET pure_epsilon = 1.0",
    ],
    ids=["mechanism-edited", "row-deleted", "groups-edited", "sums-edited"],
)
def test_edited_database_is_refused(db, edit):
    with PrivacyLedger(db, SitePolicy("st-mary", 5.0, 0.0), create=True) as ledger:
        for i in range(4):
            ledger.charge("job", f"q{i}", LaplaceMechanism(1.0, 20.0 if i % 2 else 40.0))
    with sqlite3.connect(db) as conn:
        conn.execute(edit)
    conn.close()
    with pytest.raises(ConfigError, match=r"corrupted or edited|does not match|head file"):
        PrivacyLedger(db, SitePolicy("st-mary", 5.0, 0.0))


def test_ledger_show_verifies_the_chain(db, capsys):
    from privadapt.client.ledger.cli import show_ledger

    charged(db, count=2)
    assert show_ledger(db) == 0
    assert "hash chain verified: 2 charges" in capsys.readouterr().out
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE charges SET query_id = 'forged' WHERE id = 1")
    conn.close()
    assert show_ledger(db) == 2
    assert "corrupted or edited" in capsys.readouterr().err


def test_ledger_init_creates_once_and_never_reopens(tmp_path, capsys):
    from privadapt.cli.main import main

    policy_file = tmp_path / "policy.toml"
    policy_file.write_text(policy().to_toml())
    db = tmp_path / "site.db"
    assert main(["ledger", "init", "--site-db", str(db), "--policy", str(policy_file)]) == 0
    assert head_file(db).exists()
    PrivacyLedger(db, policy()).close()  # now the site can open it
    assert main(["ledger", "init", "--site-db", str(db), "--policy", str(policy_file)]) == 2
    assert "already exists" in capsys.readouterr().err


def test_site_daemon_refuses_to_start_on_a_missing_ledger(tmp_path, capsys):
    import numpy as np

    from privadapt.client.daemon.main import main
    from privadapt.common.data.dataset import Dataset
    from privadapt.simulation.local_deployment import LocalDeployment, write_pki

    deployment = LocalDeployment(tmp_path, write_pki(tmp_path / "pki"))
    data = Dataset(np.zeros((4, 2)), np.ones(4), ("a", "b"))
    config = deployment.write_site(policy(), data, "127.0.0.1:1")
    remove_database(tmp_path / "st-mary" / "site.db")
    head_file(tmp_path / "st-mary" / "site.db").unlink()
    assert main(["--config", str(config)]) == 2
    assert "privadapt ledger init" in capsys.readouterr().err


def test_a_ledger_that_claims_schema_1_but_has_its_derived_tables_is_refused(tmp_path):
    # Claim schema 1, empty the derived state, delete rows and
    # the head file, and the chain restarted with the history forgotten.
    db = tmp_path / "site.db"
    with PrivacyLedger(db, policy(), create=True) as ledger:
        for k in range(3):
            ledger.charge("job", f"q{k}", GaussianMechanism.single(1.0, 2.0))
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM charges WHERE id > 1")
        conn.execute("DELETE FROM ledger_state")
        conn.execute("DELETE FROM groups")
        conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    head_file(db).unlink()
    with pytest.raises(ConfigError, match="schema 1 never had"):
        PrivacyLedger(db, policy())
