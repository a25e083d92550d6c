"""Markdown tables and diagnostics of the gain study from its run logs
(experiments/gain_study.py; nothing is recomputed here).

    .venv/bin/python -m experiments.gain_report LOG.csv [LOG.csv ...] [--methods ...]
        [--diagnose]
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import math
import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

EPS = ("1", "3", "10", "inf")
FREE = ("source-only", "constant")
REFERENCES = ("target-only (non-private)", "adapter (non-private)")


def load(paths: list[Path]) -> list[dict]:
    rows = []
    for path in paths:
        with path.open() as handle:
            rows += list(csv.DictReader(handle))
    return rows


def value(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


class Table:
    def __init__(self, rows: list[dict]) -> None:
        self.cell: dict[tuple, dict] = {}
        for r in rows:
            self.cell[r["task"], int(r["split"]), r["epsilon"], r["method"]] = r
        self.tasks = list(dict.fromkeys(r["task"] for r in rows))

    def splits(self, task: str) -> list[int]:
        return sorted({k[1] for k in self.cell if k[0] == task})

    def get(self, task, split, eps, method, column="loss") -> float:
        for key in ((task, split, eps, method), (task, split, "all", method)):
            if key in self.cell:
                return value(self.cell[key][column])
        return math.nan

    def row(self, task, split, eps, method) -> dict | None:
        return self.cell.get((task, split, eps, method))

    def series(self, task, eps, method, column="loss") -> np.ndarray:
        return np.array([self.get(task, s, eps, method, column) for s in self.splits(task)])

    def oracle(self, task, eps, column="loss") -> np.ndarray:
        pick = np.nanmax if column != "loss" else np.nanmin
        return pick(np.stack([self.series(task, eps, m, column) for m in (*FREE, *REFERENCES)]),
                    axis=0)

    def gain(self, task, eps, method, column="loss") -> float:
        src = np.nanmean(self.series(task, eps, "source-only", column))
        best = np.nanmean(self.oracle(task, eps, column))
        own = np.nanmean(self.series(task, eps, method, column))
        return float((src - own) / (best - src) * (-1 if column == "loss" else 1))

    def p90(self, task, eps, method) -> float:
        own = self.series(task, eps, method)
        src = self.series(task, eps, "source-only")
        if np.all(np.isnan(own)):
            return math.nan
        return 100 * float(np.nanpercentile((own - src) / src, 90))

    def status(self, task, eps, method) -> str:
        found = [self.row(task, s, eps, method) for s in self.splits(task)]
        bad = Counter(r["status"].split(":")[0] for r in found if r and r["status"] != "ok")
        return ", ".join(f"{k} {v}/{len(found)}" for k, v in bad.items())


def fmt(x: float, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.{digits}g}"


def markdown(table: Table, methods: list[str]) -> str:
    out = []
    for task in table.tasks:
        logistic = not math.isnan(table.get(task, table.splits(task)[0], "all", "source-only",
                                            "accuracy"))
        src = np.nanmean(table.series(task, "1", "source-only"))
        best = np.nanmean(table.oracle(task, "1"))
        out.append(f"\n**{task}** ({len(table.splits(task))} splits): L_src = {fmt(src)}, "
                   f"L_oracle (non-private) = {fmt(best)}, available gain "
                   f"{100 * (src - best) / src:.1f}%")
        if logistic:
            acc = np.nanmean(table.series(task, "1", "source-only", "accuracy"))
            const = np.nanmean(table.series(task, "1", "constant", "accuracy"))
            best_acc = np.nanmean(table.oracle(task, "1", "accuracy"))
            out.append(f"accuracy: source-only {fmt(acc, 3)}, majority {fmt(const, 3)}, best "
                       f"non-private {fmt(best_acc, 3)}")
        head = "| method | L at eps 1 / 3 / 10 / inf | gain captured | p90 shortfall % |"
        line = "|---|---|---|---|"
        if logistic:
            head += " accuracy | balanced acc. |"
            line += "---|---|"
        out += ["", head, line]
        for method in methods:
            cells = []
            losses = [np.nanmean(table.series(task, e, method)) if
                      not np.all(np.isnan(table.series(task, e, method))) else math.nan
                      for e in EPS]
            if all(math.isnan(v) for v in losses) and not table.status(task, "1", method):
                continue
            shown = []
            for e, v in zip(EPS, losses, strict=True):
                status = table.status(task, e, method)
                shown.append(fmt(v) + (f" ({status})" if status else ""))
            cells.append(" / ".join(shown))
            cells.append(" / ".join(fmt(table.gain(task, e, method), 2) for e in EPS))
            cells.append(fmt(np.nanmax([table.p90(task, e, method) for e in EPS]), 3))
            if logistic:
                cells.append(" / ".join(fmt(np.nanmean(table.series(task, e, method, "accuracy")),
                                            3) for e in EPS))
                cells.append(" / ".join(fmt(np.nanmean(table.series(
                    task, e, method, "balanced_accuracy")), 3) for e in EPS))
            out.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def diagnose(table: Table) -> str:
    """Per task: what SelectedAdaptation and PrivateGridSearch chose and why."""
    out = []
    for task in table.tasks:
        out.append(f"\n### {task}")
        for eps in EPS:
            chosen, gaps, margins, bites, plans = Counter(), [], [], [], None
            for s in table.splits(task):
                r = table.row(task, s, eps, "SelectedAdaptation")
                if not r or r["status"] != "ok":
                    continue
                d = json.loads(r["detail"])
                chosen[d["chosen"]] += 1
                score = d["validation_errors"] if d["score"] == "error" else \
                    d["clipped_validation"]
                gaps.append(score[0] - min(score))  # what the best candidate gains on the score
                margins.append(d["margin_per_record"])
                bites.append(d["bite_source_only_test"])
                plans = d["budget_plan"], d["validation_records"], d["names"], d["score"]
            if chosen:
                order = defaultdict(list)
                for s in table.splits(task):
                    r = table.row(task, s, eps, "SelectedAdaptation")
                    if r and r["status"] == "ok":
                        d = json.loads(r["detail"])
                        for name, loss, clip in zip(d["names"], d["test_loss"],
                                                    d["validation_errors"] or
                                                    d["clipped_validation"], strict=True):
                            order[name].append((loss, clip))
                means = {n: (np.mean([a for a, _ in v]), np.mean([b for _, b in v]))
                         for n, v in order.items()}
                out.append(f"- SelectedAdaptation eps {eps}: chose {dict(chosen)}; noise-free "
                           f"score gap best-vs-source-only {fmt(np.mean(gaps), 3)} per record "
                           f"against margin {fmt(np.mean(margins), 3)}; source-only's loss "
                           f"above the clip on {100 * np.mean(bites):.0f}% of test records; "
                           f"score ({plans[3]}) and test L per candidate: "
                           + ", ".join(f"{n} {fmt(c, 3)} / {fmt(t, 3)}"
                                       for n, (t, c) in means.items())
                           + f"; n_val {plans[1]}; plan {json.dumps(plans[0])}")
            grid = Counter()
            for s in table.splits(task):
                r = table.row(task, s, eps, "PrivateGridSearch")
                if r is None:
                    continue
                if r["status"] != "ok":
                    grid[r["status"][:90]] += 1
                else:
                    grid[f"index {json.loads(r['detail'])['best_index']}"] += 1
            if grid:
                out.append(f"- PrivateGridSearch eps {eps}: {dict(grid)}")
    return "\n".join(out)


def targets(table: Table, methods: list[str]) -> str:
    """The targets per method and row: mean L never above source-only's
    or the constant's at any epsilon (and the p90 shortfall to source-only);
    for classifiers the same on accuracy; gain captured at epsilon 10 >= 0.5
    where the available gain exceeds 2%; mean L non-increasing in epsilon."""
    lines = ["| method | row | worst L - min(free L), % of L_src | p90 % | accuracy below "
             "max(free) by (points) | gain at eps 10 | non-decreasing in eps |",
             "|---|---|---|---|---|---|---|"]
    for method in methods:
        for task in table.tasks:
            means = [np.nanmean(table.series(task, e, method)) if not np.all(np.isnan(
                table.series(task, e, method))) else math.nan for e in EPS]
            if all(math.isnan(v) for v in means):
                continue
            src = np.nanmean(table.series(task, "1", "source-only"))
            free = min(src, np.nanmean(table.series(task, "1", "constant")))
            worst = max(v - free for v in means if not math.isnan(v))
            p90 = np.nanmax([table.p90(task, e, method) for e in EPS])
            acc = "-"
            if not math.isnan(table.get(task, table.splits(task)[0], "all", "source-only",
                                        "accuracy")):
                best_free = max(np.nanmean(table.series(task, "1", m, "accuracy"))
                                for m in FREE)
                accs = [np.nanmean(table.series(task, e, method, "accuracy")) for e in EPS]
                acc = fmt(100 * max(0.0, best_free - np.nanmin(accs)), 2)
            gain = table.gain(task, "10", method)
            finite = [v for v in means if not math.isnan(v)]
            steady = all(b <= a + 1e-12 for a, b in itertools.pairwise(finite))
            lines.append(f"| {method} | {task} | {fmt(100 * worst / src, 3)} | {fmt(p90, 3)} | "
                         f"{acc} | {fmt(gain, 2)} | {'yes' if steady else 'no'} |")
    return "\n".join(lines)


def seed001_capture(path: Path) -> str:
    """The share of non-private STC's gain over ClusterT
    (clustering cost, lower is better) that NNA and NAS capture, per dataset
    family, privacy and coreset/sites setting, over the k values of
    experiments/seed001/results/cost_tables.csv (median and quartiles; a k
    where STC is not below ClusterT has no gain to capture and is left out)."""
    rows = list(csv.DictReader(path.open()))
    cost = {(r["dataset"], r["method"], r["privacy"], r["coreset"], r["sites"], r["k"]):
            float(r["cost_mean"]) for r in rows}
    shares: dict[tuple, list[float]] = defaultdict(list)
    for (data, method, privacy, coreset, sites, k), own in cost.items():
        if method not in ("NNA", "NAS"):
            continue
        base = cost.get((data, "ClusterT", "none", "-", "1", k))
        best = cost.get((data, "STC (non-private)", "none", "-", "1", k))
        if base is None or best is None or base <= best:
            continue
        family = data.split("_")[0]
        shares[family, method, privacy, f"coreset {coreset}, {sites} site(s)"].append(
            (base - own) / (base - best))
    lines = ["| data | method | privacy | setting | median capture | quartiles | cases |",
             "|---|---|---|---|---|---|---|"]
    for key, values in sorted(shares.items()):
        q1, q2, q3 = np.percentile(values, [25, 50, 75])
        lines.append(f"| {' | '.join(key)} | {q2:.2f} | {q1:.2f} .. {q3:.2f} | {len(values)} |")
    return "\n".join(lines)


def seed003_capture(path: Path) -> str:
    """In seed 003's Figure 2 CSV (test MSE, mean over
    runs), the share of each private method's own non-private version's gain
    over public-only that it captures, per epsilon and n (the federated
    two-stage FW against the non-private two-stage FW)."""
    rows = list(csv.DictReader(path.open()))
    value = {(r["method"], r["epsilon"], r["n"]): float(r["mean"]) for r in rows}
    sizes = sorted({r["n"] for r in rows}, key=int)
    lines = ["| method | epsilon | capture at n = " + " / ".join(sizes) + " |", "|---|---|---|"]
    for method in ("federated_two_stage_fw", "two_stage_fw", "two_stage_md", "single_stage_fw"):
        reference = method.replace("federated_", "") + "_nonprivate"
        for eps in ("1.0", "3.0", "10.0"):
            cells = []
            for n in sizes:
                public = next(v for (m, _, size), v in value.items()
                              if m == "public_only" and size == n)
                best = next(v for (m, _, size), v in value.items()
                            if m == reference and size == n)
                own = value.get((method, eps, n))
                cells.append("-" if own is None else f"{(public - own) / (public - best):.2f}")
            lines.append(f"| {method} | {eps} | {' / '.join(cells)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logs", nargs="+", type=Path)
    parser.add_argument("--methods", default=None, help="semicolon-separated method names")
    parser.add_argument("--diagnose", action="store_true")
    parser.add_argument("--targets", action="store_true",
                        help="only the targets table of the --methods")
    parser.add_argument("--seed003", type=Path, default=None,
                        help="also the capture table of this seed 003 figure2.csv")
    parser.add_argument("--seed001", type=Path, default=None,
                        help="also the NNA/NAS capture table of this cost_tables.csv")
    args = parser.parse_args(argv)
    if args.seed001 is not None:
        print(seed001_capture(args.seed001))
    if args.seed003 is not None:
        print(seed003_capture(args.seed003))
    table = Table(load(args.logs))
    methods = (args.methods.split(";") if args.methods else
               list(dict.fromkeys(k[3] for k in table.cell)))
    if args.targets:
        print(targets(table, methods))
        return 0
    print(markdown(table, methods))
    if args.diagnose:
        print(diagnose(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
