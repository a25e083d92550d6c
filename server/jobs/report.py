"""A job's privacy report as one self-contained HTML page, written by
``privadapt result JOB --out DIR`` beside the model (``report.html``).

Generated from the coordinator's job store only, as the operator API returns
it: the job's state and rounds (Status), its audit events (Logs) and its
privacy report (Result: each site's spend as its own ledger stated it at the
job's end, kept for a failed or cancelled job too). It shows each site's
spend, the headline first: this job's epsilon at the job's delta, then the
site's total over every job at its cap's delta and what is left
(common/privacy_figures.py); the job's spend after each release at the job's
delta against its target (the curve the site's report gives,
server/jobs/spend_curve.py, so the figure ends on the headline); and the
rounds (each with the running figure the sites stated, at their cap delta,
aborted rounds with their reason). The page is ``templates/job_report.html.j2`` on the
layout and macros of common/html_page.py (numbers carried exactly in
``data-value``, the inline SVG figure), as for a site's ledger report; every
text from the store is HTML-escaped.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Mapping
from typing import Any

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from privadapt.common.html_page import StepPlot, render, step_plot, when
from privadapt.common.proto import federation_pb2 as pb
from privadapt.server.jobs.spec import job_state_name


def render_job_report(log: pb.JobLog, report: Mapping[str, Any]) -> str:
    """The page of the job whose status and events are ``log`` and whose
    privacy report (``privacy_report.json``) is ``report``."""
    status = log.status
    done = [r for r in status.rounds if not r.aborted]
    target = report.get("target", {})
    return render(
        __package__, "job_report.html.j2", status=status, state=job_state_name(status.state),
        generated=time.time(), target_epsilon=target.get("epsilon", math.nan),
        target_delta=target.get("delta", math.nan), done=done,
        aborted=len(status.rounds) - len(done), schema_digest=report.get("schema_digest"),
        plot=_spend_plot(report.get("sites", {}), target.get("epsilon", math.inf),
                         target.get("delta", math.nan)),
        sites=report.get("sites", {}), sites_not_reporting=report.get("sites_not_reporting", []),
        events=log.events, stamp=_stamp, milliseconds=_milliseconds)


def _stamp(stamp: Timestamp) -> str:
    return when(stamp.ToDatetime(dt.UTC).timestamp()) if stamp.seconds else "-"


def _milliseconds(duration: Duration) -> float:
    return duration.ToTimedelta() / dt.timedelta(milliseconds=1)


def _spend_plot(sites: Mapping[str, Any], target: float, delta: float) -> StepPlot | None:
    """The spend curve of the site that spent most on the job (at the job's
    delta) against the job's target; None when no site reported one."""
    curves = {name: site["spend_curve"] for name, site in sites.items()
              if site.get("spend_curve", {}).get("releases")}
    if not curves:
        return None
    name = max(curves, key=lambda n: (sites[n]["job_epsilon"], n))
    releases, epsilons = curves[name]["releases"], curves[name]["epsilon"]
    # Release k's rise is drawn over [k - 1, k], so the last release is seen too.
    last = releases[-1]
    return step_plot([k - 1.0 for k in releases], epsilons, target,
                     ("start", f"release {last:.0f}"),
                     f"this job's epsilon at delta {delta:g} (the job's) after each release "
                     f"charged to site {name} against the job's target",
                     cap_label="target", x_range=(0.0, last))
