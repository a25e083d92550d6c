"""The schema of a site's data file: which columns become which features.

A :class:`Schema` names the label column, the numeric columns (with optional
public scaling bounds and log1p), the categorical columns with their declared
categories (one-hot encoded in declared order), the label coding, an optional
intercept, an optional public divisor for every feature vector, and what
happens to a value outside a column's bounds (``out_of_range``). Operators
write it as TOML next to their data, or draft it from the coordinator's public
file with :meth:`Schema.infer` (``privadapt schema infer``);
:func:`privadapt.common.data.dataset.load_dataset` applies it. Every constant in
a schema must be public: the encoding of one record never depends on the other
records.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import field, fields
from pathlib import Path
from typing import Any

from privadapt.common.config import read_toml, toml_text
from privadapt.common.data.schema_inference import infer_schema_document
from privadapt.common.data.tables import name_list
from privadapt.common.errors import ConfigError
from privadapt.common.validation import frozen_value

__all__ = ["INTERCEPT_NAME", "OUT_OF_RANGE_POLICIES", "Schema", "name_list"]

INTERCEPT_NAME = "intercept"
#: What loading does with a numeric value outside its ``numeric_scale`` bounds:
#: "clip" it to the nearer bound (the default; the loading party logs how many
#: per column, and the counts go nowhere else) or "reject" the file, naming the row.
CLIP, REJECT = "clip", "reject"
OUT_OF_RANGE_POLICIES = (CLIP, REJECT)


@frozen_value
class Schema:
    """How the columns of a CSV file become features and a label.

    Features are, in order: the ``numeric`` columns; one indicator per declared
    category of each ``categorical`` column (in declared order); a constant 1
    if ``intercept``. ``numeric_scale`` maps a column's value v to
    (v - low) / (high - low); a column in ``log1p_columns`` is mapped through
    log1p first (its bounds stay in raw units). Every feature vector is then
    divided by ``row_norm_divisor``. ``label_map`` codes a categorical label
    (None: the label column is numeric). A value outside its column's
    ``numeric_scale`` bounds is clipped to them, or the file refused, as
    ``out_of_range`` says (:data:`OUT_OF_RANGE_POLICIES`), so every scaled
    feature lies in [0, 1]. All of these must be public constants.
    """

    label: str
    numeric: tuple[str, ...] = ()
    categorical: dict[str, tuple[str, ...]] = field(default_factory=dict)
    label_map: dict[str, float] | None = None
    numeric_scale: dict[str, tuple[float, float]] | None = None
    intercept: bool = False
    row_norm_divisor: float | None = None
    log1p_columns: tuple[str, ...] = ()
    out_of_range: str = CLIP

    def __post_init__(self) -> None:
        # Type checks here, not only in from_dict, so a schema built in code is
        # held to the same rules; containers are normalised so that it compares
        # equal to the same schema read from TOML.
        self.label = _typed(self.label, str, "label")
        self.numeric = _strings(self.numeric, "numeric")
        self.log1p_columns = _strings(self.log1p_columns, "log1p_columns")
        self.categorical = _table(self.categorical, "categorical", _strings)
        self.intercept = _typed(self.intercept, bool, "intercept")
        if self.label_map is not None:
            self.label_map = _table(self.label_map, "label_map", _number)
        if self.numeric_scale is not None:
            self.numeric_scale = _table(self.numeric_scale, "numeric_scale", _pair)
        if self.row_norm_divisor is not None:
            self.row_norm_divisor = _number(self.row_norm_divisor, "row_norm_divisor")
        self._validate()

    def _validate(self) -> None:
        columns = [*self.numeric, *self.categorical]
        if not all([self.label, *columns]):
            raise ConfigError("column names must not be empty")
        duplicated = sorted({c for c in columns if columns.count(c) > 1})
        if duplicated:
            raise ConfigError(f"columns used more than once: {name_list(duplicated)}")
        if self.label in columns:
            raise ConfigError(f"the label column {self.label!r} is also listed as a feature")
        for name, categories in self.categorical.items():
            _check_categories(f"categorical.{name}", categories)
        if self.label_map is not None:
            _check_categories("label_map", tuple(self.label_map))
            if not all(math.isfinite(v) for v in self.label_map.values()):
                raise ConfigError("key 'label_map': values must be finite numbers")
        for name, (low, high) in (self.numeric_scale or {}).items():
            if name not in self.numeric:
                raise ConfigError(f"key 'numeric_scale.{name}': not a numeric column")
            if not (math.isfinite(low) and math.isfinite(high) and low < high):
                raise ConfigError(f"key 'numeric_scale.{name}': need finite low < high, "
                                  f"got ({low}, {high})")
        for name in self.log1p_columns:
            low = (self.numeric_scale or {}).get(name, (0.0, 0.0))[0]
            if name not in self.numeric or low <= -1:
                raise ConfigError(f"key 'log1p_columns': {name!r} must be a numeric column "
                                  f"whose scale bounds are > -1")
        divisor = self.row_norm_divisor
        if divisor is not None and not (math.isfinite(divisor) and divisor > 0):
            raise ConfigError(f"key 'row_norm_divisor': expected a finite number > 0, "
                              f"got {divisor!r}")
        if not columns and not self.intercept:
            raise ConfigError("the schema declares no feature columns")
        if self.out_of_range not in OUT_OF_RANGE_POLICIES:
            raise ConfigError(f"key 'out_of_range': expected one of "
                              f"{', '.join(map(repr, OUT_OF_RANGE_POLICIES))}, "
                              f"got {self.out_of_range!r}")

    def feature_names(self) -> tuple[str, ...]:
        """Names of the encoded features, in column order (``col=category``)."""
        names = list(self.numeric)
        for column, categories in self.categorical.items():
            names += [f"{column}={c}" for c in categories]
        return tuple(names + [INTERCEPT_NAME] * self.intercept)

    def columns(self) -> tuple[str, ...]:
        """The file columns this schema reads, label last."""
        return (*self.numeric, *self.categorical, self.label)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "schema") -> Schema:
        """A schema from plain data (a parsed TOML document); ``ConfigError``
        names ``source`` and the offending key."""
        try:
            if not isinstance(d, Mapping):
                raise ConfigError(f"expected a table of keys, got {type(d).__name__}")
            allowed = [f.name for f in fields(cls)]
            unknown = sorted(set(d) - set(allowed))
            if unknown:
                raise ConfigError(f"unknown key(s) {name_list(unknown)}; allowed keys: "
                                  f"{', '.join(allowed)}")
            if "label" not in d:
                raise ConfigError("missing required key 'label' (the label column)")
            return cls(**d)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None

    @classmethod
    def infer(cls, public_file: str | Path, label: str, *, drop: Sequence[str] = (),
              categorical: Sequence[str] = (), widen: float = 0.0,
              max_categories: int = 50) -> Schema:
        """A draft schema from the coordinator's PUBLIC file (CSV or Parquet),
        by the rules of :mod:`privadapt.common.data.schema_inference`: numeric
        columns scaled by their public [min, max] (each side moved out by
        ``widen`` times the range), other columns (and those named in
        ``categorical``) one-hot over the categories seen, the ``label``
        coded by :func:`~privadapt.common.data.schema_inference.label_coding`,
        columns in ``drop`` left out. Never infer from a site's private file:
        every constant of a schema is published to every party."""
        document = infer_schema_document(public_file, label, drop=drop,
                                         categorical=categorical, widen=widen,
                                         max_categories=max_categories)
        return cls.from_dict(document, source=f"schema inferred from {public_file}")

    @classmethod
    def from_toml(cls, path: str | Path) -> Schema:
        """A schema from a TOML file (keys as the fields of this class)."""
        document = read_toml(path, "schema", "pass the path of the data file's schema TOML")
        return cls.from_dict(document, source=str(path))

    def to_toml(self) -> str:
        """This schema as TOML that :meth:`from_toml` reads back equal."""
        document: dict[str, Any] = {"label": self.label, "numeric": self.numeric,
                                    "intercept": self.intercept,
                                    "out_of_range": self.out_of_range}
        if self.log1p_columns:
            document["log1p_columns"] = self.log1p_columns
        if self.row_norm_divisor is not None:
            document["row_norm_divisor"] = self.row_norm_divisor
        for name in ("categorical", "label_map", "numeric_scale"):
            table = getattr(self, name)
            if table is not None:
                document[name] = table
        return toml_text(document)


def _check_categories(key: str, categories: tuple[str, ...]) -> None:
    if not categories:
        raise ConfigError(f"key '{key}': expected a non-empty list of names")
    if len(set(categories)) != len(categories):
        raise ConfigError(f"key '{key}': categories are listed more than once")
    if any(c != c.strip() for c in categories):
        # Values are stripped when read, so such a category could never match.
        raise ConfigError(f"key '{key}': categories must not start or end with whitespace")


def _typed(value: Any, kind: type, key: str) -> Any:
    if not isinstance(value, kind):
        raise ConfigError(f"key '{key}': expected {kind.__name__}, got {value!r}")
    return value


def _number(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigError(f"key '{key}': expected a number, got {value!r}")
    return float(value)


def _strings(value: Any, key: str) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"key '{key}': expected a list of strings, got {value!r}")
    return tuple(value)


def _pair(value: Any, key: str) -> tuple[float, float]:
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise ConfigError(f"key '{key}': expected [low, high], got {value!r}")
    return (_number(value[0], key), _number(value[1], key))


def _table(value: Any, key: str, parse: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise ConfigError(f"key '{key}': expected a table keyed by names, got {value!r}")
    return {k: parse(v, f"{key}.{k}") for k, v in value.items()}

