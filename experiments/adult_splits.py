"""Which UCI Adult split should ``make demo`` run?

On the ``sex`` split (men -> women) a model fitted on the public source alone
is as good as one fitted on the private target: the shift costs nothing, so no
adapter can show that it pays off. This script measures, for every candidate
split of :data:`privadapt.common.data.datasets.adult.SPLITS` (one public rule on one
raw column: sex, race, two age bands, two education levels, two workclass
groups, two marital-status groups, native country, blue-collar occupations),
the balanced accuracy (mean over the two labels of the share predicted right;
the majority label scores 0.5 whatever the labels' mix, so a model that beats
it has learnt something) of

* ``source-only``: non-private logistic regression on the public source over
  the ball ||w|| <= 20 (``fit_linear``, the demo's source-only model);
* ``target-only``: the same learner on the private target at the demo's size,
  ``DEMO_RECORDS_PER_SITE`` = 1000 records at each of 3 sites, pooled (3000);
* ``pooled``: the same learner on source and that private target together;

over a few shuffles of the private target (``load_adult_domains`` seeds 0..4;
mean +- std; the unheld rows, and so source-only's figure on them, change
with the shuffle too). Only non-private
learners run here: no private adapter is fitted, so the choice below cannot
depend on how well one does.

Rule, fixed before the table was computed: the demo runs the split with the
largest gap (target-only minus source-only balanced accuracy, mean over
shuffles) **on the target rows of adult.data that no site holds** (the
"unheld" rows, past each site's 1000-record cap): adult.test is never looked
at to choose. Eligible: a private target of at least N = 3000 records (every
one of the demo's 3 sites full at its cap, so each split is compared at the
same private size), at least M = 1000 unheld rows to choose on and M held-out
(adult.test) rows to report on (the binomial standard error of a share is then
at most 1.6 points, small enough that a gap of several points is not noise).
The held-out figures (accuracy and balanced accuracy on the split's rows of
adult.test, and the majority label's accuracy) are reported beside it.

The table (experiments/results/adult_splits.csv, 5 shuffles) and its choice
are in docs/explanation/demo.md.

Run from the repository root:
    .venv/bin/python -m experiments.adult_splits [--shuffles 5] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from privadapt.common.blas_threads import default_to_single_threaded_blas

# Before numpy loads: on a shared machine OpenBLAS's busy-waiting threads made
# one source fit take 40 s instead of 1.5 s (common/blas_threads.py).
default_to_single_threaded_blas()

import numpy as np  # noqa: E402

from experiments.seed000.reporting import maybe_png, mean_std, print_table, write_csv  # noqa: E402
from privadapt.cli.model_metrics import balanced_accuracy  # noqa: E402
from privadapt.common.data.datasets.adult import (  # noqa: E402
    DEMO_RECORDS_PER_SITE,
    SPLITS,
    load_adult_domains,
)
from privadapt.server.algorithms.public_erm import fit_linear  # noqa: E402

RADIUS = 20.0  # the demo's ball (api/simulation/simulate.py, experiments/demo.py)
DEMO_SITES = 3
MIN_PRIVATE_RECORDS = DEMO_SITES * DEMO_RECORDS_PER_SITE  # N
MIN_TEST_RECORDS = 1000  # M
QUICK_SPLITS = ("sex", "education-bachelors-plus")  # the library default and the demo's
HEADER = ["split", "column", "source", "target", "source_records", "private_records",
          "unheld_records", "test_records", "dim", "source_only_balanced",
          "target_only_balanced_mean", "target_only_balanced_std", "pooled_balanced_mean",
          "gap_mean", "gap_std", "test_majority", "test_source_only",
          "test_source_only_balanced", "test_target_only_mean", "test_target_only_balanced_mean",
          "eligible", "shuffles"]


def _scores(weights: np.ndarray, data) -> tuple[float, float]:
    """(accuracy, balanced accuracy) of the sign of x.w on ``data``."""
    predictions = np.where(data.features @ weights >= 0, 1.0, -1.0)
    return (float(np.mean(predictions == data.labels)),
            balanced_accuracy(data.labels, predictions))


def evaluate(name: str, shuffles: int) -> list:
    """One row of the table for split ``name`` (see HEADER)."""
    split = SPLITS[name]
    runs = []
    for seed in range(shuffles):
        domains = load_adult_domains(num_sites=DEMO_SITES, seed=seed, split=name,
                                     max_records_per_site=DEMO_RECORDS_PER_SITE)
        test, source, unheld = domains.target_test, domains.source, domains.target_unheld
        if seed == 0:  # the source and the test set do not depend on the shuffle
            majority = 1.0 if np.mean(source.labels > 0) > 0.5 else -1.0
            test_majority = float(np.mean(test.labels == majority))
            source_only = fit_linear(source.features, source.labels, "logistic", RADIUS)
            test_source, test_source_balanced = _scores(source_only, test)
        features = np.concatenate([s.features for s in domains.target_sites])
        labels = np.concatenate([s.labels for s in domains.target_sites])
        target_only = fit_linear(features, labels, "logistic", RADIUS)
        pooled = fit_linear(np.concatenate([source.features, features]),
                            np.concatenate([source.labels, labels]), "logistic", RADIUS)
        unheld_figures = ((_scores(source_only, unheld)[1], _scores(target_only, unheld)[1],
                           _scores(pooled, unheld)[1]) if unheld is not None
                          else (np.nan, np.nan, np.nan))
        runs.append((*unheld_figures, *_scores(target_only, test)))
    # The unheld rows change with the shuffle, so source-only's figure does too.
    source_balanced, _ = mean_std([r[0] for r in runs])
    target_mean, target_std = mean_std([r[1] for r in runs])
    pooled_mean, _ = mean_std([r[2] for r in runs])
    gap_mean, gap_std = mean_std([r[1] - r[0] for r in runs])
    test_target_mean, _ = mean_std([r[3] for r in runs])
    test_target_balanced, _ = mean_std([r[4] for r in runs])
    private_records = sum(s.num_records for s in domains.target_sites)
    unheld_records = 0 if unheld is None else unheld.num_records
    eligible = (private_records >= MIN_PRIVATE_RECORDS and unheld_records >= MIN_TEST_RECORDS
                and test.num_records >= MIN_TEST_RECORDS)
    return [name, split.column, split.source_label, split.target_label, source.num_records,
            private_records, unheld_records, test.num_records, source.dim, source_balanced,
            target_mean, target_std, pooled_mean, gap_mean, gap_std, test_majority,
            test_source, test_source_balanced, test_target_mean, test_target_balanced,
            eligible, shuffles]


def choose(rows: list[list]) -> str:
    """The rule of the module docstring: the eligible split with the largest
    mean balanced-accuracy gap (target-only minus source-only) on the unheld rows."""
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
    print(f"\nBalanced accuracy on the target rows of adult.data no site holds (unheld); "
          f"private target = {DEMO_SITES} sites x at most {DEMO_RECORDS_PER_SITE} records, "
          f"pooled; mean +- std over {shuffles} shuffles; gap = target-only - source-only; "
          f"test_* = the split's rows of adult.test (reported, not used to choose)")
    shown = ["split", "private_records", "unheld_records", "test_records",
             "source_only_balanced", "target_only_balanced_mean", "gap_mean", "test_majority",
             "test_source_only", "test_target_only_mean", "eligible"]
    print_table(shown, [[r[HEADER.index(h)] for h in shown] for r in rows])
    chosen = choose(rows)
    print(f"\nRule: largest mean balanced-accuracy gap on the unheld rows among splits with "
          f">= {MIN_PRIVATE_RECORDS} private, >= {MIN_TEST_RECORDS} unheld and "
          f">= {MIN_TEST_RECORDS} held-out target records -> {chosen}")
    stem = "adult_splits_quick" if args.quick else "adult_splits"
    write_csv(args.out / f"{stem}.csv", HEADER, rows)

    def draw(pyplot) -> None:
        gaps = [100 * r[HEADER.index("gap_mean")] for r in rows]
        errors = [100 * r[HEADER.index("gap_std")] for r in rows]
        colours = ["tab:blue" if r[HEADER.index("eligible")] else "tab:gray" for r in rows]
        pyplot.barh([r[0] for r in rows], gaps, xerr=errors, color=colours)
        pyplot.axvline(0.0, color="black", linewidth=0.8)
        pyplot.xlabel("target-only minus source-only balanced accuracy, unheld rows (points)")
        pyplot.title("Adult splits: what the shift costs (grey: too small)")

    maybe_png(args.out / f"{stem}.png", draw)
    print(f"Done in {time.perf_counter() - started:.1f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
