"""A ledger object once evicted a budget check (deleting its reservation) when
it held 256 outstanding checks, although the evicted query could still be
running its kernel. A 257th check was then admitted into the room the
eviction freed, and the evicted query -- admitted at its check, its kernel
run -- was refused at its charge: the late, data-timed refusal that
reservations exist to prevent. The cap itself held (the evicted charge
decided over every reservation again).

A check admitted must either stay reserved until it commits or is released,
or a new check must be refused while the ledger cannot keep that promise."""

from __future__ import annotations

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.common.errors import QueryRefusedError
from privadapt.common.mechanisms import Adjacency, LaplaceMechanism

# epsilon 1 / 256.5 each: 256 releases fit a cap of 1, 257 do not.
RELEASE = LaplaceMechanism(1.0, 256.5, Adjacency.ADD_REMOVE_ONE)


def test_an_admitted_check_is_never_refused_at_its_charge_after_256_others(tmp_path):
    policy = SitePolicy("s", 1.0, 0.0, adjacency="add_remove_one")
    with PrivacyLedger(tmp_path / "ledger.db", policy, create=True) as ledger:
        checks = [ledger.check_charge("job", f"q{i}", RELEASE) for i in range(256)]
        try:
            late = ledger.check_charge("job", "q256", RELEASE)
        except QueryRefusedError as err:  # refused before any data: q0 keeps its promise
            assert "being answered" in str(err)
            late = None
        for checked in checks[1:] + ([late] if late is not None else []):
            ledger.charge("job", checked.query_id, RELEASE, checked=checked)
        # q0 was admitted at its check and its kernel has run: no late refusal.
        ledger.charge("job", "q0", RELEASE, checked=checks[0])
        assert ledger.spent().epsilon <= 1.0
