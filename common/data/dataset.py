"""Loading and validating a site's private data: the only loader in privadapt.

A site's records end up as a :class:`Dataset` of float64 arrays that the
kernels read. A CSV or Parquet file (read by :mod:`privadapt.common.data.tables`)
is turned into one by a :class:`Schema` (defined in
:mod:`privadapt.common.data.schema`, re-exported here): which columns, which declared
categories, how the label is coded, all public constants.

Bad input stops here with a :class:`DataError` that names the file, the row (the
header is row 1 of a CSV file; a Parquet file's records count from 1), the
column and what to do (DESIGN.md section 7).

Nothing is imputed or dropped: NaN, infinite and missing values are
rejected. A numeric value outside its column's declared ``numeric_scale``
bounds is clipped to them, or refused, as the schema's ``out_of_range``
says; clipped values are counted per column and the count is logged (one
WARNING line) by the party that loads the file, in its own log, and kept
nowhere else: at a site it never leaves the site. A column without declared
bounds passes through; the kernels clip every record (DESIGN.md section 5).
"""

from __future__ import annotations

import logging
import math
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from privadapt.common.data.schema import REJECT, Schema, name_list
from privadapt.common.data.schema_digest import placeholder_feature_names
from privadapt.common.data.tables import (
    CSV_SUFFIXES,
    PARQUET_SUFFIXES,
    read_table,
    table_suffix,
)
from privadapt.common.errors import ConfigError, DataError
from privadapt.common.validation import frozen_value

__all__ = ["SUPPORTED_SUFFIXES", "Dataset", "Schema", "encode_table", "load_dataset"]

SUPPORTED_SUFFIXES = (*CSV_SUFFIXES, *PARQUET_SUFFIXES, ".npz")
_FIRST_ROW = 2  # data rows are numbered as in the file, the header being row 1

logger = logging.getLogger(__name__)


@frozen_value(eq=False)
class Dataset:
    """One site's records: ``features`` (n, d), ``labels`` (n,), float64,
    and the features' names (default: ``x0`` .. ``x{d-1}``).

    The arrays are private copies marked read-only, so a kernel cannot alter
    the data another query will see. From a file: :meth:`from_csv`,
    :meth:`from_parquet` (with a schema) or :func:`load_dataset`.
    """

    features: np.ndarray
    labels: np.ndarray
    feature_names: Sequence[str] | None = None

    def __post_init__(self) -> None:
        try:
            features = np.array(self.features, dtype=np.float64, order="C")
            labels = np.array(self.labels, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise DataError(f"features and labels must be numeric arrays: {exc}") from None
        if features.ndim != 2:
            raise DataError(f"features must be a 2-d array, got shape {features.shape}")
        names = (placeholder_feature_names(features.shape[1]) if self.feature_names is None
                 else tuple(str(n) for n in self.feature_names))
        if labels.ndim != 1 or labels.shape[0] != features.shape[0]:
            raise DataError(f"labels must be a 1-d array with one entry per record "
                            f"({features.shape[0]}), got shape {labels.shape}")
        if len(names) != features.shape[1]:
            raise DataError(f"{len(names)} feature names for {features.shape[1]} features")
        for what, array in (("features", features), ("labels", labels)):
            bad = np.argwhere(~np.isfinite(array if array.ndim == 2 else array[:, None]))
            if bad.size:
                raise DataError(f"{what} has {len(bad)} NaN or infinite values (first at "
                                f"record index {bad[0][0]}, column {bad[0][1]}); remove or "
                                f"impute them before loading")
            array.setflags(write=False)
            setattr(self, what, array)
        self.feature_names = names

    @classmethod
    def from_csv(cls, path: str | Path, schema: Schema | str | Path) -> Dataset:
        """The records of a ``.csv`` or ``.csv.gz`` file with a header row,
        encoded by ``schema`` (a :class:`Schema` or the path of its TOML)."""
        return _load_as(Path(path), schema, CSV_SUFFIXES, "from_csv")

    @classmethod
    def from_parquet(cls, path: str | Path, schema: Schema | str | Path) -> Dataset:
        """The records of a ``.parquet`` file, encoded by ``schema`` (a
        :class:`Schema` or the path of its TOML) exactly as a CSV file is."""
        return _load_as(Path(path), schema, PARQUET_SUFFIXES, "from_parquet")

    @property
    def num_records(self) -> int:
        return int(self.features.shape[0])

    @property
    def dim(self) -> int:
        return int(self.features.shape[1])


def encode_table(
    columns: Mapping[str, Sequence[str]],
    schema: Schema,
    source: str = "table",
    row_numbers: Sequence[int] | np.ndarray | None = None,
) -> Dataset:
    """Encode string columns (whitespace already stripped) into a Dataset.

    ``source`` and ``row_numbers`` (one per value, as in the file) only serve
    error and log messages. Extra columns are ignored. Values outside their
    declared bounds are clipped (and the count logged) or refused, as
    ``schema.out_of_range`` says (module docstring).
    """
    _require_columns(list(columns), schema, source)
    num_records = len(columns[schema.label])
    if num_records == 0:
        raise DataError(f"{source}: no data rows")
    if any(len(columns[name]) != num_records for name in schema.columns()):
        raise DataError(f"{source}: the columns have different lengths")
    rows = (np.arange(_FIRST_ROW, _FIRST_ROW + num_records) if row_numbers is None
            else np.asarray(row_numbers))
    features = np.zeros((num_records, len(schema.feature_names())))
    clipped: dict[str, tuple[int, int]] = {}
    for j, name in enumerate(schema.numeric):
        features[:, j], clipped[name] = _numeric_feature(columns[name], name, schema, source,
                                                         rows)
    _log_clipped(source, schema, clipped)
    offset = len(schema.numeric)
    everyone = np.arange(num_records)
    for name, categories in schema.categorical.items():
        codes = _codes(columns[name], categories, f"column {name!r}", source, rows)
        features[everyone, offset + codes] = 1.0
        offset += len(categories)
    if schema.intercept:
        features[:, offset] = 1.0
    if schema.row_norm_divisor is not None:
        features /= schema.row_norm_divisor
    if schema.label_map is None:
        labels = _parse_numbers(columns[schema.label], schema.label, source, rows)
    else:
        keys = tuple(schema.label_map)
        codes = _codes(columns[schema.label], keys, f"label column {schema.label!r}", source,
                       rows)
        labels = np.array([schema.label_map[k] for k in keys])[codes]
    return Dataset(features, labels, schema.feature_names())


def _require_columns(available: Sequence[str], schema: Schema, source: str) -> None:
    missing = [c for c in schema.columns() if c not in available]
    if missing:
        raise DataError(f"{source}: column {missing[0]!r} required by the schema is missing; "
                        f"the file has columns {name_list(available)}")


def _numeric_feature(values: Sequence[str], name: str, schema: Schema, source: str,
                     rows: np.ndarray) -> tuple[np.ndarray, tuple[int, int]]:
    """The column's feature, and how many values were clipped up and down."""
    raw = _parse_numbers(values, name, source, rows)
    low, high = (schema.numeric_scale or {}).get(name, (None, None))
    counts = (0, 0)
    if low is not None:
        raw, counts = _within_bounds(raw, values, name, (low, high), schema, source, rows)
    if name in schema.log1p_columns:
        below = np.flatnonzero(raw <= -1)
        if below.size:
            raise DataError(f"{source}: row {rows[below[0]]}, column {name!r}: value "
                            f"{values[below[0]]!r} must be > -1 (the schema log-scales it)")
        raw = np.log1p(raw)
        low, high = (None, None) if low is None else (math.log1p(low), math.log1p(high))
    return (raw if low is None else (raw - low) / (high - low)), counts


def _within_bounds(raw: np.ndarray, values: Sequence[str], name: str,
                   bounds: tuple[float, float], schema: Schema, source: str,
                   rows: np.ndarray) -> tuple[np.ndarray, tuple[int, int]]:
    """``raw`` clipped to ``bounds`` with the counts below and above, or a
    DataError naming the first value outside them when the schema rejects."""
    low, high = bounds
    below, above = raw < low, raw > high
    outside = np.flatnonzero(below | above)
    if not outside.size:
        return raw, (0, 0)
    if schema.out_of_range == REJECT:
        i = outside[0]
        raise DataError(f"{source}: row {rows[i]}, column {name!r}: {values[i]!r} is outside "
                        f"the schema's range [{low:g}, {high:g}] ({outside.size} values are); "
                        f"the schema says out_of_range = \"{REJECT}\": fix the data, widen "
                        f"the range, or let the schema clip them")
    return np.clip(raw, low, high), (int(below.sum()), int(above.sum()))


def _log_clipped(source: str, schema: Schema, clipped: Mapping[str, tuple[int, int]]) -> None:
    """One line in this party's own log: how many values were clipped, per column."""
    parts = []
    for name, (below, above) in clipped.items():
        if below or above:
            low, high = (schema.numeric_scale or {})[name]
            sides = [f"{count} {side} {bound:g}" for count, side, bound
                     in ((below, "below", low), (above, "above", high)) if count]
            parts.append(f"{name!r} {' and '.join(sides)}")
    if parts:
        total = sum(below + above for below, above in clipped.values())
        logger.warning("%s: clipped %d value(s) to the schema's declared ranges (%s); this "
                       "count is kept in this log only", source, total, ", ".join(parts))


def _parse_numbers(values: Sequence[str], name: str, source: str, rows: np.ndarray) -> np.ndarray:
    try:
        parsed = np.fromiter(map(float, values), dtype=np.float64, count=len(values))
    except ValueError:
        for i, value in enumerate(values):
            try:
                float(value)
            except ValueError:
                raise DataError(f"{source}: row {rows[i]}, column {name!r}: {value!r} is not a "
                                f"number; fix or remove this row") from None
        raise
    bad = np.flatnonzero(~np.isfinite(parsed))
    if bad.size:
        raise DataError(f"{source}: column {name!r} has {bad.size} NaN or infinite values "
                        f"(first at row {rows[bad[0]]}: {values[bad[0]]!r}); they are rejected, "
                        f"not clipped or imputed: remove or impute those rows")
    return parsed


def _codes(values: Sequence[str], allowed: tuple[str, ...], what: str, source: str,
           rows: np.ndarray) -> np.ndarray:
    """Index of each value in ``allowed``; DataError for any other value."""
    uniques, inverse = np.unique(np.asarray(values, dtype=str), return_inverse=True)
    position = {c: i for i, c in enumerate(allowed)}
    codes = np.array([position.get(u, -1) for u in uniques.tolist()])[inverse.ravel()]
    unknown = np.flatnonzero(codes < 0)
    if unknown.size:
        i = unknown[0]
        raise DataError(f"{source}: row {rows[i]}, {what}: value {values[i]!r} is not declared "
                        f"in the schema ({unknown.size} rows have undeclared values); allowed: "
                        f"{name_list(allowed)}; declare it in the schema or fix the data")
    return codes


def load_dataset(
    path: str | Path, schema: Schema | None = None, expected_dim: int | None = None
) -> Dataset:
    """Load a site's data from ``.csv``/``.csv.gz`` or ``.parquet`` (needs
    ``schema``) or ``.npz`` (arrays ``features`` and ``labels``, taken as
    already encoded; a schema then only names the features and fixes their
    number).

    Raises ``DataError`` naming the file, row and column for anything wrong,
    and when the dimension differs from ``expected_dim``.
    """
    path = Path(path)
    if table_suffix(path) is None and not path.name.lower().endswith(".npz"):
        raise DataError(f"{path}: unsupported file type; use one of "
                        f"{', '.join(SUPPORTED_SUFFIXES)} (a CSV file with a header row naming "
                        f"its columns: a file without one, such as UCI's adult.data, needs a "
                        f"header row added and its name ending in .csv)")
    if not path.is_file():
        raise DataError(f"data file not found: {path}")
    if table_suffix(path) is None:
        data = _load_npz(path, schema)
    elif schema is None:
        raise ConfigError(f"{path}: reading a CSV or Parquet file needs a schema (columns, "
                          f"categories, label coding); give the site a schema TOML (draft one "
                          f"from the public file: privadapt schema infer)")
    else:
        data = _load_table(path, schema)
    if expected_dim is not None and data.dim != expected_dim:
        raise DataError(f"{path}: records have {data.dim} features but {expected_dim} are "
                        f"expected; check the schema matches the job")
    return data


def _load_table(path: Path, schema: Schema) -> Dataset:
    table = read_table(path, set(schema.columns()))
    _require_columns(table.header, schema, str(path))
    return encode_table(table.columns, schema, str(path), table.row_numbers)


def _load_as(path: Path, schema: Schema | str | Path, suffixes: tuple[str, ...],
             method: str) -> Dataset:
    if not path.name.lower().endswith(suffixes):
        raise DataError(f"{path}: Dataset.{method} reads files ending in "
                        f"{', '.join(suffixes)}; load_dataset reads any supported file")
    if not isinstance(schema, Schema):
        schema = Schema.from_toml(schema)
    return _load_table(path, schema)


def _load_npz(path: Path, schema: Schema | None) -> Dataset:
    try:
        archive = np.load(path, allow_pickle=False)
        if not isinstance(archive, np.lib.npyio.NpzFile):
            raise ValueError("it holds a single array, not named arrays")
        with archive:
            arrays = {key: archive[key] for key in archive.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise DataError(f"{path}: cannot read the file as .npz: {exc}") from None
    if set(arrays) != {"features", "labels"}:
        raise DataError(f"{path}: expected exactly the arrays 'features' and 'labels', "
                        f"found {name_list(sorted(arrays))}")
    features, labels = arrays["features"], arrays["labels"]
    if not all(a.dtype.kind in "biuf" for a in (features, labels)):
        raise DataError(f"{path}: features and labels must be real numbers, got dtypes "
                        f"{features.dtype} and {labels.dtype}")
    if features.ndim != 2 or labels.ndim != 1 or labels.shape[0] != features.shape[0]:
        raise DataError(f"{path}: expected features of shape (n, d) and labels of shape (n,), "
                        f"got {features.shape} and {labels.shape}")
    if features.shape[0] == 0:
        raise DataError(f"{path}: the file holds no records")
    names = placeholder_feature_names(features.shape[1])
    if schema is not None:
        names = schema.feature_names()
        if len(names) != features.shape[1]:
            raise DataError(f"{path}: records have {features.shape[1]} features but the schema "
                            f"describes {len(names)}")
    try:
        return Dataset(features, labels, names)
    except DataError as exc:
        raise DataError(f"{path}: {exc}") from None
