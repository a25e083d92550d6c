"""Secure aggregation: pairwise masks cancel, hide a share, and are only used
under a roster whose every key is signed by a certificate of the federation CA.

Certificates are made here with ``cryptography.x509``: a throwaway CA and
site certificates with the role in the subject's OU, as ``privadapt certs``
issues them.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa, x25519
from cryptography.x509.oid import NameOID
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from privadapt.common.errors import QueryRefusedError, ReplayError
from privadapt.common.numerics.fixed_point import FixedPointCodec
from privadapt.common.secure.roster import RosterError, sign_round_key
from privadapt.common.secure.secagg import (
    MaskMismatchError,
    RoundKeys,
    SignedKey,
    blame_integrity_checks,
    mask_integrity_check,
    mask_share,
    pairwise_mask,
    unmask_sum,
    verify_integrity_check,
    verify_roster,
)

JOB = "job-1"
ROUND = 3
NOW = datetime(2030, 6, 1, tzinfo=UTC)
QUERY_DIGEST = bytes(range(32))  # any 32 bytes: these tests are about keys
SITE_NAMES = ("site-a", "site-b", "site-c", "site-d", "site-e", "site-f")


def _name(common_name: str, role: str | None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if role is not None:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, role))
    return x509.Name(attributes)


class Authority:
    """A throwaway federation CA that issues certificates with a role in OU."""

    def __init__(self, name: str = "privadapt test CA", is_ca: bool = True) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = _name(name, None)
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(NOW - timedelta(days=365))
            .not_valid_after(NOW + timedelta(days=3650))
            .add_extension(
                x509.BasicConstraints(ca=is_ca, path_length=0 if is_ca else None), critical=True
            )
            .sign(self.key, hashes.SHA256())
        )
        self.pem = self.certificate.public_bytes(serialization.Encoding.PEM)

    def issue(
        self,
        common_name: str,
        role: str | None = "site",
        key=None,
        not_after: datetime = NOW + timedelta(days=90),
        not_before: datetime = NOW - timedelta(days=30),
    ):
        """(certificate PEM, private key) for one party; ``role=None`` leaves out the OU."""
        key = key or ec.generate_private_key(ec.SECP256R1())
        certificate = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, role))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .sign(self.key, hashes.SHA256())
        )
        return certificate.public_bytes(serialization.Encoding.PEM), key


@functools.cache
def federation() -> tuple[Authority, dict[str, tuple[bytes, object]]]:
    """One CA and certificates for all of SITE_NAMES, made once per session."""
    ca = Authority()
    return ca, {name: ca.issue(name) for name in SITE_NAMES}


def signed(keys: RoundKeys, name: str, job_id: str = JOB, round: int = ROUND,
           query_digest: bytes = QUERY_DIGEST) -> SignedKey:
    ca, certificates = federation()
    pem, signing_key = certificates[name]
    return keys.sign(
        site_name=name,
        job_id=job_id,
        round=round,
        query_digest=query_digest,
        certificate_pem=pem,
        signing_key=signing_key,
        ca_certificate_pem=ca.pem,
    )


def fixed_keys(count: int, seed: int = 0) -> list[RoundKeys]:
    """Deterministic round keys, so statistical tests give the same verdict every run."""
    rng = np.random.default_rng(seed)
    return [
        RoundKeys(x25519.X25519PrivateKey.from_private_bytes(rng.bytes(32)),
                  x25519.X25519PrivateKey.from_private_bytes(rng.bytes(32)))
        for _ in range(count)
    ]


def round_setup(count: int, job_id: str = JOB, round: int = ROUND, keys=None):
    """(names, keys, each site's verified roster) for the first ``count`` sites."""
    names = SITE_NAMES[:count]
    keys = keys or [RoundKeys.generate() for _ in names]
    entries = [signed(k, n, job_id, round) for k, n in zip(keys, names, strict=True)]
    ca, _ = federation()
    rosters = [verify_roster(entries, ca.pem, job_id, round, count, n, now=NOW,
                             query_digest=QUERY_DIGEST) for n in names]
    return names, keys, rosters


def honest_entries(count: int = 3) -> list[SignedKey]:
    return [signed(RoundKeys.generate(), name) for name in SITE_NAMES[:count]]


def verify(entries, min_participants: int = 2, own_name: str = "site-a", ca_pem=None):
    ca_pem = ca_pem or federation()[0].pem
    return verify_roster(entries, ca_pem, JOB, ROUND, min_participants, own_name, now=NOW,
                         query_digest=QUERY_DIGEST)


# --- masks ---------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(
    count=st.integers(min_value=2, max_value=6),
    length=st.integers(min_value=0, max_value=300),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_masks_cancel_exactly_in_the_sum_over_the_roster(count, length, seed):
    names, keys, rosters = round_setup(count)
    rng = np.random.default_rng(seed)
    encodings = [rng.integers(0, 2**64, size=length, dtype=np.uint64) for _ in names]
    masked = [
        mask_share(e, k, r, JOB, ROUND, "q-1", 0)
        for e, k, r in zip(encodings, keys, rosters, strict=True)
    ]
    np.testing.assert_array_equal(unmask_sum(masked), FixedPointCodec.add(encodings))


def test_masked_share_looks_uniform_to_the_coordinator():
    codec = FixedPointCodec()
    _, keys, rosters = round_setup(3, keys=fixed_keys(3))
    share = codec.encode(np.random.default_rng(1).normal(size=100_000))
    masked = mask_share(share, keys[0], rosters[0], JOB, ROUND, "q-1", 0)
    top_byte_counts = np.bincount((masked >> np.uint64(56)).astype(np.intp), minlength=256)
    # The masks differ from run to run (the round's certificates and signed keys
    # are made fresh), so a threshold of 1e-3 failed about one run in 500; the
    # unmasked encoding below scores p = 0.0 on both tests.
    assert stats.chisquare(top_byte_counts).pvalue > 1e-6
    assert stats.kstest(masked / 2.0**64, "uniform").pvalue > 1e-6


def test_unmasked_encoding_fails_the_same_uniformity_test():
    share = FixedPointCodec().encode(np.random.default_rng(1).normal(size=100_000))
    top_byte_counts = np.bincount((share >> np.uint64(56)).astype(np.intp), minlength=256)
    assert stats.chisquare(top_byte_counts).pvalue < 1e-3
    assert stats.kstest(share / 2.0**64, "uniform").pvalue < 1e-3


def test_both_ends_of_a_pair_derive_the_same_mask():
    names, keys, rosters = round_setup(2)
    at_a = pairwise_mask(keys[0], rosters[0], names[1], "q-1", 0, 1000)
    at_b = pairwise_mask(keys[1], rosters[1], names[0], "q-1", 0, 1000)
    np.testing.assert_array_equal(at_a, at_b)
    assert np.count_nonzero(at_a) > 990


@pytest.mark.parametrize(
    ("query_id", "block", "round"), [("q-2", 0, ROUND), ("q-1", 1, ROUND), ("q-1", 0, ROUND + 1)]
)
def test_masks_differ_across_queries_blocks_and_rounds(query_id, block, round):
    keys = fixed_keys(2)  # the same keys signed for two rounds, to isolate the HKDF binding
    names, _, rosters = round_setup(2, keys=keys)
    _, _, other_rosters = round_setup(2, round=round, keys=keys)
    base = pairwise_mask(keys[0], rosters[0], names[1], "q-1", 0, 64)
    other = pairwise_mask(keys[0], other_rosters[0], names[1], query_id, block, 64)
    assert not np.any(base == other)


def test_a_pair_shown_rosters_differing_in_one_member_derives_different_masks():
    names = SITE_NAMES[:3]
    keys = fixed_keys(3)
    entries = [signed(k, n) for k, n in zip(keys, names, strict=True)]
    ca, _ = federation()
    full = verify_roster(entries, ca.pem, JOB, ROUND, 2, "site-a", now=NOW,
                         query_digest=QUERY_DIGEST)
    without_c = verify_roster(entries[:2], ca.pem, JOB, ROUND, 2, "site-b", now=NOW,
                              query_digest=QUERY_DIGEST)
    at_a = pairwise_mask(keys[0], full, "site-b", "q-1", 0, 64)
    at_b = pairwise_mask(keys[1], without_c, "site-a", "q-1", 0, 64)
    assert not np.any(at_a == at_b)


def _split_view_shares():
    """A coordinator shows site-a the roster {a, b}, site-b {a, b, c} and site-c
    {b, c}: every pair that masks at all sees its partner, so without the
    roster digest in the masks the three shares would sum cleanly although no
    two sites agreed on who takes part. (encodings, masked shares, masked checks)."""
    names = SITE_NAMES[:3]
    keys = fixed_keys(3)
    entries = dict(zip(names, (signed(k, n) for k, n in zip(keys, names, strict=True)),
                       strict=True))
    ca, _ = federation()
    views = {"site-a": ("site-a", "site-b"), "site-b": names, "site-c": ("site-b", "site-c")}
    rng = np.random.default_rng(5)
    encodings, masked, checks = [], [], []
    for key, name in zip(keys, names, strict=True):
        roster = verify_roster([entries[n] for n in views[name]], ca.pem, JOB, ROUND, 2, name,
                               now=NOW, query_digest=QUERY_DIGEST)
        encoded = rng.integers(0, 2**64, size=16, dtype=np.uint64)
        encodings.append(encoded)
        masked.append(mask_share(encoded, key, roster, JOB, ROUND, "q-1", 0))
        checks.append(mask_integrity_check(key, roster, JOB, ROUND, "q-1"))
    return encodings, masked, checks


def test_sites_shown_rosters_differing_in_one_member_produce_masks_that_do_not_cancel():
    encodings, masked, _ = _split_view_shares()
    assert not np.any(unmask_sum(masked) == FixedPointCodec.add(encodings))


def test_integrity_check_refuses_the_sum_of_shares_masked_under_different_rosters():
    _, _, checks = _split_view_shares()
    with pytest.raises(MaskMismatchError, match="did not cancel"):
        verify_integrity_check(checks)


@pytest.mark.parametrize("count", [1, 2, 5])
def test_integrity_check_passes_when_every_site_verified_the_same_roster(count):
    _, keys, rosters = round_setup(count)
    checks = [mask_integrity_check(k, r, JOB, ROUND, "q-1")
              for k, r in zip(keys, rosters, strict=True)]
    verify_integrity_check(checks)
    if count > 1:  # one site alone has no peer to mask with
        assert all(check[0] != 1 for check in checks)


def _checks_and_reveals(count: int = 4):
    names, keys, rosters = round_setup(count)
    checks = {n: mask_integrity_check(k, r, JOB, ROUND, "q-1")
              for n, k, r in zip(names, keys, rosters, strict=True)}
    reveals = {n: k.check_private_bytes() for n, k in zip(names, keys, strict=True)}
    return names, rosters[0], checks, reveals


def test_honest_sites_are_never_blamed_and_a_lying_check_is():
    names, roster, checks, reveals = _checks_and_reveals()
    assert blame_integrity_checks(roster, "q-1", checks, reveals) == ()
    liar = names[2]
    checks[liar] = checks[liar] + np.uint64(1)
    with pytest.raises(MaskMismatchError):
        verify_integrity_check(list(checks.values()))
    assert blame_integrity_checks(roster, "q-1", checks, reveals) == (liar,)


def test_a_site_that_reveals_another_key_or_none_is_blamed():
    names, roster, checks, reveals = _checks_and_reveals()
    reveals[names[0]] = RoundKeys.generate().check_private_bytes()  # not the key it signed
    reveals[names[1]] = None
    reveals[names[3]] = b"short"
    assert blame_integrity_checks(roster, "q-1", checks, reveals) == (
        names[0], names[1], names[3])


def test_the_check_key_masks_nothing_but_the_check():
    # Revealing it must not reveal a share: the block masks come from the
    # other key, so knowing the check key leaves a block's mask unknown.
    _, keys, rosters = round_setup(2, keys=fixed_keys(2))
    assert keys[0].check_private_bytes() != keys[0]._private_key.private_bytes_raw()
    check = mask_integrity_check(keys[0], rosters[0], JOB, ROUND, "q-1")
    block = mask_share(np.ones(1, np.uint64), keys[0], rosters[0], JOB, ROUND, "q-1", 0)
    assert check[0] != block[0]


def test_integrity_check_is_masked_apart_from_every_block():
    _, keys, rosters = round_setup(2, keys=fixed_keys(2))
    check = mask_integrity_check(keys[0], rosters[0], JOB, ROUND, "q-1")
    block = mask_share(np.ones(1, np.uint64), keys[0], rosters[0], JOB, ROUND, "q-1", 0)
    assert check[0] != block[0]


def test_second_share_under_the_same_masks_is_refused():
    _, keys, rosters = round_setup(2)
    share = np.zeros(8, dtype=np.uint64)
    mask_share(share, keys[0], rosters[0], JOB, ROUND, "q-1", 0)
    with pytest.raises(ReplayError, match="already masked"):
        mask_share(share + np.uint64(1), keys[0], rosters[0], JOB, ROUND, "q-1", 0)


def test_mask_share_refuses_floats():
    _, keys, rosters = round_setup(2)
    with pytest.raises(ValueError, match="uint64"):
        mask_share(np.zeros(4), keys[0], rosters[0], JOB, ROUND, "q-1", 0)


def test_mask_share_refuses_keys_the_roster_does_not_hold():
    _, _, rosters = round_setup(2)
    with pytest.raises(RosterError, match="not this site's round key"):
        mask_share(np.zeros(4, np.uint64), RoundKeys.generate(), rosters[0], JOB, ROUND, "q", 0)


def test_floats_survive_encode_mask_sum_decode_to_codec_resolution():
    codec = FixedPointCodec(fractional_bits=32)
    names, keys, rosters = round_setup(4)
    rng = np.random.default_rng(7)
    values = [rng.normal(scale=100.0, size=(50, 20)) for _ in names]
    masked = [
        mask_share(codec.encode(v), k, r, JOB, ROUND, "q-7", 2)
        for v, k, r in zip(values, keys, rosters, strict=True)
    ]
    decoded = codec.decode(unmask_sum(masked))
    assert decoded.shape == (50, 20)
    tolerance = len(names) * 0.5 / codec.scale  # one rounding per share
    np.testing.assert_allclose(decoded, np.sum(values, axis=0), rtol=0, atol=tolerance)


# --- roster --------------------------------------------------------------------------------


def test_roster_of_honest_sites_verifies_with_k_from_the_entries():
    roster = verify(honest_entries(3))
    assert roster.size == 3
    assert roster.names == SITE_NAMES[:3]
    assert [name for name, _ in roster.peers()] == ["site-b", "site-c"]


@pytest.mark.parametrize("key_type", ["ed25519", "rsa"])
def test_roster_accepts_ed25519_and_rsa_certificate_keys(key_type):
    ca, _ = federation()
    key = (
        ed25519.Ed25519PrivateKey.generate()
        if key_type == "ed25519"
        else (rsa.generate_private_key(public_exponent=65537, key_size=2048))
    )
    pem, key = ca.issue("site-x", key=key)
    entry = RoundKeys.generate().sign(
        site_name="site-x",
        job_id=JOB,
        round=ROUND,
        query_digest=QUERY_DIGEST,
        certificate_pem=pem,
        signing_key=key,
        ca_certificate_pem=ca.pem,
    )
    assert verify([*honest_entries(1), entry]).size == 2


def test_roster_error_is_a_query_refusal():
    assert issubclass(RosterError, QueryRefusedError)


def test_roster_refuses_certificate_from_an_unknown_ca():
    # Same CA name, different key: only the CA's signature tells them apart.
    pem, key = Authority().issue("site-b")
    ca, _ = federation()
    intruder = sign_round_key(
        *key_pair(),
        site_name="site-b",
        job_id=JOB,
        round=ROUND,
        query_digest=QUERY_DIGEST,
        certificate_pem=pem,
        signing_key=key,
        ca_certificate_pem=ca.pem,
    )
    with pytest.raises(RosterError, match=r"'site-b'.*not issued by the federation CA"):
        verify([*honest_entries(1), intruder])


def test_roster_refuses_an_expired_certificate():
    ca, _ = federation()
    pem, key = ca.issue("site-b", not_after=NOW - timedelta(days=1))
    entry = sign_round_key(
        *key_pair(),
        site_name="site-b",
        job_id=JOB,
        round=ROUND,
        query_digest=QUERY_DIGEST,
        certificate_pem=pem,
        signing_key=key,
        ca_certificate_pem=ca.pem,
    )
    with pytest.raises(RosterError, match=r"'site-b'.*expired"):
        verify([*honest_entries(1), entry])


def test_a_certificate_verified_once_is_still_refused_once_it_expires():
    # The CA's signature is verified once per process; the window never is.
    ca, _ = federation()
    pem, key = ca.issue("site-b", not_before=NOW - timedelta(days=1),
                        not_after=NOW + timedelta(days=1))
    entry = sign_round_key(*key_pair(), site_name="site-b", job_id=JOB, round=ROUND,
                           query_digest=QUERY_DIGEST, certificate_pem=pem, signing_key=key,
                           ca_certificate_pem=ca.pem)
    entries = [*honest_entries(1), entry]
    assert verify(entries).size == 2
    later = NOW + timedelta(days=2)
    with pytest.raises(RosterError, match=r"'site-b'.*expired"):
        verify_roster(entries, ca.pem, JOB, ROUND, 2, "site-a", now=later,
                      query_digest=QUERY_DIGEST)
    with pytest.raises(RosterError, match=r"'site-b'.*not valid before"):
        verify_roster(entries, ca.pem, JOB, ROUND, 2, "site-a", now=NOW - timedelta(days=2),
                      query_digest=QUERY_DIGEST)


def test_a_refused_certificate_is_refused_again():
    # Only verified certificates are remembered: an untrusted one is checked
    # (and refused) every time.
    pem, key = Authority().issue("site-b")
    ca, _ = federation()
    intruder = sign_round_key(*key_pair(), site_name="site-b", job_id=JOB, round=ROUND,
                              query_digest=QUERY_DIGEST, certificate_pem=pem, signing_key=key,
                              ca_certificate_pem=ca.pem)
    for _ in range(2):
        with pytest.raises(RosterError, match=r"'site-b'.*not issued by the federation CA"):
            verify([*honest_entries(1), intruder])


def test_roster_refuses_a_tampered_public_key():
    entries = honest_entries(3)
    entries[1] = replace(entries[1], public_key=RoundKeys.generate().public_bytes)
    with pytest.raises(RosterError, match=r"'site-b'.*bad signature"):
        verify(entries)


@pytest.mark.parametrize("signed_for", [{"round": ROUND - 1}, {"job_id": "job-0"}])
def test_roster_refuses_a_signature_over_another_round_or_job(signed_for):
    entries = honest_entries(2)
    stale = signed(RoundKeys.generate(), "site-c", **signed_for)
    # Relabelled to pass for this round: the signature still covers the old context.
    entries.append(replace(stale, job_id=JOB, round=ROUND))
    with pytest.raises(RosterError, match=r"'site-c'.*bad signature"):
        verify(entries)


def test_roster_refuses_a_key_committed_to_another_query():
    other_query = bytes(32)
    entries = [*honest_entries(2), signed(RoundKeys.generate(), "site-c",
                                          query_digest=other_query)]
    with pytest.raises(RosterError, match=r"'site-c'.*different queries under one query id"):
        verify(entries)


def test_roster_refuses_a_query_digest_relabelled_after_signing():
    entries = honest_entries(2)
    other = signed(RoundKeys.generate(), "site-c", query_digest=bytes(32))
    entries.append(replace(other, query_digest=QUERY_DIGEST))
    with pytest.raises(RosterError, match=r"'site-c'.*bad signature"):
        verify(entries)


def test_masks_differ_across_query_digests():
    keys = fixed_keys(2)
    ca, _ = federation()
    rosters = []
    for digest in (QUERY_DIGEST, bytes(32)):
        entries = [signed(k, n, query_digest=digest) for k, n in zip(keys, SITE_NAMES[:2],
                                                                     strict=True)]
        rosters.append(verify_roster(entries, ca.pem, JOB, ROUND, 2, "site-a", now=NOW,
                                     query_digest=digest))
    first, second = (pairwise_mask(keys[0], r, "site-b", "q-1", 0, 64) for r in rosters)
    assert not np.any(first == second)


def test_roster_refuses_a_key_labelled_for_another_round():
    entries = [*honest_entries(2), signed(RoundKeys.generate(), "site-c", round=ROUND - 1)]
    with pytest.raises(RosterError, match=rf"'site-c'.*round {ROUND - 1}"):
        verify(entries)


def test_roster_refuses_a_duplicate_site_name():
    entries = [*honest_entries(2), signed(RoundKeys.generate(), "site-b")]
    with pytest.raises(RosterError, match="'site-b' appears twice"):
        verify(entries)


def test_roster_refuses_a_common_name_other_than_the_claimed_site():
    ca, certificates = federation()
    pem, key = certificates["site-c"]
    impostor = sign_round_key(
        *key_pair(),
        site_name="site-z",
        job_id=JOB,
        round=ROUND,
        query_digest=QUERY_DIGEST,
        certificate_pem=pem,
        signing_key=key,
        ca_certificate_pem=ca.pem,
    )
    with pytest.raises(RosterError, match=r"'site-z'.*common name"):
        verify([*honest_entries(2), impostor])


def test_roster_refuses_a_coordinator_certificate():
    ca, _ = federation()
    pem, key = ca.issue("coordinator", role="coordinator")
    entry = sign_round_key(
        *key_pair(),
        site_name="coordinator",
        job_id=JOB,
        round=ROUND,
        query_digest=QUERY_DIGEST,
        certificate_pem=pem,
        signing_key=key,
        ca_certificate_pem=ca.pem,
    )
    with pytest.raises(RosterError, match=r"'coordinator'.*role"):
        verify([*honest_entries(2), entry])


def test_roster_refuses_fewer_sites_than_the_policy_minimum():
    with pytest.raises(RosterError, match=r"only 2 verified sites.*at least 3"):
        verify(honest_entries(2), min_participants=3)


def test_roster_refuses_a_roster_without_this_site():
    with pytest.raises(RosterError, match=r"'site-d'.*not in the roster"):
        verify(honest_entries(3), own_name="site-d")


def key_pair() -> tuple[x25519.X25519PublicKey, x25519.X25519PublicKey]:
    """A fresh round's mask key and check key (public halves)."""
    keys = RoundKeys.generate()
    return keys.public_key, keys.check_public_key


def entry_from(ca: Authority, common_name: str, **issue) -> SignedKey:
    """A roster entry for ``common_name`` with a certificate ``ca`` issues (with
    ``issue`` passed on), signed for this round in ``ca``'s federation."""
    pem, key = ca.issue(common_name, **issue)
    return sign_round_key(
        *key_pair(),
        site_name=common_name,
        job_id=JOB,
        round=ROUND,
        query_digest=QUERY_DIGEST,
        certificate_pem=pem,
        signing_key=key,
        ca_certificate_pem=ca.pem,
    )


def test_roster_refuses_a_certificate_not_yet_valid():
    ca, _ = federation()
    entry = entry_from(ca, "site-b", not_before=NOW + timedelta(days=1))
    with pytest.raises(RosterError, match=r"'site-b'.*not valid before"):
        verify([*honest_entries(1), entry])


def test_roster_refuses_an_unreadable_certificate():
    entry = replace(honest_entries(2)[1], certificate_pem=b"not a certificate")
    with pytest.raises(RosterError, match=r"'site-b'.*not a PEM X\.509 certificate"):
        verify([*honest_entries(1), entry])


def test_roster_refuses_a_certificate_without_a_role():
    ca, _ = federation()
    entry = entry_from(ca, "site-b", role=None)
    with pytest.raises(RosterError, match=r"'site-b'.*no privadapt role"):
        verify([*honest_entries(1), entry])


def test_roster_refuses_a_federation_certificate_that_is_not_a_ca():
    # A leaf certificate passed as the federation CA: it signed the entries, but
    # BasicConstraints says it may not vouch for anyone.
    fake = Authority(is_ca=False)
    entries = [entry_from(fake, name) for name in SITE_NAMES[:2]]
    with pytest.raises(RosterError, match=r"'site-a'.*not a CA certificate"):
        verify(entries, ca_pem=fake.pem)


def test_roster_refuses_an_unreadable_federation_certificate():
    with pytest.raises(RosterError, match="federation CA certificate is unreadable"):
        verify(honest_entries(2), ca_pem=b"junk")


def test_a_non_canonical_key_encoding_is_refused():
    # X25519 ignores the top bit: the same key has two encodings, and the
    # roster's duplicate check compares bytes, so only one is accepted.
    entries = honest_entries(3)
    twin = entries[2].public_key[:-1] + bytes([entries[2].public_key[-1] | 0x80])
    entries[2] = dataclasses.replace(entries[2], public_key=twin)
    with pytest.raises(RosterError, match="not canonically encoded"):
        verify(entries)
