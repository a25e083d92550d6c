"""The split-query attack with record parts: a coordinator shows site-a the
validation part and the other sites the training part (or another salt, or
another fraction) under one query id.
The sums would then mix different records, and site-a's part could be the one
with few of its records. The part is bound into the query digest every site
signs into its round key, so every site refuses the round at the roster,
before anything is computed or charged. Sites as in test_site_worker (no gRPC)."""

from __future__ import annotations

import numpy as np
import pytest

from privadapt.common.data.record_parts import RecordPart
from privadapt.common.federation import Query
from privadapt.common.mechanisms import Adjacency, GaussianMechanism
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.wire.messages import query_to_proto
from tests.client.daemon.test_site_worker import (  # noqa: F401 -- pki is a fixture
    JOB,
    NAMES,
    Calls,
    make_worker,
    pki,
    roster_of,
)

PARAMS = {"weights": np.zeros(3), "loss": "logistic", "clip_norm": 1.0}
VALIDATION = RecordPart("validation", 0.25, "salt")


def announcement_on(records: RecordPart, round: int = 1) -> pb.WorkItem:
    mechanism = GaussianMechanism.single(2.0, 4.0, Adjacency.REPLACE_ONE)
    query = Query(JOB, f"s1-r{round}", "linear_gradient", PARAMS, mechanism, records=records)
    return pb.WorkItem(round_announcement=pb.RoundAnnouncement(
        job_id=JOB, round=round, query_id=query.query_id, query=query_to_proto(query, round),
        fractional_bits=query.fractional_bits))


def run_round(make_site, pki, tmp_path, parts):  # noqa: F811 -- pki is the fixture
    workers = [make_worker(make_site, pki, tmp_path, n) for n in NAMES]
    calls = [Calls() for _ in NAMES]
    for worker, call, records in zip(workers, calls, parts, strict=True):
        worker.handle(announcement_on(records), call)
    keys = [call.only("key") for call in calls]
    for worker, call in zip(workers, calls, strict=True):
        worker.handle(roster_of(keys), call)
    return workers, calls


@pytest.mark.parametrize("others", [
    RecordPart("train", 0.25, "salt"), RecordPart.ALL, RecordPart("validation", 0.25, "salt2"),
    RecordPart("validation", 0.5, "salt"),
])
def test_sites_shown_different_parts_refuse_the_round_before_any_charge(
        make_site, pki, tmp_path, others):  # noqa: F811 -- pki is the fixture
    workers, calls = run_round(make_site, pki, tmp_path, (VALIDATION, others, others))
    for worker, call in zip(workers, calls, strict=True):
        refusal = call.only("refusal")
        assert refusal.reason == pb.Refusal.ROSTER_INVALID
        assert "different queries under one query id" in refusal.message
        assert not [r for k, r in call.sent if k == "share"]
        assert worker.site.ledger.charges() == []


def test_sites_shown_the_same_part_answer(make_site, pki, tmp_path):  # noqa: F811
    workers, calls = run_round(make_site, pki, tmp_path, (VALIDATION,) * 3)
    for worker, call in zip(workers, calls, strict=True):
        assert call.only("share") and len(worker.site.ledger.charges()) == 1


def test_a_malformed_part_is_refused_by_the_daemon_not_a_crash(make_site, pki, tmp_path):  # noqa: F811
    worker = make_worker(make_site, pki, tmp_path, NAMES[0])
    call = Calls()
    item = announcement_on(VALIDATION)
    item.round_announcement.query.records.validation_fraction = float("nan")
    worker.handle(item, call)
    refusal = call.only("refusal")
    assert refusal.reason == pb.Refusal.POLICY and "validation_fraction" in refusal.message
    assert worker.site.ledger.charges() == []
