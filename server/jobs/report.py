"""A job's privacy report as one self-contained HTML page, written by
``privadapt result JOB --out DIR`` beside the model (``report.html``).

Generated from the coordinator's job store only, as the operator API returns
it: the job's state and rounds (Status), its audit events (Logs) and its
privacy report (Result: each site's spend as its own ledger stated it at the
job's end). It shows the job's per-round progress (epsilon so far after each
round, as a figure and a table, aborted rounds with their reason) and each
site's spend: this job's epsilon at the job's delta, every job's at the site's
cap, and what is left. Shared pieces (style, numbers carried exactly in
``data-value``, the inline SVG figure) are common/html_page.py, as for a
site's ledger report; every text from the store is HTML-escaped.
"""

from __future__ import annotations

import datetime as dt
import html
import math
import time
from collections.abc import Mapping
from typing import Any

from privadapt.common.html_page import cell, number, page, row, step_plot, when
from privadapt.common.proto import federation_pb2 as pb
from privadapt.server.jobs.spec import job_state_name


def render_job_report(log: pb.JobLog, report: Mapping[str, Any]) -> str:
    """The page of the job whose status and events are ``log`` and whose
    privacy report (``privacy_report.json``) is ``report``."""
    status = log.status
    done = [r for r in status.rounds if not r.aborted]
    aborted = len(status.rounds) - len(done)
    target = report.get("target", {})
    job = html.escape(status.job_id)
    return page(f"Privacy report: job {status.job_id}", [
        f"<h1>Privacy report of job {job}</h1>",
        f'<p class="note">Generated {when(time.time())} from the coordinator\'s job store '
        "only (the job's rounds, audit events and privacy report). Each site's figures are "
        "what its own ledger stated; the site's ledger report is the authority on them.</p>",
        "<h2>Job</h2><table>",
        row("algorithm", status.algorithm),
        row("state", job_state_name(status.state)),
        row("target epsilon", number(target.get("epsilon", math.nan)), "target_epsilon",
            target.get("epsilon", math.nan)),
        row("at delta", f"{target.get('delta', math.nan):g}", "target_delta",
            target.get("delta", math.nan)),
        row("rounds done", str(len(done)), "rounds_done", len(done)),
        row("rounds aborted", str(aborted), "rounds_aborted", aborted),
        row("rounds planned", str(status.planned_rounds or "not known"), "planned_rounds",
            status.planned_rounds),
        row("created", _stamp(status.created)),
        row("last change", _stamp(status.updated)),
        row("schema digest", report.get("schema_digest") or "none"),
        *([row("message", status.message)] if status.message else []),
        "</table>",
        "<h2>Progress</h2>",
        _progress_plot(done, target.get("epsilon", math.inf)),
        '<p class="note">After each round, the largest epsilon so far over the participating '
        "sites' ledgers, each at its own cap's delta; the dashed line is the job's target "
        "epsilon at the job's delta.</p>",
        "<h2>Each site's spend</h2>",
        _sites_table(report),
        "<h2>Rounds</h2>",
        _rounds_table(status),
        "<h2>Events</h2>",
        _events_table(log),
    ])


def _stamp(stamp) -> str:
    return when(stamp.ToDatetime(dt.UTC).timestamp()) if stamp.seconds else "-"


def _progress_plot(done: list[pb.RoundProgress], target: float) -> str:
    if not done:
        return "<p>No round was completed.</p>"
    # Round k's rise is drawn over [k - 1, k], so the last round is seen too.
    last = max(r.round for r in done)
    return step_plot([r.round - 1.0 for r in done], [r.epsilon_so_far for r in done], target,
                     ("start", f"round {last}"),
                     "epsilon so far after each round against the job's target",
                     cap_label="target", x_range=(0.0, float(last)))


def _sites_table(report: Mapping[str, Any]) -> str:
    sites = report.get("sites", {})
    if not sites:
        return "<p>No site reported its spend.</p>"
    rows = ["<table><tr><th>site</th><th>this job's epsilon</th><th>at delta</th>"
            "<th>accounting</th><th>all jobs' epsilon at the cap's delta</th><th>cap</th>"
            "<th>left</th><th>releases</th><th>releases the coordinator saw alone</th></tr>"]
    for name, site in sorted(sites.items()):
        left = max(0.0, site["cap_epsilon"] - site["total_epsilon"])
        rows.append(
            f'<tr class="site" data-site="{html.escape(name)}"><td>{html.escape(name)}</td>'
            f"{cell(site['job_epsilon'], 'site_job_epsilon')}"
            f"<td>{site['delta']:g}</td><td>{html.escape(str(site['method']))}</td>"
            f"{cell(site['total_epsilon'], 'site_total_epsilon')}"
            f"{cell(site['cap_epsilon'], 'site_cap_epsilon')}{cell(left, 'site_left_epsilon')}"
            f"{cell(site['releases'], 'site_releases')}"
            f"{cell(site['releases_seen_by_coordinator'], 'site_releases_seen')}</tr>")
    rows.append("</table>")
    missing = report.get("sites_not_reporting", [])
    if missing:
        rows.append(f'<p class="note">Did not report: '
                    f"{html.escape(', '.join(missing))}.</p>")
    return "\n".join(rows)


def _rounds_table(status: pb.JobStatus) -> str:
    rows = ["<table><tr><th>round</th><th>sites</th><th>duration (ms)</th>"
            "<th>epsilon so far</th><th>aborted</th></tr>"]
    for r in status.rounds:
        ms = r.duration.ToTimedelta() / dt.timedelta(milliseconds=1)
        epsilon = "<td>-</td>" if r.aborted else cell(r.epsilon_so_far, "round_epsilon")
        rows.append(
            f'<tr class="round" data-round="{r.round}"><td class="n">{r.round}</td>'
            f"<td>{html.escape(', '.join(r.participants))}</td>"
            f'<td class="n">{ms:.1f}</td>{epsilon}'
            f"<td>{html.escape(r.abort_reason) if r.aborted else ''}</td></tr>")
    rows.append("</table>")
    return "\n".join(rows)


def _events_table(log: pb.JobLog) -> str:
    rows = ["<table><tr><th>time (UTC)</th><th>event</th><th>site</th><th>detail</th></tr>"]
    for event in log.events:
        rows.append(f"<tr><td>{_stamp(event.time)}</td><td>{html.escape(event.event)}</td>"
                    f"<td>{html.escape(event.site_name)}</td>"
                    f"<td>{html.escape(event.detail)}</td></tr>")
    rows.append("</table>")
    return "\n".join(rows)
