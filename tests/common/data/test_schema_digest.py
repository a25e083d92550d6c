"""SchemaDigest: what a party's features mean, compared field by field."""

import pytest

from privadapt.common.data.schema import Schema
from privadapt.common.data.schema_digest import SchemaDigest, describe_names
from privadapt.common.proto import federation_pb2 as pb

SCHEMA = Schema(label="income", numeric=("age",), categorical={"race": ("a", "b", "c")},
                label_map={"<=50K": -1.0, ">50K": 1.0}, numeric_scale={"age": (17.0, 90.0)},
                intercept=True)
DIM = 5  # age, race=a, race=b, race=c, intercept


def _with(**changes) -> SchemaDigest:
    fields = {"label": SCHEMA.label, "numeric": list(SCHEMA.numeric),
              "categorical": {k: list(v) for k, v in SCHEMA.categorical.items()},
              "label_map": SCHEMA.label_map, "numeric_scale": SCHEMA.numeric_scale,
              "intercept": SCHEMA.intercept}
    fields.update(changes)
    return SchemaDigest.of(Schema.from_dict(fields), DIM)


def test_the_same_schema_has_the_same_digest():
    assert SchemaDigest.of(SCHEMA, DIM) == _with()
    assert SchemaDigest.of(SCHEMA, DIM).digest == _with().digest


def test_flipped_label_map_and_reordered_categories_name_the_categories_first():
    flipped = _with(label_map={"<=50K": 1.0, ">50K": -1.0},
                    categorical={"race": ["b", "a", "c"]})
    differing = SchemaDigest.of(SCHEMA, DIM).differing_fields(flipped)
    assert differing == ["categorical.race", "label_map", "feature_names"]


def test_label_map_order_in_the_file_does_not_matter():
    assert _with(label_map={">50K": 1.0, "<=50K": -1.0}) == SchemaDigest.of(SCHEMA, DIM)


@pytest.mark.parametrize(("changes", "first"), [
    ({"numeric_scale": {"age": [0.0, 100.0]}}, "numeric_scale.age"),
    ({"label": "salary"}, "label"),
    ({"intercept": False}, "intercept"),
])
def test_each_meaningful_change_is_named(changes, first):
    assert SchemaDigest.of(SCHEMA, DIM).differing_fields(_with(**changes))[0] == first


def test_plain_arrays_say_so_and_are_compared_with_a_schema_on_dimension_only():
    plain = SchemaDigest.of(None, DIM)
    assert not plain.from_schema
    assert [name for name, _ in plain.fields] == ["feature_names", "dimension"]
    assert plain.differing_fields(SchemaDigest.of(SCHEMA, DIM)) == []
    assert plain.differing_fields(SchemaDigest.of(SCHEMA, DIM + 1)) == ["dimension"]
    assert plain.differing_fields(SchemaDigest.of(None, DIM + 1)) == ["feature_names",
                                                                     "dimension"]


def test_proto_round_trip_and_a_tampered_field_is_refused():
    digest = SchemaDigest.of(SCHEMA, DIM)
    message = digest.to_proto()
    assert SchemaDigest.from_proto(message) == digest
    message.fields[0].digest = "0" * 64
    with pytest.raises(ValueError, match="does not match its fields"):
        SchemaDigest.from_proto(message)
    assert isinstance(message, pb.SchemaDigest)


def test_describe_names_lists_the_first_and_a_few_more():
    assert describe_names(["a"]) == "'a'"
    assert describe_names(["a", "b", "c", "d", "e"]) == "'a' (also: 'b', 'c', 'd', ...)"
