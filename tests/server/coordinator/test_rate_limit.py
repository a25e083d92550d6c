"""Register is rate-limited per identity, and oversized registrations stored
by an older coordinator are trimmed when the store opens: one certificate
holder must not fill the coordinator's store or its Register path."""

from __future__ import annotations

import json
import sqlite3

import pytest

from privadapt.server.coordinator.rate_limit import RateLimit
from privadapt.server.store import CoordinatorStore
from privadapt.server.store.sites import MAX_STORED_FIELD_CHARS


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_is_allowed_then_refused_until_the_window_slides():
    clock = Clock()
    limit = RateLimit(3, 60.0, clock)
    assert [limit.allow("st-mary") for _ in range(3)] == [0.0, 0.0, 0.0]
    clock.now += 10
    assert limit.allow("st-mary") == pytest.approx(50.0)  # the first event expires at 160
    assert limit.allow("st-john") == 0.0  # another identity is not held back
    clock.now += 50
    assert limit.allow("st-mary") == 0.0


def test_bad_limits_are_refused():
    with pytest.raises(ValueError):
        RateLimit(0, 1.0)
    with pytest.raises(ValueError):
        RateLimit(1, 0.0)


def test_oversized_stored_registrations_are_trimmed(tmp_path):
    path = tmp_path / "coordinator.db"
    with CoordinatorStore(path) as store:
        store.upsert_site("st-mary", num_records=10, num_features=3, kernels=["linear_gradient"],
                          policy_version="v1", certificate_expiry=None)
        store.upsert_site("st-john", num_records=10, num_features=3, kernels=["x"],
                          policy_version="v1", certificate_expiry=None)
    with sqlite3.connect(path) as conn:  # what an older, unbounded coordinator stored
        conn.execute("UPDATE sites SET kernels = ? WHERE name = 'st-john'",
                     (json.dumps(["k" * 100] * MAX_STORED_FIELD_CHARS),))
    with CoordinatorStore(path) as store:
        assert store.trim_oversized_registrations() == ["st-john"]
        sites = {s.name: s for s in store.sites()}
        assert sites["st-john"].kernels == () and sites["st-mary"].kernels == ("linear_gradient",)
        assert store.trim_oversized_registrations() == []
