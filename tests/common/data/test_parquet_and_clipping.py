"""Parquet site data is read with the same schema checks as CSV; a value
outside its declared range is clipped as the schema says and counted in the
loading party's own log; a Dataset needs no feature names."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from privadapt.common.data.dataset import Dataset, load_dataset
from privadapt.common.data.schema import Schema
from privadapt.common.errors import ConfigError, DataError

SCHEMA = Schema(label="y", numeric=("x", "gain"), categorical={"color": ("red", "blue")},
                label_map={"no": -1.0, "yes": 1.0},
                numeric_scale={"x": (-4.0, 4.0), "gain": (0.0, 999.0)},
                log1p_columns=("gain",), intercept=True)
COLUMNS = {"x": [0.5, -4.0, 2.25], "gain": [0, 999, 10], "color": ["red", "blue", "red"],
           "y": ["yes", "no", "no"]}
LOADER = "privadapt.common.data.dataset"


def write_csv(tmp_path: Path, columns: dict[str, list], name: str = "site.csv") -> Path:
    path = tmp_path / name
    rows = zip(*columns.values(), strict=True)
    path.write_text(",".join(columns) + "\n" + "".join(",".join(map(str, r)) + "\n"
                                                      for r in rows))
    return path


def write_parquet(tmp_path: Path, columns: dict[str, list], name: str = "site.parquet") -> Path:
    path = tmp_path / name
    pq.write_table(pa.table(columns), path)
    return path


def test_a_parquet_file_loads_into_the_arrays_of_the_same_csv(tmp_path):
    from_csv = load_dataset(write_csv(tmp_path, COLUMNS), SCHEMA)
    from_parquet = load_dataset(write_parquet(tmp_path, COLUMNS), SCHEMA)
    np.testing.assert_array_equal(from_parquet.features, from_csv.features)
    np.testing.assert_array_equal(from_parquet.labels, from_csv.labels)
    assert from_parquet.feature_names == from_csv.feature_names


@pytest.mark.parametrize("change, message", [
    ({"color": ["red", "green", "red"]},
     "row {row}, column 'color': value 'green' is not declared in the schema"),
    ({"x": ["0.5", "many", "1"]}, "row {row}, column 'x': 'many' is not a number"),
])
def test_parquet_and_csv_refuse_the_same_bad_value_with_the_same_words(tmp_path, change,
                                                                       message):
    columns = {**COLUMNS, **change}
    # The second record: row 3 of the CSV file (the header is row 1), record 2 of the Parquet.
    for path, row in ((write_csv(tmp_path, columns), 3), (write_parquet(tmp_path, columns), 2)):
        with pytest.raises(DataError, match=re.escape(f"{path}: " + message.format(row=row))):
            load_dataset(path, SCHEMA)


def test_a_parquet_file_without_a_schema_column_names_the_column(tmp_path):
    path = write_parquet(tmp_path, {k: v for k, v in COLUMNS.items() if k != "gain"})
    with pytest.raises(DataError, match=re.escape("column 'gain' required by the schema is "
                                                  "missing")):
        load_dataset(path, SCHEMA)


def test_a_null_in_parquet_is_refused_naming_the_row(tmp_path):
    path = write_parquet(tmp_path, {**COLUMNS, "x": [0.5, None, 1.0]})
    with pytest.raises(DataError, match=re.escape("column 'x' has 1 missing values (first at "
                                                  "row 2)")):
        load_dataset(path, SCHEMA)


def test_a_value_far_outside_the_range_is_clipped_and_counted_in_the_log(tmp_path, caplog):
    path = write_csv(tmp_path, {**COLUMNS, "x": [1e6, -4.0, -7.0]})
    with caplog.at_level(logging.WARNING, logger=LOADER):
        data = load_dataset(path, SCHEMA)
    np.testing.assert_array_equal(data.features[:, 0], [1.0, 0.0, 0.0])  # (4 - -4)/8, ...
    (record,) = caplog.records
    assert record.getMessage() == (f"{path}: clipped 2 value(s) to the schema's declared "
                                   f"ranges ('x' 1 below -4 and 1 above 4); this count is "
                                   f"kept in this log only")


def test_values_inside_the_range_are_loaded_unchanged_and_log_nothing(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger=LOADER):
        data = load_dataset(write_csv(tmp_path, COLUMNS), SCHEMA)
    np.testing.assert_allclose(data.features[:, 0], [4.5 / 8, 0.0, 6.25 / 8])
    assert caplog.records == []


def test_a_bounded_log_scaled_column_is_clipped_before_its_logarithm(tmp_path):
    data = load_dataset(write_csv(tmp_path, {**COLUMNS, "gain": [-5, 10**9, 0]}), SCHEMA)
    np.testing.assert_array_equal(data.features[:, 1], [0.0, 1.0, 0.0])


def test_a_schema_that_rejects_names_the_row_the_column_and_the_range(tmp_path):
    rejecting = Schema(**{**SCHEMA.__dict__, "out_of_range": "reject"})
    path = write_csv(tmp_path, {**COLUMNS, "x": [0.0, 1e6, 9.0]})
    with pytest.raises(DataError, match=re.escape(
            f"{path}: row 3, column 'x': '1000000.0' is outside the schema's range [-4, 4] "
            f"(2 values are)")):
        load_dataset(path, rejecting)


def test_an_unknown_out_of_range_policy_is_refused():
    with pytest.raises(ConfigError, match=re.escape("key 'out_of_range': expected one of "
                                                    "'clip', 'reject', got 'wrap'")):
        Schema.from_dict({"label": "y", "numeric": ["x"], "out_of_range": "wrap"})


def test_dataset_from_csv_and_from_parquet_take_a_schema_or_its_toml(tmp_path):
    (tmp_path / "schema.toml").write_text(SCHEMA.to_toml())
    from_csv = Dataset.from_csv(write_csv(tmp_path, COLUMNS), tmp_path / "schema.toml")
    from_parquet = Dataset.from_parquet(write_parquet(tmp_path, COLUMNS), SCHEMA)
    np.testing.assert_array_equal(from_csv.features, from_parquet.features)


def test_dataset_from_csv_refuses_another_format_naming_the_loader_that_reads_it(tmp_path):
    with pytest.raises(DataError, match=re.escape("Dataset.from_csv reads files ending in "
                                                  ".csv, .csv.gz")):
        Dataset.from_csv(write_parquet(tmp_path, COLUMNS), SCHEMA)


def test_a_dataset_of_bare_arrays_names_its_features_x0_x1(tmp_path):
    data = Dataset(np.zeros((3, 2)), np.ones(3))
    assert data.feature_names == ("x0", "x1")


def test_a_headerless_file_such_as_adult_data_is_refused_saying_what_to_add(tmp_path):
    path = tmp_path / "adult.data.gz"
    path.write_bytes(b"")
    with pytest.raises(DataError, match=re.escape("needs a header row added and its name "
                                                  "ending in .csv")):
        load_dataset(path, SCHEMA)
