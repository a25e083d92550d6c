"""Small CSV files of the shape a user brings: a public source file, one
private file per site and a labelled test file, written by the tests that
run privadapt on "your own data".

The public source and the sites' target differ (a domain shift): in the
target the outcome depends on smoking and age more strongly, and the people
are younger. Every category of every site appears in the public file, as the
inferred schema needs.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HEADER = ("age", "bmi", "region", "smoker", "visits", "outcome")
REGIONS = ("north", "south", "east", "west")
LABEL = "outcome"


@dataclass(frozen=True)
class OwnDataFiles:
    public: Path
    sites: tuple[Path, ...]
    test: Path


def records(num: int, rng: np.random.Generator, target: bool) -> list[list[str]]:
    """``num`` rows of HEADER: the target's (younger, a stronger effect of
    smoking and age) or the public source's."""
    age = rng.integers(20, 60 if target else 90, num)
    bmi = np.round(rng.normal(26.0, 4.0, num), 1)
    region = rng.integers(0, len(REGIONS), num)
    smoker = rng.random(num) < 0.35
    visits = rng.poisson(3.0, num)
    strength = 2.5 if target else 0.5
    logit = (strength * (smoker - 0.35) + (0.08 if target else 0.01) * (age - 40)
             + 0.1 * (bmi - 26.0) + 0.3 * (region == 1) + 0.5 * rng.normal(size=num))
    outcome = np.where(logit > 0, "yes", "no")
    return [[str(a), str(b), REGIONS[r], "yes" if s else "no", str(v), o]
            for a, b, r, s, v, o in zip(age, bmi, region, smoker, visits, outcome,
                                        strict=True)]


def write_csv(path: Path, rows: list[list[str]]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(HEADER)
        writer.writerows(rows)
    return path


def write_own_data(directory: Path, *, num_sites: int = 3, site_records: int = 300,
                   public_records: int = 600, test_records: int = 400, seed: int = 0,
                   outlier: bool = True) -> OwnDataFiles:
    """``public.csv``, ``a.csv``, ``b.csv``, ... and ``test.csv`` in
    ``directory``; with ``outlier``, the first site's first record has an
    age of 1000000, far outside the public range."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    public = write_csv(directory / "public.csv", records(public_records, rng, target=False))
    sites = []
    for k in range(num_sites):
        rows = records(site_records, rng, target=True)
        if outlier and k == 0:
            rows[0][0] = "1000000"
        sites.append(write_csv(directory / f"{'abcdefgh'[k]}.csv", rows))
    test = write_csv(directory / "test.csv", records(test_records, rng, target=True))
    return OwnDataFiles(public, tuple(sites), test)
