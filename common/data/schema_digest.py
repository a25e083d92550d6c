"""What a party's features mean, as a digest the federation can compare.

Why: a site whose schema flipped the label map and reordered a
categorical column (same dimension) was aggregated silently. Each site
registers a :class:`SchemaDigest` of its schema and the coordinator compares
them, and that of its public sample, before a job starts
(server/jobs/launch_checks.py).

The digest is a list of *fields* in a canonical order, each a SHA-256 of the
field's canonical JSON value, so the coordinator can name the first field two
parties differ in without the schemas themselves travelling:

* ``label`` (the label column), ``numeric`` and ``categorical`` (the feature
  columns of each type, in order): names, order and types of the columns;
* ``categorical.<column>``: that column's categories, in declared order (the
  order of its one-hot features);
* ``label_map``: the label coding (order-free);
* ``numeric_scale.<column>``: that column's public bounds and log1p flag, the
  constants the clipping of a query is reasoned about in;
* ``intercept``, ``row_norm_divisor``, ``feature_names`` and ``dimension``.

A party without a schema file (plain ``.npz`` arrays) has only its dimension
and placeholder feature names (``x0``, ``x1``, ...): its digest says so
(``from_schema = False``) and holds just ``dimension`` and ``feature_names``.
Two such digests are compared on those; a plain one and a schema-made one on
``dimension`` alone, since placeholder names say nothing about meaning.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from privadapt.common.data.schema import Schema
from privadapt.common.proto import federation_pb2 as pb

DIMENSION = "dimension"
FEATURE_NAMES = "feature_names"


def placeholder_feature_names(dim: int) -> tuple[str, ...]:
    """The names of features that came without a schema: ``x0`` .. ``x{d-1}``."""
    return tuple(f"x{j}" for j in range(dim))


def _hash(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _schema_fields(schema: Schema) -> list[tuple[str, Any]]:
    scale = schema.numeric_scale or {}
    fields: list[tuple[str, Any]] = [
        ("label", schema.label),
        ("numeric", list(schema.numeric)),
        ("categorical", list(schema.categorical)),
    ]
    fields += [(f"categorical.{column}", list(categories))
               for column, categories in schema.categorical.items()]
    label_map = None if schema.label_map is None else sorted(schema.label_map.items())
    fields.append(("label_map", label_map))
    fields += [(f"numeric_scale.{column}",
                {"bounds": list(scale[column]) if column in scale else None,
                 "log1p": column in schema.log1p_columns})
               for column in schema.numeric]
    fields += [("intercept", schema.intercept),
               ("row_norm_divisor", schema.row_norm_divisor),
               (FEATURE_NAMES, list(schema.feature_names()))]
    return fields


@dataclass(frozen=True)
class SchemaDigest:
    """Per-field digests of what a party's features mean, in canonical order."""

    fields: tuple[tuple[str, str], ...]
    from_schema: bool

    @classmethod
    def of(cls, schema: Schema | None, dim: int) -> SchemaDigest:
        """The digest of ``schema`` (features of dimension ``dim``), or of plain
        arrays of dimension ``dim`` when there is no schema."""
        if schema is None:
            values: list[tuple[str, Any]] = [(FEATURE_NAMES,
                                              list(placeholder_feature_names(dim)))]
        else:
            values = _schema_fields(schema)
        values.append((DIMENSION, int(dim)))
        return cls(tuple((name, _hash(value)) for name, value in values), schema is not None)

    @property
    def digest(self) -> str:
        """One hex digest of the whole: equal digests, equal meaning."""
        return _hash([self.from_schema, [list(f) for f in self.fields]])

    def differing_fields(self, other: SchemaDigest) -> list[str]:
        """The fields ``other`` differs in, in this digest's order (then the
        fields only ``other`` has); empty when the two agree."""
        mine, theirs = dict(self.fields), dict(other.fields)
        if not (self.from_schema and other.from_schema):
            # Placeholder names mean nothing next to a schema's names.
            both_plain = not self.from_schema and not other.from_schema
            compared = [FEATURE_NAMES, DIMENSION] if both_plain else [DIMENSION]
            return [name for name in compared if mine.get(name) != theirs.get(name)]
        names = [name for name, _ in self.fields]
        names += [name for name, _ in other.fields if name not in mine]
        return [name for name in names if mine.get(name) != theirs.get(name)]

    def to_proto(self) -> pb.SchemaDigest:
        return pb.SchemaDigest(digest=self.digest, from_schema_file=self.from_schema,
                               fields=[pb.SchemaField(name=n, digest=d) for n, d in self.fields])

    @classmethod
    def from_proto(cls, message: pb.SchemaDigest) -> SchemaDigest:
        """The digest a site sent; ``ValueError`` if its overall digest is not
        that of its fields (a corrupted or hand-made message)."""
        digest = cls(tuple((f.name, f.digest) for f in message.fields), message.from_schema_file)
        if digest.digest != message.digest:
            raise ValueError("schema digest does not match its fields")
        return digest


def describe_names(names: Sequence[str], limit: int = 3) -> str:
    """``'a'`` or ``'a' (also: 'b', 'c')`` for a message."""
    first, rest = names[0], list(names[1:limit + 1])
    also = f" (also: {', '.join(repr(n) for n in rest)}" + (
        ", ...)" if len(names) > limit + 1 else ")") if rest else ""
    return f"{first!r}{also}"
