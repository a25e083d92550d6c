"""The console entry points exist and behave as documented."""

import subprocess
import sys

import pytest

from privadapt.cli import main as cli
from privadapt.client.daemon import main as daemon
from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.common.mechanisms import GaussianMechanism
from privadapt.server.coordinator import main as coordinator


def test_ledger_show_prints_charges_and_totals(tmp_path, capsys):
    policy = SitePolicy("st-mary", 3.0, 1e-5)
    with PrivacyLedger(tmp_path / "ledger.db", policy, create=True) as ledger:
        ledger.charge("job-1", "q1", GaussianMechanism.single(2.0, 10.0))
    assert cli.main(["ledger", "show", "--site-db", str(tmp_path / "ledger.db")]) == 0
    out = capsys.readouterr().out
    assert "st-mary" in out and "job-1" in out and "q1" in out


def test_ledger_show_of_missing_file_exits_2_without_traceback(tmp_path, capsys):
    assert cli.main(["ledger", "show", "--site-db", str(tmp_path / "absent.db")]) == 2
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("entry", [daemon.main, coordinator.main])
def test_daemon_with_a_missing_config_file_exits_2_naming_it(entry, tmp_path, capsys):
    assert entry(["--config", str(tmp_path / "absent.toml")]) == 2
    err = capsys.readouterr().err
    assert "absent.toml" in err and "not found" in err and "Traceback" not in err


def test_privadapt_without_command_prints_help(capsys):
    assert cli.main([]) == 0
    assert "ledger" in capsys.readouterr().out


def test_console_script_module_runs_in_a_fresh_process():
    result = subprocess.run(
        [sys.executable, "-m", "privadapt.cli.main", "--help"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 0 and "privadapt" in result.stdout


def test_version_prints_the_installed_version(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith("privadapt 0.")


@pytest.mark.parametrize(("entry", "name"), [(daemon.main, "privadapt-site"),
                                            (coordinator.main, "privadapt-coordinator")])
def test_both_daemons_print_the_installed_version(entry, name, capsys):
    with pytest.raises(SystemExit) as done:
        entry(["--version"])  # no --config needed to ask
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(f"{name} 0.")
