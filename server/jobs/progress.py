"""How a job's progress reads on an operator's screen: one line per job, one
per round, a progress bar for ``--follow`` on a terminal, and ``privadapt
logs`` (the job's audit events from the coordinator's store)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence

from privadapt.common.privacy_figures import running_spend_text, site_privacy_line
from privadapt.common.proto import federation_pb2 as pb
from privadapt.server.jobs.spec import job_state_name

BAR_WIDTH = 30


def job_line(job: pb.JobStatus) -> str:
    state = job_state_name(job.state)
    done = sum(1 for r in job.rounds if not r.aborted)
    aborted = len(job.rounds) - done
    text = f"{job.job_id}  {job.algorithm}  {state}  rounds={done}"
    if aborted:
        text += f" (+{aborted} aborted)"
    return text + (f"  {job.message}" if job.message else "")


def round_lines(rounds: Iterable[pb.RoundProgress], cap_delta: float | None = None
                ) -> list[str]:
    """One line per round; the running figure at the sites' cap delta
    (``cap_delta`` when they share one)."""
    lines = []
    for r in rounds:
        ms = r.duration.ToTimedelta() / dt.timedelta(milliseconds=1)
        if r.aborted:
            lines.append(f"  round {r.round:>5}  ABORTED  {r.abort_reason}")
        else:
            lines.append(f"  round {r.round:>5}  sites={len(r.participants)}  {ms:8.1f} ms  "
                         f"{running_spend_text(r.epsilon_so_far, cap_delta)}")
    return lines


def progress_bar(job: pb.JobStatus, width: int = BAR_WIDTH,
                 cap_delta: float | None = None, eta_s: float | None = None) -> str:
    """``[#########.........]  37/100 rounds  ETA 1m05s  job epsilon so far
    0.41 at delta 1e-05 (the sites' cap)``: the rounds done against the job's
    planned rounds (a count alone when the coordinator has no plan for it),
    the time left at the pace so far (``eta_s``, when known), and what the
    job waits for, if it waits."""
    done = [r for r in job.rounds if not r.aborted]
    epsilon = (f"  {running_spend_text(done[-1].epsilon_so_far, cap_delta)}" if done
               else "")
    aborted = len(job.rounds) - len(done)
    tail = f"{epsilon}{f'  ({aborted} aborted)' if aborted else ''}"
    if job.state == pb.JOB_STATE_RUNNING and job.message:
        tail += f"  -- {job.message}"
    if not job.planned_rounds:
        return f"{len(done)} rounds{tail}"
    filled = min(width, width * len(done) // job.planned_rounds)
    eta = "" if eta_s is None else f"  ETA {duration_text(eta_s)}"
    return f"[{'#' * filled}{'.' * (width - filled)}]  {len(done)}/{job.planned_rounds} " \
        f"rounds{eta}{tail}"


def duration_text(seconds: float) -> str:
    """``45s``, ``3m05s``, ``2h07m``."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class Pace:
    """The time left for a job at the pace of the rounds seen so far (wall
    clock, waits included), from the first status that had a round."""

    def __init__(self) -> None:
        self._start: tuple[float, int] | None = None

    def eta(self, job: pb.JobStatus, now: float) -> float | None:
        done = sum(1 for r in job.rounds if not r.aborted)
        if self._start is None:
            if done:
                self._start = (now, done)
            return None
        started, first = self._start
        if not job.planned_rounds or done <= first or now <= started:
            return None
        return max(0, job.planned_rounds - done) * (now - started) / (done - first)


def log_lines(log: pb.JobLog) -> list[str]:
    """``privadapt logs JOB``: the job's line, its audit events oldest first
    (time, event, site, detail), then its rounds."""
    lines = [job_line(log.status)]
    for event in log.events:
        when = event.time.ToDatetime(dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%fZ")
        site = f"  site={event.site_name}" if event.site_name else ""
        lines.append(f"  {when}  {event.event}{site}"
                     f"{f'  {event.detail}' if event.detail else ''}")
    lines.extend(round_lines(log.status.rounds))
    return lines


def new_round_lines(job: pb.JobStatus, printed: int, cap_delta: float | None = None
                    ) -> tuple[Sequence[str], int]:
    """The round lines not printed yet, and how many there are now."""
    lines = round_lines(job.rounds, cap_delta)
    return lines[printed:], len(lines)


def privacy_lines(report: dict) -> list[str]:
    """A job's privacy report (``privacy_report.json``) as the lines
    ``privadapt result``, ``status`` and ``--follow`` print: one per site,
    the job's spend at the job's delta, then the site's total."""
    lines = [f"  {site_privacy_line(name, site)}"
             for name, site in sorted(report.get("sites", {}).items())]
    missing = report.get("sites_not_reporting", [])
    if missing:
        lines.append(f"  did not report their spend: {', '.join(missing)}")
    return lines
