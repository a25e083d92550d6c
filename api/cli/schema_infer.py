"""``privadapt schema infer PUBLIC.csv --label COLUMN [...] > schema.toml``.

Prints a draft schema, drawn by :meth:`Schema.infer` from the coordinator's
PUBLIC file only (the rules and why: common/data/schema_inference.py), as
TOML that every site and the coordinator then load, headed by comments that
say where each constant came from and what to review.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from privadapt.common.data.schema import Schema


def header(public_file: Path, widen: float) -> str:
    """The comments above the drafted schema."""
    lines = [
        f"Drafted by `privadapt schema infer` from {public_file.name}, the coordinator's",
        "PUBLIC file: every constant below is seen by every party, so never draft",
        "it from a site's private file. Review it, then give this same file to every",
        "site and to the coordinator.",
        f"numeric_scale: each column's [min, max] in the public file, widened by {widen:g} x",
        "(max - min) on each side; a site's value outside is clipped to it",
        "(out_of_range = \"clip\") and counted in that site's own log only.",
        "categorical: the categories seen in the public file; a site value not listed",
        "is refused at that site (add it here if it may be public).",
        "label_map: the classes sorted, coded -1/+1 (two) or 0..C-1; none: a numeric label.",
        "row_norm_divisor: sqrt(numeric + categorical + 1), so every record has norm <= 1.",
    ]
    return "".join(f"# {line}\n" for line in lines) + "\n"


def infer_schema_toml(public_file: Path, label: str, drop: Sequence[str] = (),
                      categorical: Sequence[str] = (), widen: float = 0.0,
                      max_categories: int = 50) -> str:
    """The drafted schema as commented TOML."""
    schema = Schema.infer(public_file, label, drop=drop, categorical=categorical, widen=widen,
                          max_categories=max_categories)
    return header(public_file, widen) + schema.to_toml()
