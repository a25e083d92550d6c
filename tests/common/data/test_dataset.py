"""Data loading: the schema's encoding, and a clear DataError (file, row,
column, value) for every kind of bad input."""

from __future__ import annotations

import gzip
import math
import re
import tomllib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import privadapt.common.data.dataset as dataset_module
from privadapt.common.data.dataset import Dataset, Schema, encode_table, load_dataset
from privadapt.common.errors import ConfigError, DataError

SCHEMA = Schema(
    label="income",
    numeric=("age", "gain"),
    categorical={"color": ("red", "green", "blue")},
    label_map={">50K": 1.0, "<=50K": -1.0},
    numeric_scale={"age": (10.0, 90.0), "gain": (0.0, 999.0)},
    log1p_columns=("gain",),
    intercept=True,
    row_norm_divisor=2.0,
)
HEADER = "age,gain,color,income"
GOOD_ROWS = ["50,0,green,>50K", "10,999,red,<=50K"]


def raises(kind: type[Exception], text: str):
    """``pytest.raises`` for an error whose message contains ``text`` verbatim."""
    return pytest.raises(kind, match=re.escape(text))


def write_csv(tmp_path: Path, lines: list[str], name: str = "site.csv") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def load_rows(tmp_path: Path, rows: list[str], header: str = HEADER) -> Dataset:
    return load_dataset(write_csv(tmp_path, [header, *rows]), SCHEMA)


# --- Dataset ----------------------------------------------------------------


def test_dataset_reports_num_records_and_dim():
    data = Dataset(np.zeros((4, 3)), np.ones(4), ("a", "b", "c"))
    assert (data.num_records, data.dim) == (4, 3)


def test_dataset_holds_read_only_float64_c_contiguous_copies():
    features = np.asfortranarray(np.arange(6, dtype=np.int64).reshape(3, 2))
    data = Dataset(features, [1, -1, 1], ("a", "b"))
    assert data.features.dtype == np.float64 and data.features.flags.c_contiguous
    assert not data.features.flags.writeable and not data.labels.flags.writeable
    features[0, 0] = 99
    assert data.features[0, 0] == 0.0


def test_dataset_rejects_labels_of_another_length():
    with raises(DataError, "one entry per record"):
        Dataset(np.zeros((3, 2)), np.zeros(2), ("a", "b"))


def test_dataset_rejects_feature_names_of_another_count():
    with raises(DataError, "1 feature names for 2 features"):
        Dataset(np.zeros((3, 2)), np.zeros(3), ("a",))


def test_dataset_rejects_one_dimensional_features():
    with raises(DataError, "2-d array"):
        Dataset(np.zeros(3), np.zeros(3), ())


def test_dataset_rejects_nan_feature_naming_record_and_column():
    features = np.zeros((3, 2))
    features[2, 1] = np.nan
    with raises(DataError, "1 NaN or infinite values (first at record index 2, column 1)"):
        Dataset(features, np.zeros(3), ("a", "b"))


# --- Schema -----------------------------------------------------------------


def test_schema_feature_names_are_numeric_then_declared_categories_then_intercept():
    assert SCHEMA.feature_names() == ("age", "gain", "color=red", "color=green", "color=blue",
                                      "intercept")


def test_schema_from_toml_reads_every_field(tmp_path):
    path = tmp_path / "schema.toml"
    path.write_text(
        'label = "income"\nnumeric = ["age", "gain"]\nlog1p_columns = ["gain"]\n'
        "intercept = true\nrow_norm_divisor = 2\n"
        '[categorical]\ncolor = ["red", "green", "blue"]\n'
        '[label_map]\n">50K" = 1\n"<=50K" = -1\n'
        "[numeric_scale]\nage = [10, 90]\ngain = [0, 999]\n"
    )
    assert Schema.from_toml(path) == SCHEMA


def test_schema_to_toml_reads_back_equal():
    assert Schema.from_dict(tomllib.loads(SCHEMA.to_toml())) == SCHEMA


_names = st.text(min_size=1, max_size=8).filter(lambda s: s == s.strip())


@settings(max_examples=40, deadline=None)
@given(categories=st.lists(_names, min_size=1, max_size=4, unique=True),
       divisor=st.floats(min_value=1e-3, max_value=1e3))
def test_schema_to_toml_round_trips_any_category_names_and_divisor(categories, divisor):
    schema = Schema(label="y", categorical={"c": tuple(categories)},
                    label_map={c: float(i) for i, c in enumerate(categories)},
                    row_norm_divisor=divisor)
    assert Schema.from_dict(tomllib.loads(schema.to_toml())) == schema


def test_schema_file_that_does_not_exist_is_a_config_error(tmp_path):
    with raises(ConfigError, f"schema file {tmp_path / 'nope.toml'}: not found"):
        Schema.from_toml(tmp_path / "nope.toml")


def test_schema_file_that_is_not_toml_names_the_file(tmp_path):
    path = tmp_path / "schema.toml"
    path.write_text("label = \n")
    with raises(ConfigError, f"schema file {path}: not valid TOML"):
        Schema.from_toml(path)


def test_schema_unknown_key_names_file_and_key(tmp_path):
    path = tmp_path / "schema.toml"
    path.write_text('label = "y"\nnumerics = ["a"]\n')
    with raises(ConfigError, f"{path}: unknown key(s) 'numerics'"):
        Schema.from_toml(path)


def test_schema_without_label_is_rejected():
    with raises(ConfigError, "in.toml: missing required key 'label'"):
        Schema.from_dict({"numeric": ["a"]}, source="in.toml")


def test_schema_key_of_wrong_type_is_named():
    with raises(ConfigError, "in.toml: key 'numeric': expected a list of strings"):
        Schema.from_dict({"label": "y", "numeric": "age"}, source="in.toml")


def test_schema_scale_with_low_not_below_high_is_rejected():
    with raises(ConfigError, "key 'numeric_scale.a': need finite low < high"):
        Schema.from_dict({"label": "y", "numeric": ["a"], "numeric_scale": {"a": [3, 3]}})


def test_schema_scale_of_an_undeclared_column_is_rejected():
    with raises(ConfigError, "key 'numeric_scale.b': not a numeric column"):
        Schema.from_dict({"label": "y", "numeric": ["a"], "numeric_scale": {"b": [0, 1]}})


def test_schema_label_listed_as_feature_is_rejected():
    with raises(ConfigError, "label column 'y' is also listed as a feature"):
        Schema(label="y", numeric=("y",))


def test_schema_non_positive_row_norm_divisor_is_rejected():
    with raises(ConfigError, "key 'row_norm_divisor'"):
        Schema(label="y", numeric=("a",), row_norm_divisor=0.0)


def test_schema_category_declared_twice_is_rejected():
    with raises(ConfigError, "key 'categorical.c': categories are listed more"):
        Schema(label="y", categorical={"c": ("x", "x")})


def test_schema_log1p_column_with_scale_low_at_minus_one_is_rejected():
    with raises(ConfigError, "key 'log1p_columns'"):
        Schema(label="y", numeric=("a",), numeric_scale={"a": (-1.0, 5.0)},
               log1p_columns=("a",))


# --- CSV: encoding ------------------------------------------------------------


def test_csv_is_scaled_one_hot_encoded_with_intercept_and_divided_by_public_constant(tmp_path):
    data = load_rows(tmp_path, GOOD_ROWS)
    expected = np.array([[0.5, 0.0, 0.0, 1.0, 0.0, 1.0],
                         [0.0, 1.0, 1.0, 0.0, 0.0, 1.0]]) / 2.0
    np.testing.assert_allclose(data.features, expected, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(data.labels, [1.0, -1.0])
    assert data.feature_names == SCHEMA.feature_names()


def test_csv_log1p_column_is_scaled_between_log1p_of_its_bounds(tmp_path):
    data = load_rows(tmp_path, ["10,99,red,>50K"])
    assert data.features[0, 1] == pytest.approx(math.log1p(99) / math.log1p(999) / 2.0)


def test_csv_columns_in_any_order_with_extras_and_whitespace_load_the_same(tmp_path):
    shuffled = [" income , note,color ,age,gain", ">50K , x, green, 50 ,0", "<=50K,y,red,10,999"]
    other = load_dataset(write_csv(tmp_path, shuffled, "other.csv"), SCHEMA)
    np.testing.assert_array_equal(other.features, load_rows(tmp_path, GOOD_ROWS).features)
    np.testing.assert_array_equal(other.labels, [1.0, -1.0])


def test_csv_gz_loads_the_same_as_csv(tmp_path):
    path = tmp_path / "site.csv.gz"
    with gzip.open(path, "wt") as handle:
        handle.write("\n".join([HEADER, *GOOD_ROWS]) + "\n")
    np.testing.assert_array_equal(load_dataset(path, SCHEMA).features,
                                  load_rows(tmp_path, GOOD_ROWS).features)


def test_csv_with_numeric_label_column_needs_no_label_map(tmp_path):
    schema = Schema(label="y", numeric=("a",))
    data = load_dataset(write_csv(tmp_path, ["a,y", "1,0.5", "2,-3"]), schema)
    np.testing.assert_array_equal(data.labels, [0.5, -3.0])


def test_csv_values_outside_the_public_range_are_clipped_to_it(tmp_path):
    data = load_rows(tmp_path, ["170,0,red,>50K"])
    assert data.features[0, 0] == pytest.approx(1.0 / 2.0)  # age 90 of [10, 90], divisor 2


def test_csv_with_byte_order_mark_reads_first_column_name(tmp_path):
    path = tmp_path / "site.csv"
    path.write_bytes(("\ufeff" + "\n".join([HEADER, *GOOD_ROWS]) + "\n").encode("utf-8"))
    assert load_dataset(path, SCHEMA).num_records == 2


def test_encode_table_gives_what_load_dataset_gives(tmp_path):
    columns = dict(zip(HEADER.split(","), zip(*(r.split(",") for r in GOOD_ROWS), strict=True),
                       strict=True))
    np.testing.assert_array_equal(encode_table(columns, SCHEMA).features,
                                  load_rows(tmp_path, GOOD_ROWS).features)


def test_csv_of_50k_rows_and_15_columns_keeps_only_the_schemas_columns(tmp_path, monkeypatch):
    # How fast this loads is a benchmark row (benchmarks/run.py, against the
    # csv module reading the same file); here, the work it does: the eleven
    # columns the schema does not name are never kept, and every record is
    # encoded as the encoder encodes it.
    rng = np.random.default_rng(0)
    header = HEADER + "," + ",".join(f"extra{i}" for i in range(11))
    colors = np.array(["red", "green", "blue"])[rng.integers(0, 3, 50_000)]
    rows = [f"{a:.3f},{g},{c},>50K" for a, g, c in zip(
        rng.uniform(10, 90, 50_000), rng.integers(0, 999, 50_000), colors, strict=True)]
    path = write_csv(tmp_path, [header] + [f"{r},{','.join(['1.5'] * 11)}" for r in rows])
    tables = []
    read = dataset_module.read_table

    def recorded_read(*args):
        tables.append(read(*args))
        return tables[-1]

    monkeypatch.setattr(dataset_module, "read_table", recorded_read)
    data = load_dataset(path, SCHEMA)
    assert [len(t.header) for t in tables] == [15]
    assert set(tables[0].columns) == set(SCHEMA.columns())
    columns = dict(zip(HEADER.split(","), zip(*(r.split(",") for r in rows), strict=True),
                       strict=True))
    np.testing.assert_array_equal(data.features, encode_table(columns, SCHEMA).features)
    assert data.features.shape == (50_000, 6)


# --- CSV: bad input -------------------------------------------------------------


def test_missing_file_is_rejected_naming_the_path(tmp_path):
    with raises(DataError, f"data file not found: {tmp_path / 'gone.csv'}"):
        load_dataset(tmp_path / "gone.csv", SCHEMA)


def test_unsupported_extension_is_rejected_listing_supported_ones(tmp_path):
    path = write_csv(tmp_path, [HEADER, *GOOD_ROWS], "site.xlsx")
    with raises(DataError, "unsupported file type; use one of .csv, .csv.gz, .parquet, .npz"):
        load_dataset(path, SCHEMA)


def test_csv_without_schema_is_a_config_error(tmp_path):
    with raises(ConfigError, "needs a schema"):
        load_dataset(write_csv(tmp_path, [HEADER, *GOOD_ROWS]), None)


def test_csv_missing_column_is_named_with_the_available_columns(tmp_path):
    path = write_csv(tmp_path, ["age,color,income", "50,green,>50K"])
    with raises(DataError, f"{path}: column 'gain' required by the schema is missing; "
                           "the file has columns 'age', 'color', 'income'"):
        load_dataset(path, SCHEMA)


def test_csv_non_numeric_value_names_file_row_column_and_value(tmp_path):
    path = write_csv(tmp_path, [HEADER, *GOOD_ROWS, "4O,0,red,>50K"])
    with raises(DataError, f"{path}: row 4, column 'age': '4O' is not a number"):
        load_dataset(path, SCHEMA)


def test_csv_empty_numeric_value_is_named(tmp_path):
    path = write_csv(tmp_path, [HEADER, "50,,red,>50K"])
    with raises(DataError, f"{path}: row 2, column 'gain': '' is not a number"):
        load_dataset(path, SCHEMA)


def test_csv_undeclared_category_names_file_row_column_value_and_allowed(tmp_path):
    path = write_csv(tmp_path, [HEADER, *GOOD_ROWS, "50,0,purple,>50K", "50,0,pink,>50K"])
    with pytest.raises(DataError) as error:
        load_dataset(path, SCHEMA)
    message = str(error.value)
    assert f"{path}: row 4, column 'color': value 'purple' is not declared" in message
    assert "2 rows have undeclared values" in message
    assert "allowed: 'red', 'green', 'blue'" in message


def test_csv_unknown_label_value_names_file_row_and_allowed_labels(tmp_path):
    path = write_csv(tmp_path, [HEADER, "50,0,red,>50K.", *GOOD_ROWS])
    with pytest.raises(DataError) as error:
        load_dataset(path, SCHEMA)
    message = str(error.value)
    assert f"{path}: row 2, label column 'income': value '>50K.' is not declared" in message
    assert "allowed: '>50K', '<=50K'" in message


@pytest.mark.parametrize("bad", ["nan", "inf", "-Infinity", "NaN"])
def test_csv_with_nan_is_rejected_naming_row_and_column(tmp_path, bad):
    path = write_csv(tmp_path, [HEADER, *GOOD_ROWS, f"{bad},0,red,>50K", "nan,1,red,>50K"])
    with raises(DataError, f"{path}: column 'age' has 2 NaN or infinite values "
                           f"(first at row 4: '{bad}'); they are rejected, "
                           "not clipped"):
        load_dataset(path, SCHEMA)


def test_csv_nan_label_is_rejected(tmp_path):
    path = write_csv(tmp_path, ["a,y", "1,0", "2,nan"])
    with raises(DataError, "column 'y' has 1 NaN or infinite values"):
        load_dataset(path, Schema(label="y", numeric=("a",)))


def test_csv_row_numbers_count_the_header_and_blank_lines(tmp_path):
    path = write_csv(tmp_path, [HEADER, GOOD_ROWS[0], "", "x,0,red,>50K"])
    with raises(DataError, "row 4, column 'age'"):
        load_dataset(path, SCHEMA)


def test_csv_row_with_wrong_number_of_fields_is_named(tmp_path):
    path = write_csv(tmp_path, [HEADER, GOOD_ROWS[0], "50,0,red"])
    with raises(DataError, f"{path}: row 3 has 3 fields but the header has 4"):
        load_dataset(path, SCHEMA)


def test_empty_csv_is_rejected(tmp_path):
    path = tmp_path / "site.csv"
    path.write_text("")
    with raises(DataError, f"{path}: the file is empty"):
        load_dataset(path, SCHEMA)


def test_csv_with_header_only_is_rejected(tmp_path):
    with raises(DataError, "no data rows"):
        load_rows(tmp_path, [])


def test_csv_with_a_used_column_twice_is_rejected(tmp_path):
    path = write_csv(tmp_path, [HEADER + ",age", GOOD_ROWS[0] + ",51"])
    with raises(DataError, "column(s) 'age' appear more than once"):
        load_dataset(path, SCHEMA)


def test_csv_log1p_value_at_or_below_minus_one_is_rejected(tmp_path):
    # Without bounds: with them, such a value is clipped to the lower bound (> -1).
    unbounded = Schema(label="income", numeric=("age", "gain"), log1p_columns=("gain",),
                       label_map=SCHEMA.label_map, categorical=SCHEMA.categorical)
    path = write_csv(tmp_path, [HEADER, "50,-1,red,>50K"])
    with raises(DataError, f"{path}: row 2, column 'gain': value '-1' must be > -1"):
        load_dataset(path, unbounded)


def test_csv_of_another_dimension_than_expected_is_rejected(tmp_path):
    path = write_csv(tmp_path, [HEADER, *GOOD_ROWS])
    with raises(DataError, f"{path}: records have 6 features but 7 are expected"):
        load_dataset(path, SCHEMA, expected_dim=7)


def test_corrupt_csv_gz_is_rejected(tmp_path):
    path = tmp_path / "site.csv.gz"
    path.write_bytes(b"not gzip at all")
    with raises(DataError, f"{path}: cannot read the file as CSV"):
        load_dataset(path, SCHEMA)


# --- npz ----------------------------------------------------------------------


def save_npz(tmp_path: Path, **arrays: np.ndarray) -> Path:
    path = tmp_path / "site.npz"
    np.savez(path, **arrays)
    return path


def test_npz_loads_features_and_labels_with_generic_names(tmp_path):
    features = np.arange(6.0).reshape(3, 2)
    data = load_dataset(save_npz(tmp_path, features=features, labels=np.ones(3)))
    np.testing.assert_array_equal(data.features, features)
    assert data.feature_names == ("x0", "x1")


def test_npz_with_schema_takes_its_feature_names(tmp_path):
    path = save_npz(tmp_path, features=np.zeros((2, 6)), labels=np.ones(2))
    assert load_dataset(path, SCHEMA).feature_names == SCHEMA.feature_names()


def test_npz_with_wrong_keys_is_rejected(tmp_path):
    path = save_npz(tmp_path, X=np.zeros((2, 2)), y=np.zeros(2))
    with raises(DataError, f"{path}: expected exactly the arrays 'features' and "
                           "'labels', found 'X', 'y'"):
        load_dataset(path)


def test_npz_with_mismatched_shapes_is_rejected(tmp_path):
    path = save_npz(tmp_path, features=np.zeros((3, 2)), labels=np.zeros(2))
    with raises(DataError, f"{path}: expected features of shape (n, d)"):
        load_dataset(path)


def test_npz_with_nan_is_rejected_naming_file_and_record(tmp_path):
    features = np.zeros((3, 2))
    features[1, 0] = np.inf
    path = save_npz(tmp_path, features=features, labels=np.zeros(3))
    with raises(DataError, f"{path}: features has 1 NaN or infinite values "
                           "(first at record index 1, column 0)"):
        load_dataset(path)


def test_npz_of_another_dimension_than_the_schema_is_rejected(tmp_path):
    path = save_npz(tmp_path, features=np.zeros((2, 3)), labels=np.ones(2))
    with raises(DataError, "records have 3 features but the schema describes 6"):
        load_dataset(path, SCHEMA)


def test_npz_of_another_dimension_than_expected_is_rejected(tmp_path):
    path = save_npz(tmp_path, features=np.zeros((2, 3)), labels=np.ones(2))
    with raises(DataError, "records have 3 features but 2 are expected"):
        load_dataset(path, expected_dim=2)


def test_npz_without_records_is_rejected(tmp_path):
    path = save_npz(tmp_path, features=np.zeros((0, 3)), labels=np.zeros(0))
    with raises(DataError, "holds no records"):
        load_dataset(path)


def test_corrupt_npz_is_rejected(tmp_path):
    path = tmp_path / "site.npz"
    path.write_bytes(b"garbage")
    with raises(DataError, f"{path}: cannot read the file as .npz"):
        load_dataset(path)
