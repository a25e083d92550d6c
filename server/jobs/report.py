"""A job's privacy report as one self-contained HTML page, written by
``privadapt result JOB --out DIR`` beside the model (``report.html``).

Generated from the coordinator's job store only, as the operator API returns
it: the job's state and rounds (Status), its audit events (Logs) and its
privacy report (Result: each site's spend as its own ledger stated it at the
job's end). It shows the job's per-round progress (epsilon so far after each
round, as a figure and a table, aborted rounds with their reason) and each
site's spend: this job's epsilon at the job's delta, every job's at the site's
cap, and what is left. The page is ``templates/job_report.html.j2`` on the
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
        plot=_progress_plot(done, target.get("epsilon", math.inf)),
        sites=report.get("sites", {}), sites_not_reporting=report.get("sites_not_reporting", []),
        events=log.events, stamp=_stamp, milliseconds=_milliseconds)


def _stamp(stamp: Timestamp) -> str:
    return when(stamp.ToDatetime(dt.UTC).timestamp()) if stamp.seconds else "-"


def _milliseconds(duration: Duration) -> float:
    return duration.ToTimedelta() / dt.timedelta(milliseconds=1)


def _progress_plot(done: list[pb.RoundProgress], target: float) -> StepPlot | None:
    if not done:
        return None
    # Round k's rise is drawn over [k - 1, k], so the last round is seen too.
    last = max(r.round for r in done)
    return step_plot([r.round - 1.0 for r in done], [r.epsilon_so_far for r in done], target,
                     ("start", f"round {last}"),
                     "epsilon so far after each round against the job's target",
                     cap_label="target", x_range=(0.0, float(last)))
