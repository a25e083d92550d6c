"""The query digest every site signs into its round key (common/secure/query_digest.py):
equal for the same query however it was built, different for any change that
changes the answer."""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pytest

from privadapt.common.data.record_parts import RecordPart
from privadapt.common.federation import Query, ReleaseForm
from privadapt.common.mechanisms import Adjacency, GaussianMechanism, LaplaceMechanism
from privadapt.common.secure.query_digest import (
    QUERY_DIGEST_BYTES,
    canonical_encoding,
    query_digest,
)
from privadapt.common.wire.messages import query_from_proto, query_to_proto

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


# Digests of the encoding as first released (a joined byte string per value),
# pinned: sites and coordinators of different versions must agree on every
# digest, however the encoding is computed (it is now hashed piece by piece).
_PINNED = {
    "scalars": "8037f48075f84117d253a9bdd60b35fff2732aaca5434677ae1992051f4c4a11",
    "numpy scalars": "491a4e628d2ba7147e673f608ae334cee786c6b8db7cafbb93f2ecd0fada476e",
    "arrays": "fd1f3079b7aea43056fe0792717ceb64a7b6f302659ee8e61a27f09375d88307",
    "mapping": "d4635df6cf63eff222937a27ba940fb2ad063d1e866d36dcceb6f464fd7fb5cf",
}


def _pinned_values() -> dict:
    rng = np.random.default_rng(7)
    grid = np.arange(12, dtype=np.float64).reshape(3, 4)
    return {
        "scalars": [None, True, False, 0, -1, 255, 2**80, -(2**70), 0.0, -0.0, 0.1, 1e308, "",
                    "é", b"\x00\xff"],
        "numpy scalars": [np.float64(2.5), np.int64(-3), np.bool_(True), np.uint64(2**63)],
        # Transposed, strided and big-endian arrays encode as their C-order
        # little-endian values; 0-d and empty arrays too.
        "arrays": [grid, grid.T, grid[:, ::2], grid.astype(">f8"), np.zeros((0, 3)),
                   np.array(4.0), np.arange(5, dtype=np.int64), np.arange(5, dtype=np.uint64),
                   np.array([True, False]), grid.astype(np.float32), rng.normal(size=1000)],
        "mapping": {"b": {"z": [1, 2.0, "x"], "a": ()}, "a": np.ones(3)},
    }


@pytest.mark.parametrize("name", sorted(_PINNED))
def test_encoding_is_the_one_first_released(name):
    assert hashlib.sha256(canonical_encoding(_pinned_values()[name])).hexdigest() == _PINNED[name]


def test_query_digests_are_the_ones_first_released():
    weights = np.random.default_rng(3).normal(size=100_000)
    big = Query("job", "s000001-r000002", "linear_gradient",
                {"weights": weights, "loss": "logistic", "clip_norm": 1.0},
                GaussianMechanism.single(2.0, 50.0, Adjacency.REPLACE_ONE))
    small = Query("job-b", "q", "record_count", {}, LaplaceMechanism(1.0, 2.0),
                  collusion_tolerance=1, fractional_bits=20, form=ReleaseForm.PER_SITE)
    assert query_digest(big, 2).hex() == (
        "13282b9015a6a4dcaf4506e2fbd60e6819b6e0522dbbbdc60a9cc4faf5192b25")
    assert query_digest(small, 7).hex() == (
        "b6ba0b0a2ce583a1057350d4158f1c8698d51e0b62bc3959a76700e200de7e72")


# --- record parts (common/data/record_parts.py) ---------------------------------------------


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
