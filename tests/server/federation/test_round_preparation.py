"""How the coordinator prepares a round (server/federation/network.py,
server/federation/rounds.py). It encodes a step's query once: its fingerprint hashes the
probe encoding, and every attempt announces it with the round's query id and
number; that must be exactly the query's own encoding, and a round refuses an
encoding of another query. It records the round while the sites handle the
announcement, before the roster (what sites answer and charge)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from privadapt.common.data.record_parts import RecordPart
from privadapt.common.federation import Query, ReleaseForm
from privadapt.common.mechanisms import Adjacency, GaussianMechanism
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.wire.messages import query_to_proto
from privadapt.server.coordinator.site_registry import SiteRegistry
from privadapt.server.federation.network import _announced, _fingerprint
from privadapt.server.federation.rounds import RoundFailedError, RoundHub

MECHANISM = GaussianMechanism.single(2.0, 5.0, Adjacency.REPLACE_ONE)
PARAMS = {"weights": np.linspace(-1.0, 1.0, 1000), "loss": "logistic", "clip_norm": 1.0}


def _query(query_id: str, form=ReleaseForm.SECURE_SUM, records=RecordPart.ALL) -> Query:
    return Query("job-1", query_id, "linear_gradient", PARAMS, MECHANISM, 1, 32, form, records)


@pytest.mark.parametrize("form", list(ReleaseForm))
@pytest.mark.parametrize("records", [RecordPart.ALL, RecordPart("train", 0.25, "salt")])
def test_announced_copy_is_the_query_own_encoding(form, records) -> None:
    probe = query_to_proto(_query("fingerprint", form, records), round=0)
    fingerprint = _fingerprint(probe)
    for round in (7, 8):  # a step's attempts, each with its own ids
        query = _query(f"s000004-r{round:06d}", form, records)
        announced = _announced(probe, query, round)
        assert (announced.SerializeToString(deterministic=True)
                == query_to_proto(query, round).SerializeToString(deterministic=True))
    assert fingerprint == _fingerprint(query_to_proto(_query("fingerprint", form, records), 0))


def test_fingerprint_is_the_probe_encoding_hash_as_before() -> None:
    """Stored fingerprints stay valid: a job resumed by this version compares
    the same hash of the same encoding."""
    probe = query_to_proto(_query("fingerprint"), round=0)
    encoded = probe.SerializeToString(deterministic=True)
    assert _fingerprint(probe) == hashlib.sha256(encoded).hexdigest()
    assert _fingerprint(probe, ["a", "b"]) == hashlib.sha256(encoded + b"\x00a\x00b").hexdigest()


@pytest.mark.parametrize("change", ["query_id", "round", "fractional_bits", "form", "params"])
def test_round_refuses_an_encoding_of_another_query(change) -> None:
    hub = RoundHub(SiteRegistry())
    hub.open_job("job-1", 0)
    query = _query("s1-r1")
    encoded = query_to_proto(query, 1)
    if change == "query_id":
        encoded.query_id = "s1-r2"
    elif change == "round":
        encoded.round = 2
    elif change == "fractional_bits":
        encoded.fractional_bits = 31
    elif change == "form":
        encoded.form = str(ReleaseForm.PER_SITE)
    else:
        del encoded.params["loss"]
    with pytest.raises(ValueError, match="announces another"):
        hub.run_round(query, 1, ["site-a"], 1.0, encoded=encoded)


def test_round_takes_the_matching_encoding() -> None:
    """The check passes for the query's own encoding (the round then fails
    only because no site is connected)."""
    hub = RoundHub(SiteRegistry())
    hub.open_job("job-1", 0)
    query = _query("s1-r1")
    with pytest.raises(Exception) as caught:
        hub.run_round(query, 1, ["site-a"], 0.5, encoded=query_to_proto(query, 1))
    assert not isinstance(caught.value, ValueError)


# -- the round's record, committed while the sites handle the announcement ----

SITES = ("site-a", "site-b")


def _hub_with_sites() -> tuple[RoundHub, dict]:
    registry = SiteRegistry()
    hub = RoundHub(registry)
    sessions = {}
    for name in SITES:
        session = registry.register(name, pb.RegisterRequest(site_name=name))
        registry.attach(name, session.session_id, [])
        sessions[name] = session
    hub.open_job("job-1", 0)
    return hub, sessions


def _kinds(session) -> list[str]:
    kinds = []
    while not session.outbox.empty():
        kinds.append(session.outbox.get().WhichOneof("item"))
    return kinds


def test_round_is_recorded_after_its_announcement_and_before_its_roster() -> None:
    """The hook runs once the announcement is queued and before any key is
    awaited: no roster (what sites answer and charge) can precede it."""
    hub, sessions = _hub_with_sites()
    seen: list[list[str]] = []

    def record() -> None:
        seen.extend(_kinds(sessions[name]) for name in SITES)

    query = Query("job-1", "s1-r1", "linear_gradient", {"clip_norm": 1.0}, MECHANISM)
    with pytest.raises(RoundFailedError, match="deadline passed waiting for keys"):
        hub.run_round(query, 1, SITES, 0.2, announced=record)
    assert seen == [["round_announcement"], ["round_announcement"]]


def test_a_round_that_cannot_be_recorded_is_aborted_at_the_sites() -> None:
    hub, sessions = _hub_with_sites()

    def fail() -> None:
        raise ValueError("round 1 of job 'job-1' is already stored")

    query = Query("job-1", "s1-r1", "linear_gradient", {"clip_norm": 1.0}, MECHANISM)
    with pytest.raises(ValueError, match="already stored"):
        hub.run_round(query, 1, SITES, 5.0, announced=fail)
    for name in SITES:
        assert _kinds(sessions[name]) == ["round_announcement", "round_abort"]
