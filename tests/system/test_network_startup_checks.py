"""Startup and connection checks that name the fix.

A site's certificate from another CA, a coordinator started with a site's or an
operator's certificate, a second daemon with a site's identity, a coordinator
that is down, and a coordinator dialled by a name its certificate lacks."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from concurrent import futures

import grpc
import pytest

from privadapt.cli import main as cli
from privadapt.client.daemon.config import SiteConfig
from privadapt.client.daemon.main import SiteDaemon
from privadapt.common.errors import ConfigError
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.proto import federation_pb2_grpc as rpc
from privadapt.common.secure import certs, tls
from privadapt.common.secure.certcheck import fingerprint
from privadapt.common.secure.dial_diagnosis import explain_unreachable, host_matches
from privadapt.common.wire.messages import channel_options
from privadapt.server.coordinator.main import Coordinator, CoordinatorConfig
from privadapt.simulation.local_deployment import LocalDeployment, free_port
from tests.network_harness import (
    ThreadSites,
    in_process_coordinator,
    make_pki,
    write_coordinator_config,
    write_site,
)
from tests.synthetic_data import synthetic_dataset

DIM = 3
# Only turns a hang into a failure; well above the daemon's REGISTER_TIMEOUT_S.
HANG_GUARD_S = 60


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    directory = make_pki(tmp_path_factory.mktemp("pki"), ("site-a",))
    other = directory / "other"
    certs.init_ca(other)
    certs.issue_certificate(other, "site", "site-a")
    certs.issue_certificate(directory, "coordinator", "far", hosts=["coord.example.org"])
    return directory


def _site_config(tmp_path, pki, port: int) -> SiteConfig:
    return SiteConfig.from_toml(write_site(tmp_path, pki, "site-a", synthetic_dataset(20, DIM, 0),
                                           port))


def test_a_site_certificate_from_another_ca_is_refused_at_start(tmp_path, pki):
    config = _site_config(tmp_path, pki, free_port())
    foreign = SiteConfig(**{**config.__dict__, "cert": pki / "other" / "site-a.crt",
                            "key": pki / "other" / "site-a.key"})
    with pytest.raises(ConfigError, match=r"does not chain to the configured CA .*ca\.crt"):
        SiteDaemon(foreign)


@pytest.mark.parametrize("role_name", ["site-a", "operator"])
def test_a_coordinator_with_a_site_or_operator_certificate_is_refused(tmp_path, pki, role_name):
    config = CoordinatorConfig.from_toml(write_coordinator_config(tmp_path, pki))
    wrong = CoordinatorConfig(**{**config.__dict__, "cert": pki / f"{role_name}.crt",
                                 "key": pki / f"{role_name}.key"})
    with pytest.raises(ConfigError, match="needs a coordinator certificate: issue one with "
                       "`privadapt certs issue --role coordinator"):
        Coordinator(wrong)


def test_an_operator_config_with_a_site_certificate_is_refused(tmp_path, pki, capsys):
    (tmp_path / "operator.toml").write_text(
        f'[operator]\ncoordinator = "127.0.0.1:{free_port()}"\n[tls]\n'
        f'cert = "{pki}/site-a.crt"\nkey = "{pki}/site-a.key"\nca = "{pki}/ca.crt"\n')
    assert cli.main(["sites", "--config", str(tmp_path / "operator.toml")]) == 2
    assert "needs an operator certificate" in capsys.readouterr().err


def test_a_coordinator_that_is_down_is_connection_refused_at_the_first_attempt(
        tmp_path, pki, caplog):
    # "At once" read as an order of events, not a duration: the first message
    # the daemon logs is the first attempt's, and it says connection refused;
    # a call that waited for its REGISTER_TIMEOUT_S would log DEADLINE_EXCEEDED
    # first, on any machine.
    port = free_port()
    daemon = SiteDaemon(_site_config(tmp_path, pki, port))
    caplog.set_level(logging.INFO, logger="privadapt.site")
    thread = threading.Thread(target=daemon.run, daemon=True)
    thread.start()
    try:
        _wait_for_a_warning(caplog, "connection refused", level=logging.INFO)
    finally:
        daemon.stop()
        thread.join(timeout=HANG_GUARD_S)
    # Before the site ever registered, a coordinator not yet listening is
    # news (INFO), said with the dial's diagnosis at the first attempt.
    messages = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert f"connection refused by 127.0.0.1:{port}: nothing listens there" in messages[0], \
        messages
    assert not any("DEADLINE_EXCEEDED" in m for m in messages)


def _wait_for_a_warning(caplog, text: str = "", level: int = logging.WARNING) -> None:
    """Until a record at ``level`` or above containing ``text`` is logged; the
    deadline only turns a daemon that never logs one into a failure instead
    of a hang."""
    deadline = time.monotonic() + HANG_GUARD_S
    while not any(r.levelno >= level and text in r.getMessage() for r in caplog.records):
        assert time.monotonic() < deadline, f"no record containing {text!r} was logged"
        time.sleep(0.05)


def test_the_operator_cli_says_connection_refused(tmp_path, pki, capsys):
    port = free_port()
    config = LocalDeployment(tmp_path, pki).write_operator(f"127.0.0.1:{port}")
    assert cli.main(["sites", "--config", str(config)]) == 2
    assert f"connection refused by 127.0.0.1:{port}" in capsys.readouterr().err


def test_a_hostname_mismatch_names_the_host_dialled_and_the_certificate_names(pki):
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = server.add_secure_port("127.0.0.1:0", tls.server_credentials(
        pki / "far.crt", pki / "far.key", pki / "ca.crt"))
    server.start()
    try:
        reason = explain_unreachable(f"127.0.0.1:{port}", pki / "ca.crt")
    finally:
        server.stop(None)
    assert reason is not None
    assert "dialled '127.0.0.1'" in reason and "'coord.example.org'" in reason
    assert "--host 127.0.0.1" in reason


def test_a_matching_coordinator_gives_no_diagnosis(tmp_path, pki):
    with in_process_coordinator(write_coordinator_config(tmp_path, pki)) as coordinator:
        assert explain_unreachable(f"127.0.0.1:{coordinator.port}", pki / "ca.crt") is None
        assert explain_unreachable(f"localhost:{coordinator.port}", pki / "ca.crt") is None


def test_host_matching():
    assert host_matches("127.0.0.1", ["localhost", "127.0.0.1"])
    assert host_matches("Coord.Example.org", ["coord.example.org"])
    assert not host_matches("10.0.0.1", ["localhost", "127.0.0.1"])
    assert not host_matches("evil.org", ["coord.example.org"])


def _register(pki, port: int) -> pb.RegisterResponse:
    credentials = tls.channel_credentials(pki / "site-a.crt", pki / "site-a.key", pki / "ca.crt")
    with grpc.secure_channel(f"127.0.0.1:{port}", credentials, options=channel_options()) as ch:
        return rpc.FederationServiceStub(ch).Register(
            pb.RegisterRequest(site_name="site-a", num_records=20, num_features=DIM), timeout=10)


def test_a_second_daemon_with_a_site_identity_is_refused_and_the_first_keeps_its_session(
        tmp_path, pki, caplog):
    caplog.set_level(logging.WARNING)
    with in_process_coordinator(write_coordinator_config(tmp_path, pki)) as coordinator:
        sites = ThreadSites()
        sites.start(write_site(tmp_path, pki, "site-a", synthetic_dataset(20, DIM, 0),
                               coordinator.port))
        try:
            assert coordinator.registry.wait_until(
                lambda: "site-a" in coordinator.registry.connected_names(), 20)
            first = coordinator.registry.session("site-a").session_id
            with pytest.raises(grpc.RpcError) as refused:
                _register(pki, coordinator.port)
            assert refused.value.code() == grpc.StatusCode.ALREADY_EXISTS
            assert "another privadapt-site runs with this site's certificate" in \
                refused.value.details()
            time.sleep(0.5)  # the old flapping replaced sessions every 200 ms
            session = coordinator.registry.session("site-a")
            assert session is not None and session.session_id == first
            events = [e.event for e in coordinator.store.audit_log()]
            assert "site_identity_in_use" in events
        finally:
            sites.stop()
    assert any(r.levelno == logging.WARNING and "registration from" in r.getMessage()
               and "refused" in r.getMessage() for r in caplog.records)


def test_a_site_with_a_foreign_ca_says_in_one_line_what_is_wrong(tmp_path, pki, caplog):
    caplog.set_level(logging.WARNING, logger="privadapt.site")
    with in_process_coordinator(write_coordinator_config(tmp_path, pki)) as coordinator:
        # A whole other federation's files: its CA, and a site certificate from it.
        daemon = SiteDaemon(SiteConfig.from_toml(write_site(
            tmp_path, pki / "other", "site-a", synthetic_dataset(20, DIM, 0), coordinator.port)))
        thread = threading.Thread(target=daemon.run, daemon=True)
        thread.start()
        try:
            _wait_for_a_warning(caplog, "not issued by the federation CA")
        finally:
            daemon.stop()
            thread.join(timeout=HANG_GUARD_S)
    ours = certs.load_certificate(pki / "other" / "ca.crt")
    told = [r.getMessage() for r in caplog.records
            if "not issued by the federation CA" in r.getMessage()]
    assert told and "\n" not in told[0]
    assert f"SHA-256 fingerprint {fingerprint(ours)}" in told[0]
    assert "point [tls] ca at the CA that issued it" in told[0]


def test_raw_grpc_core_lines_never_reach_a_privadapt_processs_stderr(tmp_path, pki):
    script = tmp_path / "handshake.py"
    script.write_text(
        "import sys\nfrom concurrent import futures\nfrom pathlib import Path\n"
        "import privadapt.common.secure.tls as tls\nimport grpc\n"
        "pki = Path(sys.argv[1])\n"
        "server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))\n"
        "port = server.add_secure_port('127.0.0.1:0', tls.server_credentials("
        "pki / 'far.crt', pki / 'far.key', pki / 'ca.crt'))\nserver.start()\n"
        "other = pki / 'other'\n"
        "channel = grpc.secure_channel(f'127.0.0.1:{port}', tls.channel_credentials("
        "other / 'site-a.crt', other / 'site-a.key', other / 'ca.crt'))\n"
        "try:\n    grpc.channel_ready_future(channel).result(timeout=2)\n"
        "except grpc.FutureTimeoutError:\n    print('refused')\n")
    environment = {k: v for k, v in os.environ.items() if k != "GRPC_VERBOSITY"}
    done = subprocess.run([sys.executable, str(script), str(pki)], capture_output=True,
                          text=True, timeout=60, env=environment, check=False)
    assert done.stdout.strip() == "refused"
    assert "ssl_transport_security" not in done.stderr and "Handshake failed" not in done.stderr
