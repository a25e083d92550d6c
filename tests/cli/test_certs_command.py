"""``privadapt certs init`` and ``privadapt certs issue`` write the files they
print; expected mistakes print one line and exit 2."""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime, timedelta

import pytest
from cryptography import x509

from privadapt.cli import main as cli
from privadapt.common.secure import certs
from privadapt.common.secure.certcheck import (
    UntrustedCertificateError,
    fingerprint,
    verify_issued_by,
)
from privadapt.common.secure.certs import load_certificate


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    return err


def test_certs_init_then_issue_writes_and_prints_the_files(tmp_path, capsys):
    directory = tmp_path / "pki"
    assert cli.main(["certs", "init", "--dir", str(directory)]) == 0
    assert cli.main(
        ["certs", "issue", "--dir", str(directory), "--role", "site", "--name", "st-mary"]
    ) == 0
    out = capsys.readouterr().out
    for name in ("ca.key", "ca.crt", "st-mary.key", "st-mary.crt"):
        assert str(directory / name) in out
    assert stat.S_IMODE(os.stat(directory / "st-mary.key").st_mode) == 0o600
    cert = certs.load_certificate(directory / "st-mary.crt")
    certs.verify_issued_by(cert, certs.load_certificate(directory / "ca.crt"))
    assert certs.certificate_identity(cert) == certs.Identity("st-mary", "site")


def test_certs_issue_days_and_hosts_reach_the_certificate(tmp_path):
    cli.main(["certs", "init", "--dir", str(tmp_path)])
    argv = ["certs", "issue", "--dir", str(tmp_path), "--role", "coordinator", "--name", "coord",
            "--days", "30", "--host", "coord.example.org", "--host", "10.0.0.7"]
    assert cli.main(argv) == 0
    cert = certs.load_certificate(tmp_path / "coord.crt")
    lifetime = cert.not_valid_after_utc - datetime.now(UTC)
    assert timedelta(days=29) < lifetime <= timedelta(days=30)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["coord.example.org"]


def test_certs_init_over_an_existing_ca_exits_2(tmp_path, capsys):
    assert cli.main(["certs", "init", "--dir", str(tmp_path)]) == 0
    capsys.readouterr()
    assert cli.main(["certs", "init", "--dir", str(tmp_path)]) == 2
    assert "already exists" in _one_line_error(capsys)


@pytest.mark.parametrize(
    "extra",
    [
        ["--role", "site", "--name", "../escape"],
        ["--role", "site", "--name", "st-mary", "--host", "example.org"],
        ["--role", "operator", "--name", "alice", "--days", "0"],
    ],
    ids=["bad-name", "host-for-a-site", "zero-days"],
)
def test_certs_issue_mistakes_exit_2_with_one_line(tmp_path, capsys, extra):
    cli.main(["certs", "init", "--dir", str(tmp_path)])
    capsys.readouterr()
    assert cli.main(["certs", "issue", "--dir", str(tmp_path), *extra]) == 2
    _one_line_error(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ca.crt", "ca.key"]


def test_certs_issue_without_a_ca_exits_2_and_says_to_run_init(tmp_path, capsys):
    argv = ["certs", "issue", "--dir", str(tmp_path), "--role", "site", "--name", "st-mary"]
    assert cli.main(argv) == 2
    assert "certs init" in _one_line_error(capsys)


def test_two_federations_cas_have_distinct_names_and_a_wrong_one_is_told_by_fingerprint(
        tmp_path, capsys):
    for federation in ("one", "two"):
        assert cli.main(["certs", "init", "--dir", str(tmp_path / federation)]) == 0
    assert cli.main(["certs", "issue", "--dir", str(tmp_path / "one"), "--role", "site",
                     "--name", "st-mary"]) == 0
    capsys.readouterr()
    one, two = (load_certificate(tmp_path / f / "ca.crt") for f in ("one", "two"))
    names = [ca.subject.rfc4514_string() for ca in (one, two)]
    assert names[0] != names[1] and all(n.startswith("CN=privadapt-ca-") for n in names)
    site = load_certificate(tmp_path / "one" / "st-mary.crt")
    with pytest.raises(UntrustedCertificateError, match="not issued by the federation CA") as wrong:
        verify_issued_by(site, two)
    message = str(wrong.value)
    assert f"{names[1]!r}" in message and f"but by {names[0]!r}" in message
    assert fingerprint(two) in message and fingerprint(two).count(":") == 31
