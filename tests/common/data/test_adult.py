"""UCI Adult domains: documented sizes, bounded records, public-only encoding,
and site CSVs that load back into exactly the same arrays."""

from __future__ import annotations

import gzip
import math
import re
from importlib import resources

import numpy as np
import pytest

from privadapt.common.data.dataset import Schema, encode_table, load_dataset
from privadapt.common.data.datasets import adult
from privadapt.common.data.datasets.adult import (
    ADULT_COLUMNS,
    ADULT_SCHEMA,
    DEMO_SPLIT,
    SPLITS,
    AdultDomains,
    adult_schema,
    load_adult_domains,
    site_schema_path,
    write_site_csvs,
)

SOURCE_SIZE, TARGET_SIZE, TEST_SIZE, DIM = 20_380, 9_782, 4_913, 103


@pytest.fixture(scope="module")
def domains() -> AdultDomains:
    return load_adult_domains(num_sites=3, seed=0)


def all_parts(domains: AdultDomains):
    return [domains.source, *domains.target_sites, domains.target_test]


def test_parts_have_the_documented_sizes(domains):
    assert domains.source.num_records == SOURCE_SIZE
    assert [s.num_records for s in domains.target_sites] == [3261, 3261, 3260]
    assert domains.target_test.num_records == TEST_SIZE
    assert {part.dim for part in all_parts(domains)} == {DIM}


def test_sites_split_the_target_into_near_equal_parts():
    sizes = [s.num_records for s in load_adult_domains(num_sites=7).target_sites]
    assert sum(sizes) == TARGET_SIZE and max(sizes) - min(sizes) <= 1


def test_sites_partition_the_women_of_adult_data(domains):
    rows = np.concatenate(domains.target_site_rows)
    assert set(rows[:, ADULT_COLUMNS.index("sex")].tolist()) == {"Female"}
    # adult.data has a few duplicate rows, so compare multisets, not sets.
    one_site = load_adult_domains(num_sites=1).target_site_rows[0]
    assert sorted(map(tuple, rows.tolist())) == sorted(map(tuple, one_site.tolist()))


@pytest.mark.parametrize(("file_name", "sex", "part"), [
    (adult.TRAIN_FILE, "Male", "source"), (adult.TEST_FILE, "Female", "target_test")])
def test_parts_are_the_complete_rows_of_one_sex(domains, file_name, sex, part):
    folder = resources.files("privadapt.common.data.datasets").joinpath("adult")
    with gzip.open(folder.joinpath(file_name).open("rb"), "rt") as handle:
        rows = [line.split(", ") for line in handle if line.count(",") == 14]
    expected = sum(1 for r in rows if r[9] == sex and "?" not in r)
    assert getattr(domains, part).num_records == expected


def test_every_record_has_norm_at_most_one(domains):
    for part in all_parts(domains):
        assert np.linalg.norm(part.features, axis=1).max() <= 1.0


def test_every_feature_lies_in_zero_to_one_over_the_divisor(domains):
    for part in all_parts(domains):
        assert part.features.min() >= 0.0
        assert part.features.max() <= 1.0 / adult.ROW_NORM_DIVISOR + 1e-15


def test_labels_are_plus_or_minus_one_including_the_test_file(domains):
    for part in all_parts(domains):
        assert set(np.unique(part.labels)) == {-1.0, 1.0}


def test_row_norm_divisor_is_sqrt_of_the_most_nonzero_coordinates():
    nonzero = len(adult.NUMERIC_COLUMNS) + len(adult.CATEGORIES) + 1
    assert nonzero == 13 and math.sqrt(13) == adult.ROW_NORM_DIVISOR


def test_same_seed_gives_the_same_sites(domains):
    again = load_adult_domains(num_sites=3, seed=0)
    for first, second in zip(domains.target_sites, again.target_sites, strict=True):
        np.testing.assert_array_equal(first.features, second.features)
        np.testing.assert_array_equal(first.labels, second.labels)


def test_another_seed_gives_other_sites(domains):
    other = load_adult_domains(num_sites=3, seed=1)
    assert not np.array_equal(domains.target_sites[0].features, other.target_sites[0].features)


def test_source_and_test_do_not_depend_on_seed_or_split(domains):
    other = load_adult_domains(num_sites=5, seed=9, max_records_per_site=10)
    np.testing.assert_array_equal(domains.source.features, other.source.features)
    np.testing.assert_array_equal(domains.target_test.features, other.target_test.features)


def test_max_records_per_site_caps_every_site():
    capped = load_adult_domains(num_sites=4, max_records_per_site=100)
    assert [s.num_records for s in capped.target_sites] == [100] * 4


@pytest.mark.parametrize("bad", [{"num_sites": 0}, {"max_records_per_site": 0},
                                 {"num_sites": 10**6}])
def test_invalid_arguments_are_rejected(bad):
    with pytest.raises(ValueError):
        load_adult_domains(**bad)


def test_scaling_constants_are_public_module_constants():
    assert ADULT_SCHEMA.numeric_scale == adult.NUMERIC_RANGES
    assert ADULT_SCHEMA.categorical == adult.CATEGORIES
    assert ADULT_SCHEMA.row_norm_divisor == adult.ROW_NORM_DIVISOR
    assert ADULT_SCHEMA.log1p_columns == adult.LOG1P_COLUMNS


def test_encoding_a_record_does_not_depend_on_the_other_records(domains):
    # No statistic of the data enters the encoding: each site's records encode
    # alone exactly as they do inside the site.
    rows = domains.target_site_rows[1][:5]
    columns = {name: rows[:, j].tolist() for j, name in enumerate(ADULT_COLUMNS)}
    np.testing.assert_array_equal(encode_table(columns, ADULT_SCHEMA).features,
                                  domains.target_sites[1].features[:5])


def test_sampling_weight_and_sex_are_not_features(domains):
    assert not any(name.split("=")[0] in {"fnlwgt", "sex"} for name in domains.feature_names)
    assert domains.feature_names == ADULT_SCHEMA.feature_names()


def test_declared_categories_are_those_listed_in_adult_names():
    names = resources.files("privadapt.common.data.datasets").joinpath("adult", "adult.names")
    listed = dict(re.findall(r"^([a-z-]+): (.+)\.$", names.read_text(), flags=re.MULTILINE))
    for column, categories in adult.CATEGORIES.items():
        assert tuple(listed[column].split(", ")) == categories
    assert tuple(listed["sex"].split(", ")) == adult.SEX_CATEGORIES


def test_site_csvs_load_back_into_the_same_arrays(domains, tmp_path):
    paths = write_site_csvs(domains, tmp_path / "sites")
    assert len(paths) == 3
    for path, site in zip(paths, domains.target_sites, strict=True):
        loaded = load_dataset(path, Schema.from_toml(site_schema_path(path)), expected_dim=DIM)
        np.testing.assert_array_equal(loaded.features, site.features)
        np.testing.assert_array_equal(loaded.labels, site.labels)
        assert loaded.feature_names == site.feature_names


def test_site_schema_file_reads_back_as_the_adult_schema(domains, tmp_path):
    path = write_site_csvs(domains, tmp_path)[0]
    assert Schema.from_toml(site_schema_path(path)) == ADULT_SCHEMA


def test_bundled_files_ship_with_their_attribution():
    folder = resources.files("privadapt.common.data.datasets").joinpath("adult")
    readme = folder.joinpath("README.md").read_text()
    assert "Ronny Kohavi and Barry Becker (1996)" in readme and "CC BY 4.0" in readme
    assert all(folder.joinpath(name).is_file()
               for name in ("adult.data.gz", "adult.test.gz", "adult.names"))


# Named splits: one public rule on one raw column each.
COMPLETE_TRAIN, COMPLETE_TEST = SOURCE_SIZE + TARGET_SIZE, 15_060


@pytest.fixture(scope="module", params=sorted(SPLITS))
def split_domains(request) -> AdultDomains:
    return load_adult_domains(num_sites=2, seed=0, split=request.param)


def test_the_default_split_is_sex_and_encodes_as_before():
    assert adult_schema("sex") == ADULT_SCHEMA == adult_schema()
    assert load_adult_domains(num_sites=1).split is SPLITS["sex"]
    assert DEMO_SPLIT in SPLITS


def test_every_split_partitions_the_complete_rows(split_domains):
    rule = split_domains.split
    column = ADULT_COLUMNS.index(rule.column)
    target = np.concatenate(split_domains.target_site_rows)
    assert rule.in_target(target[:, column]).all()
    sizes = split_domains.source.num_records + len(target)
    assert sizes == COMPLETE_TRAIN
    one = load_adult_domains(num_sites=1, split=rule.name)
    assert one.target_test.num_records + _source_test_size(rule) == COMPLETE_TEST


def _source_test_size(rule) -> int:
    table, _ = adult._read_raw(adult.TEST_FILE)
    complete = ~(table == adult.MISSING).any(axis=1)
    chosen = rule.in_target(table[:, ADULT_COLUMNS.index(rule.column)])
    return int(np.sum(complete & ~chosen))


def test_every_split_bounds_its_records_by_one(split_domains):
    for part in all_parts(split_domains):
        assert np.linalg.norm(part.features, axis=1).max() <= 1.0
        assert part.dim == len(split_domains.feature_names) == len(split_domains.schema
                                                                  .feature_names())


def test_a_split_column_is_dropped_exactly_when_constant_in_the_target(split_domains):
    rule = split_domains.split
    target = np.concatenate(split_domains.target_site_rows)
    constant = len(set(target[:, ADULT_COLUMNS.index(rule.column)].tolist())) == 1
    assert (rule.column not in split_domains.schema.columns()) == constant
    assert "fnlwgt" not in split_domains.schema.columns()
    # sex is a feature wherever the split does not make it constant
    assert ("sex" in split_domains.schema.columns()) == (rule.name != "sex")


def test_every_split_round_trips_through_its_site_csvs(split_domains, tmp_path):
    for path, site in zip(write_site_csvs(split_domains, tmp_path), split_domains.target_sites,
                          strict=True):
        schema = Schema.from_toml(site_schema_path(path))
        assert schema == split_domains.schema
        loaded = load_dataset(path, schema, expected_dim=site.dim)
        np.testing.assert_array_equal(loaded.features, site.features)
        np.testing.assert_array_equal(loaded.labels, site.labels)


def test_an_unknown_split_is_refused_with_the_known_names():
    with pytest.raises(ValueError, match="marital-not-married"):
        load_adult_domains(split="height")


def test_the_rows_past_each_sites_cap_are_the_unheld_design_set():
    capped = load_adult_domains(num_sites=3, seed=1, split="sex", max_records_per_site=500)
    whole = load_adult_domains(num_sites=3, seed=1, split="sex")
    assert whole.target_unheld is None
    held = sum(site.num_records for site in capped.target_sites)
    assert held == 1500
    assert held + capped.target_unheld.num_records == sum(
        site.num_records for site in whole.target_sites)
    # The same shuffle: each site keeps the first 500 of its share, the rest is unheld.
    for site, share in zip(capped.target_sites, whole.target_sites, strict=True):
        np.testing.assert_array_equal(site.features, share.features[:500])
    np.testing.assert_array_equal(
        capped.target_unheld.features,
        np.concatenate([share.features[500:] for share in whole.target_sites]))
