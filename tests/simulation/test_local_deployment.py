"""LocalDeployment writes a federation that loads: every configuration parses
with the daemons' own loaders, names files that exist, and every certificate
chains to the deployment's CA with the role and name the party needs."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from privadapt.cli.operator import OperatorConfig
from privadapt.client.daemon.config import SiteConfig
from privadapt.client.policy import SitePolicy
from privadapt.common.data.dataset import load_dataset
from privadapt.common.data.schema import Schema
from privadapt.common.errors import ConfigError
from privadapt.common.mechanisms import Adjacency
from privadapt.common.secure import certs
from privadapt.common.secure.certcheck import certificate_identity
from privadapt.server.coordinator.main import CoordinatorConfig
from privadapt.simulation.local_deployment import LocalDeployment, free_port, write_pki
from tests.synthetic_data import synthetic_dataset

ADDRESS = "127.0.0.1:50123"


@pytest.fixture
def deployment(tmp_path: Path) -> LocalDeployment:
    return LocalDeployment(tmp_path, write_pki(tmp_path / "pki"))


def _assert_issued(path: Path, ca: Path, name: str, role: str) -> None:
    cert = certs.load_certificate(path)
    certs.verify_issued_by(cert, certs.load_certificate(ca))
    identity = certificate_identity(cert)
    assert (identity.name, identity.role) == (name, role)


def test_coordinator_config_loads_with_its_certificate_and_public_source(
        deployment: LocalDeployment) -> None:
    source = synthetic_dataset(30, 3, seed=1)
    path = deployment.write_coordinator(ADDRESS, public_source=source, min_sites=2,
                                        round_timeout_s=5.0)
    config = CoordinatorConfig.from_toml(path)
    assert (config.listen, config.min_sites, config.round_timeout_s) == (ADDRESS, 2, 5.0)
    assert config.database == deployment.workdir / "coordinator.db"
    _assert_issued(config.cert, config.ca, "coordinator", "coordinator")
    assert config.public_source is not None
    loaded = load_dataset(config.public_source)
    np.testing.assert_array_equal(loaded.features, source.features)


def test_operator_config_loads_secure_and_insecure(deployment: LocalDeployment) -> None:
    config = OperatorConfig.locate(deployment.write_operator(ADDRESS))
    assert config.coordinator == ADDRESS
    _assert_issued(config.cert, config.ca, "operator", "operator")
    insecure = OperatorConfig.locate(deployment.write_operator(ADDRESS, insecure=True),
                                     insecure=True)
    assert insecure == OperatorConfig(ADDRESS, None, None, None, insecure=True)


def test_site_with_a_dataset_loads_its_policy_data_and_certificate(
        deployment: LocalDeployment, tmp_path: Path) -> None:
    data = synthetic_dataset(20, 4, seed=2)
    policy = SitePolicy("st-mary", 2.0, 1e-6, adjacency=Adjacency.ADD_REMOVE_ONE,
                        min_participants=2, peers=["st-paul"])
    path = deployment.write_site(policy, data, ADDRESS)
    config = SiteConfig.from_toml(path)
    assert path == tmp_path / "st-mary" / "site.toml"
    assert config.coordinator == ADDRESS and config.schema is None
    assert SitePolicy.from_toml(config.policy) == policy
    np.testing.assert_array_equal(load_dataset(config.data).labels, data.labels)
    assert config.database == tmp_path / "st-mary" / "site.db"
    _assert_issued(config.cert, config.ca, "st-mary", "site")
    # The site's own files are named relative to it: the directory can move.
    moved = tmp_path / "moved"
    shutil.copytree(tmp_path / "st-mary", moved)
    assert SiteConfig.from_toml(moved / "site.toml").data == moved / "data.npz"


def test_site_with_a_csv_and_schema_points_at_them(deployment: LocalDeployment,
                                                  tmp_path: Path) -> None:
    schema = Schema(label="y", numeric=("a",))
    csv = tmp_path / "data" / "a.csv"
    csv.parent.mkdir()
    csv.write_text("a,y\n0.5,1\n0.25,-1\n")
    (tmp_path / "data" / "a.schema.toml").write_text(schema.to_toml())
    config = SiteConfig.from_toml(deployment.write_site(
        SitePolicy("st-paul", 1.0, 1e-5), csv, ADDRESS, schema=tmp_path / "data" / "a.schema.toml"))
    assert config.data == csv and load_dataset(config.data, Schema.from_toml(config.schema))


def test_a_site_written_again_keeps_its_certificate(deployment: LocalDeployment) -> None:
    data = synthetic_dataset(10, 2, seed=3)
    first = SiteConfig.from_toml(deployment.write_site(SitePolicy("s", 1.0, 1e-5), data, ADDRESS))
    before = first.cert.read_bytes()
    again = deployment.write_site(SitePolicy("s", 3.0, 1e-5), data, ADDRESS)
    assert first.cert.read_bytes() == before
    assert SitePolicy.from_toml(SiteConfig.from_toml(again).policy).epsilon_cap == 3.0


def test_a_separate_pki_directory_is_used_as_given(tmp_path: Path) -> None:
    pki = write_pki(tmp_path / "shared-pki", ["site-a"])
    deployment = LocalDeployment(tmp_path / "run", pki)
    config = SiteConfig.from_toml(deployment.write_site(
        SitePolicy("site-a", 1.0, 1e-5), synthetic_dataset(10, 2, seed=4), ADDRESS))
    assert config.ca == pki / "ca.crt" and config.cert == pki / "site-a.crt"
    with pytest.raises(ConfigError, match="a CA already exists"):
        write_pki(pki)


def test_free_port_is_a_port_number() -> None:
    assert 0 < free_port() < 65536
