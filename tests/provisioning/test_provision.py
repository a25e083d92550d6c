"""``privadapt provision``: one federation file, a startup kit per participant
that the daemons' own loaders accept, and a federation started from the kits."""

from __future__ import annotations

import stat
from pathlib import Path

import numpy as np
import pytest
from cryptography import x509

from privadapt.cli import main as cli
from privadapt.cli.operator import OperatorConfig
from privadapt.client.daemon.config import SiteConfig
from privadapt.client.policy import SitePolicy
from privadapt.common.errors import ConfigError
from privadapt.common.secure import certs, tls
from privadapt.provisioning.systemd_units import render_unit, unit_file_name
from privadapt.server.coordinator.main import CoordinatorConfig
from privadapt.simulation.local_deployment import free_port
from tests.network_harness import ThreadSites, in_process_coordinator
from tests.paths import DEPLOY_DIR
from tests.synthetic_data import synthetic_dataset

SITES = ("st-mary", "st-john")


def _federation(tmp_path: Path, port: int) -> Path:
    for k, name in enumerate(SITES):
        data = synthetic_dataset(50, 4, seed=k)
        np.savez(tmp_path / f"{name}.npz", features=data.features, labels=data.labels)
    path = tmp_path / "federation.toml"
    path.write_text(
        f'[federation]\nconfig_dir = "/etc/privadapt"\n\n'
        f'[coordinator]\nhost = "127.0.0.1"\nport = {port}\nextra_hosts = ["localhost"]\n'
        f'database = "state/coordinator.db"\nsite_wait_timeout_s = 30\n\n'
        '[policy.privacy]\nepsilon_cap = 5.0\ndelta_cap = 1e-6\n\n'
        + "".join(f'[[site]]\nname = "{name}"\ndata = "{tmp_path / (name + ".npz")}"\n'
                  'database = "state/site.db"\n\n' for name in SITES)
        + '[site.policy.privacy]\nepsilon_cap = 4.0\n\n'  # st-john's own cap
        + '[[operator]]\nname = "alice"\n')
    return path


def test_provision_writes_a_kit_per_participant_that_the_loaders_accept(tmp_path, capsys):
    federation = _federation(tmp_path, 50051)
    assert cli.main(["provision", str(federation)]) == 0
    assert "wrote the site kit of 'st-mary'" in capsys.readouterr().out
    kits = tmp_path / "kits"
    assert sorted(p.name for p in kits.iterdir()) == ["alice", "ca", "coordinator", *sorted(SITES)]
    coordinator = CoordinatorConfig.from_toml(kits / "coordinator" / "coordinator.toml")
    assert coordinator.listen == "0.0.0.0:50051"
    assert coordinator.database == kits / "coordinator" / "state" / "coordinator.db"
    assert tls.check_own_certificate(coordinator.cert, coordinator.ca, "coordinator").name == \
        "coordinator"
    names = certs.load_certificate(coordinator.cert).extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value
    assert {str(n.value) for n in names} == {"127.0.0.1", "localhost"}
    for name in SITES:
        kit = kits / name
        config = SiteConfig.from_toml(kit / "site.toml")
        assert config.coordinator == "127.0.0.1:50051"
        assert config.cert == kit / "tls" / f"{name}.crt"
        assert tls.check_own_certificate(config.cert, config.ca, "site").name == name
        policy = SitePolicy.from_toml(config.policy)
        assert policy.site_name == name and not policy.simulation
        assert policy.peers == frozenset(SITES) - {name}
        assert policy.epsilon_cap == (4.0 if name == "st-john" else 5.0)
        assert (kit / unit_file_name("site")).read_text() == render_unit("site")
        assert "privadapt ledger init" in (kit / "README.txt").read_text()
    operator = OperatorConfig.locate(kits / "alice" / "operator.toml")
    assert operator.coordinator == "127.0.0.1:50051"
    assert tls.check_own_certificate(operator.cert, operator.ca, "operator").name == "alice"
    keys = [p for p in kits.rglob("*.key")]
    assert len(keys) == 1 + 1 + len(SITES) + 1  # the CA, the coordinator, the sites, alice
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in keys)
    # Private keys of the parties live in their kits only, not beside the CA.
    assert sorted(p.name for p in (kits / "ca").iterdir()) == ["ca.crt", "ca.key"]


def test_provision_refuses_to_overwrite_a_kit_unless_forced(tmp_path, capsys):
    federation = _federation(tmp_path, 50051)
    assert cli.main(["provision", str(federation), "--out", str(tmp_path / "k")]) == 0
    ca = (tmp_path / "k" / "ca" / "ca.crt").read_bytes()
    old = (tmp_path / "k" / "st-mary" / "tls" / "st-mary.crt").read_bytes()
    capsys.readouterr()
    assert cli.main(["provision", str(federation), "--out", str(tmp_path / "k")]) == 2
    assert "already exist" in capsys.readouterr().err
    assert cli.main(["provision", str(federation), "--out", str(tmp_path / "k"), "--force"]) == 0
    assert (tmp_path / "k" / "ca" / "ca.crt").read_bytes() == ca  # the CA is reused
    assert (tmp_path / "k" / "st-mary" / "tls" / "st-mary.crt").read_bytes() != old


@pytest.mark.parametrize("old, new, message", [
    ("", '[[site]]\nname = "st-mary"\ndata = "x.npz"\n', "repeated: st-mary"),
    ("epsilon_cap = 5.0", "epsilon_cap = 0.0", "policy of site 'st-mary'"),
    ("", '[[site]]\nname = "bad name"\ndata = "x.npz"\n', "[[site]] name"),
    ("port = 50051", 'port = "50051"', "[coordinator] port must be a whole number"),
])
def test_a_bad_federation_file_is_refused_before_anything_is_written(tmp_path, capsys, old, new,
                                                                      message):
    federation = _federation(tmp_path, 50051)
    text = federation.read_text()
    federation.write_text(text.replace(old, new, 1) if old else text + new)
    assert cli.main(["provision", str(federation)]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "kits").exists()


def test_the_deploy_examples_are_the_rendered_units():
    for daemon in ("coordinator", "site"):
        assert (DEPLOY_DIR / unit_file_name(daemon)).read_text() == render_unit(daemon)


@pytest.mark.slow
def test_a_federation_started_from_its_kits_runs_a_job(tmp_path, capsys):
    port = free_port()
    federation = _federation(tmp_path, port)
    assert cli.main(["provision", str(federation)]) == 0
    kits = tmp_path / "kits"
    for name in SITES:  # what each site's README.txt says to run once
        (kits / name / "state").mkdir()
        assert cli.main(["ledger", "init", "--site-db", str(kits / name / "state" / "site.db"),
                         "--policy", str(kits / name / "policy.toml")]) == 0
    config = CoordinatorConfig.from_toml(kits / "coordinator" / "coordinator.toml")
    (kits / "coordinator" / "state").mkdir()
    loopback = CoordinatorConfig(**{**config.__dict__, "listen": f"127.0.0.1:{port}"})
    toml = kits / "coordinator" / "loopback.toml"
    toml.write_text(loopback.to_toml(toml.parent))
    job = tmp_path / "job.toml"
    job.write_text(
        '[job]\nid = "kit-job"\nalgorithm = "noisy_gd"\nepsilon = 1.0\ndelta = 1e-7\n'
        f'sites = {list(SITES)!r}\nseed = 1\n'.replace("'", '"')
        + '[hyperparameters]\nloss = "logistic"\niterations = 2\nlearning_rate = 1.0\n'
        'radius = 5.0\nclip_norm = 1.0\n')
    operator = ["--config", str(kits / "alice" / "operator.toml")]
    sites = ThreadSites()
    with in_process_coordinator(toml) as coordinator:
        try:
            for name in SITES:
                sites.start(kits / name / "site.toml")
            assert coordinator.registry.wait_until(
                lambda: coordinator.registry.connected_names() == set(SITES), 30)
            capsys.readouterr()
            assert cli.main(["launch", str(job), "--follow", *operator]) == 0
            assert "succeeded" in capsys.readouterr().out
        finally:
            sites.stop()


def test_the_deploy_example_federation_provisions(tmp_path):
    kits = tmp_path / "kits"
    from privadapt.provisioning.provision import provision

    written = provision(DEPLOY_DIR / "federation.toml", kits)
    assert [k.name for k in written] == ["coordinator", "st-mary", "st-john", "city-general",
                                         "northside", "alice"]
    site = SiteConfig.from_toml(kits / "city-general" / "site.toml")
    assert site.coordinator == "coord.example.org:50051"
    assert site.database == Path("/var/lib/privadapt-site/site.db")
    assert SitePolicy.from_toml(site.policy).epsilon_cap == 2.0
    assert (kits / "city-general" / "schema.toml").read_text() == \
        (DEPLOY_DIR / "adult.schema.toml").read_text()
    # The coordinator holds it too (no public sample): it names the models' features.
    coordinator = CoordinatorConfig.from_toml(kits / "coordinator" / "coordinator.toml")
    assert coordinator.public_source is None
    assert coordinator.public_source_schema.read_text() == \
        (DEPLOY_DIR / "adult.schema.toml").read_text()


def test_a_one_machine_federation_runs_as_a_user_with_its_own_directories(tmp_path):
    from privadapt.provisioning.provision import provision

    home = tmp_path / "home" / "ann"
    federation = _federation(tmp_path, 50051)
    text = federation.read_text().replace(
        '[federation]\nconfig_dir = "/etc/privadapt"\n',
        f'[federation]\nconfig_dir = "{home}/privadapt"\nvenv = "{home}/venv"\n'
        f'service = "user"\nstate_dir = "{home}/state"\n').replace(
        'database = "state/coordinator.db"\n', "").replace('database = "state/site.db"\n', "")
    federation.write_text(text)
    provision(federation, tmp_path / "kits")
    for daemon, kit in (("coordinator", "coordinator"), ("site", "st-mary")):
        unit = (tmp_path / "kits" / kit / unit_file_name(daemon)).read_text()
        assert "User=" not in unit and "/var/lib" not in unit and "/etc/privadapt" not in unit
        assert f"ExecStart={home}/venv/bin/privadapt-{daemon} --config " \
               f"{home}/privadapt/{daemon}.toml" in unit
        assert "WantedBy=default.target" in unit
        steps = (tmp_path / "kits" / kit / "README.txt").read_text()
        assert f"mkdir -p -m 0700 {home}/state/privadapt-{daemon}" in steps
        assert "systemctl --user enable --now" in steps and "/etc/systemd" not in steps
    site = SiteConfig.from_toml(tmp_path / "kits" / "st-mary" / "site.toml")
    assert site.database == home / "state" / "privadapt-site" / "site.db"
    coordinator = CoordinatorConfig.from_toml(tmp_path / "kits" / "coordinator" /
                                              "coordinator.toml")
    assert coordinator.database == home / "state" / "privadapt-coordinator" / "coordinator.db"


def test_a_system_service_keeps_its_state_where_state_dir_says(tmp_path):
    from privadapt.provisioning.provision import provision

    federation = _federation(tmp_path, 50051)
    federation.write_text(federation.read_text().replace(
        '[federation]\n', '[federation]\nstate_dir = "/srv/state"\n').replace(
        'database = "state/site.db"\n', ""))
    provision(federation, tmp_path / "kits")
    unit = (tmp_path / "kits" / "st-mary" / unit_file_name("site")).read_text()
    assert "ReadWritePaths=/srv/state/privadapt-site" in unit and "User=privadapt-site" in unit
    site = SiteConfig.from_toml(tmp_path / "kits" / "st-mary" / "site.toml")
    assert site.database == Path("/srv/state/privadapt-site/site.db")
    federation.write_text(federation.read_text().replace(
        '[federation]\n', '[federation]\nservice = "root"\n'))
    with pytest.raises(ConfigError, match=r"\[federation\] service must be one of system, user"):
        provision(federation, tmp_path / "other")
    assert not (tmp_path / "other").exists()
