"""``make demo-local``: private adaptation on UCI Adult, in-process.

On the demo's Adult split (``DEMO_SPLIT``, chosen by experiments/adult_splits.py;
``--split`` names another): public source = the split's source rows of
adult.data (at the coordinator); private target = its target rows, split over
3 sites of at most ``DEMO_RECORDS_PER_SITE`` records, each with its own policy
and SQLite privacy ledger; held-out target = the target's rows of adult.test.
Prints the accuracy, balanced accuracy and ROC AUC on the held-out target of
the majority label, source-only (non-private), target-only non-private, noisy
projected gradient descent at epsilon = 1 and 3, and the private selection
(``SelectedAdaptation`` with ``make demo``'s ``DEMO_SELECTION``: a ball-GD
model around source-only and its free shrunk copy on each site's training
records, the free source-only model and public majority label, one private
release of their validation error counts choosing) at epsilon = 1 and 3,
then each site's epsilon as read from its own ledger.

The sites run in this process (``LocalFederation``, which aggregates through
the same fixed-point path as the networked federation of ``make demo``); each
fit is one job of the sites, so every ledger reports each job and composes them.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
import uuid
from pathlib import Path

from privadapt import LocalFederation, NoisyGD, PrivadaptError, load_adult_domains
from privadapt.cli.model_metrics import BINARY, model_metrics
from privadapt.common.data.datasets.adult import (
    DEMO_RECORDS_PER_SITE,
    DEMO_SPLIT,
    SPLITS,
    AdultDomains,
)
from privadapt.server.algorithms.gradient_descent.noisy_gd import IterationRecord
from privadapt.server.algorithms.model_selection.selected_adaptation import SelectedAdaptation
from privadapt.simulation.simulate import (
    DEMO_EPSILONS,
    DEMO_LEARNING,
    DEMO_SELECTION,
    free_model_figures,
)

SITE_NAMES = ("site-a", "site-b", "site-c")
DELTA = 1e-6
SITE_CAP_EPSILON, SITE_CAP_DELTA = 5.0, 1e-5
# make demo's learning settings (api/simulation/simulate.py says how they were checked).
HYPERPARAMETERS = {k: v for k, v in DEMO_LEARNING.items() if k != "loss"}
PROGRESS_EVERY = 25


def make_federation(domains: AdultDomains, workdir: Path, private: bool) -> LocalFederation:
    """The private sites keep their ledgers in ``workdir``; the simulation
    sites (infinite cap, non-private answers allowed) in ``workdir/simulation``."""
    if private:
        return LocalFederation.from_datasets(
            domains.target_sites, names=SITE_NAMES, epsilon_cap=SITE_CAP_EPSILON,
            delta_cap=SITE_CAP_DELTA, ledger_dir=workdir, min_noise_multiplier=0.5)
    return LocalFederation.from_datasets(
        domains.target_sites, names=SITE_NAMES, epsilon_cap=math.inf, delta_cap=SITE_CAP_DELTA,
        ledger_dir=workdir / "simulation", allow_non_private=True)


def progress_printer(label: str):
    def report(record: IterationRecord) -> None:
        print(
            f"  [{label}] iteration {record.iteration:>3}/{HYPERPARAMETERS['iterations']}  "
            f"|gradient| {record.gradient_norm:.4f}  |w| {record.weights_norm:.3f}",
            flush=True,
        )

    return report


def run(workdir: Path, split: str = DEMO_SPLIT) -> int:
    started = time.perf_counter()
    run_id = uuid.uuid4().hex[:6]  # job ids are unique per run: ledgers refuse replays
    domains = load_adult_domains(num_sites=len(SITE_NAMES), seed=0, split=split,
                                 max_records_per_site=DEMO_RECORDS_PER_SITE)
    source_label, target_label = domains.split.source_label, domains.split.target_label
    sizes = ", ".join(f"{n}={d.num_records}" for n, d in zip(SITE_NAMES, domains.target_sites,
                                                                strict=True))
    print(f"UCI Adult, split {split}: public source ({source_label}) "
          f"{domains.source.num_records} records; private target ({target_label}) over 3 "
          f"sites: {sizes}; held-out target {domains.target_test.num_records}; "
          f"d={domains.source.dim}")
    test = domains.target_test

    def figures(weights) -> tuple[float, float, float]:
        got = model_metrics(weights, test.features, test.labels, BINARY)
        return got["accuracy"], got["balanced_accuracy"], got["roc_auc"]

    # The bars every method must clear (make demo's: the majority label and
    # the source-only model).
    rows: list[tuple[str, str, tuple[float, float, float]]] = [
        (label, "-", (free["accuracy"], free["balanced_accuracy"], free["roc_auc"]))
        for label, free in zip(("majority class (public source)", "source only (public data)"),
                               free_model_figures(domains), strict=True)]

    simulation = make_federation(domains, workdir, private=False)
    model = NoisyGD(loss="logistic", epsilon=math.inf, delta=DELTA, **HYPERPARAMETERS)
    model.fit(simulation.new_job(f"target-only-{run_id}"),
              progress=progress_printer("non-private"), progress_every=PROGRESS_EVERY)
    rows.append(("target only, non-private", "inf", figures(model.coef_)))

    private = make_federation(domains, workdir, private=True)
    for epsilon in DEMO_EPSILONS:
        model.set_params(epsilon=epsilon)
        model.fit(private.new_job(f"noisy-gd-eps{epsilon:g}-{run_id}"),
                  progress=progress_printer(f"epsilon={epsilon:g}"), progress_every=PROGRESS_EVERY)
        rows.append((f"noisy GD, target only (z={model.noise_multiplier_:.1f})", f"{epsilon:g}",
                     figures(model.coef_)))

    for epsilon in DEMO_EPSILONS:
        selection = SelectedAdaptation(epsilon=epsilon, delta=DELTA, seed=0, **DEMO_SELECTION)
        selection.fit(private.new_job(f"selected-eps{epsilon:g}-{run_id}"),
                      public_source=domains.source)
        rows.append((f"private selection: {selection.chosen_}", f"{epsilon:g}",
                     figures(selection.coef_)))

    print(f"\nTarget test figures ({target_label}, adult.test)")
    print(f"  {'method':<56} {'epsilon':>8} {'accuracy':>9} {'balanced':>9} {'ROC AUC':>8}")
    for method, epsilon_text, (acc, balanced, auc) in rows:
        print(f"  {method:<56} {epsilon_text:>8} {acc:>9.4f} {balanced:>9.4f} {auc:>8.4f}")

    print(f"\nPrivacy spent, read from each site's own ledger (cap epsilon={SITE_CAP_EPSILON:g}, "
          f"delta={SITE_CAP_DELTA:g})")
    for site in private.sites:
        total = site.ledger.spent()
        jobs = ", ".join(
            f"{job} {site.ledger.spent_by_job(job, DELTA).epsilon:.3f}"
            for job in site.ledger.jobs()
        )
        print(f"  {site.name}: per job at delta={DELTA:g}: {jobs}; all jobs together "
              f"{total.epsilon:.3f} at delta={total.delta:g} ({total.method.value.upper()})")
    print(f"\nLedgers are in {workdir}; inspect one with:\n"
          f"  .venv/bin/privadapt ledger show --site-db {workdir / 'site-a.ledger.db'}")
    print(f"Done in {time.perf_counter() - started:.1f} s.")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path,
                        help="where the site ledgers go (default: a new temporary directory)")
    parser.add_argument("--split", default=DEMO_SPLIT, choices=sorted(SPLITS),
                        help=f"the UCI Adult split (default {DEMO_SPLIT})")
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="privadapt-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        return run(workdir, args.split)
    except PrivadaptError as err:
        print(f"demo stopped: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
