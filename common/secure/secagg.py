"""Secure aggregation by pairwise additive masks (Bonawitz et al., "Practical
Secure Aggregation for Privacy-Preserving Machine Learning", CCS 2017), in its
simplest form: the pairwise masks only, without the secret sharing of mask
seeds that lets that protocol survive dropouts.

Protocol, per round (DESIGN.md section 6):

1. every site makes a fresh X25519 key pair (:meth:`RoundKeys.generate`) and
   signs its public key, with the digest of the exact query it answers
   (:func:`privadapt.common.secure.query_digest.query_digest`), with its certificate
   key (:meth:`RoundKeys.sign`);
2. the coordinator publishes all signed keys; every site verifies the roster
   against the federation CA (:func:`privadapt.common.secure.roster.verify_roster`),
   refuses it unless every entry commits to the same query digest as its own,
   and takes K from it;
3. for each release, a site encodes its noised share as fixed-point integers
   mod 2^64 and masks it (:func:`mask_share`): for every peer j, the shared
   secret X25519(own, j) is expanded with HKDF-SHA256 into a ChaCha20 key bound
   to (federation, job, round, the digest of the whole verified roster
   (:attr:`Roster.digest`, which covers the query digest), query, block, the
   two names), whose keystream,
   read as little-endian uint64, is the pair's mask. The site with the smaller
   name adds it, the other subtracts it, so the masks cancel in the sum over
   the roster and the coordinator's :func:`unmask_sum` is the exact sum of the
   encodings;
4. with its blocks, every site sends one more masked value, the integrity
   check (:func:`mask_integrity_check`): the integer 1 under masks derived
   from a second X25519 key pair (the *check key*, signed into the roster
   with the mask key) that masks nothing else, under the roster's digest.
   Its sum is K exactly when every site verified the same roster (and sent
   an honest check); otherwise it is off by a pseudo-random 64-bit
   difference of two keystreams, so :func:`verify_integrity_check` tells a
   sum over disagreeing rosters from a good one (a false pass has
   probability 2^-64) before anything is decoded. It does not test the block
   masks themselves: a site masking its blocks with a key other than the one
   it signed (a bug, or a site sending garbage on purpose, which it could
   always do) goes undetected;
5. with its share, every site sends the private half of its check key
   (:meth:`RoundKeys.check_private_bytes`). It reveals nothing about any
   share: that key masked only the constant 1. When the check fails,
   :func:`blame_integrity_checks` recomputes the check each site had to send
   and names the sites whose key does not match the one they signed or
   whose check differs: a participant that lies in its check is identified
   and left out of the job, instead of aborting every retry at the honest
   sites' expense.

What it defends against: an honest-but-curious coordinator (and any
eavesdropper) sees each site's share only masked by keystreams it cannot
compute, so it learns the sum over the roster and nothing more about any one
site. A peer site learns nothing either: it never sees another site's share.
Colluding with t sites, the coordinator can strip those sites' masks and learn
the sum over the honest ones -- which is why noise shares are sized by K - t.

What it does not defend against:

* dropouts: a site that does not submit leaves its masks in the sum; the round
  is aborted and retried with the remaining sites and fresh keys (no SecAgg+
  recovery by secret sharing of seeds);
* a malicious coordinator beyond the signed roster: it cannot forge keys,
  and a dropped key shows in K, but it may show different sites different
  (each validly signed) rosters. Each site then still sizes its noise by the K of
  the roster it verified, so its own release stays private; and since the
  masks are derived under the roster's digest, two sites shown different
  rosters share no mask, so their shares stay masked in any sum (the integrity
  check then fails and the round is aborted; without the digest, rosters
  chosen so that every pair still agreed on its pair would have summed
  cleanly over subsets the sites never agreed to). A re-sent query is refused
  (one share per (query, block) in :class:`RoundKeys`, and the ledger's replay
  check), since two shares under the same masks would reveal their difference;
* a site that sends garbage *blocks* with an honest check: the check detects
  masks that do not cancel and a site lying in its check (step 5), not a
  site lying about its input;
* a site lying about its own input (no range proofs): clipping at the site is
  trusted.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import x25519
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from privadapt.common.errors import PrivadaptError, ReplayError
from privadapt.common.numerics.fixed_point import FixedPointCodec
from privadapt.common.secure.roster import (
    Roster,
    RosterError,
    SignedKey,
    SigningKey,
    canonical_bytes,
    sign_round_key,
    verify_roster,
)

__all__ = [
    "INTEGRITY_CHECK_SHAPE",
    "MaskMismatchError",
    "RosterError",
    "RoundKeys",
    "SignedKey",
    "blame_integrity_checks",
    "mask_integrity_check",
    "mask_share",
    "pairwise_mask",
    "unmask_sum",
    "verify_integrity_check",
    "verify_roster",
]

_HKDF_SALT = b"privadapt/secagg/v1/pairwise-mask"
# Each derived ChaCha20 key is used for exactly one keystream (its HKDF info
# names the federation, job, round, query, block and pair, and round keys are
# fresh), so a constant all-zero nonce never repeats a (key, nonce) pair. The
# 16 bytes are cryptography's layout: a 32-bit block counter, then the nonce.
_ZERO_NONCE = bytes(16)
# The 32-bit block counter gives 2^32 blocks of 64 bytes: 2^35 uint64 per key.
_MAX_MASK_LENGTH = 2**35
# Keystream is produced chunk by chunk into a reusable buffer that stays in
# cache; allocating a fresh multi-megabyte output per peer halves throughput.
_CHUNK = 1 << 14
_ZEROS = bytes(8 * _CHUNK)
# The integrity check is masked under its own HKDF info: a str in the block
# field, which canonical_bytes tags apart from every (int) block index.
_CHECK_BLOCK = "integrity-check"
INTEGRITY_CHECK_SHAPE = (1,)
"""Shape of the masked integrity check a site sends after its blocks."""


class MaskMismatchError(PrivadaptError):
    """The masked shares' masks did not cancel: their sum is garbage."""


class RoundKeys:
    """A site's X25519 key pair for one round.

    Also remembers which (job, round, query, block) it has masked, and refuses
    a second share under the same masks: two shares masked alike would hand
    the coordinator their difference in the clear.
    """

    def __init__(self, private_key: x25519.X25519PrivateKey,
                 check_private_key: x25519.X25519PrivateKey) -> None:
        self._private_key = private_key
        self.public_key = private_key.public_key()
        # Masks the integrity check only, so it can be revealed (step 5).
        self._check_private_key = check_private_key
        self.check_public_key = check_private_key.public_key()
        self._shared: dict[bytes, bytes] = {}
        self._masked: set[tuple[str, int, str, int | str]] = set()

    @classmethod
    def generate(cls) -> RoundKeys:
        return cls(x25519.X25519PrivateKey.generate(), x25519.X25519PrivateKey.generate())

    @property
    def public_bytes(self) -> bytes:
        return _raw(self.public_key)

    def check_private_bytes(self) -> bytes:
        """The private half of the check key, which a site reveals after a
        failed integrity check: it masked the constant 1 and nothing else."""
        return self._check_private_key.private_bytes(
            serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
            serialization.NoEncryption())

    def sign(
        self,
        *,
        site_name: str,
        job_id: str,
        round: int,
        query_digest: bytes,
        certificate_pem: bytes,
        signing_key: SigningKey,
        ca_certificate_pem: bytes,
    ) -> SignedKey:
        """This site's roster entry, committing to the query it answers
        (``query_digest``), signed with its certificate key."""
        return sign_round_key(
            self.public_key,
            self.check_public_key,
            site_name=site_name,
            job_id=job_id,
            round=round,
            query_digest=query_digest,
            certificate_pem=certificate_pem,
            signing_key=signing_key,
            ca_certificate_pem=ca_certificate_pem,
        )

    def _shared_secret(self, peer: x25519.X25519PublicKey) -> bytes:
        """X25519 with a peer, cached for the round: masking a query with K
        peers would otherwise spend most of its time on key agreement."""
        raw = _raw(peer)
        if raw not in self._shared:
            self._shared[raw] = self._private_key.exchange(peer)
        return self._shared[raw]

    def _claim(self, job_id: str, round: int, query_id: str, block: int | str) -> None:
        """Record that a share is being masked for this context, once only."""
        context = (job_id, round, query_id, block)
        if context in self._masked:
            raise ReplayError(
                f"job {job_id!r} round {round}: query {query_id!r} block {block} was already "
                "masked with these keys; a second share under the same masks would reveal "
                "the difference of the two"
            )
        self._masked.add(context)


def _raw(key: x25519.X25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _mask_context(roster: Roster, query_id: str, block: int | str) -> bytes:
    """The HKDF info shared by every pair of one (query, block); the pair's two
    names, in sorted order, are appended per peer (the encoding concatenates).
    The roster's digest is in it so that only sites that verified the same
    roster derive the same masks."""
    return canonical_bytes(roster.federation, roster.job_id, roster.round, roster.digest,
                           query_id, block)


def _pair_cipher(
    own: RoundKeys,
    roster: Roster,
    context: bytes,
    peer_name: str,
    peer_key: x25519.X25519PublicKey,
) -> Cipher:
    try:
        secret = own._shared_secret(peer_key)
    except ValueError:  # cryptography refuses a low-order point (all-zero secret)
        raise RosterError(
            f"roster of job {roster.job_id!r} round {roster.round}: site {peer_name!r} "
            "presents an unusable X25519 key; refusing"
        ) from None
    return _keystream_cipher(secret, context, roster.own_name, peer_name)


def _keystream_cipher(secret: bytes, context: bytes, own_name: str, peer_name: str) -> Cipher:
    info = context + canonical_bytes(*sorted((own_name, peer_name)))
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=_HKDF_SALT, info=info).derive(secret)
    return Cipher(algorithms.ChaCha20(key, _ZERO_NONCE), mode=None)


def _apply_mask(total: np.ndarray, cipher: Cipher, add: bool, buffer: np.ndarray) -> None:
    """total += mask (or -= mask) mod 2^64, the mask being the keystream."""
    stream = cipher.encryptor()
    view = memoryview(buffer).cast("B")
    operation = np.add if add else np.subtract
    for start in range(0, total.size, _CHUNK):
        count = min(_CHUNK, total.size - start)
        stream.update_into(_ZEROS[: 8 * count], view)
        part = total[start : start + count]
        operation(part, buffer[:count], out=part)


def pairwise_mask(
    own: RoundKeys, roster: Roster, peer_name: str, query_id: str, block: int, length: int
) -> np.ndarray:
    """The mask this site shares with ``peer_name`` (identical at both ends);
    the site whose name sorts first adds it, the other subtracts it."""
    if not 0 <= length <= _MAX_MASK_LENGTH:
        raise ValueError(f"length must be in [0, 2^35], got {length}")
    mask = np.zeros(length, dtype=np.uint64)
    buffer = np.empty(min(length, _CHUNK), dtype="<u8")
    context = _mask_context(roster, query_id, block)
    cipher = _pair_cipher(own, roster, context, peer_name, roster.public_key(peer_name))
    _apply_mask(mask, cipher, True, buffer)
    return mask


def mask_share(
    encoded: np.ndarray,
    own: RoundKeys,
    roster: Roster,
    job_id: str,
    round: int,
    query_id: str,
    block: int,
) -> np.ndarray:
    """This site's masked share of one block of one query (uint64, same shape).

    ``encoded`` is the fixed-point encoding (:class:`FixedPointCodec`) of the
    site's noised share. Each (job, round, query, block) may be masked once.
    """
    encoded = np.asarray(encoded)
    if encoded.dtype != np.uint64:
        raise ValueError(
            f"mask_share takes a uint64 fixed-point encoding, got dtype {encoded.dtype}; "
            "encode the share with FixedPointCodec first"
        )
    if encoded.size > _MAX_MASK_LENGTH:
        raise ValueError(f"a block holds at most 2^35 values, got {encoded.size}")
    return _masked(encoded, own, roster, job_id, round, query_id, block)


def mask_integrity_check(
    own: RoundKeys, roster: Roster, job_id: str, round: int, query_id: str
) -> np.ndarray:
    """This site's masked integrity check for one query (uint64, shape
    :data:`INTEGRITY_CHECK_SHAPE`): the integer 1, masked like a block but
    under masks of its own. Sent after the query's blocks; see
    :func:`verify_integrity_check`."""
    _check_roster(own, roster, job_id, round)
    own._claim(job_id, round, query_id, _CHECK_BLOCK)
    return _integrity_check(own._check_private_key, roster, roster.own_name, query_id)


def _integrity_check(
    check_key: x25519.X25519PrivateKey, roster: Roster, name: str, query_id: str
) -> np.ndarray:
    """The check site ``name`` sends: 1 plus, for every other member, the
    keystream of the check keys' shared secret (added by the name that sorts
    first, subtracted by the other)."""
    total = np.ones(INTEGRITY_CHECK_SHAPE, dtype=np.uint64)
    buffer = np.empty(1, dtype="<u8")
    context = _mask_context(roster, query_id, _CHECK_BLOCK)
    for peer_name, peer_key in roster.check_keys:
        if peer_name == name:
            continue
        try:
            secret = check_key.exchange(peer_key)
        except ValueError:
            raise RosterError(f"roster of job {roster.job_id!r} round {roster.round}: site "
                              f"{peer_name!r} presents an unusable check key") from None
        _apply_mask(total, _keystream_cipher(secret, context, name, peer_name),
                    name < peer_name, buffer)
    return total


def blame_integrity_checks(
    roster: Roster, query_id: str, checks: dict[str, np.ndarray],
    revealed: dict[str, bytes | None],
) -> tuple[str, ...]:
    """After a failed integrity check (step 5 of the module docstring): the
    sites whose check cannot be vouched for. ``checks`` are the masked checks
    the sites sent, ``revealed`` the private check keys they revealed (None:
    none in time). A site is blamed when it revealed nothing, revealed a key
    whose public half is not the one it signed into the roster, or sent a
    check other than the one its revealed key gives. Honest sites are never
    blamed: their check is exactly what their signed key computes, whatever
    the others do. Returns the blamed names, sorted."""
    blamed = []
    for name, sent in sorted(checks.items()):
        raw = revealed.get(name)
        try:
            key = x25519.X25519PrivateKey.from_private_bytes(raw) if raw else None
        except ValueError:
            key = None
        if key is None or _raw(key.public_key()) != _raw(roster.check_key(name)):
            blamed.append(name)
            continue
        expected = _integrity_check(key, roster, name, query_id)
        if not np.array_equal(np.asarray(sent, dtype=np.uint64).reshape(-1), expected):
            blamed.append(name)
    return tuple(blamed)


def _masked(
    encoded: np.ndarray,
    own: RoundKeys,
    roster: Roster,
    job_id: str,
    round: int,
    query_id: str,
    block: int | str,
) -> np.ndarray:
    _check_roster(own, roster, job_id, round)
    own._claim(job_id, round, query_id, block)

    total = encoded.astype(np.uint64, order="C", copy=True).reshape(-1)
    buffer = np.empty(min(total.size, _CHUNK), dtype="<u8")
    context = _mask_context(roster, query_id, block)
    for peer_name, peer_key in roster.peers():
        cipher = _pair_cipher(own, roster, context, peer_name, peer_key)
        _apply_mask(total, cipher, roster.own_name < peer_name, buffer)
    return total.reshape(encoded.shape)


def _check_roster(own: RoundKeys, roster: Roster, job_id: str, round: int) -> None:
    if (job_id, round) != (roster.job_id, roster.round):
        raise RosterError(
            f"masking job {job_id!r} round {round} with the roster of job {roster.job_id!r} "
            f"round {roster.round}; verify the roster of this round first"
        )
    if _raw(roster.public_key(roster.own_name)) != own.public_bytes:
        raise RosterError(
            f"job {job_id!r} round {round}: the roster's key for {roster.own_name!r} is not "
            "this site's round key; refusing to mask"
        )


def unmask_sum(masked_shares: Iterable[np.ndarray]) -> np.ndarray:
    """The coordinator's side: the sum mod 2^64 of every roster member's
    masked share, in which the masks cancel. It needs no keys."""
    shares = [np.asarray(share) for share in masked_shares]
    if not shares:
        raise ValueError("no masked shares to sum")
    for share in shares:
        if share.dtype != np.uint64 or share.shape != shares[0].shape:
            raise ValueError(
                f"masked shares must all be uint64 of shape {shares[0].shape}, got "
                f"{share.dtype} of shape {share.shape}"
            )
    return FixedPointCodec.add(shares)


def verify_integrity_check(masked_checks: Sequence[np.ndarray]) -> None:
    """The coordinator's side of the integrity check: the masked checks of
    every roster member (from :func:`mask_integrity_check`) must sum to their
    number. :class:`MaskMismatchError` otherwise: some pair of sites derived
    different check masks (different rosters or check keys), or a site sent a
    wrong check, so the sum of the blocks is not to be trusted and must not
    be decoded (:func:`blame_integrity_checks` says whose check was wrong)."""
    total = unmask_sum(masked_checks)
    if total.shape != INTEGRITY_CHECK_SHAPE or int(total[0]) != len(masked_checks):
        raise MaskMismatchError(
            f"the masks of {len(masked_checks)} shares did not cancel (integrity check "
            "failed): the sites masked under different rosters or keys, so the sum is "
            "garbage and was discarded; the round is aborted (if it recurs, compare the "
            "sites' privadapt versions and look for a coordinator showing sites different "
            "rosters)"
        )
