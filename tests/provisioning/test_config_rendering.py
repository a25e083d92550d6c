"""Every configuration loaded from TOML renders itself (``to_toml``) as text
its loader reads back equal: optional keys, relative and absolute paths, and
the deploy/ examples."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from privadapt.cli.operator import OperatorConfig
from privadapt.client.daemon.config import SiteConfig
from privadapt.server.coordinator.main import CoordinatorConfig
from tests.paths import DEPLOY_DIR


def _write(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(text)
    return path


def _site(tmp_path: Path, **fields) -> SiteConfig:
    base = {"coordinator": "127.0.0.1:5000", "data": tmp_path / "site" / "data.npz",
            "policy": tmp_path / "site" / "policy.toml", "database": Path("/var/lib/s.db"),
            "cert": tmp_path / "pki" / "s.crt", "key": tmp_path / "pki" / "s.key",
            "ca": tmp_path / "pki" / "ca.crt"}
    return SiteConfig(**{**base, **fields})


@pytest.mark.parametrize("schema", [None, "schema.toml"])
def test_site_config_reads_back_equal(tmp_path: Path, schema: str | None) -> None:
    config = _site(tmp_path, schema=schema and tmp_path / "site" / schema)
    site_dir = tmp_path / "site"
    text = config.to_toml(relative_to=site_dir)
    # Inside the site directory: relative, so the directory can move.
    assert 'data = "data.npz"' in text and str(tmp_path / "pki") in text
    assert ("schema" in text) == (schema is not None)
    assert SiteConfig.from_toml(_write(site_dir, "site.toml", text)) == config
    # Absolute paths throughout read back from anywhere.
    assert SiteConfig.from_toml(_write(tmp_path / "x", "s.toml", config.to_toml())) == config


def test_coordinator_config_reads_back_equal(tmp_path: Path) -> None:
    minimal = CoordinatorConfig("127.0.0.1:0", tmp_path / "c.db", tmp_path / "c.crt",
                                tmp_path / "c.key", tmp_path / "ca.crt")
    full = CoordinatorConfig("0.0.0.0:50051", tmp_path / "c.db", tmp_path / "c.crt",
                             tmp_path / "c.key", tmp_path / "ca.crt", name="coord",
                             round_timeout_s=2.5, site_wait_timeout_s=7.0, min_sites=3,
                             public_source=tmp_path / "data" / "source.csv",
                             public_source_schema=Path("/etc/source.schema.toml"),
                             max_sites=9,
                             public_sources=(tmp_path / "data" / "a.csv", tmp_path / "b.csv"))
    for config in (minimal, full):
        path = _write(tmp_path, "coordinator.toml", config.to_toml(relative_to=tmp_path))
        assert CoordinatorConfig.from_toml(path) == config
    assert "name" not in minimal.to_toml() and "public_source" not in minimal.to_toml()


def test_operator_config_reads_back_equal(tmp_path: Path) -> None:
    config = OperatorConfig("127.0.0.1:5000", tmp_path / "pki" / "op.crt",
                            tmp_path / "pki" / "op.key", tmp_path / "pki" / "ca.crt")
    path = _write(tmp_path, "operator.toml", config.to_toml(relative_to=tmp_path))
    assert OperatorConfig.locate(path) == config
    insecure = OperatorConfig("127.0.0.1:5000", None, None, None, insecure=True)
    path = _write(tmp_path, "insecure.toml", insecure.to_toml())
    assert "[tls]" not in path.read_text()
    assert OperatorConfig.locate(path, insecure=True) == insecure


@pytest.mark.parametrize("name, load", [
    ("site.toml", SiteConfig.from_toml),
    ("coordinator.toml", CoordinatorConfig.from_toml),
    ("operator.toml", OperatorConfig.locate),
])
def test_deploy_examples_read_back_equal(tmp_path: Path, name: str, load) -> None:
    deploy = tmp_path / "etc"
    shutil.copytree(DEPLOY_DIR, deploy)
    config = load(deploy / name)
    rendered = _write(deploy, f"rendered-{name}", config.to_toml(relative_to=deploy))
    assert load(rendered) == config
