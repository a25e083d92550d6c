"""The example files in deploy/ load with the project's own loaders, so they
cannot drift from the code: a renamed key, a new required key, an unknown
kernel or a job the example policy would refuse fails here."""

from __future__ import annotations

import configparser
import shutil
from pathlib import Path

import pytest

from privadapt.cli.operator import OperatorConfig
from privadapt.client.daemon.config import SiteConfig
from privadapt.client.policy import SitePolicy
from privadapt.common.data.datasets.adult import ADULT_SCHEMA
from privadapt.common.data.schema import Schema
from privadapt.common.mechanisms import GaussianMechanism
from privadapt.server.algorithms.gradient_descent.noisy_gd import gradient_mechanism
from privadapt.server.coordinator.main import CoordinatorConfig
from privadapt.server.jobs.catalog import validate_hyperparameters
from privadapt.server.jobs.spec import hyperparameters, job_spec_from_toml
from tests.paths import DEPLOY_DIR

# The kernel each example algorithm queries
# (noisy_gd: server/algorithms/gradient_descent/noisy_gd.py).
KERNEL_OF = {"noisy_gd": "linear_gradient"}


@pytest.fixture
def deploy(tmp_path: Path) -> Path:
    """A copy of deploy/ somewhere else, so relative paths are seen to resolve
    against the file's directory, not the current one."""
    copy = tmp_path / "etc-privadapt"
    shutil.copytree(DEPLOY_DIR, copy)
    return copy


def test_coordinator_config(deploy: Path) -> None:
    config = CoordinatorConfig.from_toml(deploy / "coordinator.toml")
    assert config.cert == deploy / "tls" / "coordinator.crt"
    assert config.key == deploy / "tls" / "coordinator.key"
    assert config.ca == deploy / "tls" / "ca.crt"
    # Absolute, inside the unit's ReadWritePaths (ProtectSystem=strict).
    assert config.database.is_absolute()
    assert config.database.parent == Path(_service(deploy, "coordinator")["ReadWritePaths"])
    assert config.min_sites >= 2


def test_site_config_points_at_the_example_policy_and_schema(deploy: Path) -> None:
    config = SiteConfig.from_toml(deploy / "site.toml")
    assert config.policy == deploy / "policy.toml" and config.policy.is_file()
    assert config.schema == deploy / "adult.schema.toml"
    assert Schema.from_toml(config.schema) == ADULT_SCHEMA
    assert config.data.is_absolute()
    assert config.database.parent == Path(_service(deploy, "site")["ReadWritePaths"])
    policy = SitePolicy.from_toml(config.policy)
    # The daemon refuses to start unless the certificate's CN is the policy's name.
    assert config.cert == deploy / "tls" / f"{policy.site_name}.crt"
    assert config.key == deploy / "tls" / f"{policy.site_name}.key"


def test_policy_is_hospital_grade(deploy: Path) -> None:
    policy = SitePolicy.from_toml(deploy / "policy.toml")
    assert policy.allowed_kernels
    assert 0 < policy.epsilon_cap < float("inf")
    assert 0 < policy.delta_cap < 1e-4
    assert policy.min_noise_multiplier > 0
    assert policy.min_participants >= 2
    assert policy.max_clip_norm is not None and policy.max_label_bound is not None
    assert not policy.allow_non_private


def test_job_is_valid_and_the_example_policy_accepts_it(deploy: Path) -> None:
    spec, job_id = job_spec_from_toml(deploy / "job.toml")
    assert job_id
    params = hyperparameters(spec)
    validate_hyperparameters(spec.algorithm, params)  # what the coordinator checks at launch
    policy = SitePolicy.from_toml(deploy / "policy.toml")
    assert policy.site_name in spec.sites
    assert KERNEL_OF[spec.algorithm] in policy.allowed_kernels
    assert spec.collusion_tolerance >= policy.collusion_tolerance
    assert spec.min_participants >= policy.min_participants
    assert spec.min_participants - spec.collusion_tolerance >= 1
    assert params["clip_norm"] <= policy.max_clip_norm
    assert spec.epsilon <= policy.epsilon_cap
    mechanism = gradient_mechanism(spec.epsilon, spec.delta, params["iterations"],
                                   params["clip_norm"], spec.calibration,
                                   dim=len(ADULT_SCHEMA.feature_names()))
    assert isinstance(mechanism, GaussianMechanism)
    assert mechanism.noise_multiplier >= policy.min_noise_multiplier


def test_operator_config(deploy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = OperatorConfig.locate(deploy / "operator.toml")
    assert config.cert == deploy / "tls" / "alice.crt"
    assert config.ca == deploy / "tls" / "ca.crt"
    assert ":" in config.coordinator
    # Without --config: $PRIVADAPT_OPERATOR_CONFIG.
    monkeypatch.setenv("PRIVADAPT_OPERATOR_CONFIG", str(deploy / "operator.toml"))
    assert OperatorConfig.locate(None) == config


def test_every_example_toml_is_tested() -> None:
    # federation.toml: tests/provisioning/test_provision.py
    tested = {"coordinator.toml", "site.toml", "policy.toml", "job.toml", "operator.toml",
              "adult.schema.toml", "federation.toml"}
    assert {p.name for p in DEPLOY_DIR.glob("*.toml")} == tested


@pytest.mark.parametrize("role", ["coordinator", "site"])
def test_systemd_unit(deploy: Path, role: str) -> None:
    service = _service(deploy, role)
    assert service["ExecStart"] == (f"/opt/privadapt/.venv/bin/privadapt-{role} "
                                    f"--config /etc/privadapt/{role}.toml")
    assert service["User"] not in ("", "root")
    assert service["Restart"] == "on-failure"
    assert service["KillSignal"] == "SIGTERM"
    for key, value in {"NoNewPrivileges": "true", "ProtectSystem": "strict",
                       "PrivateTmp": "true", "ProtectHome": "true"}.items():
        assert service[key] == value, key
    assert service["ReadWritePaths"] == f"/var/lib/{service['StateDirectory']}"


def test_no_private_key_in_deploy() -> None:
    for path in DEPLOY_DIR.rglob("*"):
        assert path.suffix != ".key", path
        if path.is_file():
            assert b"PRIVATE KEY-----" not in path.read_bytes(), path


def _service(deploy: Path, role: str) -> configparser.SectionProxy:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # systemd keys are case-sensitive
    parser.read(deploy / f"privadapt-{role}.service")
    return parser["Service"]
