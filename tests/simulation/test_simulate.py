"""``make demo`` is ``privadapt simulate --sites 3``: a coordinator and site
daemons as processes over mutual TLS. Run here with 2 sites and a short job."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def _simulate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "privadapt.cli.main", "simulate", *args],
                          capture_output=True, text=True, timeout=300, check=False)


def test_simulate_runs_a_networked_job_and_reports_each_sites_ledger(tmp_path):
    job = tmp_path / "job.toml"
    job.write_text('[job]\nid = "short"\nalgorithm = "noisy_gd"\nepsilon = 1.0\n'
                   'delta = 1e-6\n[hyperparameters]\nloss = "logistic"\niterations = 20\n'
                   "learning_rate = 16.0\nradius = 20.0\nclip_norm = 1.0\n")
    workdir = tmp_path / "run"
    result = _simulate("--sites", "2", "--workdir", str(workdir), "--job", str(job))
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "short  noisy_gd  succeeded  rounds=20" in out
    figures = _figures(out)
    # majority class, source only, the job: the bar first, then the methods.
    assert list(figures) == ["majority class (public source)",
                             "source only (public data, coordinator)",
                             "noisy GD, target only, networked"]
    assert "split education-bachelors-plus" in out and "site-1=2000, site-2=2000" in out
    majority, source_only, private = figures.values()
    # The majority label scores 0.5 balanced accuracy and 0.5 AUC whatever the mix.
    assert majority[1:] == (0.5, 0.5) and 0.45 < majority[0] < 0.6
    # The demo's split: source-only loses a third of the way to the target's
    # own model; even 20 noisy steps from zero beat the majority label.
    assert 0.6 < source_only[1] < 0.7 and private[1] > 0.6
    assert "Delivered private model against the free models" in out
    spent = re.findall(r"short site-\d: this job epsilon (\d(?:\.\d+)?) at delta 1e-06", out)
    assert len(spent) == 2 and all(0.99 <= float(e) <= 1.0 for e in spent)
    assert (workdir / "site-1" / "site.db").exists()
    assert "first round done" in out and "Peak memory" in out
    # Every process it started is gone.
    from pathlib import Path

    leftovers = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if str(workdir).encode() in cmdline.read_bytes():
                leftovers.append(cmdline.parent.name)
        except OSError:
            continue
    assert leftovers == []
    again = _simulate("--sites", "2", "--workdir", str(workdir), "--job", str(job))
    assert again.returncode == 2 and "is not empty" in again.stderr
    assert "Traceback" not in again.stderr


def _figures(out: str) -> dict[str, tuple[float, float, float]]:
    """The first table's rows: label -> (accuracy, balanced accuracy, ROC AUC)."""
    table = out.split("Target test figures", 1)[1].split("\n\n", 1)[0]
    rows = re.findall(r"^  (.+?)\s+(?:-|\d+)\s+(0\.\d{4}|1\.0000)\s+(0\.\d{4}|1\.0000)"
                      r"\s+(0\.\d{4}|1\.0000)$", table, flags=re.MULTILINE)
    return {label: tuple(float(v) for v in values) for label, *values in rows}


def test_the_closing_note_never_names_a_removed_directory(tmp_path):
    from privadapt.simulation.simulate import closing_note

    gone = closing_note(tmp_path / "privadapt-simulate-x", True, tmp_path / "unused.toml")
    assert "was removed, ledgers included" in gone and "--keep" in gone
    assert "--site-db" not in gone


@pytest.mark.slow
def test_without_workdir_the_temporary_directory_is_removed_unless_kept(tmp_path):
    job = tmp_path / "job.toml"
    job.write_text('[job]\nid = "tiny"\nalgorithm = "noisy_gd"\nepsilon = 1.0\n'
                   'delta = 1e-6\n[hyperparameters]\nloss = "logistic"\niterations = 2\n'
                   "learning_rate = 16.0\nradius = 20.0\nclip_norm = 1.0\n")
    from pathlib import Path

    for keep in (False, True):
        result = _simulate("--sites", "2", "--job", str(job), *(["--keep"] if keep else []))
        assert result.returncode == 0, result.stdout + result.stderr
        workdir = Path(re.search(r"work directory: (\S+) ", result.stdout).group(1))
        assert workdir.exists() == keep
        if keep:
            assert f"Everything is kept in {workdir}" in result.stdout
            assert (workdir / "site-1" / "site.db").exists()
            import shutil

            shutil.rmtree(workdir)
        else:
            assert "was removed, ledgers included" in result.stdout
            assert "--site-db" not in result.stdout


def test_simulate_refuses_an_unknown_split_before_starting_anything(tmp_path):
    result = _simulate("--sites", "2", "--workdir", str(tmp_path / "run"), "--split", "height")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "'height' is not an Adult split" in result.stderr and "sex" in result.stderr
    assert not (tmp_path / "run").exists()
