"""Drafting a schema from the coordinator's public file (``privadapt schema infer``).

Why only the public file: every constant of a schema (a column's range, its
categories, the label coding) is part of the encoding all parties apply, so it
is sent to the coordinator (the schema digest), written into every site's
configuration and the result's model file. Drafted from a site's private file,
its minimum, maximum and the categories present would be released exactly,
with no noise and no ledger charge. Drafted from the public file, a site's own
values only ever meet the schema at that site: a value outside a range is
clipped to it (``out_of_range = "clip"``) and counted in the site's own log.

The rules, applied to every column of the file but those dropped:

* the **label** column: if it holds more than two distinct values and every
  one is a number, the label is a number (regression: no ``label_map``;
  the jobs' ``label_bound`` clips it at the sites). Otherwise it is a class:
  the distinct values sorted (numerically when all are numbers) are coded
  -1 and +1 when there are two (the logistic loss's labels: ``no`` -1,
  ``yes`` +1; ``0`` -1, ``1`` +1), and 0, 1, ..., C-1 when there are more (the
  softmax loss's class indices). A label with a single value is refused.
* a column whose every value is a number is **numeric**, scaled to [0, 1] by
  its public range: ``numeric_scale = [min - w (max - min), max + w (max - min)]``
  with ``w = widen`` (default 0: the public file's own [min, max]); a column
  constant in the public file gets [v - 1, v + 1]. Numbers are taken as
  numeric even when there are few of them, because a numeric column clips a
  value the public file lacks while a categorical one refuses it; name a
  column in ``categorical`` for codes (a region number, a ZIP code).
* any other column is **categorical**: one feature per category seen in the
  public file, sorted. A site value not seen there is refused at that site
  (add it to the list by hand: the list is public). More than
  ``max_categories`` categories (default 50) is refused: an identifier or
  free text, to ``drop``.
* an ``intercept``, and ``row_norm_divisor`` = sqrt(numeric + categorical
  columns + 1), so that every record has norm at most 1 (each scaled
  numeric value in [0, 1], one 1 per categorical column, the intercept),
  as the Adult demo's schema does; ``out_of_range = "clip"``. No column is
  log-scaled: add ``log1p_columns`` by hand for a heavy-tailed one.

Empty, NaN and infinite values are refused, as the loader refuses them at
the sites.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from privadapt.common.data.tables import Table, name_list, read_table
from privadapt.common.errors import ConfigError, DataError

__all__ = ["infer_schema_document", "label_coding", "numeric_range"]


def infer_schema_document(public_file: str | Path, label: str, *, drop: Sequence[str] = (),
                          categorical: Sequence[str] = (), widen: float = 0.0,
                          max_categories: int = 50) -> dict[str, Any]:
    """The schema (as plain data for ``Schema.from_dict``) the module's rules
    draw from the public file's columns."""
    if isinstance(widen, bool) or not isinstance(widen, int | float) or not (
            math.isfinite(widen) and widen >= 0):
        raise ConfigError(f"widen must be a finite number >= 0, got {widen!r}")
    if isinstance(max_categories, bool) or not isinstance(max_categories, int) \
            or max_categories < 1:
        raise ConfigError(f"max_categories must be an integer >= 1, got {max_categories!r}")
    table = read_table(public_file)
    _check_names(table, label, drop, categorical)
    features = [c for c in table.header if c != label and c not in drop]
    for column in (*features, label):
        _check_complete(table, column)
    numbers = {c: _numbers(table, c) for c in (*features, label)}
    numeric = tuple(c for c in features if numbers[c] is not None and c not in categorical)
    categories = {c: _categories(table, c, numbers[c], max_categories)
                  for c in features if c not in numeric}
    if not numeric and not categories:
        raise DataError(f"{table.source}: no feature column is left besides the label "
                        f"{label!r}")
    document: dict[str, Any] = {
        "label": label,
        "numeric": list(numeric),
        "categorical": categories,
        "numeric_scale": {c: list(numeric_range(numbers[c], widen)) for c in numeric},
        "intercept": True,
        "row_norm_divisor": math.sqrt(len(numeric) + len(categories) + 1),
        "out_of_range": "clip",
    }
    coding = label_coding(table.columns[label], numbers[label])
    if coding is not None:
        document["label_map"] = coding
    if not numeric:
        del document["numeric_scale"]
    return document


def numeric_range(values: Sequence[float], widen: float = 0.0) -> tuple[float, float]:
    """[min - w (max - min), max + w (max - min)] with ``w = widen``; a
    constant column's value v gives [v - 1, v + 1]."""
    low, high = min(values), max(values)
    if low == high:
        return (low - 1.0, high + 1.0)
    margin = widen * (high - low)
    return (low - margin, high + margin)


def label_coding(values: Sequence[str], numbers: Sequence[float] | None
                 ) -> dict[str, float] | None:
    """The label map of the module's rule: None for a numeric label with more
    than two values; else the sorted classes coded -1, +1 (two) or 0..C-1."""
    distinct = set(values)
    if numbers is not None and len(set(numbers)) > 2:
        return None
    if len(distinct) < 2:
        raise DataError(f"the label has a single value ({name_list(sorted(distinct))}) in the "
                        f"public file: nothing to learn; write the label_map by hand")
    if numbers is not None:
        value = dict(zip(values, numbers, strict=True))
        classes = sorted(distinct, key=lambda v: (value[v], v))
    else:
        classes = sorted(distinct)
    codes = [-1.0, 1.0] if len(classes) == 2 else [float(i) for i in range(len(classes))]
    return dict(zip(classes, codes, strict=True))


def _check_names(table: Table, label: str, drop: Sequence[str],
                 categorical: Sequence[str]) -> None:
    available = table.header
    for what, names in (("--label", [label]), ("--drop", drop), ("--categorical", categorical)):
        unknown = [n for n in names if n not in available]
        if unknown:
            raise ConfigError(f"{table.source}: {what} names column(s) {name_list(unknown)} "
                              f"the file does not have; its columns: {name_list(available)}")
    if label in drop or label in categorical:
        raise ConfigError(f"the label column {label!r} cannot also be dropped or a feature")
    if table.num_records == 0:
        raise DataError(f"{table.source}: no data rows")


def _check_complete(table: Table, column: str) -> None:
    values = table.columns[column]
    if "" in values:
        row = table.row_numbers[values.index("")]
        raise DataError(f"{table.source}: row {row}, column {column!r}: empty value "
                        f"({values.count('')} in the column); the sites' loader refuses missing "
                        f"values too: remove or impute them")


def _numbers(table: Table, column: str) -> list[float] | None:
    """The column's values as finite numbers, or None if one is not a number;
    a NaN or infinite value is refused."""
    parsed = []
    for row, value in zip(table.row_numbers, table.columns[column], strict=True):
        try:
            number = float(value)
        except ValueError:
            return None
        if not math.isfinite(number):
            raise DataError(f"{table.source}: row {row}, column {column!r}: {value!r} is not a "
                            f"finite number; remove or impute it")
        parsed.append(number)
    return parsed


def _categories(table: Table, column: str, numbers: list[float] | None,
                max_categories: int) -> list[str]:
    values = table.columns[column]
    distinct = set(values)
    if len(distinct) > max_categories:
        raise DataError(f"{table.source}: column {column!r} has {len(distinct)} distinct "
                        f"values, more than {max_categories} categories: an identifier or free "
                        f"text? Leave it out (--drop {column}) or allow more categories "
                        f"(--max-categories N)")
    if numbers is None:
        return sorted(distinct)
    value = dict(zip(values, numbers, strict=True))
    return sorted(distinct, key=lambda v: (value[v], v))
