"""Reading a tabular data file (CSV or Parquet) into columns of strings.

Both formats end up in one shape, a :class:`Table`: the header's column names
and, for the columns asked for, one string per record, exactly what
:func:`privadapt.common.data.dataset.encode_table` encodes with a schema and what
schema inference reads. So a CSV file and a Parquet file holding the same
values load into the same arrays and are refused with the same messages.

* CSV (``.csv``, ``.csv.gz``): a header row naming the columns, then one
  record per row; blank lines are skipped, a byte-order mark is ignored,
  values are stripped of surrounding whitespace. Rows are numbered as in the
  file (the header is row 1).
* Parquet (``.parquet``): every column is cast to text by Arrow (integers as
  ``1``, floats in their shortest exact form, ``1.0`` as ``1``, booleans as
  ``true``/``false``), so a number reads back as the same float64 and a
  category as the text a CSV file would hold. A null is refused (as a CSV
  file's empty value is wherever a number or a declared category is needed).
  Records are numbered from 1 (there is no header row).
"""

from __future__ import annotations

import csv
import gzip
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from privadapt.common.errors import DataError

CSV_SUFFIXES = (".csv", ".csv.gz")
PARQUET_SUFFIXES = (".parquet",)
_FIRST_CSV_ROW = 2  # data rows are numbered as in the file, the header being row 1


def name_list(names: Sequence[str], limit: int = 25) -> str:
    """Names for a message; long lists are cut so the message stays readable."""
    if not names:
        return "(none)"
    shown = ", ".join(repr(n) for n in names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")


@dataclass(frozen=True)
class Table:
    """A file's ``header`` (every column name, in file order) and, for the
    columns read, their values as stripped strings; ``row_numbers`` says
    where each record is in the file (for messages)."""

    source: str
    header: tuple[str, ...]
    columns: dict[str, list[str]]
    row_numbers: np.ndarray

    @property
    def num_records(self) -> int:
        return len(self.row_numbers)


def table_suffix(path: Path) -> str | None:
    """The tabular suffix ``path`` ends with (case-insensitive), else None."""
    name = path.name.lower()
    return next((s for s in (*CSV_SUFFIXES, *PARQUET_SUFFIXES) if name.endswith(s)), None)


def read_table(path: str | Path, wanted: Collection[str] | None = None) -> Table:
    """The columns ``wanted`` (all of them if None) of a CSV or Parquet file.

    A wanted column the file lacks is left out (the caller says what it
    needed); a wanted column that appears twice in the header, a row with
    the wrong number of fields, a null and an unreadable file are refused
    with a ``DataError`` naming the file."""
    path = Path(path)
    suffix = table_suffix(path)
    if suffix is None:
        raise DataError(f"{path}: not a CSV or Parquet file (expected a name ending in "
                        f"{', '.join((*CSV_SUFFIXES, *PARQUET_SUFFIXES))})")
    if not path.is_file():
        raise DataError(f"data file not found: {path}")
    if suffix in PARQUET_SUFFIXES:
        return _read_parquet(path, wanted)
    return _read_csv(path, wanted)


def _read_csv(path: Path, wanted: Collection[str] | None) -> Table:
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        # utf-8-sig: spreadsheets often write a byte-order mark before the header.
        with opener(path, "rt", newline="", encoding="utf-8-sig") as handle:
            reader = csv.reader(handle)
            header = next(reader, None)
            records = list(reader)
    except (OSError, EOFError, UnicodeDecodeError, csv.Error) as exc:
        raise DataError(f"{path}: cannot read the file as CSV: {exc}") from None
    if header is None:
        raise DataError(f"{path}: the file is empty; expected a header row and data rows")
    names = tuple(name.strip() for name in header)
    chosen = _chosen_columns(path, names, wanted)
    kept = [(i + _FIRST_CSV_ROW, r) for i, r in enumerate(records) if r]  # skip blank lines
    for row_number, record in kept:
        if len(record) != len(names):
            raise DataError(f"{path}: row {row_number} has {len(record)} fields but the header "
                            f"has {len(names)}")
    position = {name: j for j, name in enumerate(names)}
    columns = {name: [r[position[name]].strip() for _, r in kept] for name in chosen}
    return Table(str(path), names, columns, np.array([n for n, _ in kept], dtype=np.int64))


def _read_parquet(path: Path, wanted: Collection[str] | None) -> Table:
    # Imported here, not at the top: Arrow takes about half a second to load,
    # which a site (or a test) reading CSV should not pay.
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    try:
        names = tuple(pq.read_schema(path).names)
        chosen = _chosen_columns(path, tuple(n.strip() for n in names), wanted)
        original = {n.strip(): n for n in names}
        table = pq.read_table(path, columns=[original[n] for n in chosen])
        columns = {}
        for name in chosen:
            column = table.column(original[name])
            if column.null_count:
                first = int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
                raise DataError(f"{path}: column {name!r} has {column.null_count} missing "
                                f"values (first at row {first + 1}); they are rejected, not "
                                f"imputed: remove or impute those rows")
            text = column if pa.types.is_string(column.type) else pc.cast(column, pa.string())
            columns[name] = [value.strip() for value in text.to_pylist()]
    except (OSError, pa.ArrowException) as exc:
        raise DataError(f"{path}: cannot read the file as Parquet: {exc}") from None
    rows = np.arange(1, table.num_rows + 1, dtype=np.int64)
    return Table(str(path), tuple(n.strip() for n in names), columns, rows)


def _chosen_columns(path: Path, header: tuple[str, ...],
                    wanted: Collection[str] | None) -> tuple[str, ...]:
    """The wanted columns the header has, in header order; a repeated one is refused."""
    chosen = [n for n in header if wanted is None or n in wanted]
    repeated = sorted({n for n in chosen if chosen.count(n) > 1})
    if repeated:
        raise DataError(f"{path}: column(s) {name_list(repeated)} appear more than once")
    return tuple(chosen)
