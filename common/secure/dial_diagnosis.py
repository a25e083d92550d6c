"""Why a coordinator could not be reached, in words that name the fix.

gRPC reports every failure to connect as UNAVAILABLE (or, for a call that
waited, DEADLINE_EXCEEDED) with a detail written for gRPC's developers. When
that happens a site daemon or the operator CLI asks :func:`explain_unreachable`,
which dials the address itself:

* nothing listens there: "connection refused", at once, not after a timeout;
* the host name does not resolve, or nothing answers (a firewall);
* something answers over TLS, but its certificate holds names that do not
  include the host dialled (both are named), was not issued by the configured
  CA, or is not a coordinator's.

The TLS probe verifies nothing and sends no certificate: it only reads the
certificate the server presents, to describe it. Trust is still decided by
gRPC's own mutual TLS.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
from pathlib import Path

from cryptography import x509

from privadapt.common.errors import ConfigError
from privadapt.common.secure.certcheck import (
    CertificateError,
    certificate_identity,
    verify_issued_by,
)
from privadapt.common.secure.certs import load_certificate

PROBE_TIMEOUT_S = 2.0


def split_address(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of ``host:port`` or ``[v6]:port``; None for anything
    else (``unix:`` paths, no port)."""
    host, colon, port = address.rpartition(":")
    if not colon or not port.isdigit() or address.startswith("unix:"):
        return None
    return host.strip("[]"), int(port)


def explain_unreachable(address: str, ca_path: Path | None = None,
                        timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """One sentence saying why ``address`` (``host:port``) cannot be used as
    the coordinator, or None if this probe finds nothing wrong (the server
    then refused our certificate: its own log says why)."""
    parsed = split_address(address)
    if parsed is None:
        return None
    host, port = parsed
    try:
        connection = socket.create_connection((host, port), timeout=timeout_s)
    except ConnectionRefusedError:
        return (f"connection refused by {host}:{port}: nothing listens there. Is "
                "privadapt-coordinator running, and is this the port of its [coordinator] listen?")
    except socket.gaierror:
        return f"cannot resolve the host {host!r} of {address}: check the coordinator's address"
    except TimeoutError:
        return (f"no answer from {host}:{port} within {timeout_s:g} s: the host is down or a "
                "firewall drops the connection")
    except OSError as err:
        return f"cannot connect to {address}: {err.strerror or err}"
    with connection:
        presented = _presented_certificate(connection, host, timeout_s)
    if presented is None:
        return None
    return _certificate_problem(presented, host, address, ca_path)


def certificate_names(cert: x509.Certificate) -> list[str]:
    """The DNS names and IP addresses a certificate is valid for (its SAN)."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [*san.get_values_for_type(x509.DNSName),
            *(str(ip) for ip in san.get_values_for_type(x509.IPAddress))]


def host_matches(host: str, names: list[str]) -> bool:
    """Whether ``host`` (as dialled) is one of a certificate's ``names``."""
    try:
        dialled = ipaddress.ip_address(host)
    except ValueError:
        return host.lower().rstrip(".") in {n.lower() for n in names}
    for name in names:
        try:
            if ipaddress.ip_address(name) == dialled:
                return True
        except ValueError:
            continue
    return False


def _presented_certificate(connection: socket.socket, host: str,
                           timeout_s: float) -> x509.Certificate | None:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    try:
        ipaddress.ip_address(host)
        server_name = None
    except ValueError:
        server_name = host
    connection.settimeout(timeout_s)
    try:
        with context.wrap_socket(connection, server_hostname=server_name) as tls:
            der = tls.getpeercert(binary_form=True)
    except (OSError, ssl.SSLError):
        return None  # not TLS, or it refused us before showing its certificate
    return None if der is None else x509.load_der_x509_certificate(der)


def _certificate_problem(cert: x509.Certificate, host: str, address: str,
                         ca_path: Path | None) -> str | None:
    names = certificate_names(cert)
    if not host_matches(host, names):
        held = ", ".join(repr(n) for n in names) or "no host names"
        return (f"hostname mismatch: dialled {host!r} ({address}), but the coordinator's "
                f"certificate holds {held}. Dial one of those, or reissue the coordinator's "
                f"certificate with `privadapt certs issue --role coordinator --host {host}`")
    if ca_path is not None:
        try:
            verify_issued_by(cert, load_certificate(ca_path))
        except (CertificateError, ConfigError) as err:
            return f"the server at {address} is not vouched for by the CA {ca_path}: {err}"
    try:
        identity = certificate_identity(cert)
    except CertificateError as err:
        return f"the server at {address} presents no privadapt certificate: {err}"
    if identity.role != "coordinator":
        return (f"the server at {address} presents a {identity.role} certificate "
                f"({identity.name!r}), not a coordinator's: restart it with its coordinator "
                "certificate")
    return None
