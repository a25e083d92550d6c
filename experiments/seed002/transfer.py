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

The results CSV (and PNG) are rewritten after every run, so a run cut short
leaves the table of the runs that finished (column ``runs``). ``--networked``:
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
    """The target at one site: in-process (seeded noise), or a site daemon
    when ``sites`` is networked (stopped when the next one starts)."""
    if sites is not None and sites.networked:
        yield sites.make(*target, private=not math.isinf(epsilon), epsilon_cap=10.0,
                         num_sites=1, tag=ledgers.name)
        return
    names = tuple(f"x{i}" for i in range(DIM))
    options = {"allow_non_private": True} if math.isinf(epsilon) else {}
    with LocalFederation.from_datasets(
            [Dataset(*target, names)], epsilon_cap=math.inf if math.isinf(epsilon) else 10.0,
            delta_cap=1e-4, noise_seed=seed, ledger_dir=ledgers / f"run-{seed}-{epsilon}",
            **options) as local:
        yield local


def privacy(epsilon: float) -> dict:
    return {"epsilon": epsilon, "delta": 0.0 if math.isinf(epsilon) else DELTA}


def ledger_epsilon(model) -> float:
    return max(spent.job.epsilon for spent in model.privacy_.values())


def references(beta, target, epsilon, seed, ledgers, iterations,
               daemons: Federations | None = None) -> dict[str, tuple]:
    """(SSE, ledger epsilon) of each target-only method."""
    results = {}
    for name, route in (("dp_fw", "auto"), ("dp_fw_sum", "secure_sum")):
        with federation(target, epsilon, seed, ledgers / name, daemons) as sites:
            model = DPFrankWolfe(radius=TRANSFER["pilot_radius"], clip_norm=CLIP,
                                 iterations=iterations["main"] + iterations["pilot"],
                                 route=route, **privacy(epsilon)).fit(sites)
        results[name] = (float(np.sum((model.coef_ - beta) ** 2)), ledger_epsilon(model))
    with federation(target, epsilon, seed, ledgers / "gd", daemons) as sites:
        model = NoisyGD(iterations=iterations["gd"], **GD, **privacy(epsilon)).fit(sites)
    results["noisy_gd"] = (float(np.sum((model.coef_ - beta) ** 2)), ledger_epsilon(model))
    return results


def transfer_run(beta, target, sources, epsilon, seed, ledgers, iterations,
                 daemons: Federations | None = None) -> tuple:
    """(SSE, ledger epsilon, informative found, distractors kept)."""
    with federation(target, epsilon, seed, ledgers / "transfer", daemons) as sites:
        model = DPFrankWolfeTransfer(iterations=iterations["main"],
                                     pilot_iterations=iterations["pilot"], **TRANSFER,
                                     **privacy(epsilon)).fit(sites, public_sources=sources)
    informative = len(sources) - DISTRACTORS
    found = sum(1 for k in model.informative_set_ if k < informative)
    kept = len(model.informative_set_) - found
    return (float(np.sum((model.coef_ - beta) ** 2)), ledger_epsilon(model),
            found / informative if informative else math.nan, kept)


HEADER = ["method", "k", "epsilon", "sse_mean", "sse_std", "ledger_epsilon_max",
          "informative_recall", "distractors_kept", "runs"]


def summary_rows(cells: dict[tuple, list[tuple]]) -> list[list]:
    """One row per (method, k, epsilon): mean and std of the SSE over the runs."""
    rows = []
    for (method, k, epsilon), outcomes in cells.items():
        mean, std = mean_std([o[0] for o in outcomes])
        recall = mean_std([o[2] for o in outcomes])[0] if method == "transfer" else math.nan
        kept = mean_std([o[3] for o in outcomes])[0] if method == "transfer" else math.nan
        rows.append([method, "" if k is None else k, epsilon, mean, std,
                     max(o[1] for o in outcomes), recall, kept, len(outcomes)])
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="one run, fewer iterations")
    parser.add_argument("--epsilons", type=float, nargs="+", default=list(EPSILONS))
    parser.add_argument("--auxiliary", type=int, nargs="+", default=list(AUXILIARY),
                        help="the k values (numbers of informative sources)")
    parser.add_argument("--out", type=Path, default=Path("experiments/seed002/results"))
    add_networked_flag(parser)
    args = parser.parse_args(argv)
    runs = 1 if args.quick else args.runs
    iterations = ({"main": 30, "pilot": 15, "gd": 20} if args.quick
                  else {"main": 100, "pilot": 50, "gd": 50})
    started = time.time()
    cells: dict[tuple, list[tuple]] = {}
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) \
            as scratch, Federations(Path(scratch), networked=args.networked) as daemons:
        print(f"target site: {daemons.description}", file=sys.stderr)
        ledgers = Path(scratch)
        for run in range(runs):
            for epsilon in args.epsilons:
                beta, target, _ = problem(run, 0)
                for name, outcome in references(beta, target, epsilon, run, ledgers,
                                                iterations, daemons).items():
                    cells.setdefault((name, None, epsilon), []).append(outcome)
                for k in args.auxiliary:
                    beta, target, sources = problem(run, k)
                    cells.setdefault(("transfer", k, epsilon), []).append(transfer_run(
                        beta, target, sources, epsilon, run, ledgers, iterations, daemons))
            # Rewritten after every run: a long run cut short keeps what finished.
            write_csv(args.out / "transfer.csv", HEADER, summary_rows(cells))
            maybe_png(args.out / "transfer.png",
                      lambda plt: draw(plt, cells, args.epsilons, args.auxiliary))
            print(f"run {run + 1}/{runs} done ({time.time() - started:.0f} s)", file=sys.stderr)
    print_table(HEADER, summary_rows(cells))
    print(f"total {time.time() - started:.0f} s")
    return 0


def draw(plt, cells: dict, epsilons: list[float], auxiliary: list[int]) -> None:
    for number, epsilon in enumerate(epsilons):
        colour = f"C{number}"
        means = [np.mean([o[0] for o in cells[("transfer", k, epsilon)]]) for k in auxiliary]
        plt.plot(auxiliary, means, "o-", color=colour, label=f"transfer eps={epsilon:g}")
        for name, style in (("dp_fw", "--"), ("noisy_gd", ":")):
            level = np.mean([o[0] for o in cells[(name, None, epsilon)]])
            plt.axhline(level, linestyle=style, color=colour, linewidth=1)
    plt.yscale("log")
    plt.xlabel("auxiliary datasets k")
    plt.ylabel("target SSE (dashed: DP FW, dotted: noisy GD)")
    plt.legend(fontsize=7)


if __name__ == "__main__":
    sys.exit(main())
