"""Job files and the launch command line's --id and --set overrides."""

import pytest

from privadapt.common.errors import ConfigError
from privadapt.server.jobs.spec import hyperparameters, job_spec_from_toml

JOB = """[job]
id = "from-file"
algorithm = "noisy_gd"
epsilon = 1.0
delta = 1e-6
[hyperparameters]
loss = "logistic"
iterations = 10
learning_rate = 1.0
radius = 5.0
clip_norm = 1.0
"""


@pytest.fixture
def job_file(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text(JOB)
    return path


def test_set_overrides_job_keys_and_hyperparameters_and_id_replaces_the_files(job_file):
    spec, job_id = job_spec_from_toml(
        job_file, ["epsilon=3", "iterations=50", "loss=squared", "job.seed=4",
                   'sites=["a", "b"]'], job_id="retry-2")
    assert job_id == "retry-2"
    assert (spec.epsilon, spec.seed, list(spec.sites)) == (3.0, 4, ["a", "b"])
    assert hyperparameters(spec)["iterations"] == 50
    assert hyperparameters(spec)["loss"] == "squared"


def test_file_id_is_kept_without_an_override(job_file):
    assert job_spec_from_toml(job_file)[1] == "from-file"


@pytest.mark.parametrize(("override", "expected"), [
    ("epsilon", r"--set 'epsilon': expected KEY=VALUE"),
    ("model.iterations=3", r"a dotted key starts with job. or hyperparameters."),
    ("delta=0.01", r"delta = 0.01 is 0.001 or more.*allow_large_delta"),
    ("epsilon=true", r"\[job\] epsilon must be a number, got True"),
])
def test_bad_overrides_are_refused_naming_them(job_file, override, expected):
    with pytest.raises(ConfigError, match=expected):
        job_spec_from_toml(job_file, [override])


def test_allow_large_delta_is_read_from_the_file(job_file):
    spec, _ = job_spec_from_toml(job_file, ["delta=0.01", "allow_large_delta=true"])
    assert spec.allow_large_delta and spec.delta == 0.01
