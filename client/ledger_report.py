"""``privadapt ledger report``: a site's privacy ledger as one self-contained
HTML page, for an auditor.

Generated from the ledger alone (opened read-only, its hash chain verified
first, as ``ledger show`` does): every job that touched the site's data, each
release with every field that sets its cost, cumulative epsilon over time
against the cap as an inline SVG figure, and what remains. The page needs no
network: no script, no stylesheet, font or image from elsewhere, no link
out. Every text that came from outside the site (job and query ids, chosen by
a coordinator) is HTML-escaped, so a hostile id cannot inject markup into the
auditor's browser.

Each number is printed rounded and carried exactly in a ``data-value``
attribute (Python's ``repr`` of the float), so a program can check the page
against the ledger. What the ledger does not record, the page cannot show:
the kernel of a release (the ledger keeps the mechanism it charged, which
fixes the cost; the coordinator's job report names the kernels).

The cumulative figure is the running epsilon each charge recorded when it was
admitted: the exact figure when the charge needed it, otherwise the upper
bound that admitted it (client/ledger_totals.py), so the curve can sit above
the exact totals, which the page states separately.
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Sequence
from pathlib import Path

from privadapt.client.ledger import Charge, PrivacyLedger
from privadapt.client.ledger_accounting import exact_report, mechanism_json
from privadapt.client.ledger_cli import verified_ledger
from privadapt.common.mechanisms import KernelMechanism, Mechanism

_EXIT_ERROR = 2
_STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #bbb; padding: 0.25em 0.5em; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
code { font-size: 0.85em; }
.note { color: #555; max-width: 60em; }
"""
_WIDTH, _HEIGHT, _MARGIN = 720, 300, 50


def write_report(site_db: Path, out: Path) -> int:
    """Write the report of the ledger ``site_db`` to ``out``; 0, or 2 after a
    one-line message on stderr (missing or altered ledger)."""
    with verified_ledger(site_db, "ledger report") as opened:
        if opened is None:
            return _EXIT_ERROR
        ledger, verified = opened
        page = render_report(ledger, verified, site_db)
        count = len(ledger.charges())
    out.write_text(page, encoding="utf-8")
    print(f"wrote {out} (privacy report of site {ledger.policy.site_name!r}, {count} charges)")
    return 0


def render_report(ledger: PrivacyLedger, verified: str, site_db: Path) -> str:
    """The whole page as a string."""
    policy = ledger.policy
    charges = ledger.charges()
    total = ledger.spent()
    cap = policy.epsilon_cap
    remaining = max(0.0, cap - total.epsilon) if math.isfinite(total.epsilon) else 0.0
    site = html.escape(policy.site_name)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>Privacy report: site {site}</title><style>{_STYLE}</style></head><body>",
        f"<h1>Privacy report of site {site}</h1>",
        f'<p class="note">Generated {_when(time.time())} from the ledger '
        f"<code>{html.escape(str(site_db))}</code> only. {html.escape(verified)}.</p>",
        "<h2>Budget</h2><table>",
        _row("cap (epsilon)", _number(cap), "cap_epsilon", cap),
        _row("at delta", f"{policy.delta_cap:g}", "delta_cap", policy.delta_cap),
        _row("adjacency", policy.adjacency.value),
        _row("accounting", policy.accounting.value.upper()),
        _row("charges", str(len(charges)), "charges", len(charges)),
        _row(f"epsilon spent, all jobs ({total.method.value.upper()})",
             _number(total.epsilon), "total_epsilon", total.epsilon),
        _row("epsilon remaining (cap minus spent)", _number(remaining), "remaining_epsilon",
             remaining),
        "</table>",
        "<h2>Cumulative epsilon over time</h2>",
        _plot(charges, cap),
        '<p class="note">Each step is the running epsilon the ledger recorded when it admitted '
        "a charge (the exact figure when it was needed, otherwise the upper bound that admitted "
        "it); the dashed line is the cap. The exact totals are in the tables.</p>",
        "<h2>Jobs</h2>",
        _jobs_table(ledger, charges),
        "<h2>Releases</h2>",
        _releases_table(ledger, charges),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def _jobs_table(ledger: PrivacyLedger, charges: Sequence[Charge]) -> str:
    rows = ["<table><tr><th>job</th><th>releases</th><th>first</th><th>last</th>"
            f"<th>epsilon at delta {ledger.policy.delta_cap:g}</th></tr>"]
    for job in ledger.jobs():
        mine = [c for c in charges if c.job_id == job]
        spent = ledger.spent_by_job(job)
        rows.append(
            f'<tr data-job="{html.escape(job)}"><td>{html.escape(job)}</td>'
            f'<td class="n">{len(mine)}</td><td>{_when(mine[0].timestamp)}</td>'
            f"<td>{_when(mine[-1].timestamp)}</td>"
            f"{_cell(spent.epsilon, 'job_epsilon')}</tr>")
    rows.append("</table>")
    return "\n".join(rows)


def _releases_table(ledger: PrivacyLedger, charges: Sequence[Charge]) -> str:
    policy = ledger.policy
    rows = ['<p class="note">The ledger records the mechanism it charged (which fixes the '
            "cost), not the kernel: the coordinator's job report names the kernels.</p>",
            "<table><tr><th>#</th><th>time (UTC)</th><th>job</th><th>query</th><th>kernel</th>"
            "<th>mechanism</th><th>sensitivity</th><th>noise</th>"
            f"<th>epsilon alone at delta {policy.delta_cap:g}</th><th>running epsilon</th>"
            "<th>as stored</th></tr>"]
    for number, charge in enumerate(charges, 1):
        text = mechanism_json(charge.mechanism)
        alone = exact_report({text: 1}, policy).epsilon
        sensitivity, noise = _sensitivity_and_noise(charge.mechanism)
        rows.append(
            f'<tr class="release" data-job="{html.escape(charge.job_id)}">'
            f'<td class="n">{number}</td><td>{_when(charge.timestamp)}</td>'
            f"<td>{html.escape(charge.job_id)}</td><td>{html.escape(charge.query_id)}</td>"
            f"<td>not recorded</td><td>{html.escape(charge.mechanism.summary)}"
            f" [{charge.mechanism.adjacency.value}]</td>"
            f"<td>{html.escape(sensitivity)}</td><td>{html.escape(noise)}</td>"
            f"{_cell(alone, 'release_epsilon')}{_cell(charge.epsilon_after, 'running_epsilon')}"
            f"<td><code>{html.escape(text)}</code></td></tr>")
    rows.append("</table>")
    return "\n".join(rows)


def _sensitivity_and_noise(mechanism: Mechanism) -> tuple[str, str]:
    """Per block: the sensitivity, and the noise (sigma or scale; a sampling
    rate when there is one); for other kinds, their own fields."""
    if isinstance(mechanism, KernelMechanism):
        sensitivity = ", ".join(f"{s:.6g}" for s in mechanism.sensitivities)
        noise = ", ".join(f"{s:.6g}" for s in mechanism.noise_scales)
        if mechanism.is_sampled:
            noise += f" (Poisson sampling rate {mechanism.sampling_rate:.6g})"
        return f"{sensitivity} ({mechanism.noise_norm})", noise
    fields = {k: v for k, v in mechanism.to_dict().items() if k not in ("kind", "adjacency")}
    sensitivity = fields.pop("sensitivity", fields.pop("sensitivities", "-"))
    return str(sensitivity), ", ".join(f"{k}={v}" for k, v in fields.items()) or "-"


def _plot(charges: Sequence[Charge], cap: float) -> str:
    """Cumulative epsilon against time as an inline SVG step line."""
    if not charges:
        return "<p>No charges yet.</p>"
    times = [c.timestamp for c in charges]
    values = [c.epsilon_after for c in charges]
    finite = [v for v in values if math.isfinite(v)]
    top = max([*finite, cap if math.isfinite(cap) else 0.0, 1e-12]) * 1.1
    start, end = times[0], max(times[-1], times[0] + 1e-9)

    def x(t: float) -> float:
        return _MARGIN + (t - start) / (end - start) * (_WIDTH - 2 * _MARGIN)

    def y(v: float) -> float:
        return _HEIGHT - _MARGIN - min(v, top) / top * (_HEIGHT - 2 * _MARGIN)

    points, previous = [f"{x(start):.1f},{y(0.0):.1f}"], 0.0
    for t, v in zip(times, values, strict=True):
        points.append(f"{x(t):.1f},{y(previous):.1f}")
        points.append(f"{x(t):.1f},{y(v):.1f}")
        previous = v
    base = _HEIGHT - _MARGIN
    # Inline SVG in HTML needs no namespace declaration: the page names no URL at all.
    parts = [f'<svg width="{_WIDTH}" height="{_HEIGHT}" '
             f'viewBox="0 0 {_WIDTH} {_HEIGHT}" role="img" '
             'aria-label="cumulative epsilon over time against the cap">',
             f'<line x1="{_MARGIN}" y1="{base}" x2="{_WIDTH - _MARGIN}" y2="{base}" '
             'stroke="#444"/>',
             f'<line x1="{_MARGIN}" y1="{_MARGIN}" x2="{_MARGIN}" y2="{base}" stroke="#444"/>',
             f'<polyline class="cumulative" fill="none" stroke="#1f77b4" stroke-width="2" '
             f'points="{" ".join(points)}"/>']
    if math.isfinite(cap):
        parts.append(f'<line class="cap" x1="{_MARGIN}" y1="{y(cap):.1f}" '
                     f'x2="{_WIDTH - _MARGIN}" y2="{y(cap):.1f}" stroke="#d62728" '
                     'stroke-dasharray="6 4"/>')
        parts.append(f'<text x="{_WIDTH - _MARGIN}" y="{y(cap) - 4:.1f}" text-anchor="end" '
                     f'font-size="12" fill="#d62728">cap {cap:g}</text>')
    parts += [f'<text x="{_MARGIN - 6}" y="{base}" text-anchor="end" font-size="12">0</text>',
              f'<text x="{_MARGIN - 6}" y="{_MARGIN + 4}" text-anchor="end" '
              f'font-size="12">{top:.3g}</text>',
              f'<text x="{_MARGIN}" y="{base + 18}" font-size="12">{_when(start)}</text>',
              f'<text x="{_WIDTH - _MARGIN}" y="{base + 18}" text-anchor="end" '
              f'font-size="12">{_when(end)}</text>',
              f'<text x="14" y="{_HEIGHT / 2:.0f}" font-size="12" '
              f'transform="rotate(-90 14 {_HEIGHT / 2:.0f})" text-anchor="middle">'
              "epsilon</text>",
              "</svg>"]
    return "\n".join(parts)


def _row(label: str, shown: str, field: str | None = None, value: float | None = None) -> str:
    data = f' data-field="{field}" data-value="{value!r}"' if field is not None else ""
    return f"<tr><th>{html.escape(label)}</th><td{data}>{html.escape(shown)}</td></tr>"


def _cell(value: float, field: str) -> str:
    return f'<td class="n" data-field="{field}" data-value="{value!r}">{_number(value)}</td>'


def _number(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.4g}"


def _when(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(timestamp))
