"""UCI Adult split by a public attribute into a public source and a private target.

Default split ``sex``, the Adult experiment of the seed paper on private
supervised adaptation (Table 4, Figure 4): public source = men in
``adult.data`` (held by the coordinator), private target = women in
``adult.data`` (shuffled and split over the sites), held-out target = women in
``adult.test``. Task: income > 50K. The other named splits (:data:`SPLITS`)
are each one public rule on one raw column (race, age band, education level,
workclass, marital status, native country, occupation group): the target is
the complete rows the rule selects, the source the complete rows it does not;
``make demo`` runs :data:`DEMO_SPLIT` (``education-bachelors-plus``: source =
below a bachelor's degree, target = a bachelor's degree or more), chosen by
experiments/adult_splits.py's rule: the split whose shift costs a source-only
model most balanced accuracy, measured on adult.data only (see its docstring).

Preprocessing, every constant public and fixed in this module (nothing is
computed from the data, least of all from the private target):

* rows with a missing value ('?', only in workclass, occupation and
  native-country) are dropped, whatever the split: 2,399 of the 32,561 rows of
  adult.data (1,410 men, 989 women) and 1,221 of the 16,281 rows of adult.test
  (713 men, 508 women), as in adult.names (45,222 rows without unknowns);
* ``fnlwgt`` is dropped: it is the census sampling weight, not an attribute of
  the person; the split's own column is dropped when the split's rule makes it
  constant within the target (a single category: ``sex`` in the ``sex`` split,
  ``marital-status`` in ``marital-never-married``); ``sex`` is a feature of
  every other split (:data:`SEX_CATEGORIES`);
* numeric columns are scaled to [0, 1] by public bounds: age (17, 90), from
  adult.names' extraction rule AAGE > 16 and the census top-code at 90;
  education-num (1, 16), the ranks of the 16 education levels of adult.names;
  hours-per-week (1, 99), from HRSWK > 0 and the field's two digits;
  capital-gain and capital-loss through log1p with bounds (0, 99999), the
  five-digit field whose top-code is 99999 (log1p because both are zero for
  most people and heavy-tailed for the rest);
* categorical columns are one-hot encoded with the categories in the order
  adult.names lists them (so the category never observed after the drop,
  workclass=Never-worked, still has its column);
* label y = +1 for ">50K", -1 for "<=50K" (adult.test's trailing '.' removed);
* an intercept is appended, and every feature vector is divided by the square
  root of its most non-zero coordinates: for ``sex``, ``ROW_NORM_DIVISOR`` =
  sqrt(13), as a record has at most 5 numeric coordinates in [0, 1], exactly
  one 1 per categorical column (7) and the intercept, so ||x||^2 <= 5 + 7 + 1
  = 13 before the division and ||x|| <= 1 after it; sqrt(14) for a split that
  keeps all 8 categorical columns (sex included), sqrt(13) when it drops one.

This gives d = 103 features for ``sex`` (:data:`ADULT_SCHEMA`); another split's
encoding is :func:`adult_schema` of it. The encoding is applied by
:func:`privadapt.common.data.dataset.encode_table`, the code ``load_dataset`` runs on a
site's CSV, so :func:`write_site_csvs` hands each site a file (and its schema)
that loads into exactly the arrays of its ``target_sites`` entry.
"""

from __future__ import annotations

import csv
import functools
import gzip
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np

from privadapt.common.data.dataset import Dataset, Schema, encode_table
from privadapt.common.errors import DataError

TRAIN_FILE = "adult.data.gz"
TEST_FILE = "adult.test.gz"
ADULT_COLUMNS = (
    "age", "workclass", "fnlwgt", "education", "education-num", "marital-status",
    "occupation", "relationship", "race", "sex", "capital-gain", "capital-loss",
    "hours-per-week", "native-country", "income",
)
MISSING = "?"
SOURCE_SEX, TARGET_SEX = "Male", "Female"  # the domains of the ``sex`` split
# adult.names' order; a feature of every split but ``sex`` (a test checks the list).
SEX_CATEGORIES = ("Female", "Male")

NUMERIC_COLUMNS = ("age", "education-num", "capital-gain", "capital-loss", "hours-per-week")
NUMERIC_RANGES: dict[str, tuple[float, float]] = {
    "age": (17.0, 90.0),
    "education-num": (1.0, 16.0),
    "capital-gain": (0.0, 99999.0),
    "capital-loss": (0.0, 99999.0),
    "hours-per-week": (1.0, 99.0),
}
LOG1P_COLUMNS = ("capital-gain", "capital-loss")
# Copied from adult.names, in its order (a test checks they still agree).
CATEGORIES: dict[str, tuple[str, ...]] = {
    "workclass": ("Private", "Self-emp-not-inc", "Self-emp-inc", "Federal-gov", "Local-gov",
                  "State-gov", "Without-pay", "Never-worked"),
    "education": ("Bachelors", "Some-college", "11th", "HS-grad", "Prof-school", "Assoc-acdm",
                  "Assoc-voc", "9th", "7th-8th", "12th", "Masters", "1st-4th", "10th",
                  "Doctorate", "5th-6th", "Preschool"),
    "marital-status": ("Married-civ-spouse", "Divorced", "Never-married", "Separated",
                       "Widowed", "Married-spouse-absent", "Married-AF-spouse"),
    "occupation": ("Tech-support", "Craft-repair", "Other-service", "Sales", "Exec-managerial",
                   "Prof-specialty", "Handlers-cleaners", "Machine-op-inspct", "Adm-clerical",
                   "Farming-fishing", "Transport-moving", "Priv-house-serv", "Protective-serv",
                   "Armed-Forces"),
    "relationship": ("Wife", "Own-child", "Husband", "Not-in-family", "Other-relative",
                     "Unmarried"),
    "race": ("White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black"),
    "native-country": (
        "United-States", "Cambodia", "England", "Puerto-Rico", "Canada", "Germany",
        "Outlying-US(Guam-USVI-etc)", "India", "Japan", "Greece", "South", "China", "Cuba",
        "Iran", "Honduras", "Philippines", "Italy", "Poland", "Jamaica", "Vietnam", "Mexico",
        "Portugal", "Ireland", "France", "Dominican-Republic", "Laos", "Ecuador", "Taiwan",
        "Haiti", "Columbia", "Hungary", "Guatemala", "Nicaragua", "Scotland", "Thailand",
        "Yugoslavia", "El-Salvador", "Trinadad&Tobago", "Peru", "Hong", "Holand-Netherlands",
    ),
}
LABEL_MAP = {">50K": 1.0, "<=50K": -1.0}
ROW_NORM_DIVISOR = math.sqrt(len(NUMERIC_COLUMNS) + len(CATEGORIES) + 1)


@dataclass(frozen=True)
class AdultSplit:
    """A public rule on one raw column: the target domain is the complete rows
    whose ``column`` is one of ``target_values`` (a categorical column) or lies
    in ``[target_range[0], target_range[1])`` (a numeric one); the source is
    every other complete row. The labels name the domains in printed tables."""

    name: str
    column: str
    source_label: str
    target_label: str
    target_values: tuple[str, ...] = ()
    target_range: tuple[float, float] | None = None

    def in_target(self, values: np.ndarray) -> np.ndarray:
        """Which raw values of ``column`` (strings) belong to the target."""
        if self.target_range is not None:
            numbers = values.astype(float)
            return (numbers >= self.target_range[0]) & (numbers < self.target_range[1])
        return np.isin(values, self.target_values)

    @property
    def dropped_columns(self) -> tuple[str, ...]:
        """Raw columns left out of the features: the sampling weight, and the
        split's own column when the rule makes it constant in the target."""
        constant = self.target_range is None and len(self.target_values) == 1
        return ("fnlwgt", self.column) if constant else ("fnlwgt",)


_GOVERNMENT = ("Federal-gov", "Local-gov", "State-gov")
_SELF_EMPLOYED = ("Self-emp-not-inc", "Self-emp-inc")
_BLUE_COLLAR = ("Craft-repair", "Handlers-cleaners", "Machine-op-inspct", "Transport-moving",
                "Farming-fishing")
_NON_WHITE = tuple(r for r in CATEGORIES["race"] if r != "White")
_NOT_MARRIED = tuple(m for m in CATEGORIES["marital-status"] if m != "Married-civ-spouse")
_NON_US = tuple(c for c in CATEGORIES["native-country"] if c != "United-States")
# The candidate splits of experiments/adult_splits.py, each a rule fixed before
# any model was fitted on it; education-num 9 is HS-grad, 13 Bachelors.
SPLITS: dict[str, AdultSplit] = {s.name: s for s in (
    AdultSplit("sex", "sex", "men", "women", target_values=(TARGET_SEX,)),
    AdultSplit("race-non-white", "race", "White", "non-White", target_values=_NON_WHITE),
    AdultSplit("age-under-30", "age", "age 30+", "age < 30", target_range=(17.0, 30.0)),
    AdultSplit("age-50-plus", "age", "age < 50", "age 50+", target_range=(50.0, 91.0)),
    AdultSplit("education-hs-or-less", "education-num", "beyond high school",
               "high school or less", target_range=(1.0, 10.0)),
    AdultSplit("education-bachelors-plus", "education-num", "below a bachelor's degree",
               "bachelor's degree or more", target_range=(13.0, 17.0)),
    AdultSplit("workclass-government", "workclass", "non-government", "government",
               target_values=_GOVERNMENT),
    AdultSplit("workclass-self-employed", "workclass", "not self-employed", "self-employed",
               target_values=_SELF_EMPLOYED),
    AdultSplit("marital-not-married", "marital-status", "married (civilian spouse)",
               "not married", target_values=_NOT_MARRIED),
    AdultSplit("marital-never-married", "marital-status", "ever married", "never married",
               target_values=("Never-married",)),
    AdultSplit("native-non-us", "native-country", "born in the US", "born outside the US",
               target_values=_NON_US),
    AdultSplit("occupation-blue-collar", "occupation", "other occupations",
               "blue-collar occupations", target_values=_BLUE_COLLAR),
)}
DEFAULT_SPLIT = "sex"
# What `make demo` (privadapt simulate) and experiments/demo.py run: the split
# experiments/adult_splits.py's rule picks (see its docstring and
# experiments/results/adult_splits.csv), at most DEMO_RECORDS_PER_SITE private
# records per site, a mid-size hospital.
DEMO_SPLIT = "education-bachelors-plus"
DEMO_RECORDS_PER_SITE = 2000


def adult_schema(split: str = DEFAULT_SPLIT) -> Schema:
    """The encoding of a named split: every raw column but the label and the
    split's :attr:`AdultSplit.dropped_columns`, categorical columns in file
    order, each record scaled to norm <= 1 by sqrt(numeric + categorical + 1)."""
    dropped = _split(split).dropped_columns
    every = {**CATEGORIES, "sex": SEX_CATEGORIES}
    categorical = {c: every[c] for c in ADULT_COLUMNS if c in every and c not in dropped}
    numeric = tuple(c for c in NUMERIC_COLUMNS if c not in dropped)
    return Schema(
        label="income",
        numeric=numeric,
        categorical=categorical,
        label_map=LABEL_MAP,
        numeric_scale={c: NUMERIC_RANGES[c] for c in numeric},
        intercept=True,
        row_norm_divisor=math.sqrt(len(numeric) + len(categorical) + 1),
        log1p_columns=tuple(c for c in LOG1P_COLUMNS if c in numeric),
    )


def _split(name: str) -> AdultSplit:
    if name not in SPLITS:
        raise ValueError(f"unknown Adult split {name!r}; known: {', '.join(SPLITS)}")
    return SPLITS[name]


ADULT_SCHEMA = adult_schema(DEFAULT_SPLIT)


@dataclass(frozen=True, eq=False)
class AdultDomains:
    """The public source, the private target split over sites, and the
    held-out target of one :class:`AdultSplit`, with the ``schema`` that
    encoded them; ``target_site_rows`` keeps each site's raw rows (strings,
    columns as ``ADULT_COLUMNS``) so :func:`write_site_csvs` can write them.
    ``target_unheld`` is the target rows of adult.data that no site holds
    (those past each site's record cap; empty without a cap): a design set
    for choosing a demo's task or settings without looking at adult.test."""

    source: Dataset
    target_sites: tuple[Dataset, ...]
    target_test: Dataset
    feature_names: tuple[str, ...]
    target_site_rows: tuple[np.ndarray, ...] = field(repr=False)
    split: AdultSplit
    schema: Schema = field(repr=False)
    target_unheld: Dataset | None = field(default=None, repr=False)


def load_adult_domains(
    num_sites: int = 3, seed: int = 0, max_records_per_site: int | None = None,
    split: str = DEFAULT_SPLIT,
) -> AdultDomains:
    """The named ``split`` (:data:`SPLITS`; default ``sex``): source rows of
    adult.data (men), target rows of adult.data (women) shuffled with ``seed``
    and split into ``num_sites`` near-equal sites (each cut to at most
    ``max_records_per_site`` records), target rows of adult.test (held out)."""
    if isinstance(num_sites, bool) or not isinstance(num_sites, int) or num_sites < 1:
        raise ValueError(f"num_sites must be a positive integer, got {num_sites!r}")
    if max_records_per_site is not None and max_records_per_site < 1:
        raise ValueError(f"max_records_per_site must be >= 1 or None, "
                         f"got {max_records_per_site!r}")
    rule, schema = _split(split), adult_schema(split)
    source_rows, source_lines = _domain(TRAIN_FILE, rule, target=False)
    target_rows, target_lines = _domain(TRAIN_FILE, rule, target=True)
    test_rows, test_lines = _domain(TEST_FILE, rule, target=True)
    if num_sites > len(target_rows):
        raise ValueError(f"num_sites={num_sites} exceeds the {len(target_rows)} target records")
    order = np.random.default_rng(seed).permutation(len(target_rows))
    shares = np.array_split(order, num_sites)
    parts = [part[:max_records_per_site] for part in shares]
    unheld = np.concatenate([part[len(kept):] for part, kept in zip(shares, parts, strict=True)])
    return AdultDomains(
        source=_encode(source_rows, source_lines, TRAIN_FILE, schema),
        target_sites=tuple(_encode(target_rows[p], target_lines[p], TRAIN_FILE, schema)
                           for p in parts),
        target_test=_encode(test_rows, test_lines, TEST_FILE, schema),
        feature_names=schema.feature_names(),
        target_site_rows=tuple(target_rows[p] for p in parts),
        split=rule,
        schema=schema,
        target_unheld=(_encode(target_rows[unheld], target_lines[unheld], TRAIN_FILE, schema)
                       if len(unheld) else None),
    )


def write_site_csvs(domains: AdultDomains, directory: str | Path) -> list[Path]:
    """Write site k's raw rows to ``directory/adult-site-k.csv`` (with a
    header) and the split's schema next to it (:func:`site_schema_path`);
    returns the CSV paths in site order. ``load_dataset(csv,
    Schema.from_toml(schema))`` gives back exactly ``domains.target_sites[k - 1]``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for k, rows in enumerate(domains.target_site_rows, start=1):
        path = directory / f"adult-site-{k}.csv"
        with open(path, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(ADULT_COLUMNS)
            writer.writerows(rows.tolist())
        site_schema_path(path).write_text(domains.schema.to_toml(), encoding="utf-8")
        paths.append(path)
    return paths


def site_schema_path(csv_path: str | Path) -> Path:
    """Where :func:`write_site_csvs` puts the schema of a site's CSV."""
    csv_path = Path(csv_path)
    return csv_path.with_name(csv_path.name.removesuffix(".csv") + ".schema.toml")


def _domain(file_name: str, rule: AdultSplit, target: bool) -> tuple[np.ndarray, np.ndarray]:
    """Complete rows of one domain, with their line numbers in the file. Complete
    means no '?' in any column of the ``sex`` encoding, which holds every column
    that has one, so each split partitions the same 45,222 rows."""
    table, lines = _read_raw(file_name)
    used = [ADULT_COLUMNS.index(c) for c in ADULT_SCHEMA.columns()]
    complete = ~(table[:, used] == MISSING).any(axis=1)
    chosen = rule.in_target(table[:, ADULT_COLUMNS.index(rule.column)])
    keep = complete & (chosen if target else ~chosen)
    return table[keep], lines[keep]


def _encode(rows: np.ndarray, lines: np.ndarray, file_name: str, schema: Schema) -> Dataset:
    # Lists of str, as csv gives load_dataset, so both paths parse identical input.
    columns = {name: rows[:, j].tolist() for j, name in enumerate(ADULT_COLUMNS)}
    return encode_table(columns, schema, source=file_name, row_numbers=lines)


@functools.cache
def _read_raw(file_name: str) -> tuple[np.ndarray, np.ndarray]:
    """All rows of a bundled Adult file as strings (n, 15), with line numbers;
    comment and blank lines skipped, the label's trailing '.' (adult.test)
    removed. Cached: the files never change and tests load them often."""
    rows, lines = [], []
    resource = resources.files(__package__).joinpath("adult", file_name)
    with resource.open("rb") as raw, gzip.open(raw, "rt", encoding="ascii", newline="") as text:
        for line, row in enumerate(csv.reader(text, skipinitialspace=True), start=1):
            if not row or row[0].startswith("|"):
                continue
            if len(row) != len(ADULT_COLUMNS):
                raise DataError(f"{file_name}: line {line} has {len(row)} fields, expected "
                                f"{len(ADULT_COLUMNS)}; the bundled file is damaged")
            row[-1] = row[-1].removesuffix(".")
            rows.append(row)
            lines.append(line)
    table, numbers = np.array(rows, dtype=str), np.array(lines)
    table.setflags(write=False)
    numbers.setflags(write=False)
    return table, numbers
