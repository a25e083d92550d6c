"""The federation CA and the certificates of its parties (DESIGN.md section 2).

Every party (site, coordinator, operator) holds an X.509 certificate issued by
one federation CA, with the party's id as common name (CN) and its role as
organisational unit (OU). Checking certificates (identity, CA signature,
validity) is :mod:`privadapt.common.secure.certcheck`; its names are re-exported here.

Keys are ECDSA P-256 (supported by every gRPC TLS stack, small and fast to
sign the per-round key-agreement keys with), stored as unencrypted PKCS#8 PEM
with file mode 0600 next to the CA files in one directory::

    DIR/ca.key  DIR/ca.crt  DIR/NAME.key  DIR/NAME.crt

Extended key usage follows who dials whom: a site and an operator are gRPC
*clients* (clientAuth); the coordinator is the gRPC *server* (serverAuth, with
its host names and addresses as subject alternative names).

Nothing here overwrites an existing key; private keys are written with
``O_EXCL`` straight to their final path with mode 0600, never to a temporary
file elsewhere.
"""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from privadapt.common.errors import ConfigError
from privadapt.common.secure.certcheck import (
    ROLES,
    CertificateError,
    CertificateExpiredError,
    CertificateNotYetValidError,
    Identity,
    Role,
    UntrustedCertificateError,
    certificate_from_pem,
    certificate_identity,
    verify_issued_by,
)

__all__ = [
    "CA_CERT_FILE",
    "CA_KEY_FILE",
    "ROLES",
    "CaFiles",
    "CertificateError",
    "CertificateExpiredError",
    "CertificateNotYetValidError",
    "Identity",
    "IssuedFiles",
    "Role",
    "UntrustedCertificateError",
    "certificate_from_pem",
    "certificate_identity",
    "init_ca",
    "issue_certificate",
    "load_certificate",
    "load_private_key",
    "read_file",
    "validate_name",
    "verify_issued_by",
]

CA_KEY_FILE = "ca.key"
CA_CERT_FILE = "ca.crt"

# A name is a file name and a CN at once: letters, digits, '.', '_', '-', starting
# with a letter or digit (no hidden files, no '..'), at most 64 characters (the
# X.509 upper bound for a common name).
_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# "ca" would overwrite the CA's own files (compared case-insensitively because
# some file systems are).
_RESERVED_NAMES = frozenset({"ca"})
_DNS_PATTERN = re.compile(
    r"(?=.{1,253}$)(\*\.)?([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)"
    r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
)
# Certificates start a little in the past so that a peer whose clock is a few
# minutes behind the issuer's does not reject a freshly issued certificate.
_CLOCK_SKEW = timedelta(minutes=5)


@dataclass(frozen=True)
class CaFiles:
    """The files :func:`init_ca` wrote."""

    key: Path
    cert: Path


@dataclass(frozen=True)
class IssuedFiles:
    """The files :func:`issue_certificate` wrote, and the CA certificate a
    peer needs to verify them."""

    key: Path
    cert: Path
    ca_cert: Path


def validate_name(name: str, what: str = "name") -> str:
    """Return ``name`` if it is safe as a file name and a common name, else
    raise :class:`ConfigError` saying what is allowed."""
    if not isinstance(name, str) or not _NAME_PATTERN.fullmatch(name):
        raise ConfigError(
            f"invalid {what} {name!r}: use 1 to 64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit (it becomes a file name and the "
            "certificate's common name)"
        )
    if name.lower() in _RESERVED_NAMES:
        raise ConfigError(f"invalid {what} {name!r}: reserved for the CA's own files; pick another")
    return name


def unique_ca_name() -> str:
    """``privadapt-ca-`` and 8 random hex digits: two federations' CAs never
    share a name, so a certificate of the wrong one is named as such."""
    return f"privadapt-ca-{secrets.token_hex(4)}"


def init_ca(directory: Path, name: str | None = None, valid_days: int = 3650) -> CaFiles:
    """Create a federation CA in ``directory``: ``ca.key`` (0600) and ``ca.crt``,
    named ``name`` (default: :func:`unique_ca_name`).

    Refuses (:class:`ConfigError`) if either file already exists: replacing a
    CA silently would orphan every certificate issued under it.
    """
    directory = Path(directory)
    name = unique_ca_name() if name is None else name
    validate_name(name, "CA name")
    _check_days(valid_days)
    files = CaFiles(directory / CA_KEY_FILE, directory / CA_CERT_FILE)
    existing = [str(p) for p in (files.key, files.cert) if p.exists()]
    if existing:
        raise ConfigError(
            f"a CA already exists in {directory} ({', '.join(existing)}); keep using it, "
            "or remove ca.key and ca.crt (every certificate it issued stops being "
            "trusted) or pick another --dir to create a new one"
        )
    _make_directory(directory)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _CLOCK_SKEW)
        .not_valid_after(now + timedelta(days=valid_days))
        # path_length=0: the CA signs party certificates only, never sub-CAs.
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            _key_usage(digital_signature=True, key_cert_sign=True, crl_sign=True), critical=True
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write_private_key(files.key, key)
    _write_new_file(files.cert, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return files


def issue_certificate(
    directory: Path,
    role: Role,
    name: str,
    valid_days: int = 365,
    hosts: Sequence[str] = ("localhost", "127.0.0.1"),
    *,
    not_valid_before: datetime | None = None,
    not_valid_after: datetime | None = None,
) -> IssuedFiles:
    """Issue ``NAME.key`` (0600) and ``NAME.crt`` in ``directory``, signed by
    the CA there, with CN = ``name`` and OU = ``role``.

    ``hosts`` (DNS names or IP addresses) become the subject alternative names
    of a coordinator certificate, which clients check against the address they
    dial; other roles ignore them. ``not_valid_before``/``not_valid_after``
    override the validity period (tests use them to make expired certificates).
    Refuses to overwrite an existing certificate or key of the same name.
    """
    directory = Path(directory)
    if role not in ROLES:
        raise ConfigError(f"invalid role {role!r}: use one of {', '.join(ROLES)}")
    validate_name(name)
    _check_days(valid_days)
    san = _subject_alternative_names(hosts) if role == "coordinator" else None
    ca_key, ca_cert = _load_ca(directory)
    files = IssuedFiles(
        directory / f"{name}.key", directory / f"{name}.crt", directory / CA_CERT_FILE
    )
    existing = [str(p) for p in (files.key, files.cert) if p.exists()]
    if existing:
        raise ConfigError(
            f"a certificate named {name!r} already exists ({', '.join(existing)}); "
            "remove both files to re-issue it, or pick another --name"
        )
    now = datetime.now(UTC)
    start = not_valid_before or now - _CLOCK_SKEW
    end = not_valid_after or now + timedelta(days=valid_days)
    if start >= end:
        raise ConfigError(f"certificate validity starts ({start}) after it ends ({end})")
    if end > ca_cert.not_valid_after_utc:
        raise ConfigError(
            f"the certificate would outlive the CA in {directory} (CA expires "
            f"{ca_cert.not_valid_after_utc:%Y-%m-%d}); ask for fewer days or create a new CA"
        )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _build_party_certificate(key, ca_key, ca_cert, role, name, start, end, san)
    _write_private_key(files.key, key)
    _write_new_file(files.cert, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return files


def load_certificate(path: Path) -> x509.Certificate:
    """Read a PEM certificate; :class:`ConfigError` naming ``path`` if it is
    missing, unreadable or not a PEM certificate."""
    data = read_file(path, "certificate")
    try:
        return certificate_from_pem(data)
    except CertificateError as err:
        raise ConfigError(f"{path}: {err}") from None


def load_private_key(path: Path) -> ec.EllipticCurvePrivateKey:
    """Read an unencrypted PEM ECDSA private key, with errors naming ``path``."""
    data = read_file(path, "private key")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as err:
        raise ConfigError(f"{path}: not an unencrypted PEM private key ({err})") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ConfigError(f"{path}: expected an ECDSA key as issued by `privadapt certs issue`")
    return key


def read_file(path: Path, what: str) -> bytes:
    """Read a file, turning a missing or unreadable one into a
    :class:`ConfigError` that names the path and what it should hold."""
    path = Path(path)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(
            f"{what} file {path} does not exist; check the path or create it with `privadapt certs`"
        ) from None
    except OSError as err:
        raise ConfigError(f"cannot read {what} file {path}: {err.strerror or err}") from None


def _build_party_certificate(
    key: ec.EllipticCurvePrivateKey,
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    role: Role,
    name: str,
    start: datetime,
    end: datetime,
    san: x509.SubjectAlternativeName | None,
) -> x509.Certificate:
    subject = x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, role),
        x509.NameAttribute(NameOID.COMMON_NAME, name),
    ])
    # The coordinator is the gRPC server; sites and operators dial it. grpc's
    # TLS (BoringSSL) enforces this purpose on both sides of the handshake.
    if role == "coordinator":
        usage = ExtendedKeyUsageOID.SERVER_AUTH
    else:
        usage = ExtendedKeyUsageOID.CLIENT_AUTH
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(digital_signature=True), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False
        )
    )
    if san is not None:
        builder = builder.add_extension(san, critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def _load_ca(directory: Path) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key_path, cert_path = directory / CA_KEY_FILE, directory / CA_CERT_FILE
    if not key_path.exists() or not cert_path.exists():
        raise ConfigError(
            f"no CA in {directory} (need {CA_KEY_FILE} and {CA_CERT_FILE}); "
            f"create one with `privadapt certs init --dir {directory}`"
        )
    key, cert = load_private_key(key_path), load_certificate(cert_path)
    if key.public_key().public_numbers() != cert.public_key().public_numbers():
        raise ConfigError(f"{key_path} is not the key of {cert_path}; restore the CA's own key")
    if datetime.now(UTC) > cert.not_valid_after_utc:
        raise ConfigError(
            f"the CA in {directory} expired on {cert.not_valid_after_utc:%Y-%m-%d}; create a new CA"
        )
    return key, cert


def _subject_alternative_names(hosts: Sequence[str]) -> x509.SubjectAlternativeName:
    if isinstance(hosts, str):  # a lone string would be split into characters
        hosts = (hosts,)
    if not hosts:
        raise ConfigError("a coordinator certificate needs at least one host name or IP address")
    entries: list[x509.GeneralName] = []
    for host in hosts:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            if not _DNS_PATTERN.fullmatch(host):
                raise ConfigError(
                    f"invalid host {host!r}: use a DNS name (e.g. coordinator.example.org) "
                    "or an IP address"
                ) from None
            entries.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(entries)


def _key_usage(
    digital_signature: bool = False, key_cert_sign: bool = False, crl_sign: bool = False
) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=digital_signature,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=key_cert_sign,
        crl_sign=crl_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _check_days(valid_days: int) -> None:
    if isinstance(valid_days, bool) or not isinstance(valid_days, int) or valid_days < 1:
        raise ConfigError(f"validity must be a whole number of days >= 1, got {valid_days!r}")


def _make_directory(directory: Path) -> None:
    try:
        # 0700: the directory holds the CA's private key.
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"cannot create directory {directory}: {err.strerror or err}") from None


def _write_private_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    _write_new_file(path, pem, 0o600)


def _write_new_file(path: Path, data: bytes, mode: int) -> None:
    # O_EXCL: never replace an existing file (a race with another `certs` run
    # fails here instead of swapping a key under a live certificate). The mode
    # is given at creation, so the key is never readable by others, even briefly.
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        raise ConfigError(f"{path} already exists; remove it first or pick another name") from None
    except OSError as err:
        raise ConfigError(f"cannot write {path}: {err.strerror or err}") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            # The umask may have cleared bits of `mode`; set exactly what we mean.
            os.fchmod(handle.fileno(), mode)
            handle.write(data)
    except OSError as err:
        path.unlink(missing_ok=True)
        raise ConfigError(f"cannot write {path}: {err.strerror or err}") from None
