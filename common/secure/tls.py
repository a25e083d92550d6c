"""gRPC credentials for mutual TLS between the coordinator and its peers.

The coordinator is the gRPC server and demands a client certificate from the
federation CA (``require_client_auth=True``); sites and operators are clients
that present theirs and check the coordinator's against the same CA. grpc's
own ``ssl_*_credentials`` do the TLS (STYLE.md section 4); this module only
reads and checks the files first, so that a wrong path or a key that does not
match its certificate gives a message naming the file instead of an opaque
handshake failure later.

Inside a handler, :func:`peer_identity` returns who is calling (CN and OU of the
certificate grpc has already verified) and :func:`require_role` refuses callers
of the wrong role, e.g. a site certificate on the operator API.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import NoReturn

import grpc

from privadapt.common.errors import ConfigError
from privadapt.common.secure.certs import (
    CertificateError,
    Identity,
    Role,
    certificate_from_pem,
    certificate_identity,
    load_certificate,
    load_private_key,
    verify_issued_by,
)

# Keys grpc puts in ServicerContext.auth_context() for a TLS peer.
_PEM_KEY = "x509_pem_cert"
_CN_KEY = "x509_common_name"


def server_credentials(cert_path: Path, key_path: Path, ca_path: Path) -> grpc.ServerCredentials:
    """Server side of mutual TLS: present ``cert_path``/``key_path`` and accept
    only clients whose certificate was issued by the CA in ``ca_path``."""
    cert, key, ca = _read_tls_files(cert_path, key_path, ca_path)
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=ca, require_client_auth=True
    )


def channel_credentials(cert_path: Path, key_path: Path, ca_path: Path) -> grpc.ChannelCredentials:
    """Client side of mutual TLS: present ``cert_path``/``key_path`` and trust
    only a server whose certificate was issued by the CA in ``ca_path``."""
    cert, key, ca = _read_tls_files(cert_path, key_path, ca_path)
    return grpc.ssl_channel_credentials(
        root_certificates=ca, private_key=key, certificate_chain=cert
    )


def check_own_certificate(cert_path: Path, ca_path: Path, role: Role) -> Identity:
    """The identity of a daemon's (or operator's) own certificate, checked at
    start against its configured CA and its role, so a wrong file is named
    with its fix instead of surfacing as a failed handshake on the other side.

    ``ConfigError`` if ``cert_path`` was not issued by the CA in ``ca_path``,
    is outside its validity, or is not a ``role`` certificate.
    """
    cert, ca = load_certificate(cert_path), load_certificate(ca_path)
    try:
        verify_issued_by(cert, ca)
    except CertificateError as err:
        raise ConfigError(
            f"{cert_path} does not chain to the configured CA {ca_path}: {err}. Point [tls] "
            "ca at the CA that issued it, or issue a new certificate from this CA") from None
    identity = certificate_identity(cert)
    if identity.role != role:
        raise ConfigError(
            f"{cert_path} is a {identity.role} certificate for {identity.name!r}, but this "
            f"needs {'an' if role == 'operator' else 'a'} {role} certificate: issue one with "
            f"`privadapt certs issue --role {role} --name NAME"
            f"{' --host HOST' if role == 'coordinator' else ''}` and name it in [tls] cert")
    return identity


def peer_identity(context: grpc.ServicerContext) -> Identity:
    """The verified identity of the caller of the current RPC.

    Aborts the RPC with UNAUTHENTICATED if the connection carries no client
    certificate (a plaintext server) or the certificate has no privadapt role.
    """
    auth = context.auth_context()
    pems = auth.get(_PEM_KEY) or []
    if not pems:
        names = [n.decode(errors="replace") for n in auth.get(_CN_KEY) or []]
        detail = f" (common name {names[0]!r} without its certificate)" if names else ""
        _abort(context, grpc.StatusCode.UNAUTHENTICATED,
               f"no verified client certificate on this connection{detail}; "
               "connect over mutual TLS with a certificate from the federation CA")
    try:
        return certificate_identity(certificate_from_pem(pems[0]))
    except CertificateError as err:
        _abort(context, grpc.StatusCode.UNAUTHENTICATED, f"unusable client certificate: {err}")


def require_role(context: grpc.ServicerContext, roles: Iterable[Role]) -> Identity:
    """:func:`peer_identity`, aborting with PERMISSION_DENIED unless the caller's
    role is one of ``roles``."""
    allowed = tuple(roles)
    identity = peer_identity(context)
    if identity.role not in allowed:
        _abort(context, grpc.StatusCode.PERMISSION_DENIED,
               f"{identity.role} certificate {identity.name!r} may not call this method; "
               f"it needs a {' or '.join(allowed)} certificate")
    return identity


def insecure_warning() -> str:
    """The warning printed when a daemon runs with ``--insecure``."""
    return (
        "WARNING: --insecure: gRPC without TLS. No party is authenticated, anyone on "
        "the network can read and change every message, and site identities are not "
        "checked. Use it only for local debugging on 127.0.0.1, never with real data."
    )


def _read_tls_files(cert_path: Path, key_path: Path, ca_path: Path) -> tuple[bytes, bytes, bytes]:
    # Parse every file before handing the bytes to grpc: grpc reports a bad file
    # only as a failed handshake, without saying which file was wrong.
    cert = load_certificate(cert_path)
    key = load_private_key(key_path)
    load_certificate(ca_path)
    if key.public_key().public_numbers() != cert.public_key().public_numbers():
        raise ConfigError(
            f"{key_path} is not the private key of {cert_path}; pass the matching pair"
        )
    return (Path(cert_path).read_bytes(), Path(key_path).read_bytes(), Path(ca_path).read_bytes())


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    context.abort(code, message)
    # abort() raises inside a real servicer; a stand-in context that returns
    # must still not let the call through.
    raise CertificateError(message)
