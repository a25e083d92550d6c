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
against the ledger. Each release names the kernel that computed it, as the
ledger recorded it ("unknown" for a charge from before the ledger recorded
kernels, schema 3). A section lists every kernel the site latched off after
its floating-point certificate failed (client/ledger/latches.py), active or
cleared by an operator, each one bit released uncharged.

The cumulative figure is the running epsilon each charge recorded when it was
admitted: the exact figure when the charge needed it, otherwise the upper
bound that admitted it (client/ledger/totals.py), so the curve can sit above
the exact totals, which the page states separately.
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Sequence
from pathlib import Path

from privadapt.client.ledger.accounting import exact_report, mechanism_json
from privadapt.client.ledger.cli import verified_ledger
from privadapt.client.ledger.latches import KernelLatch
from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.ledger.view import Charge
from privadapt.common.html_page import cell, number, page, row, step_plot, when
from privadapt.common.mechanisms import KernelMechanism, Mechanism

_EXIT_ERROR = 2
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
    return page(f"Privacy report: site {policy.site_name}", [
        f"<h1>Privacy report of site {site}</h1>",
        f'<p class="note">Generated {when(time.time())} from the ledger '
        f"<code>{html.escape(str(site_db))}</code> only. {html.escape(verified)}.</p>",
        "<h2>Budget</h2><table>",
        row("cap (epsilon)", number(cap), "cap_epsilon", cap),
        row("at delta", f"{policy.delta_cap:g}", "delta_cap", policy.delta_cap),
        row("adjacency", policy.adjacency.value),
        row("accounting", policy.accounting.value.upper()),
        row("charges", str(len(charges)), "charges", len(charges)),
        row(f"epsilon spent, all jobs ({total.method.value.upper()})",
            number(total.epsilon), "total_epsilon", total.epsilon),
        row("epsilon remaining (cap minus spent)", number(remaining), "remaining_epsilon",
            remaining),
        "</table>",
        "<h2>Cumulative epsilon over time</h2>",
        _plot(charges, cap),
        '<p class="note">Each step is the running epsilon the ledger recorded when it admitted '
        "a charge (the exact figure when it was needed, otherwise the upper bound that admitted "
        "it); the dashed line is the cap. The exact totals are in the tables.</p>",
        "<h2>Latched kernels</h2>",
        _latches_table(ledger.latches()),
        "<h2>Jobs</h2>",
        _jobs_table(ledger, charges),
        "<h2>Releases</h2>",
        _releases_table(ledger, charges),
    ])


def _jobs_table(ledger: PrivacyLedger, charges: Sequence[Charge]) -> str:
    rows = ["<table><tr><th>job</th><th>releases</th><th>first</th><th>last</th>"
            f"<th>epsilon at delta {ledger.policy.delta_cap:g}</th></tr>"]
    for job in ledger.jobs():
        mine = [c for c in charges if c.job_id == job]
        spent = ledger.spent_by_job(job)
        rows.append(
            f'<tr data-job="{html.escape(job)}"><td>{html.escape(job)}</td>'
            f'<td class="n">{len(mine)}</td><td>{when(mine[0].timestamp)}</td>'
            f"<td>{when(mine[-1].timestamp)}</td>"
            f"{cell(spent.epsilon, 'job_epsilon')}</tr>")
    rows.append("</table>")
    return "\n".join(rows)


def _latches_table(latches: Sequence[KernelLatch]) -> str:
    """Every latch: the kernel, when it was set and by which query, and when
    an operator cleared it (blank while it holds)."""
    if not latches:
        return "<p>No kernel was ever latched off.</p>"
    rows = ['<p class="note">A kernel is latched off when its floating-point certificate fails '
            "on a query (or is armed while a certificate runs); whether it fails can depend on "
            "the data, so the query a run of certificates first failed on is released, "
            "uncharged. The site refuses a latched kernel until its operator "
            "clears the latch (<code>privadapt ledger clear-latch</code>), which lets one more "
            "bit out.</p>",
            "<table><tr><th>kernel</th><th>latched (UTC)</th><th>job</th><th>query</th>"
            "<th>cleared (UTC)</th></tr>"]
    for latch in latches:
        cleared = "" if latch.cleared_at is None else when(latch.cleared_at)
        rows.append(
            f'<tr class="latch" data-active="{str(latch.active).lower()}">'
            f'<td class="kernel">{html.escape(latch.kernel)}</td><td>{when(latch.latched_at)}'
            f"</td><td>{html.escape(latch.job_id)}</td><td>{html.escape(latch.query_id)}</td>"
            f"<td>{cleared}</td></tr>")
    rows.append("</table>")
    return "\n".join(rows)


def _releases_table(ledger: PrivacyLedger, charges: Sequence[Charge]) -> str:
    policy = ledger.policy
    rows = ['<p class="note">The kernel of each release is as the ledger recorded it '
            '("unknown" for a charge made before the ledger recorded kernels); the mechanism '
            "fixes the cost.</p>",
            "<table><tr><th>#</th><th>time (UTC)</th><th>job</th><th>query</th><th>kernel</th>"
            "<th>mechanism</th><th>sensitivity</th><th>noise</th>"
            f"<th>epsilon alone at delta {policy.delta_cap:g}</th><th>running epsilon</th>"
            "<th>as stored</th></tr>"]
    for index, charge in enumerate(charges, 1):
        text = mechanism_json(charge.mechanism)
        alone = exact_report({text: 1}, policy).epsilon
        sensitivity, noise = _sensitivity_and_noise(charge.mechanism)
        rows.append(
            f'<tr class="release" data-job="{html.escape(charge.job_id)}">'
            f'<td class="n">{index}</td><td>{when(charge.timestamp)}</td>'
            f"<td>{html.escape(charge.job_id)}</td><td>{html.escape(charge.query_id)}</td>"
            f'<td class="kernel">{html.escape(charge.kernel)}</td>'
            f"<td>{html.escape(charge.mechanism.summary)}"
            f" [{charge.mechanism.adjacency.value}]</td>"
            f"<td>{html.escape(sensitivity)}</td><td>{html.escape(noise)}</td>"
            f"{cell(alone, 'release_epsilon')}{cell(charge.epsilon_after, 'running_epsilon')}"
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
    end = max(times[-1], times[0] + 1e-9)
    return step_plot(times, [c.epsilon_after for c in charges], cap,
                     (when(times[0]), when(end)),
                     "cumulative epsilon over time against the cap")
