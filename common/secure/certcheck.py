"""Checking a party's certificate: who it speaks for, and whether the federation
CA vouches for it (DESIGN.md section 2).

The subject of every certificate the federation CA issues carries the party's
identity:

* common name (CN): the party's id, e.g. ``st-mary``;
* organisational unit (OU): its role, exactly ``site``, ``coordinator`` or
  ``operator``. Other modules (the secure-aggregation roster, the operator API)
  decide what a peer may do from this field alone.

Nothing here reads files or keys; issuing certificates is
:mod:`privadapt.common.secure.certs`, which re-exports everything below.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, get_args

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.x509.oid import NameOID

from privadapt.common.errors import PrivadaptError

Role = Literal["site", "coordinator", "operator"]
ROLES: tuple[Role, ...] = get_args(Role)


class CertificateError(PrivadaptError):
    """A certificate is not acceptable: wrong CA, outside its validity, or
    without a privadapt identity."""


class UntrustedCertificateError(CertificateError):
    """A certificate was not issued (signed) by the federation CA."""


class CertificateExpiredError(CertificateError):
    """A certificate's validity period has ended."""


class CertificateNotYetValidError(CertificateError):
    """A certificate's validity period has not started."""


@dataclass(frozen=True)
class Identity:
    """Who a certificate speaks for: its common name and its role (OU)."""

    name: str
    role: Role


def certificate_from_pem(pem: bytes) -> x509.Certificate:
    """Parse a PEM certificate received as bytes (from a peer, not a file);
    :class:`CertificateError` if it is not one."""
    try:
        return x509.load_pem_x509_certificate(pem)
    except ValueError as err:
        raise CertificateError(f"not a PEM X.509 certificate ({err})") from None


def certificate_identity(cert: x509.Certificate) -> Identity:
    """The party a certificate speaks for: CN as its name, OU as its role.
    :class:`CertificateError` if either is missing or the role is unknown."""
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    units = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
    subject = cert.subject.rfc4514_string()
    if len(names) != 1:
        raise CertificateError(f"certificate {subject!r} must have exactly one common name")
    if len(units) != 1 or units[0].value not in ROLES:
        raise CertificateError(
            f"certificate {subject!r} has no privadapt role: its OU must be one of "
            f"{', '.join(ROLES)}; issue it with `privadapt certs issue --role ...`"
        )
    return Identity(str(names[0].value), units[0].value)  # type: ignore[arg-type]


def verify_issued_by(
    cert: x509.Certificate, ca_cert: x509.Certificate, now: datetime | None = None
) -> None:
    """Check that ``ca_cert`` signed ``cert`` and that ``cert`` is valid at
    ``now`` (default: the current time; naive datetimes are taken as UTC).

    Raises :class:`UntrustedCertificateError`, :class:`CertificateExpiredError`
    or :class:`CertificateNotYetValidError`, each naming the certificate.
    """
    subject = cert.subject.rfc4514_string()
    constraints = _basic_constraints(ca_cert)
    if constraints is None or not constraints.ca:
        raise UntrustedCertificateError(
            f"{ca_cert.subject.rfc4514_string()!r} is not a CA certificate; "
            "pass the federation's ca.crt"
        )
    try:
        # Checks the issuer name against the CA's subject and the signature.
        cert.verify_directly_issued_by(ca_cert)
    except (ValueError, TypeError, InvalidSignature):
        raise UntrustedCertificateError(
            f"certificate {subject!r} was not issued by the federation CA "
            f"{ca_cert.subject.rfc4514_string()!r} (key id {_key_id(ca_cert)}, SHA-256 "
            f"fingerprint {fingerprint(ca_cert)}) but by {cert.issuer.rfc4514_string()!r} "
            f"(key id {_issuer_key_id(cert)}); issue it with this federation's "
            "`privadapt certs issue`, or point [tls] ca at the CA that issued it"
        ) from None
    now = datetime.now(UTC) if now is None else now
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    if now < cert.not_valid_before_utc:
        raise CertificateNotYetValidError(
            f"certificate {subject!r} is not valid before "
            f"{cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC; check this machine's clock"
        )
    if now > cert.not_valid_after_utc:
        raise CertificateExpiredError(
            f"certificate {subject!r} expired on {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC; "
            "issue a new one with `privadapt certs issue`"
        )


def _basic_constraints(cert: x509.Certificate) -> x509.BasicConstraints | None:
    try:
        return cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        return None


def fingerprint(cert: x509.Certificate) -> str:
    """The certificate's SHA-256 fingerprint, as ``openssl x509 -fingerprint
    -sha256`` prints it (``AB:CD:...``): two CAs of one name differ here."""
    return cert.fingerprint(hashes.SHA256()).hex(":").upper()


def _key_id(cert: x509.Certificate) -> str:
    try:
        return cert.extensions.get_extension_for_class(
            x509.SubjectKeyIdentifier).value.digest.hex(":")
    except x509.ExtensionNotFound:
        return "not stated"


def _issuer_key_id(cert: x509.Certificate) -> str:
    """The key id of the CA that signed ``cert`` (its authority key identifier)."""
    try:
        key_id = cert.extensions.get_extension_for_class(
            x509.AuthorityKeyIdentifier).value.key_identifier
    except x509.ExtensionNotFound:
        key_id = None
    return "not stated" if key_id is None else key_id.hex(":")
