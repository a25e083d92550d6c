"""The ledger records the kernel of each charge (the
report's kernel column), covered by the hash chain; a ledger from before
(schema 2) is upgraded in place, its rows showing "unknown", and its chain
still verifies."""

from __future__ import annotations

import io
import json
import sqlite3

import numpy as np
import pytest

from privadapt.client.ledger.cli import show_ledger
from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.common.data.record_parts import RecordPart
from privadapt.common.errors import ConfigError
from privadapt.common.federation import Query
from privadapt.common.kernels import get_kernel
from privadapt.common.mechanisms import Adjacency, GaussianMechanism

GAUSS = GaussianMechanism.single(1.0, 10.0)
DIM = 5


def _policy() -> SitePolicy:
    return SitePolicy("st-mary", 5.0, 1e-5)


def _as_schema_2(db) -> None:
    """Turn a ledger whose rows record no kernel into the file schema 2 wrote."""
    with sqlite3.connect(db) as conn:
        conn.execute("ALTER TABLE charges DROP COLUMN kernel")
        conn.execute("DROP TABLE reservations")
        conn.execute("DROP TABLE kernel_latches")  # schema 4's
        conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    conn.close()


def _show(db, as_json=False) -> str:
    out = io.StringIO()
    assert show_ledger(db, out=out, as_json=as_json) == 0
    return out.getvalue()


def test_a_site_records_the_kernel_of_each_charge(make_site):
    site = make_site(dim=DIM, adjacency="add_remove_one")
    params = {"weights": np.zeros(DIM), "loss": "squared", "clip_norm": 1.0}
    kernel = get_kernel("linear_gradient")
    mechanism = kernel.mechanism(kernel.Params.from_wire(params, DIM), 5.0,
                                 Adjacency.ADD_REMOVE_ONE, dim=DIM, records=RecordPart.ALL)
    site.answer(Query("job", "q1", "linear_gradient", params, mechanism), 1)
    assert [c.kernel for c in site.ledger.charges()] == ["linear_gradient"]


def test_a_schema_2_ledger_verifies_shows_unknown_and_is_upgraded(tmp_path):
    db = tmp_path / "site.db"
    with PrivacyLedger(db, _policy(), create=True) as ledger:
        ledger.charge("job", "old-1", GAUSS)
        ledger.charge("job", "old-2", GAUSS)
    _as_schema_2(db)
    # Read-only (ledger show): nothing upgraded, the chain verifies, kernels unknown.
    text = _show(db)
    assert "hash chain verified: 2 charges" in text
    assert all("unknown" in line for line in text.splitlines() if "old-" in line)
    document = json.loads(_show(db, as_json=True))
    assert [c["kernel"] for c in document["charges"]] == ["unknown", "unknown"]
    # A site opening it for charging upgrades it; old rows keep their chain bytes.
    with PrivacyLedger(db, _policy()) as ledger:
        ledger.charge("job", "new", GAUSS, kernel="second_moments")
        assert [c.kernel for c in ledger.charges()] == ["unknown", "unknown", "second_moments"]
        assert "3 charges" in ledger.verify()
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'"
                            ).fetchone() == ("6",)  # upgraded to the current schema
        assert conn.execute("SELECT COUNT(*) FROM kernel_latches").fetchone() == (0,)
    conn.close()
    with PrivacyLedger(db, _policy()) as reopened:  # the open check rebuilds the chain
        assert len(reopened.charges()) == 3
    document = json.loads(_show(db, as_json=True))
    assert [c["kernel"] for c in document["charges"]] == ["unknown", "unknown", "second_moments"]
    assert "second_moments" in _show(db)


@pytest.mark.parametrize("forged", ["'linear_gradient'", "NULL"])
def test_the_chain_covers_the_kernel(tmp_path, forged):
    db = tmp_path / "site.db"
    with PrivacyLedger(db, _policy(), create=True) as ledger:
        ledger.charge("job", "q1", GAUSS, kernel="second_moments")
        ledger.charge("job", "q2", GAUSS)
    with sqlite3.connect(db) as conn:
        conn.execute(f"UPDATE charges SET kernel = {forged} WHERE id = 1")
    conn.close()
    with pytest.raises(ConfigError, match=r"does not match|not the chain"):
        PrivacyLedger(db, _policy())


def test_a_kernel_cannot_be_given_to_an_old_row(tmp_path):
    db = tmp_path / "site.db"
    with PrivacyLedger(db, _policy(), create=True) as ledger:
        ledger.charge("job", "q1", GAUSS)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE charges SET kernel = 'linear_gradient' WHERE id = 1")
    conn.close()
    with pytest.raises(ConfigError):
        PrivacyLedger(db, _policy())
