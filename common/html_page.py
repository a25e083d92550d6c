"""Self-contained HTML pages for an auditor: the pieces the site's ledger
report (client/ledger/report.py) and the coordinator's job report
(server/jobs/report.py) share.

A page is a jinja2 template in the ``templates/`` folder of the package that
renders it, extending ``page.html.j2`` here and using the macros of
``macros.html.j2`` (a table row, a numeric cell, the step figure). Autoescape
is on for every template, so a text from outside (a job id, a site name) is
shown, never run; a template that names a value it was not given fails
instead of printing nothing.

A page needs no network: no script, no stylesheet, font or image from
elsewhere, no link out; figures are inline SVG. Each number is printed rounded
and carried exactly in a ``data-value`` attribute (Python's ``repr`` of the
float) beside a ``data-field`` name, so a program can check a page against
its source.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jinja2

WIDTH, HEIGHT, MARGIN = 720, 300, 50


def number(value: float) -> str:
    """``value`` rounded for the eye (4 significant digits, or "inf")."""
    return "inf" if math.isinf(value) else f"{value:.4g}"


def when(timestamp: float) -> str:
    """A Unix time as UTC text."""
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(timestamp))


@dataclass(frozen=True)
class StepPlot:
    """What ``macros.html.j2``'s ``step_plot`` draws: the step line's SVG
    points, the top of the y axis, the dashed line's height (None for no
    finite cap) and the figure's labels."""

    points: str
    top: float
    cap: float
    cap_y: float | None
    x_labels: tuple[str, str]
    aria_label: str
    y_label: str
    cap_label: str


def step_plot(xs: Sequence[float], ys: Sequence[float], cap: float, x_labels: tuple[str, str],
              aria_label: str, y_label: str = "epsilon", cap_label: str = "cap",
              x_range: tuple[float, float] | None = None) -> StepPlot:
    """Cumulative values ``ys`` at ``xs`` (at least one) as a step line from
    0, with ``cap`` as a dashed line (labelled ``cap_label``) when it is
    finite; the x axis spans ``x_range`` (default: the first to the last x),
    and ``x_labels`` name its two ends."""
    finite = [v for v in ys if math.isfinite(v)]
    top = max([*finite, cap if math.isfinite(cap) else 0.0, 1e-12]) * 1.1
    start, end = x_range or (xs[0], xs[-1])
    end = max(end, start + 1e-9)
    # At a Unix time start + 1e-9 is start again (one charge, or all in one
    # instant): the span, not only the end, needs the floor.
    span = max(end - start, 1e-9)

    def x(t: float) -> float:
        return MARGIN + (t - start) / span * (WIDTH - 2 * MARGIN)

    def y(v: float) -> float:
        return HEIGHT - MARGIN - min(v, top) / top * (HEIGHT - 2 * MARGIN)

    points, previous = [f"{x(start):.1f},{y(0.0):.1f}"], 0.0
    for t, v in zip(xs, ys, strict=True):
        points.append(f"{x(t):.1f},{y(previous):.1f}")
        points.append(f"{x(t):.1f},{y(v):.1f}")
        previous = v
    if end > xs[-1]:  # the last value holds to the end of the axis
        points.append(f"{x(end):.1f},{y(previous):.1f}")
    return StepPlot(" ".join(points), top, cap, y(cap) if math.isfinite(cap) else None,
                    x_labels, aria_label, y_label, cap_label)


@functools.cache
def _environment(package: str) -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.ChoiceLoader([jinja2.PackageLoader(package, "templates"),
                                    jinja2.PackageLoader(__package__, "templates")]),
        autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True,
        lstrip_blocks=True, keep_trailing_newline=True)
    environment.filters.update(number=number, when=when, exact=repr)
    environment.globals.update(WIDTH=WIDTH, HEIGHT=HEIGHT, MARGIN=MARGIN)
    return environment


def render(package: str, template: str, **context: Any) -> str:
    """The page of ``template`` from ``package``'s ``templates/`` folder
    (``__package__`` of the caller), with the shared layout and macros."""
    return _environment(package).get_template(template).render(**context)
