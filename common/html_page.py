"""Self-contained HTML pages for an auditor: the pieces the site's ledger
report (client/ledger/report.py) and the coordinator's job report
(server/jobs/report.py) share.

A page needs no network: no script, no stylesheet, font or image from
elsewhere, no link out; figures are inline SVG. Every text is HTML-escaped by
the caller or here. Each number is printed rounded and carried exactly in a
``data-value`` attribute (Python's ``repr`` of the float) beside a
``data-field`` name, so a program can check a page against its source.
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Sequence

STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #bbb; padding: 0.25em 0.5em; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
code { font-size: 0.85em; }
.note { color: #555; max-width: 60em; }
"""
WIDTH, HEIGHT, MARGIN = 720, 300, 50


def page(title: str, parts: Sequence[str]) -> str:
    """A whole page: ``title`` (escaped here) and the body ``parts`` (HTML)."""
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>",
        *parts,
        "</body></html>",
    ]) + "\n"


def row(label: str, shown: str, field: str | None = None, value: float | None = None) -> str:
    """A table row: a heading cell and a value cell (exact value in data-value)."""
    data = f' data-field="{field}" data-value="{value!r}"' if field is not None else ""
    return f"<tr><th>{html.escape(label)}</th><td{data}>{html.escape(shown)}</td></tr>"


def cell(value: float, field: str) -> str:
    """A numeric cell, rounded for the eye and exact in data-value."""
    return f'<td class="n" data-field="{field}" data-value="{value!r}">{number(value)}</td>'


def number(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.4g}"


def when(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(timestamp))


def step_plot(xs: Sequence[float], ys: Sequence[float], cap: float, x_labels: tuple[str, str],
              aria_label: str, y_label: str = "epsilon", cap_label: str = "cap",
              x_range: tuple[float, float] | None = None) -> str:
    """Cumulative values ``ys`` at ``xs`` as an inline SVG step line from 0,
    with ``cap`` as a dashed line (labelled ``cap_label``) when it is finite;
    the x axis spans ``x_range`` (default: the first to the last x), and
    ``x_labels`` name its two ends."""
    if not xs:
        return "<p>Nothing to plot yet.</p>"
    finite = [v for v in ys if math.isfinite(v)]
    top = max([*finite, cap if math.isfinite(cap) else 0.0, 1e-12]) * 1.1
    start, end = x_range or (xs[0], xs[-1])
    end = max(end, start + 1e-9)

    def x(t: float) -> float:
        return MARGIN + (t - start) / (end - start) * (WIDTH - 2 * MARGIN)

    def y(v: float) -> float:
        return HEIGHT - MARGIN - min(v, top) / top * (HEIGHT - 2 * MARGIN)

    points, previous = [f"{x(start):.1f},{y(0.0):.1f}"], 0.0
    for t, v in zip(xs, ys, strict=True):
        points.append(f"{x(t):.1f},{y(previous):.1f}")
        points.append(f"{x(t):.1f},{y(v):.1f}")
        previous = v
    if end > xs[-1]:  # the last value holds to the end of the axis
        points.append(f"{x(end):.1f},{y(previous):.1f}")
    base = HEIGHT - MARGIN
    # Inline SVG in HTML needs no namespace declaration: the page names no URL at all.
    parts = [f'<svg width="{WIDTH}" height="{HEIGHT}" '
             f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
             f'aria-label="{html.escape(aria_label)}">',
             f'<line x1="{MARGIN}" y1="{base}" x2="{WIDTH - MARGIN}" y2="{base}" '
             'stroke="#444"/>',
             f'<line x1="{MARGIN}" y1="{MARGIN}" x2="{MARGIN}" y2="{base}" stroke="#444"/>',
             f'<polyline class="cumulative" fill="none" stroke="#1f77b4" stroke-width="2" '
             f'points="{" ".join(points)}"/>']
    if math.isfinite(cap):
        parts.append(f'<line class="cap" x1="{MARGIN}" y1="{y(cap):.1f}" '
                     f'x2="{WIDTH - MARGIN}" y2="{y(cap):.1f}" stroke="#d62728" '
                     'stroke-dasharray="6 4"/>')
        parts.append(f'<text x="{WIDTH - MARGIN}" y="{y(cap) - 4:.1f}" text-anchor="end" '
                     f'font-size="12" fill="#d62728">{html.escape(cap_label)} {cap:g}</text>')
    parts += [f'<text x="{MARGIN - 6}" y="{base}" text-anchor="end" font-size="12">0</text>',
              f'<text x="{MARGIN - 6}" y="{MARGIN + 4}" text-anchor="end" '
              f'font-size="12">{top:.3g}</text>',
              f'<text x="{MARGIN}" y="{base + 18}" font-size="12">'
              f"{html.escape(x_labels[0])}</text>",
              f'<text x="{WIDTH - MARGIN}" y="{base + 18}" text-anchor="end" '
              f'font-size="12">{html.escape(x_labels[1])}</text>',
              f'<text x="14" y="{HEIGHT / 2:.0f}" font-size="12" '
              f'transform="rotate(-90 14 {HEIGHT / 2:.0f})" text-anchor="middle">'
              f"{html.escape(y_label)}</text>",
              "</svg>"]
    return "\n".join(parts)
