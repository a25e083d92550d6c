"""The coordinator encodes a step's query once: its fingerprint hashes the
probe encoding, and every attempt announces it with the round's
query id and number (server/network_federation.py). That must be exactly
the query's own encoding, and a round refuses an encoding of another query."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from privadapt.common.federation import Query, ReleaseForm
from privadapt.common.mechanisms import Adjacency, GaussianMechanism
from privadapt.common.record_parts import RecordPart
from privadapt.common.wire import query_to_proto
from privadapt.server.network_federation import _announced, _fingerprint
from privadapt.server.rounds import RoundHub
from privadapt.server.site_registry import SiteRegistry

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
