"""``privadapt simulate --set KEY=VALUE`` overrides every job it runs, read by
the same function as ``privadapt launch --set`` (server/jobs/spec.py), and a
malformed one is refused before anything is started."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from privadapt.cli.main import _build_parser
from privadapt.common.errors import ConfigError
from privadapt.common.proto import federation_pb2 as pb
from privadapt.server.jobs.spec import hyperparameters
from privadapt.simulation.simulate import run_job, simulate

JOB = ('[job]\nid = "short"\nalgorithm = "noisy_gd"\nepsilon = 1.0\ndelta = 1e-6\n'
       '[hyperparameters]\nloss = "logistic"\niterations = 20\nlearning_rate = 16.0\n'
       "radius = 20.0\nclip_norm = 1.0\n")


class _RecordingStub:
    """The operator API as run_job uses it: records the launched spec."""

    def __init__(self) -> None:
        self.launched: list[pb.LaunchRequest] = []

    def Launch(self, request, timeout):  # noqa: N802 (the gRPC method's name)
        self.launched.append(request)
        return SimpleNamespace(job_id=request.job_id)

    def Watch(self, request):  # noqa: N802
        yield pb.JobStatus(job_id=request.job_id, state=pb.JOB_STATE_SUCCEEDED)

    def Result(self, request, timeout):  # noqa: N802
        return pb.ResultResponse(job_id=request.job_id)


def test_simulate_applies_each_set_to_the_job_it_launches(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text(JOB)
    stub = _RecordingStub()
    run_job(stub, path, 0.0, ["site-1", "site-2"],
            ["epsilon=3", "iterations=5", "job.id=retry"])
    (request,) = stub.launched
    assert request.job_id == "retry" and request.spec.epsilon == 3.0
    assert hyperparameters(request.spec)["iterations"] == 5


def test_the_cli_passes_set_to_simulate():
    args = _build_parser().parse_args(["simulate", "--set", "epsilon=3", "--set", "seed=2"])
    assert args.overrides == ["epsilon=3", "seed=2"]


@pytest.mark.parametrize("override, message", [
    ("epsilon", "expected KEY=VALUE"), ("model.x=1", "starts with job. or hyperparameters."),
])
def test_a_malformed_set_is_refused_before_anything_is_started(tmp_path, override, message):
    workdir = tmp_path / "run"
    with pytest.raises(ConfigError, match=message):
        simulate(2, workdir, [], overrides=[override])
    assert not workdir.exists()


def test_a_job_file_the_set_breaks_is_refused_before_anything_is_started(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text(JOB)
    with pytest.raises(ConfigError, match="delta must be in"):
        simulate(2, tmp_path / "run", [path], overrides=["delta=2"])
    assert not (tmp_path / "run").exists()
