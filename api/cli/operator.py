"""Operator commands: ``privadapt launch | status | result | cancel | sites | logs``.

``status``, ``sites``, ``result`` and ``logs`` take ``--json`` for scripts: one JSON
document with the reply's proto field names (``result``: the model's path and
the privacy report).

They talk to the coordinator's ``OperatorService`` over mutual TLS with an
operator certificate, named in an operator configuration file::

    [operator]
    coordinator = "127.0.0.1:50051"
    [tls]
    cert = "alice.crt"
    key = "alice.key"
    ca = "ca.crt"

found at ``--config PATH``, else ``$PRIVADAPT_OPERATOR_CONFIG``, else
``./operator.toml``. A refused call prints the coordinator's message on one
line and exits 2.

``--insecure`` reaches a coordinator started with ``--insecure`` (plaintext
gRPC, for local experiments), spelled and warned about as the daemons do
(common/daemon_cli.py); the ``[tls]`` section may then be left out.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import grpc

from privadapt.cli.json_output import message_document
from privadapt.common.config import Layout, read_sections, read_toml, render_layout
from privadapt.common.errors import ConfigError
from privadapt.common.privacy_figures import shared_delta, site_total_text
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.proto import federation_pb2_grpc as rpc
from privadapt.common.secure import tls
from privadapt.common.secure.dial_diagnosis import explain_unreachable
from privadapt.common.wire.messages import channel_options, params_from_proto
from privadapt.server.jobs.progress import (
    Pace,
    job_line,
    log_lines,
    new_round_lines,
    privacy_lines,
    progress_bar,
    round_lines,
)
from privadapt.server.jobs.report import render_job_report
from privadapt.server.jobs.result_files import (
    NAMES_NOT_STATED,
    PAGE_FILE,
    REPORT_FILE,
    claim_output,
    write_model,
)
from privadapt.server.jobs.spec import SET_HELP, job_spec_from_toml, job_state_name

CALL_TIMEOUT_S = 30.0
FINISHED = (pb.JOB_STATE_SUCCEEDED, pb.JOB_STATE_FAILED, pb.JOB_STATE_CANCELLED)
DRY_RUN_TIMEOUT_S = 600.0
_TLS_KEYS = ("cert", "key", "ca")
_LAYOUT: Layout = {
    "operator": {"coordinator": (str, True)},
    "tls": {key: (str, True) for key in _TLS_KEYS},
}
# Plaintext needs no certificate: [tls] may be absent (it is ignored if present).
_INSECURE_LAYOUT: Layout = {**_LAYOUT, "tls": {key: (str, False) for key in _TLS_KEYS}}


@dataclass(frozen=True)
class OperatorConfig:
    """Where the coordinator is and the operator's TLS files (None only with
    ``insecure``: a plaintext channel)."""

    coordinator: str
    cert: Path | None
    key: Path | None
    ca: Path | None
    insecure: bool = False

    @classmethod
    def locate(cls, given: Path | None, insecure: bool = False) -> OperatorConfig:
        path = given or Path(os.environ.get("PRIVADAPT_OPERATOR_CONFIG", "operator.toml"))
        data = read_toml(path, "operator configuration",
                         "pass --config PATH or set PRIVADAPT_OPERATOR_CONFIG")
        layout = _INSECURE_LAYOUT if insecure else _LAYOUT
        values = read_sections(data, layout, f"operator configuration {path}")
        if insecure:
            return cls(values["coordinator"], None, None, None, insecure=True)
        return cls(values["coordinator"], *(path.parent / values[k] for k in _TLS_KEYS))

    def to_toml(self, relative_to: Path | None = None) -> str:
        """This configuration as TOML that :meth:`locate` (with the same
        ``insecure``) reads back equal from a file in ``relative_to``; an
        insecure one has no ``[tls]``."""
        return render_layout(_LAYOUT, self, relative_to)

    def stub(self) -> rpc.OperatorServiceStub:
        if self.insecure:
            channel = grpc.insecure_channel(self.coordinator, options=channel_options())
        else:
            assert self.cert is not None and self.key is not None and self.ca is not None
            tls.check_own_certificate(self.cert, self.ca, "operator")
            credentials = tls.channel_credentials(self.cert, self.key, self.ca)
            channel = grpc.secure_channel(self.coordinator, credentials,
                                          options=channel_options())
        return rpc.OperatorServiceStub(channel)


def add_operator_commands(commands: argparse._SubParsersAction) -> None:
    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        parser = commands.add_parser(name, help=help_text)
        parser.add_argument("--config", type=Path, help="operator configuration (TOML)")
        # Spelled and worded as the daemons' flag (common/daemon_cli.py).
        parser.add_argument("--insecure", action="store_true",
                            help="plaintext gRPC to a coordinator started with --insecure, for "
                            "local debugging only (prints a warning)")
        return parser

    launch = command("launch", "launch a job described by a job TOML")
    launch.add_argument("job_file", type=Path)
    launch.add_argument("--follow", action="store_true", help="print progress until it ends")
    launch.add_argument("--id", dest="job_id", help="the job's id (overrides [job] id)")
    launch.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help=SET_HELP)
    launch.add_argument("--dry-run", action="store_true",
                        help="check the job against the coordinator and its sites and print "
                        "what was checked; store and start nothing")
    status = command("status", "a job's state and per-round progress (or every job)")
    status.add_argument("job_id", nargs="?", default="")
    status.add_argument("--follow", action="store_true", help="print progress until it ends")
    result = command("result", "write a finished job's model, privacy report and its HTML page")
    result.add_argument("job_id")
    result.add_argument("--out", type=Path, required=True, help="directory to write into")
    cancel = command("cancel", "cancel a running job")
    cancel.add_argument("job_id")
    cancel.add_argument("--reason", default="cancelled by the operator")
    sites = command("sites", "list the sites the coordinator knows")
    logs = command("logs", "a job's audit events and rounds from the coordinator's store")
    logs.add_argument("job_id")
    for parser in (launch, status, result, sites, logs):
        parser.add_argument("--json", action="store_true",
                            help="print one JSON document instead of lines, for scripts")


def run_operator_command(args: argparse.Namespace) -> int:
    if args.insecure:
        print(tls.insecure_warning(), file=sys.stderr)
    stub = OperatorConfig.locate(args.config, args.insecure).stub()
    try:
        return _COMMANDS[args.command](stub, args)
    except grpc.RpcError as err:
        reason = None
        if err.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            config = OperatorConfig.locate(args.config, args.insecure)
            reason = explain_unreachable(config.coordinator, config.ca)
        raise ConfigError(reason or f"coordinator: {err.code().name}: {err.details()}") from None


def _launch(stub: rpc.OperatorServiceStub, args: argparse.Namespace) -> int:
    spec, job_id = job_spec_from_toml(args.job_file, args.overrides, args.job_id)
    # A dry run runs the job's estimator on stand-ins: the adaptation estimators'
    # public warm start can take a while on a busy coordinator.
    response = stub.Launch(pb.LaunchRequest(spec=spec, job_id=job_id, dry_run=args.dry_run),
                           timeout=DRY_RUN_TIMEOUT_S if args.dry_run else CALL_TIMEOUT_S)
    if args.json:
        return _launch_json(stub, response, args)
    if args.dry_run:
        print(response.plan)
        return 0
    job_id = response.job_id
    print(f"launched {job_id}")
    return _follow(stub, job_id) if args.follow else 0


def _launch_json(stub: rpc.OperatorServiceStub, response: pb.LaunchResponse,
                 args: argparse.Namespace) -> int:
    """``launch --json``: the job id (or the dry run's plan); with
    ``--follow``, the job's final status once it ends (no progress lines)."""
    if args.dry_run:
        print(json.dumps({"dry_run": True, "plan": response.plan}, indent=2))
        return 0
    document: dict = {"job_id": response.job_id}
    if not args.follow:
        print(json.dumps(document, indent=2))
        return 0
    job = next(iter(deque(watch(stub, response.job_id), maxlen=1)), None)
    document["status"] = None if job is None else message_document(job)
    print(json.dumps(document, indent=2))
    return 0 if job is not None and job.state == pb.JOB_STATE_SUCCEEDED else 1


def _status(stub: rpc.OperatorServiceStub, args: argparse.Namespace) -> int:
    if args.follow and args.job_id:
        return _follow(stub, args.job_id)
    response = stub.Status(pb.StatusRequest(job_id=args.job_id), timeout=CALL_TIMEOUT_S)
    if args.json:
        return _print_json(response)
    for job in response.jobs:
        print(job_line(job))
        if args.job_id:
            for line in round_lines(job.rounds, _cap_delta(stub, job)):
                print(line)
            _print_privacy(stub, job)
    return 0


def _cap_delta(stub: rpc.OperatorServiceStub, job: pb.JobStatus) -> float | None:
    """The cap delta the job's participants share, as their ledgers last
    reported it to the coordinator (None if they differ or are not known)."""
    names = {name for r in job.rounds for name in r.participants}
    if not names:
        return None
    sites = stub.ListSites(pb.ListSitesRequest(), timeout=CALL_TIMEOUT_S).sites
    deltas = {s.site_name: s.budget.delta_cap for s in sites if s.HasField("budget")}
    if not names <= set(deltas):
        return None
    return shared_delta(deltas[name] for name in names)


def _print_privacy(stub: rpc.OperatorServiceStub, job: pb.JobStatus,
                   out: TextIO | None = None) -> None:
    """A finished job's spend per site, as ``privadapt result`` prints it."""
    if job.state not in FINISHED:
        return
    response = stub.Result(pb.ResultRequest(job_id=job.job_id), timeout=CALL_TIMEOUT_S)
    if response.privacy_report_json:
        for line in privacy_lines(json.loads(response.privacy_report_json)):
            print(line, file=out or sys.stdout)


def _follow(stub: rpc.OperatorServiceStub, job_id: str, out: TextIO | None = None) -> int:
    """Print the job's progress from the Watch stream until it ends: a
    progress bar (with an ETA) redrawn in place on a terminal, else one line
    per round; while the job waits for sites, which ones and until when,
    every few seconds."""
    out = out or sys.stdout
    on_terminal = out.isatty()
    job = None
    printed = 0
    cap_delta: float | None = None
    pace, waiting = Pace(), ""
    for job in watch(stub, job_id):
        if cap_delta is None and job.rounds:
            cap_delta = _cap_delta(stub, job)
        if on_terminal:
            bar = progress_bar(job, cap_delta=cap_delta, eta_s=pace.eta(job, time.time()))
            print(f"\r{bar}\x1b[K", end="", file=out, flush=True)
            continue
        lines, printed = new_round_lines(job, printed, cap_delta)
        for line in lines:
            print(line, file=out, flush=True)
        # What the job waits for, every few seconds while it waits.
        if job.state == pb.JOB_STATE_RUNNING and job.message != waiting:
            waiting = job.message
            if waiting:
                print(f"  {waiting}", file=out, flush=True)
    if job is not None:
        if on_terminal:
            print(file=out)
        print(job_line(job), file=out)
        _print_privacy(stub, job, out)
    return 0 if job is not None and job.state == pb.JOB_STATE_SUCCEEDED else 1


def watch(stub: rpc.OperatorServiceStub, job_id: str) -> Iterator[pb.JobStatus]:
    """The job's status after every round until it ends (a server stream)."""
    yield from stub.Watch(pb.StatusRequest(job_id=job_id))


@dataclass(frozen=True)
class ResultFiles:
    """Where :func:`write_result_files` put a job's result."""

    model: Path | None  # None: the job failed or was cancelled
    privacy_report: Path
    page: Path


def write_result_files(stub: rpc.OperatorServiceStub, response: pb.ResultResponse,
                       out: Path, job_id: str) -> ResultFiles:
    """Write the ``model.npz``, ``privacy_report.json`` and ``report.html``
    of the job ``job_id`` (``response``: the coordinator's Result reply)
    into ``out`` (server/jobs/result_files.py); a failed or cancelled job
    has no model, only its privacy report and page. ``ConfigError`` if the
    job has neither (not finished, or no site was ever charged for it)."""
    if not response.privacy_report_json:
        state = job_state_name(response.state)
        raise ConfigError(f"job {job_id!r} has no result (state: {state})")
    claim_output(out, response.job_id)
    report = json.loads(response.privacy_report_json)
    model_path = None
    if response.model:
        model_path = write_model(out, response.job_id,
                                 params_from_proto(response.model, "model"),
                                 response.schema_digest, response.feature_names,
                                 report.get("feature_names_source", NAMES_NOT_STATED))
    report_path = out / REPORT_FILE
    report_path.write_text(response.privacy_report_json + "\n")
    log = stub.Logs(pb.StatusRequest(job_id=response.job_id), timeout=CALL_TIMEOUT_S)
    page_path = out / PAGE_FILE
    page_path.write_text(render_job_report(log, report), encoding="utf-8")
    return ResultFiles(model_path, report_path, page_path)


def _result(stub: rpc.OperatorServiceStub, args: argparse.Namespace) -> int:
    response = stub.Result(pb.ResultRequest(job_id=args.job_id), timeout=CALL_TIMEOUT_S)
    files = write_result_files(stub, response, args.out, args.job_id)
    report = json.loads(response.privacy_report_json)
    state = job_state_name(response.state)
    if args.json:
        print(json.dumps({"state": state,
                          "model": None if files.model is None else str(files.model),
                          "page": str(files.page), "privacy_report": report}, indent=2))
        return 0
    if files.model is None:
        print(f"job {args.job_id!r} {state}: no model; wrote its privacy report "
              f"{files.privacy_report} and {files.page} (what each site was charged)")
    else:
        print(f"wrote {files.model}, {files.privacy_report} and {files.page}")
    for line in privacy_lines(report):
        print(line)
    return 0


def _cancel(stub: rpc.OperatorServiceStub, args: argparse.Namespace) -> int:
    response = stub.Cancel(pb.CancelRequest(job_id=args.job_id, reason=args.reason),
                           timeout=CALL_TIMEOUT_S + 5)
    print(f"{args.job_id}: {job_state_name(response.state)}")
    return 0


def _sites(stub: rpc.OperatorServiceStub, args: argparse.Namespace) -> int:
    response = stub.ListSites(pb.ListSitesRequest(), timeout=CALL_TIMEOUT_S)
    if args.json:
        return _print_json(response)
    for site in response.sites:
        seen = site.last_seen.ToDatetime(dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")
        print(f"{site.site_name:<20} {'connected' if site.connected else 'away':<10} "
              f"records={site.num_records:<8} last seen {seen}  {budget_text(site)}")
    if not response.sites:
        print("no site has registered yet")
    else:
        print("budgets as each site's ledger reported them (at its cap's delta); the ledger "
              "checks every release against its cap")
    return 0


def budget_text(site: pb.SiteInfo) -> str:
    """``site total epsilon 0.81 at delta 1e-06 (the cap's), cap 3, 2.19
    left``, from the budget the site's ledger last reported."""
    if not site.HasField("budget"):
        return "budget not reported this run"
    budget = site.budget
    return site_total_text(budget.epsilon_spent, budget.delta_cap, budget.epsilon_cap)


def _print_json(message) -> int:
    """A reply as JSON with the proto's field names (every field, defaults too)."""
    print(json.dumps(message_document(message), indent=2))
    return 0


def _logs(stub: rpc.OperatorServiceStub, args: argparse.Namespace) -> int:
    log = stub.Logs(pb.StatusRequest(job_id=args.job_id), timeout=CALL_TIMEOUT_S)
    if args.json:
        return _print_json(log)
    for line in log_lines(log):
        print(line)
    return 0


_COMMANDS = {"launch": _launch, "status": _status, "result": _result, "cancel": _cancel,
             "sites": _sites, "logs": _logs}
