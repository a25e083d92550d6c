"""Seed 002 simulation: target SSE ||beta-hat - beta||^2 of private transfer
from k = 0, 5, 10, 15, 20 public auxiliary datasets, against target-only DP
Frank-Wolfe (both routes) and target-only noisy GD, for epsilon in
{0.5, 1, 3, inf}.

Data (the slides' uniform designs, in the sparse high-dimensional setting
where the l1 geometry matters): d = 200 features uniform on [-1, 1], beta with
10 non-zero entries 0.5 (||beta||_1 = 5), labels x.beta + N(0, 0.5^2). The
private target holds n0 = 2,000 records at one site. The k informative
("migrated") sources have w_k = beta + delta_k with 10 entries +-0.02
(||delta_k||_1 = 0.2) and 1,000 records each; 5 distractor sources with
w = beta + 0.5 on every entry (||delta||_2 = 7.1) are always present, so the
informative set must be chosen (A_q with q = 2, threshold 3, against a DP
Frank-Wolfe pilot on 30% of the budget).

Methods: ``transfer`` (``DPFrankWolfeTransfer``: offset ball around w_A of
radius 0.2, the design's informative contrast level ||delta_k||_1 (the
slides' h), 100 + 50 pilot iterations), ``dp_fw`` (target-only DP Frank-Wolfe,
radius 6, 150 iterations, the single holder's selection route), ``dp_fw_sum``
(the same through the secure-sum route, the one several sites must use) and
``noisy_gd`` (target-only noisy projected GD, radius 2, clip 5, eta 1, 50
iterations). Every private run's epsilon is read back from the site's ledger.
Hyperparameters were set by hand, not tuned per epsilon.

Why the offset radius is the contrast level and not larger: with radius 2
(the first committed run) transfer without noise had SSE 0.055 whatever k,
worse than the target alone (0.022). Not for want of iterations (400 instead
of 100 steps: 0.059 -> 0.047 at k = 20): the noise-free minimiser over a
radius-2 ball around w_A fits the target's own noise (its least-squares error
has l1 norm about 3 at n0 = 2,000, d = 200), which is larger than the error
of w_A. A ball of the contrast's size keeps beta-hat near w_A unless the
target's evidence is strong (README, seed 002).

Resumable: every finished fit (a unit keyed by design, method, k, epsilon and
run) is appended to ``results/transfer_runs.csv`` at once (flushed and
fsync'd; experiments/run_log.py), and a restart with the same settings skips
the units already there, recomputing nothing. Each unit's data come from
``problem(run, k)`` (seeded by the run) and its noise from a fresh federation
seeded by the run, with a ledger of its own, so a resumed table equals a
from-scratch one. The summary CSV ``transfer.csv`` (mean and std over the
runs in the log; column ``runs``) and the PNG are derived from the log after
every run and at the end. ``--quick`` and ``--networked`` write
``transfer_quick*`` / ``transfer_networked*`` instead. ``--tables-only``
prints the tables of the units logged so far and changes nothing (the log
is locked by its writer; a reader does not need the lock). ``--networked``:
every federation is real site daemons on 127.0.0.1 (mutual TLS, secure
aggregation; experiments/seed000/federation.py); their noise comes from the
operating system, so networked numbers are not bit-reproducible.

Run from the repository root:
    .venv/bin/python -m experiments.seed002.transfer [--runs 100] [--quick] [--networked]
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from experiments.run_log import RunLog
from experiments.seed000.federation import Federations, add_networked_flag
from experiments.seed000.reporting import maybe_png, mean_std, print_table, write_csv
from privadapt import Dataset, LocalFederation, NoisyGD
from privadapt.common.federation import Federation
from privadapt.server.estimators import DPFrankWolfe, DPFrankWolfeTransfer

EPSILONS = (0.5, 1.0, 3.0, math.inf)
AUXILIARY = (0, 5, 10, 15, 20)
DELTA = 1e-5
DIM, NONZERO, TARGET_N, SOURCE_N, DISTRACTORS, NOISE = 200, 10, 2000, 1000, 5, 0.5
CLIP = 2.0
CONTRAST, CONTRAST_ENTRIES = 0.02, 10
CONTRAST_L1 = CONTRAST * CONTRAST_ENTRIES  # ||delta_k||_1 of every informative source
TRANSFER = {"radius": CONTRAST_L1, "pilot_radius": 6.0, "informative_threshold": 3.0, "norm": "l2",
            "clip_norm": CLIP, "pilot_fraction": 0.3}
GD = {"loss": "squared", "learning_rate": 1.0, "radius": 2.0, "clip_norm": 5.0}
# Target-only DP Frank-Wolfe references: method -> route.
REFERENCES = {"dp_fw": "auto", "dp_fw_sum": "secure_sum", "noisy_gd": None}
DESIGN = "sparse"  # the one design built: d = 200, 10 non-zero, uniform features
LOG_KEY = ("design", "method", "k", "epsilon", "run")
LOG_HEADER = (*LOG_KEY, "sse", "ledger_epsilon", "informative_recall", "distractors_kept")
HEADER = ["design", "method", "k", "epsilon", "sse_mean", "sse_std", "ledger_epsilon_max",
          "informative_recall", "distractors_kept", "runs"]


def sample(n: int, weights: np.ndarray, rng: np.random.Generator) -> tuple:
    features = rng.uniform(-1, 1, size=(n, len(weights)))
    return features, features @ weights + NOISE * rng.normal(size=n)


def problem(run: int, num_auxiliary: int) -> tuple:
    """beta, the target sample, and the sources (informative first)."""
    rng = np.random.default_rng(run)
    beta = np.zeros(DIM)
    beta[rng.choice(DIM, NONZERO, replace=False)] = 0.5
    target = sample(TARGET_N, beta, rng)
    sources = []
    for _ in range(num_auxiliary):
        contrast = np.zeros(DIM)
        contrast[rng.choice(DIM, CONTRAST_ENTRIES, replace=False)] = rng.choice(
            [-CONTRAST, CONTRAST], CONTRAST_ENTRIES)
        sources.append(sample(SOURCE_N, beta + contrast, rng))
    sources += [sample(SOURCE_N, beta + 0.5, rng) for _ in range(DISTRACTORS)]
    return beta, target, sources


@contextlib.contextmanager
def federation(target: tuple, epsilon: float, seed: int, ledgers: Path,
               sites: Federations | None = None) -> Iterator[Federation]:
    """The target at one site: in-process (seeded noise, a new ledger in the
    fresh directory ``ledgers``), or a site daemon when ``sites`` is networked
    (stopped when the next one starts)."""
    if sites is not None and sites.networked:
        yield sites.make(*target, private=not math.isinf(epsilon), epsilon_cap=10.0,
                         num_sites=1, tag=ledgers.name)
        return
    names = tuple(f"x{i}" for i in range(DIM))
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


def reference_run(method: str, beta, target, epsilon, seed, ledgers, iterations,
                  daemons: Federations | None = None) -> tuple:
    """(SSE, ledger epsilon) of one target-only method: ``dp_fw`` (selection
    route), ``dp_fw_sum`` (secure-sum route) or ``noisy_gd``."""
    with federation(target, epsilon, seed, ledgers, daemons) as sites:
        if method == "noisy_gd":
            model = NoisyGD(iterations=iterations["gd"], **GD, **privacy(epsilon)).fit(sites)
        else:
            model = DPFrankWolfe(radius=TRANSFER["pilot_radius"], clip_norm=CLIP,
                                 iterations=iterations["main"] + iterations["pilot"],
                                 route=REFERENCES[method], **privacy(epsilon)).fit(sites)
    return float(np.sum((model.coef_ - beta) ** 2)), ledger_epsilon(model)


def transfer_run(beta, target, sources, epsilon, seed, ledgers, iterations,
                 daemons: Federations | None = None) -> tuple:
    """(SSE, ledger epsilon, informative found, distractors kept)."""
    with federation(target, epsilon, seed, ledgers, daemons) as sites:
        model = DPFrankWolfeTransfer(iterations=iterations["main"],
                                     pilot_iterations=iterations["pilot"], **TRANSFER,
                                     **privacy(epsilon)).fit(sites, public_sources=sources)
    informative = len(sources) - DISTRACTORS
    found = sum(1 for k in model.informative_set_ if k < informative)
    kept = len(model.informative_set_) - found
    return (float(np.sum((model.coef_ - beta) ** 2)), ledger_epsilon(model),
            found / informative if informative else math.nan, kept)


def units(runs: int, epsilons: list[float], auxiliary: list[int]) -> list[dict]:
    """Every unit of work, run by run (so a table cut short has whole runs):
    the target-only references have k = "", transfer one unit per k."""
    return [{"design": DESIGN, "method": method, "k": k, "epsilon": epsilon, "run": run}
            for run in range(runs) for epsilon in epsilons
            for method, k in [*((m, "") for m in REFERENCES),
                              *(("transfer", k) for k in auxiliary)]]


def compute(unit: dict, ledgers: Path, iterations: dict, daemons: Federations | None) -> dict:
    """One unit's log row. Its randomness depends on its own key only: the
    data on ``run`` (``problem``), the noise on the seed ``run`` of a fresh
    federation with a ledger of its own, whatever ran before."""
    method, k, epsilon, run = unit["method"], unit["k"], unit["epsilon"], unit["run"]
    ledger_dir = ledgers / f"{unit['design']}-{method}-k{k}-eps{epsilon:g}-run{run}"
    if method == "transfer":
        beta, target, sources = problem(run, k)
        sse, spent, recall, kept = transfer_run(beta, target, sources, epsilon, run,
                                                ledger_dir, iterations, daemons)
    else:
        beta, target, _ = problem(run, 0)
        sse, spent = reference_run(method, beta, target, epsilon, run, ledger_dir,
                                   iterations, daemons)
        recall, kept = math.nan, math.nan
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
    args = parser.parse_args(argv)
    runs = 1 if args.quick else args.runs
    iterations = ({"main": 30, "pilot": 15, "gd": 20} if args.quick
                  else {"main": 100, "pilot": 50, "gd": 50})
    stem = "transfer" + ("_quick" if args.quick else "") + ("_networked" if args.networked else "")
    setting = (f"iterations {iterations['main']}+{iterations['pilot']} gd {iterations['gd']}; "
               + ("networked" if args.networked else "in-process"))
    log = RunLog(args.out / f"{stem}_runs.csv", LOG_HEADER, LOG_KEY, setting,
                 read_only=args.tables_only)
    if args.tables_only:
        print_tables(summary_rows(log))
        return 0
    todo = [u for u in units(runs, args.epsilons, args.auxiliary)
            if (u["design"], u["method"], u["k"], u["epsilon"], u["run"]) not in log]
    print(f"{log.path}: {len(log)} units already done, {len(todo)} to do", file=sys.stderr,
          flush=True)
    started = time.time()
    if todo:
        with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) \
                as scratch, Federations(Path(scratch), networked=args.networked) as daemons:
            print(f"target site: {daemons.description}", file=sys.stderr)
            for number, unit in enumerate(todo, 1):
                log.append(compute(unit, Path(scratch), iterations, daemons))
                elapsed = time.time() - started
                print(f"[{number}/{len(todo)}] {unit['method']} k={unit['k']} "
                      f"eps={unit['epsilon']:g} run {unit['run']} done ({elapsed:.0f} s, about "
                      f"{elapsed / number * (len(todo) - number):.0f} s left)", file=sys.stderr,
                      flush=True)
                if number < len(todo) and todo[number]["run"] != unit["run"]:
                    write_tables(log, args.out, stem)
    write_tables(log, args.out, stem)
    print_tables(summary_rows(log))
    print(f"total {time.time() - started:.0f} s")
    return 0


def print_tables(rows: list[list]) -> None:
    """The summary table, then the README's: mean +- std of the SSE per
    epsilon (rows) and method (columns)."""
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
    plt.xlabel("auxiliary datasets k")
    plt.ylabel("target SSE (dashed: DP FW, dotted: noisy GD)")
    plt.legend(fontsize=7)


if __name__ == "__main__":
    sys.exit(main())
