"""Mutual TLS over real loopback gRPC: the coordinator's server accepts only
clients holding a valid certificate from the federation CA and sees who they are."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest

from privadapt.common.errors import ConfigError
from privadapt.common.secure import certs, tls

TIMEOUT_S = 5.0
SERVICE, METHOD = "privadapt.test.Echo", "Call"


@dataclass(frozen=True)
class Pki:
    ours: Path
    theirs: Path

    def creds(self, name: str, directory: Path | None = None) -> grpc.ChannelCredentials:
        """Client credentials for ``name``, trusting our CA."""
        directory = directory or self.ours
        return tls.channel_credentials(
            directory / f"{name}.crt", directory / f"{name}.key", self.ours / "ca.crt"
        )


@pytest.fixture
def pki(tmp_path) -> Pki:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    certs.init_ca(ours)
    certs.init_ca(theirs)
    certs.issue_certificate(ours, "coordinator", "coord")
    certs.issue_certificate(ours, "coordinator", "far-coord", hosts=["coord.example.org"])
    certs.issue_certificate(ours, "site", "st-mary")
    certs.issue_certificate(ours, "operator", "alice")
    certs.issue_certificate(theirs, "site", "intruder")
    certs.issue_certificate(theirs, "coordinator", "fake-coord")
    now = datetime.now(UTC)
    certs.issue_certificate(
        ours, "site", "expired", not_valid_before=now - timedelta(days=30),
        not_valid_after=now - timedelta(days=1),
    )
    return Pki(ours, theirs)


@contextlib.contextmanager
def echo_server(
    credentials: grpc.ServerCredentials | None, roles: tuple[certs.Role, ...] | None = None
) -> Iterator[tuple[str, list[certs.Identity]]]:
    """A bytes-in, bytes-out server on 127.0.0.1; yields its address and the
    identities its handler saw (restricted to ``roles`` if given)."""
    seen: list[certs.Identity] = []

    def call(request: bytes, context: grpc.ServicerContext) -> bytes:
        identity = (
            tls.peer_identity(context) if roles is None else tls.require_role(context, roles)
        )
        seen.append(identity)
        return request

    handler = grpc.method_handlers_generic_handler(
        SERVICE, {METHOD: grpc.unary_unary_rpc_method_handler(call)}
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    if credentials is None:
        port = server.add_insecure_port("127.0.0.1:0")
    else:
        port = server.add_secure_port("127.0.0.1:0", credentials)
    server.start()
    try:
        yield f"127.0.0.1:{port}", seen
    finally:
        server.stop(None)


def _call(address: str, credentials: grpc.ChannelCredentials | None) -> bytes:
    channel = (
        grpc.insecure_channel(address)
        if credentials is None
        else grpc.secure_channel(address, credentials)
    )
    with channel:
        return channel.unary_unary(f"/{SERVICE}/{METHOD}")(b"ping", timeout=TIMEOUT_S)


def _refused(
    server: grpc.ServerCredentials | None, client: grpc.ChannelCredentials | None
) -> grpc.RpcError:
    """Call a server with ``client`` credentials; return the error, having
    checked that the handler never ran."""
    with echo_server(server) as (address, seen), pytest.raises(grpc.RpcError) as err:
        _call(address, client)
    assert seen == []
    return err.value


def _server_creds(pki: Pki, name: str = "coord", directory: Path | None = None):
    directory = directory or pki.ours
    return tls.server_credentials(
        directory / f"{name}.crt", directory / f"{name}.key", pki.ours / "ca.crt"
    )


def test_site_from_the_federation_ca_connects_and_is_identified(pki):
    with echo_server(_server_creds(pki)) as (address, seen):
        assert _call(address, pki.creds("st-mary")) == b"ping"
    assert seen == [certs.Identity("st-mary", "site")]


def test_client_certificate_from_an_unknown_ca_is_refused(pki):
    error = _refused(_server_creds(pki), pki.creds("intruder", pki.theirs))
    assert error.code() == grpc.StatusCode.UNAVAILABLE


def test_expired_client_certificate_is_refused(pki):
    error = _refused(_server_creds(pki), pki.creds("expired"))
    assert error.code() == grpc.StatusCode.UNAVAILABLE


def test_plaintext_client_is_refused(pki):
    error = _refused(_server_creds(pki), None)
    assert error.code() == grpc.StatusCode.UNAVAILABLE


def test_client_refuses_a_server_certificate_from_an_unknown_ca(pki):
    error = _refused(_server_creds(pki, "fake-coord", pki.theirs), pki.creds("st-mary"))
    assert "CERTIFICATE_VERIFY_FAILED" in error.details()


def test_client_refuses_a_coordinator_certificate_for_another_host(pki):
    error = _refused(_server_creds(pki, "far-coord"), pki.creds("st-mary"))
    assert "Hostname Verification" in error.details()


def test_site_certificate_cannot_serve_as_the_coordinator(pki):
    # Its extended key usage is clientAuth only; BoringSSL enforces the purpose.
    error = _refused(_server_creds(pki, "st-mary"), pki.creds("alice"))
    assert "unsupported certificate purpose" in error.details()


def test_operator_only_method_refuses_a_site_certificate(pki):
    with echo_server(_server_creds(pki), roles=("operator",)) as (address, seen):
        assert _call(address, pki.creds("alice")) == b"ping"
        with pytest.raises(grpc.RpcError) as err:
            _call(address, pki.creds("st-mary"))
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "site certificate 'st-mary'" in err.value.details()
    assert seen == [certs.Identity("alice", "operator")]


def test_peer_identity_on_a_plaintext_server_aborts_unauthenticated():
    error = _refused(None, None)
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "mutual TLS" in error.details()


def test_missing_credential_file_is_a_config_error_naming_it(pki):
    with pytest.raises(ConfigError, match=r"absent\.key"):
        tls.server_credentials(pki.ours / "coord.crt", pki.ours / "absent.key", pki.ours / "ca.crt")


def test_key_that_does_not_match_its_certificate_is_a_config_error(pki):
    with pytest.raises(ConfigError, match=r"st-mary\.key is not the private key"):
        tls.channel_credentials(
            pki.ours / "alice.crt", pki.ours / "st-mary.key", pki.ours / "ca.crt"
        )


def test_insecure_warning_says_nothing_is_authenticated():
    warning = tls.insecure_warning()
    assert warning.startswith("WARNING") and "--insecure" in warning
    assert "authenticated" in warning
