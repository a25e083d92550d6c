"""What an operator sees of a job: the progress bar of ``--follow`` on a
terminal (one line per round otherwise, from the Watch stream), the lines of
``privadapt logs``, and the result files that never replace another job's."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from google.protobuf.duration_pb2 import Duration

from privadapt.cli.operator import _follow
from privadapt.common.errors import ConfigError
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.wire.messages import timestamp_to_proto
from privadapt.server.jobs.progress import log_lines, progress_bar
from privadapt.server.jobs.result_files import claim_output, files_owner, write_model


def _status(done: int, planned: int = 10, state=pb.JOB_STATE_RUNNING, aborted: int = 0):
    status = pb.JobStatus(job_id="j", algorithm="noisy_gd", state=state, planned_rounds=planned)
    for k in range(done):
        status.rounds.add(round=k + 1, participants=["a", "b"], duration=Duration(nanos=10**6),
                          epsilon_so_far=0.1 * (k + 1))
    for k in range(aborted):
        status.rounds.add(round=done + k + 1, aborted=True, abort_reason="site left")
    return status


def test_the_bar_fills_with_the_rounds_done_against_the_plan():
    assert progress_bar(_status(5), width=10, cap_delta=1e-5) == \
        "[#####.....]  5/10 rounds  job epsilon so far 0.5 at delta 1e-05 (the sites' cap)"
    assert progress_bar(_status(10, aborted=1), width=10).startswith(
        "[##########]  10/10 rounds  job epsilon so far 1 at each site's cap delta  "
        "(1 aborted)")
    assert progress_bar(_status(0), width=4) == "[....]  0/10 rounds"
    # Without a plan (a resumed job): the count alone.
    assert progress_bar(_status(3, planned=0)) == \
        "3 rounds  job epsilon so far 0.3 at each site's cap delta"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class _Stub:
    def __init__(self, statuses):
        self.statuses = statuses

    def Watch(self, request):  # noqa: N802 -- the gRPC method's name
        return iter(self.statuses)

    def ListSites(self, request, timeout=None):  # noqa: N802
        reply = pb.ListSitesResponse()
        for name in ("a", "b"):
            reply.sites.add(site_name=name, budget=pb.SiteBudget(delta_cap=1e-5))
        return reply

    def Result(self, request, timeout=None):  # noqa: N802
        return pb.ResultResponse(job_id=request.job_id)


def test_follow_redraws_one_bar_on_a_terminal():
    statuses = [_status(k) for k in range(1, 4)] + [_status(3, state=pb.JOB_STATE_SUCCEEDED)]
    out = _Terminal()
    assert _follow(_Stub(statuses), "j", out=out) == 0
    text = out.getvalue()
    assert text.count("\r") == 4 and text.count("\n") == 2  # one bar line, then the job line
    assert "3/10 rounds" in text and "j  noisy_gd  succeeded  rounds=3" in text
    assert "job epsilon so far 0.3 at delta 1e-05 (the sites' cap)" in text


def test_follow_prints_one_line_per_round_elsewhere():
    statuses = [_status(k) for k in range(1, 4)] + [_status(3, state=pb.JOB_STATE_SUCCEEDED)]
    out = io.StringIO()
    assert _follow(_Stub(statuses), "j", out=out) == 0
    lines = out.getvalue().splitlines()
    assert len(lines) == 4 and "\r" not in out.getvalue()
    assert [line.split()[1] for line in lines[:3]] == ["1", "2", "3"]


def test_logs_lists_the_events_then_the_rounds():
    log = pb.JobLog(status=_status(2, state=pb.JOB_STATE_SUCCEEDED))
    log.events.add(time=timestamp_to_proto(0.0), event="job_launched", detail="noisy_gd")
    log.events.add(time=timestamp_to_proto(1.5), event="site_refused", site_name="a",
                   detail="policy")
    lines = log_lines(log)
    assert lines[0].startswith("j  noisy_gd  succeeded  rounds=2")
    assert lines[1] == "  1970-01-01 00:00:00.000000Z  job_launched  noisy_gd"
    assert lines[2] == "  1970-01-01 00:00:01.500000Z  site_refused  site=a  policy"
    assert lines[3].startswith("  round     1")


def test_result_files_carry_their_job_and_refuse_another_jobs_directory(tmp_path):
    out = tmp_path / "out"
    claim_output(out, "job-1")
    path = write_model(out, "job-1", {"weights": np.ones(2)}, "abc", ["age", "hours"])
    (out / "privacy_report.json").write_text(json.dumps({"job_id": "job-1"}))
    with np.load(path, allow_pickle=False) as model:
        assert list(model["feature_names"]) == ["age", "hours"]
        assert str(model["schema_digest"]) == "abc" and str(model["job_id"]) == "job-1"
    assert files_owner(out) == "job-1"
    claim_output(out, "job-1")  # the same job's files are replaced
    with pytest.raises(ConfigError, match=r"already holds the result of job 'job-1'.*job-2"):
        claim_output(out, "job-2")
    stranger = tmp_path / "stranger"
    stranger.mkdir()
    np.savez(stranger / "model.npz", weights=np.ones(2))  # written before job ids were kept
    with pytest.raises(ConfigError, match="result files of an unknown job"):
        claim_output(stranger, "job-2")
    with pytest.raises(ConfigError, match="keeps for its metadata"):
        write_model(tmp_path / "x", "job-3", {"job_id": np.ones(1)}, "", [])
