"""The signed roster of a secure-aggregation round: who takes part, with which key.

Each site signs its fresh X25519 public key for the round with its certificate
key; the coordinator collects the signed keys and publishes them; every site
checks every entry against the federation CA before it masks anything
(DESIGN.md section 2). K, the number of participants the noise shares are sized
by, is the size of the *verified* roster, never a number the coordinator states,
so a coordinator cannot shrink the set of participants unnoticed.

What a signature covers (the "key context", :func:`key_context`): a domain tag,
the federation id (SHA-256 of the CA certificate, DER), the job id, the round,
the site name, the 32-byte public key, the digest of the exact query the
site answers in the round (:func:`privadapt.common.secure.query_digest.query_digest`)
and the site's second, *check* public key, each length-prefixed so no two
contexts share an encoding. The check key masks only the integrity check
(:mod:`privadapt.common.secure.secagg`), so a site can reveal its private half after
a failed check, and the coordinator can then tell which site's check was
wrong without learning anything about any share. A signed key
therefore cannot be replayed into another federation, job, round or name, and
:func:`verify_roster` refuses a roster whose entries commit to different
queries (the split-query attack: a coordinator sending different queries under
one query id), naming the site that disagrees.

Certificates are checked directly against the one federation CA (no
intermediates) with :mod:`privadapt.common.secure.certcheck`: issued and signed by it
(which must be a CA certificate, BasicConstraints ca=True), valid at the given
time, common name equal to the claimed site name, and organizational unit (OU)
``site`` -- the role marker ``privadapt certs issue --role`` writes.

Cost per round (the speed bar, benchmarks/network_round.py): a roster is
verified every round by every site and, entry by entry, by the coordinator,
with the same few certificates each time. What does not depend on the round
is remembered per process: the parsed CA and the federation id, and each
certificate the CA's signature was verified on (:func:`_issued_by_ca`, keyed
by the exact PEM bytes of both, successes only). Whatever depends on the
round or the time is checked every time: the validity window of the CA and of
each certificate, the identity, the round-key signature, the query digest and
the low-order check of every key.
"""

from __future__ import annotations

import functools
import hashlib
import struct
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa, x25519

from privadapt.common.errors import QueryRefusedError
from privadapt.common.secure.certcheck import (
    CertificateError,
    Role,
    certificate_from_pem,
    certificate_identity,
    verify_issued_by,
)
from privadapt.common.secure.query_digest import QUERY_DIGEST_BYTES

SITE_ROLE: Role = "site"
PUBLIC_KEY_BYTES = 32
_KEY_CONTEXT_TAG = b"privadapt/secagg/v1/round-key"
_ROSTER_DIGEST_TAG = b"privadapt/secagg/v1/roster"

SigningKey = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
"""Certificate keys a site may sign with (what ``cryptography`` loads from a PEM key)."""


class RosterError(QueryRefusedError):
    """A site refuses to mask for a round: its roster did not verify."""


def canonical_bytes(*fields: str | int | bytes) -> bytes:
    """Unambiguous encoding of a tuple of fields: each is tagged by type and
    length-prefixed, so ("ab", "c") and ("a", "bc") never collide."""
    out = bytearray()
    for field in fields:
        if isinstance(field, bytes):
            tag, raw = b"b", field
        elif isinstance(field, str):
            tag, raw = b"s", field.encode("utf-8")
        elif isinstance(field, int):
            if not 0 <= field < 2**64:
                raise ValueError(f"integer context fields must fit in 64 bits, got {field}")
            tag, raw = b"i", struct.pack(">Q", field)
        else:
            raise TypeError(f"cannot encode context field of type {type(field).__name__}")
        out += tag + struct.pack(">I", len(raw)) + raw
    return bytes(out)


def federation_id(ca_certificate_pem: bytes) -> bytes:
    """The federation's id: SHA-256 of its CA certificate (DER).
    :class:`~privadapt.common.secure.certcheck.CertificateError` if the PEM is not a
    certificate."""
    return _federation(ca_certificate_pem)[1]


@functools.lru_cache(maxsize=16)
def _federation(ca_certificate_pem: bytes) -> tuple[x509.Certificate, bytes]:
    """The parsed CA certificate and the federation id (cached: the same
    every round; a PEM that is no certificate raises and is not cached)."""
    ca = certificate_from_pem(ca_certificate_pem)
    return ca, hashlib.sha256(ca.public_bytes(serialization.Encoding.DER)).digest()


@functools.lru_cache(maxsize=1024)
def _issued_by_ca(certificate_pem: bytes, ca_certificate_pem: bytes) -> x509.Certificate:
    """``certificate_pem`` parsed, once the federation CA's signature on it
    has been verified; remembered per exact PEM pair only when it verified
    (a signature does not change with time). The validity window is not
    decided here: the check is made at the certificate's own start time, and
    :func:`_trusted_certificate` checks the window at every use."""
    cert = certificate_from_pem(certificate_pem)
    verify_issued_by(cert, _federation(ca_certificate_pem)[0], now=cert.not_valid_before_utc)
    return cert


def _trusted_certificate(certificate_pem: bytes, ca_certificate_pem: bytes,
                         now: datetime) -> x509.Certificate:
    """The certificate, if the federation CA issued it and it is valid at
    ``now``; ``CertificateError`` naming it and saying why otherwise."""
    cert = _issued_by_ca(certificate_pem, ca_certificate_pem)
    if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
        # Raises, naming the certificate and what is wrong with the time.
        verify_issued_by(cert, _federation(ca_certificate_pem)[0], now)
    return cert


def key_context(
    federation: bytes,
    job_id: str,
    round: int,
    site_name: str,
    public_key: bytes,
    query_digest: bytes,
    check_public_key: bytes,
) -> bytes:
    """The exact bytes a site signs for its round keys."""
    return _KEY_CONTEXT_TAG + canonical_bytes(federation, job_id, round, site_name, public_key,
                                              query_digest, check_public_key)


@dataclass(frozen=True)
class SignedKey:
    """One roster entry: a site's X25519 public key for (job, round), signed
    with the key of its certificate together with ``query_digest``, the digest
    of the query the site answers in the round, and ``check_public_key``, the
    key that masks only its integrity check (empty: never verifies)."""

    site_name: str
    job_id: str
    round: int
    public_key: bytes
    signature: bytes
    certificate_pem: bytes
    query_digest: bytes
    check_public_key: bytes = b""


@dataclass(frozen=True)
class Roster:
    """A verified roster as one site sees it; ``members`` is sorted by name.

    Made by :func:`verify_roster`; building one directly skips every check
    (benchmarks do, to time masking alone)."""

    federation: bytes
    job_id: str
    round: int
    own_name: str
    members: tuple[tuple[str, x25519.X25519PublicKey], ...]
    query_digest: bytes
    #: Every member's check key (same order as ``members``): they mask only
    #: the integrity check (common/secure/secagg.py). Empty in rosters built by hand.
    check_keys: tuple[tuple[str, x25519.X25519PublicKey], ...] = ()

    @property
    def size(self) -> int:
        """K, the number of verified participants."""
        return len(self.members)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.members)

    @functools.cached_property
    def digest(self) -> bytes:
        """SHA-256 of the whole roster as this site verified it: federation, job,
        round, the digest of the query every member committed to, and every
        member's name, public key and check key, in name order.

        Pairwise masks are derived under it, so two sites shown different
        rosters (a member more or less, or another key for one) or different
        queries derive different masks, which then do not cancel in the sum."""
        fields: list[str | int | bytes] = [self.federation, self.job_id, self.round,
                                           self.query_digest]
        checks = dict(self.check_keys)
        for name, key in sorted(self.members, key=lambda member: member[0]):
            fields += [name, _raw(key)]
            if name in checks:
                fields.append(_raw(checks[name]))
        return hashlib.sha256(_ROSTER_DIGEST_TAG + canonical_bytes(*fields)).digest()

    def public_key(self, name: str) -> x25519.X25519PublicKey:
        for member, key in self.members:
            if member == name:
                return key
        raise KeyError(name)

    def peers(self) -> tuple[tuple[str, x25519.X25519PublicKey], ...]:
        """Every member but this site."""
        return tuple(m for m in self.members if m[0] != self.own_name)

    def check_peers(self) -> tuple[tuple[str, x25519.X25519PublicKey], ...]:
        """Every member but this site, with its check key."""
        return tuple(m for m in self.check_keys if m[0] != self.own_name)

    def check_key(self, name: str) -> x25519.X25519PublicKey:
        return dict(self.check_keys)[name]


def _raw(key: x25519.X25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def sign_round_key(
    public_key: x25519.X25519PublicKey,
    check_public_key: x25519.X25519PublicKey,
    *,
    site_name: str,
    job_id: str,
    round: int,
    query_digest: bytes,
    certificate_pem: bytes,
    signing_key: SigningKey,
    ca_certificate_pem: bytes,
) -> SignedKey:
    """This site's roster entry for (job, round), committing to the query it
    answers in the round (``query_digest``, from
    :func:`~privadapt.common.secure.query_digest.query_digest`) and to the key that
    masks its integrity check."""
    if len(query_digest) != QUERY_DIGEST_BYTES:
        raise ValueError(f"a query digest has {QUERY_DIGEST_BYTES} bytes, got "
                         f"{len(query_digest)}")
    raw, check = _raw(public_key), _raw(check_public_key)
    message = key_context(federation_id(ca_certificate_pem), job_id, round, site_name, raw,
                          query_digest, check)
    if isinstance(signing_key, ed25519.Ed25519PrivateKey):
        signature = signing_key.sign(message)
    elif isinstance(signing_key, ec.EllipticCurvePrivateKey):
        signature = signing_key.sign(message, ec.ECDSA(hashes.SHA256()))
    elif isinstance(signing_key, rsa.RSAPrivateKey):
        signature = signing_key.sign(message, _rsa_padding(), hashes.SHA256())
    else:
        raise TypeError(
            f"cannot sign with a {type(signing_key).__name__}: use an Ed25519, ECDSA or RSA "
            "certificate key"
        )
    return SignedKey(site_name, job_id, round, raw, signature, certificate_pem, query_digest,
                     check)


def _rsa_padding() -> padding.PSS:
    # PSS with a fixed salt length, so signer and verifier agree without AUTO.
    return padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=padding.PSS.DIGEST_LENGTH)


def verify_roster(
    entries: Sequence[SignedKey],
    ca_certificate_pem: bytes,
    job_id: str,
    round: int,
    min_participants: int,
    own_name: str,
    now: datetime | None = None,
    allowed_names: Collection[str] | None = None,
    *,
    query_digest: bytes,
) -> Roster:
    """Check every entry of a published roster and return the verified roster.

    This site's own entry is checked like every other, so a misconfigured
    certificate shows up here. Raises :class:`RosterError` naming the offending
    site on the first entry that fails, on a duplicate name or key, when ``own_name`` is missing, or
    when fewer than ``min_participants`` sites remain. Every entry must commit
    to ``query_digest``, the digest of the query this site answers: an entry
    signed for another query is refused, naming its site, so a coordinator
    cannot send different queries under one query id. With ``allowed_names``
    (the site policy's peer list), any other member is refused too: a
    certificate from the CA alone does not make a peer, so whoever holds the CA
    key cannot fill a roster with sites of its own making.
    """
    if min_participants < 1:
        raise ValueError(f"min_participants must be >= 1, got {min_participants}")
    now = datetime.now(UTC) if now is None else now
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware (UTC)")
    where = f"roster of job {job_id!r} round {round}"
    try:
        ca, federation = _federation(ca_certificate_pem)
    except CertificateError as err:
        raise RosterError(f"{where}: the federation CA certificate is unreadable: {err}") from None
    if not ca.not_valid_before_utc <= now <= ca.not_valid_after_utc:
        raise RosterError(f"{where}: the federation CA certificate is not valid at {now:%Y-%m-%d}")

    members: dict[str, x25519.X25519PublicKey] = {}
    checks: dict[str, x25519.X25519PublicKey] = {}
    seen_keys: dict[bytes, str] = {}
    for entry in entries:
        if entry.site_name in members:
            raise RosterError(f"{where}: site {entry.site_name!r} appears twice; refusing")
        if allowed_names is not None and entry.site_name not in allowed_names:
            raise RosterError(
                f"{where}: site {entry.site_name!r} is not among this site's peers "
                f"({', '.join(sorted(allowed_names))}); refusing (add it to [federation] "
                "peers in the policy if it is a genuine member)"
            )
        for key in (entry.public_key, entry.check_public_key):
            if key in seen_keys:
                raise RosterError(
                    f"{where}: site {entry.site_name!r} presents the same key as "
                    f"{seen_keys[key]!r}; refusing"
                )
            seen_keys[key] = entry.site_name
        members[entry.site_name], checks[entry.site_name] = _verify_entry(
            entry, ca_certificate_pem, federation, job_id, round, now, where, query_digest)

    if own_name not in members:
        raise RosterError(
            f"{where}: this site ({own_name!r}) is not in the roster; refusing (the coordinator "
            "left out its key: check the site's registration and retry the round)"
        )
    if len(members) < min_participants:
        raise RosterError(
            f"{where}: only {len(members)} verified sites ({', '.join(sorted(members))}) but "
            f"site {own_name!r} requires at least {min_participants}; refusing (wait for more "
            "sites, or lower the minimum in this site's policy)"
        )
    ordered = tuple(sorted(members.items()))
    return Roster(federation, job_id, round, own_name, ordered, query_digest,
                  tuple(sorted(checks.items())))


def _verify_entry(
    entry: SignedKey,
    ca_certificate_pem: bytes,
    federation: bytes,
    job_id: str,
    round: int,
    now: datetime,
    where: str,
    query_digest: bytes,
) -> tuple[x25519.X25519PublicKey, x25519.X25519PublicKey]:
    def refuse(reason: str) -> RosterError:
        return RosterError(f"{where}: site {entry.site_name!r} refused: {reason}")

    if (entry.job_id, entry.round) != (job_id, round):
        raise refuse(f"its key is for job {entry.job_id!r} round {entry.round}")
    try:
        # Untrusted (not signed by the CA, or the CA is no CA), expired or not
        # yet valid; each message names the certificate and says why.
        cert = _trusted_certificate(entry.certificate_pem, ca_certificate_pem, now)
        identity = certificate_identity(cert)  # exactly one CN, a known role in OU
    except CertificateError as err:
        raise refuse(str(err)) from None
    if identity.name != entry.site_name:
        raise refuse(f"certificate common name is {identity.name!r}, not the claimed site name")
    if identity.role != SITE_ROLE:
        raise refuse(f"certificate role (OU) is {identity.role!r}, not {SITE_ROLE!r}")
    for what, raw in (("public key", entry.public_key), ("check key", entry.check_public_key)):
        if len(raw) != PUBLIC_KEY_BYTES:
            raise refuse(f"{what} has {len(raw)} bytes, not {PUBLIC_KEY_BYTES}")
        if raw[-1] & 0x80:
            # X25519 ignores the top bit, so a key has two encodings; only the
            # canonical one is accepted, so duplicate keys are caught by bytes.
            raise refuse(f"{what} is not canonically encoded (its top bit is set)")

    message = key_context(federation, job_id, round, entry.site_name, entry.public_key,
                          entry.query_digest, entry.check_public_key)
    try:
        _verify_signature(cert.public_key(), entry.signature, message)
    except InvalidSignature:
        raise refuse("bad signature over its round key") from None
    except TypeError as exc:
        raise refuse(str(exc)) from None
    if entry.query_digest != query_digest:
        # Checked after the signature, so the message blames the site only for
        # what it signed; an unsigned digest was refused above.
        raise refuse(
            f"its key commits to query digest {entry.query_digest.hex()[:16]}..., not "
            f"{query_digest.hex()[:16]}... of the query this site answers: the coordinator "
            "sent different queries under one query id (or the sites decode it differently); "
            "nothing was computed or charged"
        )
    keys = []
    for raw in (entry.public_key, entry.check_public_key):
        key = x25519.X25519PublicKey.from_public_bytes(raw)
        try:
            # A low-order point gives every peer an all-zero shared secret: caught
            # here, before any site answers (and charges) the round's query.
            # Any private key shows it (clamped scalars are multiples of the
            # cofactor 8), so one probe key serves the whole process.
            _low_order_probe().exchange(key)
        except ValueError:
            raise refuse("its X25519 key is a low-order point with no shared secret") from None
        keys.append(key)
    return keys[0], keys[1]


@functools.cache
def _low_order_probe() -> x25519.X25519PrivateKey:
    """A private key whose exchange with a low-order point fails (any key's
    does); its shared secrets are thrown away."""
    return x25519.X25519PrivateKey.generate()


def _verify_signature(key: object, signature: bytes, message: bytes) -> None:
    if isinstance(key, ed25519.Ed25519PublicKey):
        key.verify(signature, message)
    elif isinstance(key, ec.EllipticCurvePublicKey):
        key.verify(signature, message, ec.ECDSA(hashes.SHA256()))
    elif isinstance(key, rsa.RSAPublicKey):
        key.verify(signature, message, _rsa_padding(), hashes.SHA256())
    else:
        raise TypeError(f"unsupported certificate key type {type(key).__name__}")
