"""Review 10a (low): the latch lookup fails OPEN. ``ledger_latches.active``
catches every ``sqlite3.OperationalError`` and answers "not latched" -- meant
for a read-only ledger from before schema 4 (no table), but a site always
opens its ledger for charging, which creates the table, so on the site's path
an OperationalError means the database is failing (an I/O error, a busy WAL
recovery, a table dropped under it). The site then runs the latched kernel's
certificate again, on the private data: one more data-dependent bit, the one
the latch exists to withhold. The lookup should fail closed (refuse in the
latch's words, or let the error escape before any record is read) wherever
the ledger was opened for charging.

FAILS on main at 4634877.
"""

from __future__ import annotations

import math
import sqlite3

import numpy as np
import pytest

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.client.site import Site
from privadapt.common.data.dataset import Dataset
from privadapt.common.errors import QueryRefusedError, UncertifiedComputationError
from privadapt.common.federation import Query
from privadapt.common.kernels import get_kernel
from privadapt.common.mechanisms import Adjacency

DIM = 2
KERNEL = get_kernel("exact_discrepancy")
PARAMS = {"feature_norm": 1.0, "label_bound": 1.0, "radius": 1.0,
          "public_moments": np.eye(DIM + 1) * 0.1}


class FailingLatchReads:
    """A ledger connection whose reads of ``kernel_latches`` fail (I/O)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def execute(self, sql: str, *args):
        if "kernel_latches" in sql and sql.lstrip().upper().startswith("SELECT"):
            raise sqlite3.OperationalError("disk I/O error")
        return self._conn.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self._conn, name)


def test_review10a_a_failing_latch_lookup_does_not_rerun_the_certificate(tmp_path,
                                                                         monkeypatch):
    policy = SitePolicy("s", math.inf, 1e-5, adjacency=Adjacency.REPLACE_ONE,
                        allow_non_private=True, max_records=8)
    data = Dataset(np.full((4, DIM), 0.3), np.zeros(4), ("a", "b"))
    site = Site(data, policy, PrivacyLedger(tmp_path / "site.db", policy, create=True))
    mechanism = KERNEL.mechanism(KERNEL.Params.from_wire(PARAMS, DIM), math.inf,
                                 Adjacency.REPLACE_ONE, dim=DIM)
    runs = []

    def failing_certificate(self, records, typed, state):
        runs.append(1)
        raise UncertifiedComputationError("simulated")

    monkeypatch.setattr(type(KERNEL), "compute", failing_certificate)
    with pytest.raises(QueryRefusedError):
        site.answer(Query("job", "q-1", KERNEL.name, PARAMS, mechanism, fractional_bits=48), 1)
    assert site.ledger.active_latch(KERNEL.name) is not None and runs == [1]
    honest = site.ledger._connection
    monkeypatch.setattr(site.ledger, "_connection", lambda: FailingLatchReads(honest()))
    # On main the second failure then escapes as sqlite3.IntegrityError (the
    # insert's own lookup fails open too, and the unique index refuses the
    # second row): the worker turns it into Refusal.INTERNAL.
    with pytest.raises(Exception) as raised:  # any exit: what ran matters
        site.answer(Query("job", "q-2", KERNEL.name, PARAMS, mechanism, fractional_bits=48), 1)
    assert runs == [1], (f"the latched kernel's certificate ran again on the private data "
                         f"(and {type(raised.value).__name__} escaped)")
