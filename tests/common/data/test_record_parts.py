"""Record parts (common/data/record_parts.py): membership is a function of each
record alone, the fraction is respected, the salt changes the split, and
every public field is range-checked."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from privadapt.common.data.dataset import Dataset
from privadapt.common.data.record_parts import (
    CACHED_SALTS,
    MAX_SALT_CHARS,
    RecordPart,
    RecordSplitter,
    charged_adjacencies,
    record_hashes,
    worst_case,
)
from privadapt.common.federation import RecordPartView
from privadapt.common.mechanisms import Adjacency

DIM = 3
NAMES = tuple(f"x{i}" for i in range(DIM))
finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)


def dataset(features, labels) -> Dataset:
    return Dataset(np.asarray(features, dtype=float).reshape(-1, DIM), labels, NAMES)


def validation(fraction: float = 0.25, salt: str = "salt") -> RecordPart:
    return RecordPart("validation", fraction, salt)


@settings(max_examples=60, deadline=None)
@given(features=arrays(np.float64, st.tuples(st.integers(1, 20), st.just(DIM)), elements=finite),
       extra=arrays(np.float64, (DIM,), elements=finite), label=finite,
       where=st.integers(0, 20), salt=st.text(st.characters(min_codepoint=32, max_codepoint=126),
                                              max_size=12))
def test_adding_or_removing_a_record_never_moves_another(features, extra, label, where, salt):
    labels = np.arange(len(features), dtype=float)
    base = dataset(features, labels)
    at = min(where, len(features))
    grown = dataset(np.insert(features, at, extra, axis=0), np.insert(labels, at, label))
    part = validation(0.5, salt)
    before = part.membership(record_hashes(base, salt))
    after = part.membership(record_hashes(grown, salt))
    # Every old record keeps its membership; removal is the same pair read backwards.
    np.testing.assert_array_equal(np.delete(after, at), before)


def test_membership_is_the_hash_of_the_record_itself():
    rng = np.random.default_rng(3)
    data = dataset(rng.normal(size=(50, DIM)), rng.normal(size=50))
    shuffled = rng.permutation(50)
    permuted = Dataset(data.features[shuffled], data.labels[shuffled], NAMES)
    np.testing.assert_array_equal(record_hashes(permuted, "s"), record_hashes(data, "s")[shuffled])


def test_every_bit_of_a_record_counts():
    plus, minus = dataset([[0.0, 1.0, 2.0]], [1.0]), dataset([[-0.0, 1.0, 2.0]], [1.0])
    relabelled = dataset([[0.0, 1.0, 2.0]], [np.nextafter(1.0, 2.0)])
    hashes = {int(record_hashes(d, "s")[0]) for d in (plus, minus, relabelled)}
    assert len(hashes) == 3


def test_the_validation_fraction_is_respected():
    rng = np.random.default_rng(0)
    n = 20_000
    data = dataset(rng.normal(size=(n, DIM)), rng.normal(size=n))
    for fraction in (1 / 64, 0.1, 0.25, 0.5):
        chosen = validation(fraction).membership(record_hashes(data, "salt")).sum()
        spread = math.sqrt(n * fraction * (1 - fraction))
        assert abs(chosen - n * fraction) < 5 * spread


def test_train_and_validation_split_every_record_once():
    rng = np.random.default_rng(1)
    data = dataset(rng.normal(size=(300, DIM)), rng.normal(size=300))
    hashes = record_hashes(data, "x")
    train = RecordPart("train", 0.3, "x").membership(hashes)
    held = RecordPart("validation", 0.3, "x").membership(hashes)
    assert not np.any(train & held) and np.all(train | held)
    assert RecordPart.ALL.membership(hashes).all()


def test_the_salt_changes_the_split():
    rng = np.random.default_rng(2)
    data = dataset(rng.normal(size=(400, DIM)), rng.normal(size=400))
    one = validation(salt="a").membership(record_hashes(data, "a"))
    other = validation(salt="b").membership(record_hashes(data, "b"))
    assert not np.array_equal(one, other)
    # Independent splits: about fraction^2 of the records are in both.
    assert 0.02 < np.mean(one & other) < 0.12


@pytest.mark.parametrize("part, fraction, salt", [
    ("test", 0.25, "s"), ("", 0.25, "s"),
    ("validation", math.nan, "s"), ("validation", 0.01, "s"), ("validation", 0.51, "s"),
    ("train", -0.25, "s"), ("train", math.inf, "s"), ("train", True, "s"), ("train", "0.25", "s"),
    ("validation", 0.25, "x" * (MAX_SALT_CHARS + 1)), ("validation", 0.25, "tab\there"),
    ("validation", 0.25, "caf\u00e9"), ("validation", 0.25, 7),
])
def test_malformed_parts_are_refused(part, fraction, salt):
    with pytest.raises(ValueError, match="records: "):
        RecordPart(part, fraction, salt)


def test_the_extreme_accepted_fractions_and_salts():
    RecordPart("validation", 1 / 64, "")
    RecordPart("train", 0.5, "~" * MAX_SALT_CHARS)


def test_all_is_canonical_whatever_its_other_fields():
    assert RecordPart("all", 0.3, "salt") == RecordPart.ALL == RecordPart()
    assert RecordPart("all", math.nan, "\x00").to_dict() == RecordPart.ALL.to_dict()


def test_public_sizes_are_estimates_from_the_public_n():
    part = RecordPart("validation", 0.25, "s")
    assert part.public_size(1001) == 250
    assert RecordPart("train", 0.25, "s").public_size(1001) == 751
    assert RecordPart.ALL.public_size(1001) == 1001


def test_a_part_under_replace_one_is_charged_both_adjacencies():
    part = validation()
    assert charged_adjacencies(part, Adjacency.REPLACE_ONE) == (
        Adjacency.REPLACE_ONE, Adjacency.ADD_REMOVE_ONE)
    assert charged_adjacencies(part, Adjacency.ADD_REMOVE_ONE) == (Adjacency.ADD_REMOVE_ONE,)
    assert charged_adjacencies(RecordPart.ALL, Adjacency.REPLACE_ONE) == (Adjacency.REPLACE_ONE,)
    assert worst_case([(0.0, 3.0), (1.0, 2.0)]) == (1.0, 3.0)


def test_the_splitter_keeps_the_hashes_of_a_few_salts_only():
    rng = np.random.default_rng(4)
    data = dataset(rng.normal(size=(40, DIM)), rng.normal(size=40))
    splitter = RecordSplitter(data)
    first = splitter.records(validation(salt="s0"))
    for k in range(3 * CACHED_SALTS):
        splitter.records(validation(salt=f"s{k}"))
    assert len(splitter._hashes) == CACHED_SALTS
    again = splitter.records(validation(salt="s0"))  # recomputed: the same records
    np.testing.assert_array_equal(again.features, first.features)
    assert splitter.records(RecordPart.ALL) is data


class _Sizes:
    job_id, num_sites, dim = "j", 2, DIM

    @property
    def site_sizes(self) -> dict[str, int]:
        return {"a": 100, "b": 7}


def test_a_restricted_view_reports_public_estimates_and_does_not_nest():
    view = RecordPartView(_Sizes(), validation(0.25))
    assert view.site_sizes == {"a": 25, "b": 2}
    train = view.restricted_to(RecordPart("train", 0.25, "salt"))
    assert train.site_sizes == {"a": 75, "b": 5}
    assert train._base is view._base
    with pytest.raises(TypeError):
        RecordPartView(_Sizes(), "validation")


def test_hashes_are_the_same_whatever_the_hashing_block(monkeypatch):
    """record_hashes hashes in bounded blocks (no whole-dataset copies): the
    block size never changes a record's hash, which is SHA-256 of its own
    encoding alone (module docstring)."""
    import hashlib
    import struct

    from privadapt.common.data import record_parts

    rng = np.random.default_rng(4)
    data = Dataset(rng.normal(size=(37, 3)), rng.normal(size=37), ("a", "b", "c"))
    expected = []
    for x, y in zip(data.features, data.labels, strict=True):
        encoding = (record_parts._TAG + struct.pack(">H", 4) + b"salt" + struct.pack(">Q", 3)
                    + np.append(x, y).astype("<f8").tobytes())
        expected.append(int.from_bytes(hashlib.sha256(encoding).digest()[:8], "big"))
    for block_bytes in (1, 32 * 5, 1 << 20):
        monkeypatch.setattr(record_parts, "_HASH_BLOCK_BYTES", block_bytes)
        assert record_parts.record_hashes(data, "salt").tolist() == expected
