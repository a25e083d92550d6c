"""CSV writing, optional PNG (matplotlib is not a dependency) and plain-text
tables for the seed 000 experiment scripts."""

from __future__ import annotations

import argparse
import csv
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np


def add_output_option(parser: argparse.ArgumentParser, default: Path) -> None:
    """``--out``, whose default :func:`output_path` resolves after parsing."""
    parser.add_argument("--out", type=Path, default=None,
                        help=f"default {default} (--quick: a quick/ folder beside it)")


def output_path(given: Path | None, default: Path, quick: bool) -> Path:
    """Where a script writes: ``--out`` if given; else its committed results
    for a full run, or a ``quick/`` folder beside them for ``--quick``, so a
    smoke run never overwrites the results the papers' pages show."""
    if given is not None:
        return given
    if not quick:
        return default
    return default.parent / "quick" / default.name if default.suffix else default / "quick"


def write_csv(path: Path, header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    print(f"wrote {path}")


def maybe_png(path: Path, draw: Callable[[object], None]) -> None:
    """Call ``draw(pyplot)`` and save to ``path`` if matplotlib imports; else say so."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError:
        print(f"PNG skipped ({path.name}): matplotlib is not installed (not a dependency)")
        return
    pyplot.figure(figsize=(6, 4))
    draw(pyplot)
    pyplot.tight_layout()
    pyplot.savefig(path, dpi=120)
    pyplot.close()
    print(f"wrote {path}")


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    array = np.asarray(values, dtype=float)
    std = float(array.std(ddof=1)) if len(array) > 1 else math.nan
    return float(array.mean()), std


def print_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    text = [[f"{cell:.4f}" if isinstance(cell, float) else str(cell) for cell in row]
            for row in rows]
    widths = [max(len(str(h)), *(len(r[i]) for r in text)) for i, h in enumerate(header)]
    print("  ".join(f"{h:>{w}}" for h, w in zip(header, widths, strict=True)))
    for row in text:
        print("  ".join(f"{c:>{w}}" for c, w in zip(row, widths, strict=True)))
