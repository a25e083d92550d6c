"""The federation CA issues certificates whose CN is the party's id and whose
OU is its role, keeps private keys private, and rejects what it did not sign."""

from __future__ import annotations

import ipaddress
import os
import stat
from datetime import UTC, datetime, timedelta

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from privadapt.common.errors import ConfigError, PrivadaptError
from privadapt.common.secure import certs


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def ca_dir(tmp_path):
    directory = tmp_path / "ca"
    certs.init_ca(directory)
    return directory


def test_init_ca_writes_a_private_key_and_a_ca_certificate(tmp_path):
    files = certs.init_ca(tmp_path / "ca", name="test-federation")
    assert _mode(files.key) == 0o600
    cert = certs.load_certificate(files.cert)
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    cn = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
    assert cn == "test-federation"


def test_init_ca_refuses_to_overwrite_an_existing_ca(ca_dir):
    before = (ca_dir / "ca.key").read_bytes()
    with pytest.raises(ConfigError, match="already exists"):
        certs.init_ca(ca_dir)
    assert (ca_dir / "ca.key").read_bytes() == before


@pytest.mark.parametrize("role", certs.ROLES)
def test_issued_certificate_has_name_as_cn_and_role_as_ou(ca_dir, role):
    files = certs.issue_certificate(ca_dir, role, "st-mary")
    cert = certs.load_certificate(files.cert)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "st-mary"
    assert cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)[0].value == role
    assert certs.certificate_identity(cert) == certs.Identity("st-mary", role)
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_issued_key_file_is_mode_0600_and_matches_its_certificate(ca_dir):
    files = certs.issue_certificate(ca_dir, "site", "st-mary")
    assert _mode(files.key) == 0o600
    key = certs.load_private_key(files.key)
    cert = certs.load_certificate(files.cert)
    assert key.public_key().public_numbers() == cert.public_key().public_numbers()


def test_keys_are_written_only_to_the_target_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    certs.init_ca(tmp_path / "ca")
    certs.issue_certificate(tmp_path / "ca", "site", "st-mary")
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert written == ["ca/ca.crt", "ca/ca.key", "ca/st-mary.crt", "ca/st-mary.key"]


def test_coordinator_certificate_is_for_servers_and_names_its_hosts(ca_dir):
    files = certs.issue_certificate(
        ca_dir, "coordinator", "coord", hosts=["coord.example.org", "10.0.0.7"]
    )
    cert = certs.load_certificate(files.cert)
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.SERVER_AUTH]
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["coord.example.org"]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.0.0.7")]


@pytest.mark.parametrize("role", ["site", "operator"])
def test_site_and_operator_certificates_are_for_clients(ca_dir, role):
    cert = certs.load_certificate(certs.issue_certificate(ca_dir, role, "party").cert)
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    key_usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert key_usage.digital_signature and not key_usage.key_cert_sign


def test_verify_accepts_a_certificate_from_its_own_ca(ca_dir):
    files = certs.issue_certificate(ca_dir, "site", "st-mary")
    certs.verify_issued_by(
        certs.load_certificate(files.cert), certs.load_certificate(ca_dir / "ca.crt")
    )


def test_verify_detects_an_expired_certificate(ca_dir):
    now = datetime.now(UTC)
    files = certs.issue_certificate(
        ca_dir, "site", "old", not_valid_before=now - timedelta(days=30),
        not_valid_after=now - timedelta(days=1),
    )
    ca_cert = certs.load_certificate(ca_dir / "ca.crt")
    with pytest.raises(certs.CertificateExpiredError, match="expired"):
        certs.verify_issued_by(certs.load_certificate(files.cert), ca_cert)


def test_verify_detects_a_certificate_not_yet_valid(ca_dir):
    files = certs.issue_certificate(ca_dir, "site", "st-mary")
    ca_cert = certs.load_certificate(ca_dir / "ca.crt")
    with pytest.raises(certs.CertificateNotYetValidError, match="clock"):
        certs.verify_issued_by(
            certs.load_certificate(files.cert), ca_cert, now=datetime.now(UTC) - timedelta(days=1)
        )


def test_verify_rejects_a_certificate_from_another_ca_with_the_same_name(tmp_path):
    # Both CAs carry the default name, so only the signature tells them apart.
    certs.init_ca(tmp_path / "ours")
    certs.init_ca(tmp_path / "theirs")
    files = certs.issue_certificate(tmp_path / "theirs", "site", "st-mary")
    ours = certs.load_certificate(tmp_path / "ours" / "ca.crt")
    with pytest.raises(certs.UntrustedCertificateError, match="not issued"):
        certs.verify_issued_by(certs.load_certificate(files.cert), ours)


def test_verify_rejects_a_party_certificate_posing_as_the_ca(ca_dir):
    site = certs.load_certificate(certs.issue_certificate(ca_dir, "site", "a").cert)
    other = certs.load_certificate(certs.issue_certificate(ca_dir, "site", "b").cert)
    with pytest.raises(certs.UntrustedCertificateError, match="not a CA"):
        certs.verify_issued_by(other, site)


def test_certificate_errors_are_user_facing_errors():
    for error in (certs.CertificateExpiredError, certs.UntrustedCertificateError,
                  certs.CertificateNotYetValidError):
        assert issubclass(error, certs.CertificateError)
        assert issubclass(error, PrivadaptError)


@pytest.mark.parametrize(
    "name", ["", "../escape", ".hidden", "a b", "st/mary", "x" * 65, "ca", "CA", "café", "-flag"]
)
def test_unsafe_or_reserved_name_is_rejected(ca_dir, name):
    with pytest.raises(ConfigError, match="name"):
        certs.issue_certificate(ca_dir, "site", name)
    assert sorted(p.name for p in ca_dir.iterdir()) == ["ca.crt", "ca.key"]


def test_unknown_role_is_rejected(ca_dir):
    with pytest.raises(ConfigError, match="role"):
        certs.issue_certificate(ca_dir, "admin", "root")  # type: ignore[arg-type]


def test_issuing_an_existing_name_again_is_refused(ca_dir):
    files = certs.issue_certificate(ca_dir, "site", "st-mary")
    before = files.key.read_bytes()
    with pytest.raises(ConfigError, match="already exists"):
        certs.issue_certificate(ca_dir, "site", "st-mary")
    assert files.key.read_bytes() == before


def test_issuing_without_a_ca_says_to_run_certs_init(tmp_path):
    with pytest.raises(ConfigError, match="certs init"):
        certs.issue_certificate(tmp_path, "site", "st-mary")


def test_invalid_coordinator_host_is_rejected(ca_dir):
    with pytest.raises(ConfigError, match="host"):
        certs.issue_certificate(ca_dir, "coordinator", "coord", hosts=["bad host!"])


def test_certificate_cannot_outlive_its_ca(tmp_path):
    certs.init_ca(tmp_path, valid_days=10)
    with pytest.raises(ConfigError, match="outlive the CA"):
        certs.issue_certificate(tmp_path, "site", "st-mary", valid_days=11)


@pytest.mark.parametrize("days", [0, -5])
def test_non_positive_validity_is_rejected(ca_dir, days):
    with pytest.raises(ConfigError, match="days"):
        certs.issue_certificate(ca_dir, "site", "st-mary", valid_days=days)


def test_certificate_without_a_role_has_no_identity(ca_dir):
    with pytest.raises(certs.CertificateError, match="role"):
        certs.certificate_identity(certs.load_certificate(ca_dir / "ca.crt"))


def test_loading_a_missing_certificate_names_the_path(tmp_path):
    with pytest.raises(ConfigError, match=r"absent\.crt"):
        certs.load_certificate(tmp_path / "absent.crt")


def test_loading_a_file_that_is_not_a_certificate_names_the_path(tmp_path):
    path = tmp_path / "junk.crt"
    path.write_text("not a certificate")
    with pytest.raises(ConfigError, match=r"junk\.crt"):
        certs.load_certificate(path)


def test_certificate_from_pem_parses_what_load_certificate_reads(ca_dir):
    pem = (ca_dir / "ca.crt").read_bytes()
    assert certs.certificate_from_pem(pem) == certs.load_certificate(ca_dir / "ca.crt")


def test_certificate_from_pem_refuses_bytes_that_are_not_a_certificate():
    with pytest.raises(certs.CertificateError, match=r"not a PEM X\.509 certificate"):
        certs.certificate_from_pem(b"not a certificate")
