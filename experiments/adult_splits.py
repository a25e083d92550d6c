"""Which UCI Adult split should ``make demo`` run?

On the ``sex`` split (men -> women) a model fitted on the public source alone
is as good as one fitted on the private target: the shift costs nothing, so no
adapter can show that it pays off. This script measures, for every candidate
split of :data:`privadapt.common.data.datasets.adult.SPLITS` (one public rule on one
raw column: sex, race, two age bands, two education levels, two workclass
groups, two marital-status groups, native country, blue-collar occupations),
the target test accuracy (the rule's rows of adult.test) of

* ``majority``: the public source's most common label (the demo's bar);
* ``source-only``: non-private logistic regression on the public source over
  the ball ||w|| <= 20 (``fit_linear``, the demo's source-only model);
* ``target-only``: the same learner on the private target at the demo's size,
  ``DEMO_RECORDS_PER_SITE`` = 1000 records at each of 3 sites, pooled (3000);
* ``pooled``: the same learner on source and that private target together;

over a few shuffles of the private target (``load_adult_domains`` seeds 0..4;
mean +- std; source-only does not depend on the shuffle). Only non-private
learners run here: no private adapter is fitted, so the choice below cannot
depend on how well one does.

Rule, fixed before the table was computed: the demo runs the split with the
largest gap (target-only minus source-only accuracy, mean over shuffles) among
splits whose private target has at least N = 3000 records (every one of the
demo's 3 sites full at its 1000-record cap, so each split is compared at the
same private size) and whose held-out target has at least M = 1000 records
(the binomial standard error of a test accuracy is then at most 1.6 points,
small enough that a gap of a few points is not test noise).

The table (experiments/results/adult_splits.csv, 5 shuffles) and its choice
are in docs/explanation/demo.md.

Run from the repository root:
    .venv/bin/python -m experiments.adult_splits [--shuffles 5] [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from privadapt.common.blas_threads import SINGLE_THREADED_BLAS

# Before numpy loads: on a shared machine OpenBLAS's busy-waiting threads made
# one source fit take 40 s instead of 1.5 s (common/blas_threads.py).
for _name, _value in SINGLE_THREADED_BLAS.items():
    os.environ.setdefault(_name, _value)

import numpy as np  # noqa: E402

from experiments.seed000.reporting import maybe_png, mean_std, print_table, write_csv  # noqa: E402
from privadapt.common.data.datasets.adult import (  # noqa: E402
    DEMO_RECORDS_PER_SITE,
    SPLITS,
    load_adult_domains,
)
from privadapt.server.algorithms.public_erm import accuracy, fit_linear  # noqa: E402

RADIUS = 20.0  # the demo's ball (api/simulation/simulate.py, experiments/demo.py)
DEMO_SITES = 3
MIN_PRIVATE_RECORDS = DEMO_SITES * DEMO_RECORDS_PER_SITE  # N
MIN_TEST_RECORDS = 1000  # M
QUICK_SPLITS = ("sex", "marital-not-married")  # the library default and the demo's
HEADER = ["split", "column", "source", "target", "source_records", "private_records",
          "test_records", "dim", "majority", "source_only", "target_only_mean",
          "target_only_std", "pooled_mean", "pooled_std", "gap_mean", "gap_std", "eligible",
          "shuffles"]


def evaluate(name: str, shuffles: int) -> list:
    """One row of the table for split ``name`` (see HEADER)."""
    split = SPLITS[name]
    runs = []
    for seed in range(shuffles):
        domains = load_adult_domains(num_sites=DEMO_SITES, seed=seed, split=name,
                                     max_records_per_site=DEMO_RECORDS_PER_SITE)
        test, source = domains.target_test, domains.source
        if seed == 0:  # the source and the test set do not depend on the shuffle
            majority = 1.0 if np.mean(source.labels > 0) > 0.5 else -1.0
            majority_accuracy = float(np.mean(test.labels == majority))
            source_only = accuracy(fit_linear(source.features, source.labels, "logistic",
                                              RADIUS), test.features, test.labels)
        features = np.concatenate([s.features for s in domains.target_sites])
        labels = np.concatenate([s.labels for s in domains.target_sites])
        target_only = accuracy(fit_linear(features, labels, "logistic", RADIUS),
                               test.features, test.labels)
        pooled = accuracy(fit_linear(np.concatenate([source.features, features]),
                                     np.concatenate([source.labels, labels]), "logistic",
                                     RADIUS), test.features, test.labels)
        runs.append((target_only, pooled))
    target_mean, target_std = mean_std([r[0] for r in runs])
    pooled_mean, pooled_std = mean_std([r[1] for r in runs])
    gap_mean, gap_std = mean_std([r[0] - source_only for r in runs])
    private_records = sum(s.num_records for s in domains.target_sites)
    eligible = private_records >= MIN_PRIVATE_RECORDS and test.num_records >= MIN_TEST_RECORDS
    return [name, split.column, split.source_label, split.target_label, source.num_records,
            private_records, test.num_records, source.dim, majority_accuracy, source_only,
            target_mean, target_std, pooled_mean, pooled_std, gap_mean, gap_std, eligible,
            shuffles]


def choose(rows: list[list]) -> str:
    """The rule of the module docstring: the eligible split with the largest
    mean gap (target-only minus source-only)."""
    eligible = [r for r in rows if r[HEADER.index("eligible")]]
    if not eligible:
        raise SystemExit("no split meets the size thresholds")
    return max(eligible, key=lambda r: r[HEADER.index("gap_mean")])[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shuffles", type=int, default=5)
    parser.add_argument("--quick", action="store_true",
                        help=f"2 shuffles of {' and '.join(QUICK_SPLITS)} only")
    parser.add_argument("--out", type=Path, default=Path("experiments/results"))
    args = parser.parse_args(argv)
    shuffles = 2 if args.quick else args.shuffles
    names = QUICK_SPLITS if args.quick else tuple(SPLITS)
    started = time.perf_counter()
    rows = []
    for name in names:
        rows.append(evaluate(name, shuffles))
        print(f"  {name} done ({time.perf_counter() - started:.0f} s)", flush=True)
    print(f"\nTarget test accuracy (the split's rows of adult.test); private target = "
          f"{DEMO_SITES} sites x at most {DEMO_RECORDS_PER_SITE} records, pooled; mean +- std "
          f"over {shuffles} shuffles; gap = target-only - source-only")
    shown = ["split", "private_records", "test_records", "majority", "source_only",
             "target_only_mean", "target_only_std", "pooled_mean", "pooled_std", "gap_mean",
             "eligible"]
    print_table(shown, [[r[HEADER.index(h)] for h in shown] for r in rows])
    chosen = choose(rows)
    print(f"\nRule: largest mean gap among splits with >= {MIN_PRIVATE_RECORDS} private and "
          f">= {MIN_TEST_RECORDS} held-out target records -> {chosen}")
    stem = "adult_splits_quick" if args.quick else "adult_splits"
    write_csv(args.out / f"{stem}.csv", HEADER, rows)

    def draw(pyplot) -> None:
        gaps = [100 * r[HEADER.index("gap_mean")] for r in rows]
        errors = [100 * r[HEADER.index("gap_std")] for r in rows]
        colours = ["tab:blue" if r[HEADER.index("eligible")] else "tab:gray" for r in rows]
        pyplot.barh([r[0] for r in rows], gaps, xerr=errors, color=colours)
        pyplot.axvline(0.0, color="black", linewidth=0.8)
        pyplot.xlabel("target-only minus source-only accuracy (points)")
        pyplot.title("Adult splits: what the shift costs (grey: too small)")

    maybe_png(args.out / f"{stem}.png", draw)
    print(f"Done in {time.perf_counter() - started:.1f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
