"""A schema drafted from the coordinator's public file: numeric ranges,
categories and label coding by rules a user can check by hand."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from privadapt.common.data.dataset import Dataset, load_dataset
from privadapt.common.data.schema import Schema
from privadapt.common.errors import ConfigError, DataError


def write(tmp_path: Path, text: str, name: str = "public.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


PUBLIC = ("age,region,visits,outcome\n"
          "30,north,1,no\n"
          "50,south,4,yes\n"
          "70,north,2,yes\n")


def test_numbers_are_scaled_by_the_public_range_and_text_is_one_hot_over_what_was_seen(
        tmp_path):
    schema = Schema.infer(write(tmp_path, PUBLIC), "outcome")
    assert schema.numeric == ("age", "visits")
    assert schema.numeric_scale == {"age": (30.0, 70.0), "visits": (1.0, 4.0)}
    assert schema.categorical == {"region": ("north", "south")}
    assert schema.intercept and schema.out_of_range == "clip"


def test_widen_moves_each_bound_out_by_a_share_of_the_range(tmp_path):
    schema = Schema.infer(write(tmp_path, PUBLIC), "outcome", widen=0.25)
    assert schema.numeric_scale["age"] == (20.0, 80.0)


def test_a_column_constant_in_the_public_file_gets_one_either_side(tmp_path):
    schema = Schema.infer(write(tmp_path, "a,b,y\n5,1,no\n5,2,yes\n"), "y")
    assert schema.numeric_scale["a"] == (4.0, 6.0)


def test_a_two_class_label_is_coded_minus_one_and_plus_one_in_sorted_order(tmp_path):
    assert Schema.infer(write(tmp_path, PUBLIC), "outcome").label_map == {"no": -1.0,
                                                                           "yes": 1.0}
    numeric = Schema.infer(write(tmp_path, "a,y\n1,1\n2,0\n3,1\n", "n.csv"), "y")
    assert numeric.label_map == {"0": -1.0, "1": 1.0}


def test_more_classes_are_coded_by_their_sorted_index(tmp_path):
    schema = Schema.infer(write(tmp_path, "a,y\n1,cat\n2,dog\n3,ant\n"), "y")
    assert schema.label_map == {"ant": 0.0, "cat": 1.0, "dog": 2.0}


def test_a_numeric_label_with_more_than_two_values_stays_a_number(tmp_path):
    schema = Schema.infer(write(tmp_path, "a,y\n1,0.5\n2,1.5\n3,-2\n"), "y")
    assert schema.label_map is None


def test_a_label_with_one_value_is_refused(tmp_path):
    with pytest.raises(DataError, match="single value"):
        Schema.infer(write(tmp_path, "a,y\n1,yes\n2,yes\n"), "y")


def test_a_numeric_code_named_categorical_is_one_hot_in_numeric_order(tmp_path):
    schema = Schema.infer(write(tmp_path, "zone,a,y\n10,1,no\n9,2,yes\n10,3,no\n"), "y",
                          categorical=["zone"])
    assert schema.categorical == {"zone": ("9", "10")}
    assert schema.numeric == ("a",)


def test_dropped_columns_are_left_out_and_an_unknown_name_is_refused(tmp_path):
    path = write(tmp_path, PUBLIC)
    assert "visits" not in Schema.infer(path, "outcome", drop=["visits"]).columns()
    with pytest.raises(ConfigError, match=re.escape("--drop names column(s) 'vists'")):
        Schema.infer(path, "outcome", drop=["vists"])


def test_an_identifier_column_is_refused_saying_to_drop_it(tmp_path):
    rows = "".join(f"id{i},{i},{'yes' if i % 2 else 'no'}\n" for i in range(60))
    with pytest.raises(DataError, match=re.escape("--drop name")):
        Schema.infer(write(tmp_path, "name,a,y\n" + rows), "y")


def test_an_empty_value_is_refused_naming_row_and_column(tmp_path):
    with pytest.raises(DataError, match=re.escape("row 3, column 'age': empty value")):
        Schema.infer(write(tmp_path, "age,y\n1,no\n,yes\n"), "y")


def test_every_record_has_norm_at_most_one_even_at_a_site_with_values_outside(tmp_path):
    schema = Schema.infer(write(tmp_path, PUBLIC), "outcome")
    site = write(tmp_path, "age,region,visits,outcome\n1e6,south,-40,no\n60,north,3,yes\n",
                 "site.csv")
    data = load_dataset(site, schema)
    norms = np.linalg.norm(data.features, axis=1)
    assert norms.max() <= 1.0 + 1e-12
    assert schema.row_norm_divisor == pytest.approx(math.sqrt(2 + 1 + 1))


def test_the_drafted_schema_reads_back_from_its_toml_unchanged(tmp_path):
    schema = Schema.infer(write(tmp_path, PUBLIC), "outcome", widen=0.1)
    (tmp_path / "schema.toml").write_text(schema.to_toml())
    assert Schema.from_toml(tmp_path / "schema.toml") == schema


def test_a_parquet_public_file_gives_the_same_schema_as_its_csv(tmp_path):
    csv_path = write(tmp_path, PUBLIC)
    parquet = tmp_path / "public.parquet"
    pq.write_table(pa.table({"age": [30, 50, 70], "region": ["north", "south", "north"],
                             "visits": [1.0, 4.0, 2.0], "outcome": ["no", "yes", "yes"]}),
                   parquet)
    assert Schema.infer(parquet, "outcome") == Schema.infer(csv_path, "outcome")


def test_the_public_file_loads_with_its_own_schema_into_the_unit_box(tmp_path):
    path = write(tmp_path, PUBLIC)
    data = Dataset.from_csv(path, Schema.infer(path, "outcome"))
    assert data.num_records == 3 and data.features.min() >= 0.0
    assert data.feature_names == ("age", "visits", "region=north", "region=south", "intercept")
