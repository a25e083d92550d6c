"""The query digest every site signs into its round key (common/query_digest.py):
equal for the same query however it was built, different for any change that
changes the answer."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from privadapt.common.federation import Query, ReleaseForm
from privadapt.common.mechanisms import Adjacency, GaussianMechanism, LaplaceMechanism
from privadapt.common.query_digest import QUERY_DIGEST_BYTES, canonical_encoding, query_digest
from privadapt.common.record_parts import RecordPart
from privadapt.common.wire import query_from_proto, query_to_proto

MECHANISM = GaussianMechanism.single(2.0, 4.0, Adjacency.REPLACE_ONE)


def make_query(**changes) -> Query:
    params = {"weights": np.arange(3.0), "loss": "logistic", "clip_norm": 1.0, "steps": 2}
    query = Query("job", "q-1", "linear_gradient", params, MECHANISM, 1, 30)
    return dataclasses.replace(query, **changes)


def test_digest_is_32_bytes_and_independent_of_parameter_order():
    query = make_query()
    reordered = make_query(params=dict(reversed(list(query.params.items()))))
    assert len(query_digest(query, 1)) == QUERY_DIGEST_BYTES
    assert query_digest(query, 1) == query_digest(reordered, 1)


def test_digest_survives_the_wire_round_trip():
    query = make_query()
    decoded, round = query_from_proto(query_to_proto(query, 4))
    assert query_digest(decoded, round) == query_digest(query, 4)


@pytest.mark.parametrize("change", [
    {"job_id": "job-2"},
    {"query_id": "q-2"},
    {"kernel": "second_moments"},
    {"collusion_tolerance": 0},
    {"fractional_bits": 31},
    {"mechanism": GaussianMechanism.single(2.0, 4.0000001, Adjacency.REPLACE_ONE)},
    {"mechanism": GaussianMechanism.single(2.0, 4.0, Adjacency.ADD_REMOVE_ONE)},
    {"mechanism": LaplaceMechanism(2.0, 4.0, Adjacency.REPLACE_ONE)},
    # One site shown a per-site release while the others sum securely would
    # have its answer seen unmasked: the form is bound into the digest too.
    {"form": ReleaseForm.PER_SITE},
])
def test_every_field_of_the_query_changes_the_digest(change):
    assert query_digest(make_query(**change), 1) != query_digest(make_query(), 1)


def test_the_round_changes_the_digest():
    assert query_digest(make_query(), 1) != query_digest(make_query(), 2)


@pytest.mark.parametrize("params_change", [
    {"clip_norm": 1e-9},
    {"clip_norm": np.nextafter(1.0, 2.0)},             # one ulp
    {"steps": 2.0},                                      # int vs float of equal value
    {"weights": np.arange(3.0, dtype=np.float32)},       # dtype
    {"weights": np.arange(3.0).reshape(3, 1)},           # shape
    {"weights": np.array([-0.0, 1.0, 2.0])},             # -0.0 and 0.0: other bits
    {"extra": True},                                     # one parameter more
])
def test_any_change_to_a_parameter_changes_the_digest(params_change):
    base = make_query()
    changed = make_query(params={**base.params, **params_change})
    assert query_digest(changed, 1) != query_digest(base, 1)


def test_encoding_is_unambiguous_across_container_boundaries():
    assert canonical_encoding(["ab", "c"]) != canonical_encoding(["a", "bc"])
    assert canonical_encoding({"a": "b"}) != canonical_encoding(["a", "b"])
    assert canonical_encoding(True) != canonical_encoding(1)
    assert canonical_encoding(2**80) != canonical_encoding(2**80 + 1)


def test_unencodable_parameters_are_refused():
    with pytest.raises(TypeError, match="canonical encoding"):
        query_digest(make_query(params={"model": object()}), 1)


# --- record parts (common/record_parts.py) ----------------------------------------------------


PARTS = (RecordPart("validation", 0.25, "salt"), RecordPart("train", 0.25, "salt"),
         RecordPart("validation", 0.25000000000000006, "salt"),
         RecordPart("validation", 0.25, "salt2"))


def test_the_record_part_changes_the_digest():
    """Sites shown different parts (or salts, or fractions) under one query id
    would sum statistics of different records: the split-query attack."""
    digests = {query_digest(make_query(records=r), 1) for r in (RecordPart.ALL, *PARTS)}
    assert len(digests) == 1 + len(PARTS)


@pytest.mark.parametrize("records", PARTS)
def test_a_record_part_survives_the_wire_with_its_digest(records):
    decoded, round = query_from_proto(query_to_proto(make_query(records=records), 3))
    assert decoded.records == records
    assert query_digest(decoded, round) == query_digest(make_query(records=records), 3)


def test_every_record_is_one_digest_whatever_the_ignored_fields():
    assert (query_digest(make_query(records=RecordPart("all", 0.3, "x")), 1)
            == query_digest(make_query(), 1))
