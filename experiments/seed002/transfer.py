"""Seed 002 simulation: target SSE ||beta-hat - beta||^2 of private transfer
from k = 0, 5, 10, 15, 20 public auxiliary datasets, against target-only DP
Frank-Wolfe (both routes) and target-only noisy GD, for epsilon in
{0.5, 1, 3, inf}, in two designs (``--design low|sparse|both``; data and
hyperparameters in ``designs.py``): the slides' low-dimensional uniform
design with migrated, covariate-shifted sources (d = 3 with the intercept),
and a sparse high-dimensional one (d = 200, 10 non-zero coefficients) where
the l1 geometry matters. Both have distractor sources besides the k
informative ones, so the informative set must be chosen (A_q with q = 2
against a DP Frank-Wolfe pilot on 30% of the budget).

Methods: ``transfer`` (``DPFrankWolfeTransfer``: offset ball around w_A of
the design's informative contrast level ||delta_k||_1 (the slides' h)),
``dp_fw`` (target-only DP Frank-Wolfe over main + pilot iterations, the
single holder's selection route), ``dp_fw_sum`` (the same through the
secure-sum route, the one several sites must use) and ``noisy_gd``
(target-only noisy projected GD). Every private run's epsilon is read back
from the site's ledger. Hyperparameters were set by hand, not tuned per
epsilon.

Sparse design, why the offset radius is the contrast level and not larger:
with radius 2 (the first committed run) transfer without noise had SSE 0.055
whatever k, worse than the target alone (0.022). Not for want of iterations
(400 instead of 100 steps: 0.059 -> 0.047 at k = 20): the noise-free
minimiser over a radius-2 ball around w_A fits the target's own noise (its
least-squares error has l1 norm about 3 at n0 = 2,000, d = 200), which is
larger than the error of w_A. A ball of the contrast's size keeps beta-hat
near w_A unless the target's evidence is strong (docs/papers/frank-wolfe-transfer.md).

Resumable: every finished fit (a unit keyed by design, method, k, epsilon and
run) is appended to ``results/<stem>_runs.csv`` at once (flushed and
fsync'd; experiments/run_log.py; the stem is ``transfer`` for the sparse
design, ``transfer_low`` for the low one), and a restart with the same
settings skips the units already there, recomputing nothing. Each unit's
data come from ``design.problem(run, k)`` (seeded by the run) and its noise
from a fresh federation seeded by the run, with a ledger of its own, so a
resumed table equals a from-scratch one. The summary CSV ``<stem>.csv`` (mean
and std over the runs in the log; column ``runs``) and the PNG are derived
from the log after every run and at the end. ``--quick`` and ``--networked``
add ``_quick`` / ``_networked`` to the stem. ``--tables-only`` prints the
tables of the units logged so far and changes nothing (the log is locked by
its writer; a reader does not need the lock). ``--networked``: every
federation is real site daemons on 127.0.0.1 (mutual TLS, secure
aggregation; experiments/seed000/federation.py); their noise comes from the
operating system, so networked numbers are not bit-reproducible.

Speed (profiled with cProfile; docs/papers/frank-wolfe-transfer.md): about 85% of a unit's time
is the site answering queries (the exact clipped-gradient sums and the ledger
charge), which is the library's hot path and not this script's to change.
This script avoids only work whose result is known to be equal: a run's data
are generated once per design, run and k (not once per epsilon and method),
and target-only DP Frank-Wolfe without noise is fitted once per run for both
routes (at epsilon = inf ``resolve_route`` sends both to the noise-free
secure sum with the same parameters and seed, so ``dp_fw_sum``'s row is a
copy of ``dp_fw``'s; a test checks the two fits are equal).

Run from the repository root:
    .venv/bin/python -m experiments.seed002.transfer [--design low|sparse|both] [--runs 100]
        [--quick] [--networked]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from experiments.grid import Runner, add_runner_options, run_logged, runner_from
from experiments.run_log import RunLog
from experiments.seed000.federation import Federations, add_networked_flag
from experiments.seed000.reporting import maybe_png, mean_std, print_table, write_csv
from experiments.seed002.designs import DESIGNS, Design, Problem
from privadapt import Dataset, LocalFederation, NoisyGD
from privadapt.common.federation import Federation
from privadapt.server.algorithms.frank_wolfe.estimators import DPFrankWolfe, DPFrankWolfeTransfer

EPSILONS = (0.5, 1.0, 3.0, math.inf)
AUXILIARY = (0, 5, 10, 15, 20)
DELTA = 1e-5
# Target-only DP Frank-Wolfe references: method -> route.
REFERENCES = {"dp_fw": "auto", "dp_fw_sum": "secure_sum", "noisy_gd": None}
LOG_KEY = ("design", "method", "k", "epsilon", "run")
LOG_HEADER = (*LOG_KEY, "sse", "ledger_epsilon", "informative_recall", "distractors_kept")
HEADER = ["design", "method", "k", "epsilon", "sse_mean", "sse_std", "ledger_epsilon_max",
          "informative_recall", "distractors_kept", "runs"]


@functools.lru_cache(maxsize=8)
def problem(design: str, run: int, num_auxiliary: int) -> Problem:
    """``DESIGNS[design].problem(run, k)``, generated once for the methods and
    epsilons of a run that use it; the arrays are read-only, so no fit can
    change what the next one sees."""
    beta, target, sources = DESIGNS[design].problem(run, num_auxiliary)
    for array in (beta, *target, *(a for source in sources for a in source)):
        array.setflags(write=False)
    return beta, target, sources


@contextlib.contextmanager
def federation(design: Design, target: tuple, epsilon: float, seed: int, ledgers: Path,
               sites: Federations | None = None) -> Iterator[Federation]:
    """The target at one site: in-process (seeded noise, a new ledger in the
    fresh directory ``ledgers``), or a site daemon when ``sites`` is networked
    (stopped when the next one starts)."""
    if sites is not None and sites.networked:
        yield sites.make(*target, private=not math.isinf(epsilon), epsilon_cap=10.0,
                         num_sites=1, tag=ledgers.name)
        return
    names = tuple(f"x{i}" for i in range(design.dim))
    options = {"allow_non_private": True} if math.isinf(epsilon) else {}
    with LocalFederation.from_datasets(
            [Dataset(*target, names)], epsilon_cap=math.inf if math.isinf(epsilon) else 10.0,
            delta_cap=1e-4, noise_seed=seed, ledger_dir=ledgers,
            **options) as local:
        yield local


def privacy(epsilon: float) -> dict:
    return {"epsilon": epsilon, "delta": 0.0 if math.isinf(epsilon) else DELTA}


def ledger_epsilon(model) -> float:
    return max(spent.job.epsilon for spent in model.privacy_.values())


def reference_run(design: Design, method: str, beta, target, epsilon, seed, ledgers,
                  iterations, daemons: Federations | None = None) -> tuple:
    """(SSE, ledger epsilon) of one target-only method: ``dp_fw`` (selection
    route), ``dp_fw_sum`` (secure-sum route) or ``noisy_gd``."""
    with federation(design, target, epsilon, seed, ledgers, daemons) as sites:
        if method == "noisy_gd":
            model = NoisyGD(iterations=iterations["gd"], **design.gd,
                            **privacy(epsilon)).fit(sites)
        else:
            model = DPFrankWolfe(radius=design.reference_radius,
                                 clip_norm=design.transfer["clip_norm"],
                                 iterations=iterations["main"] + iterations["pilot"],
                                 route=REFERENCES[method], **privacy(epsilon)).fit(sites)
    return float(np.sum((model.coef_ - beta) ** 2)), ledger_epsilon(model)


def transfer_run(design: Design, beta, target, sources, epsilon, seed, ledgers, iterations,
                 daemons: Federations | None = None) -> tuple:
    """(SSE, ledger epsilon, informative found, distractors kept)."""
    with federation(design, target, epsilon, seed, ledgers, daemons) as sites:
        model = DPFrankWolfeTransfer(iterations=iterations["main"],
                                     pilot_iterations=iterations["pilot"], **design.transfer,
                                     **privacy(epsilon)).fit(sites, public_sources=sources)
    informative = len(sources) - design.distractors
    found = sum(1 for k in model.informative_set_ if k < informative)
    kept = len(model.informative_set_) - found
    return (float(np.sum((model.coef_ - beta) ** 2)), ledger_epsilon(model),
            found / informative if informative else math.nan, kept)


def units(design: str, runs: int, epsilons: list[float], auxiliary: list[int]) -> list[dict]:
    """Every unit of one design, run by run (so a table cut short has whole
    runs): the target-only references have k = "", transfer one unit per k."""
    return [{"design": design, "method": method, "k": k, "epsilon": epsilon, "run": run}
            for run in range(runs) for epsilon in epsilons
            for method, k in [*((m, "") for m in REFERENCES),
                              *(("transfer", k) for k in auxiliary)]]


def twin(unit: dict) -> dict | None:
    """The unit whose fit is this one's (module docstring): without noise both
    DP Frank-Wolfe routes are the same secure-sum fit."""
    if unit["method"] != "dp_fw_sum" or not math.isinf(unit["epsilon"]):
        return None
    return {**unit, "method": "dp_fw"}


def from_twin(unit: dict, row: dict[str, str]) -> dict:
    """``unit``'s row, copied from its twin's logged ``row``."""
    return {**unit, "sse": float(row["sse"]), "ledger_epsilon": float(row["ledger_epsilon"]),
            "informative_recall": math.nan, "distractors_kept": math.nan}


def compute(unit: dict, ledgers: Path, iterations: dict, daemons: Federations | None
            ) -> dict:
    """One unit's log row. Its randomness depends on its own key only: the
    data on ``run`` (``problem``), the noise on the seed ``run`` of a fresh
    federation with a ledger of its own, whatever ran before."""
    method, k, epsilon, run = unit["method"], unit["k"], unit["epsilon"], unit["run"]
    design = DESIGNS[unit["design"]]
    ledger_dir = ledgers / f"{design.name}-{method}-k{k}-eps{epsilon:g}-run{run}"
    try:
        if method == "transfer":
            beta, target, sources = problem(design.name, run, k)
            sse, spent, recall, kept = transfer_run(design, beta, target, sources, epsilon,
                                                    run, ledger_dir, iterations, daemons)
        else:
            beta, target, _ = problem(design.name, run, 0)
            sse, spent = reference_run(design, method, beta, target, epsilon, run, ledger_dir,
                                       iterations, daemons)
            recall, kept = math.nan, math.nan
    finally:  # the unit's ledger is spent: nothing reads it again
        shutil.rmtree(ledger_dir, ignore_errors=True)
    return {**unit, "sse": sse, "ledger_epsilon": spent, "informative_recall": recall,
            "distractors_kept": kept}


def summary_rows(log: RunLog) -> list[list]:
    """One row per (design, method, k, epsilon): mean and std of the SSE over
    the runs in the log, taken in run order (so the table does not depend on
    the order the units finished in)."""
    cells: dict[tuple, list[dict]] = {}
    for row in log.rows():
        cells.setdefault((row["design"], row["method"], row["k"], float(row["epsilon"])),
                         []).append(row)
    rows = []
    for (design, method, k, epsilon), outcomes in sorted(cells.items(), key=_cell_order):
        outcomes.sort(key=lambda o: int(o["run"]))
        mean, std = mean_std([float(o["sse"]) for o in outcomes])
        recall = (mean_std([float(o["informative_recall"]) for o in outcomes])[0]
                  if method == "transfer" else math.nan)
        kept = (mean_std([float(o["distractors_kept"]) for o in outcomes])[0]
                if method == "transfer" else math.nan)
        rows.append([design, method, k, epsilon, mean, std,
                     max(float(o["ledger_epsilon"]) for o in outcomes), recall, kept,
                     len(outcomes)])
    return rows


def _cell_order(item: tuple) -> tuple:
    design, method, k, epsilon = item[0]
    return (design, epsilon, method == "transfer", method, int(k) if k else -1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--design", choices=["low", "sparse", "both"], default="both",
                        help="both: the low design's table first (it is cheap), then the "
                             "sparse one's")
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="one run, fewer iterations")
    parser.add_argument("--epsilons", type=float, nargs="+", default=list(EPSILONS))
    parser.add_argument("--auxiliary", type=int, nargs="+", default=list(AUXILIARY),
                        help="the k values (numbers of informative sources)")
    parser.add_argument("--out", type=Path, default=Path("experiments/seed002/results"))
    parser.add_argument("--tables-only", action="store_true",
                        help="print the tables of the runs logged so far; compute and write "
                             "nothing (safe while another process is writing the log)")
    add_networked_flag(parser)
    add_runner_options(parser)
    args = parser.parse_args(argv)
    started = time.time()
    for name in (["low", "sparse"] if args.design == "both" else [args.design]):
        run_design(DESIGNS[name], args)
    if not args.tables_only:
        print(f"total {time.time() - started:.0f} s")
    return 0


def run_design(design: Design, args: argparse.Namespace) -> None:
    """One design's table: the units not yet in its log, then its tables."""
    runs = 1 if args.quick else args.runs
    iterations = design.quick_iterations if args.quick else design.iterations
    stem = design.stem + ("_quick" if args.quick else "") + (
        "_networked" if args.networked else "")
    setting = (f"iterations {iterations['main']}+{iterations['pilot']} gd {iterations['gd']}; "
               + ("networked" if args.networked else "in-process"))
    log = RunLog(args.out / f"{stem}_runs.csv", LOG_HEADER, LOG_KEY, setting,
                 read_only=args.tables_only)
    if args.tables_only:
        print_tables(design, summary_rows(log))
        return
    started = time.time()
    runner = Runner(workers=1) if args.networked else runner_from(args)
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) \
            as scratch, Federations(Path(scratch), networked=args.networked) as daemons:
        print(f"target site: {daemons.description}", file=sys.stderr)

        def between_runs(number: int, todo: list[dict]) -> None:
            if number < len(todo) and todo[number]["run"] != todo[number - 1]["run"]:
                write_tables(log, args.out, stem)

        run_logged(log, units(design.name, runs, args.epsilons, args.auxiliary),
                   functools.partial(compute, ledgers=Path(scratch), iterations=iterations,
                                     daemons=daemons if args.networked else None),
                   runner, describe=lambda unit, _: (
                       f"{unit['method']} k={unit['k']} eps={unit['epsilon']:g} run "
                       f"{unit['run']} ({design.name})"),
                   twin=twin, from_twin=from_twin, after=between_runs)
    write_tables(log, args.out, stem)
    log.close()
    print_tables(design, summary_rows(log))
    print(f"design {design.name}: {time.time() - started:.0f} s", file=sys.stderr)


def print_tables(design: Design, rows: list[list]) -> None:
    """The summary table, then the one in docs/papers/frank-wolfe-transfer.md:
    mean +- std of the SSE per epsilon (rows) and method (columns)."""
    print(f"\n== design {design.name} ==")
    print_table(HEADER, rows)
    cells = {(r[1], r[2], r[3]): (r[4], r[5], r[9]) for r in rows}
    ks = sorted({int(r[2]) for r in rows if r[1] == "transfer"})
    columns = [*(("transfer", str(k), f"transfer k = {k}") for k in ks),
               ("dp_fw", "", "DP FW (selection)"), ("dp_fw_sum", "", "DP FW (secure sum)"),
               ("noisy_gd", "", "noisy GD")]
    print(f"\nmean +- std of the target SSE over the runs "
          f"({min((r[9] for r in rows), default=0)} to {max((r[9] for r in rows), default=0)})")
    print("| epsilon | " + " | ".join(c[2] for c in columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for epsilon in sorted({r[3] for r in rows}):
        texts = [f"{cells[(m, k, epsilon)][0]:.3g} +- {cells[(m, k, epsilon)][1]:.2g}"
                 if (m, k, epsilon) in cells else "" for m, k, _ in columns]
        print(f"| {epsilon:g} | " + " | ".join(texts) + " |")


def write_tables(log: RunLog, out: Path, stem: str) -> None:
    """The summary CSV and PNG, derived from the log (rewritten whole)."""
    rows = summary_rows(log)
    write_csv(out / f"{stem}.csv", HEADER, rows)
    maybe_png(out / f"{stem}.png", lambda plt: draw(plt, rows))


def draw(plt, rows: list[list]) -> None:
    """Transfer's mean SSE against k per epsilon, the target-only DP FW and
    noisy GD as horizontal lines of the same colour (cells present only)."""
    means = {(r[1], r[2], r[3]): r[4] for r in rows}
    for number, epsilon in enumerate(sorted({r[3] for r in rows})):
        colour = f"C{number}"
        ks = sorted(int(k) for method, k, e in means if method == "transfer" and e == epsilon)
        plt.plot(ks, [means[("transfer", str(k), epsilon)] for k in ks], "o-", color=colour,
                 label=f"transfer eps={epsilon:g}")
        for name, style in (("dp_fw", "--"), ("noisy_gd", ":")):
            if (name, "", epsilon) in means:
                plt.axhline(means[(name, "", epsilon)], linestyle=style, color=colour,
                            linewidth=1)
    plt.yscale("log")
    if rows:
        plt.title(f"seed 002, {rows[0][0]} design", fontsize=9)
    plt.xlabel("auxiliary datasets k")
    plt.ylabel("target SSE (dashed: DP FW, dotted: noisy GD)")
    plt.legend(fontsize=7)


if __name__ == "__main__":
    sys.exit(main())
