"""``privadapt simulate --public P --data A B C --schema S``: the demo's networked
federation on a user's own files (one of them Parquet), its result model
scored by ``privadapt evaluate``; and every mistake in the files or flags
refused before anything is started."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pyarrow.csv as pv
import pyarrow.parquet as pq
import pytest

from privadapt.cli.main import main
from privadapt.common.data.schema import Schema
from tests.own_data_files import LABEL, write_own_data

SHORT_JOB = ('[job]\nid = "short"\nalgorithm = "noisy_gd"\nepsilon = 1.0\ndelta = 1e-6\n'
             '[hyperparameters]\nloss = "logistic"\niterations = 10\nlearning_rate = 16.0\n'
             "radius = 20.0\nclip_norm = 1.0\n")


def privadapt(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "privadapt.cli.main", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture
def files(tmp_path):
    """The user's files and the schema drafted from the public one."""
    own = write_own_data(tmp_path, site_records=200)
    (tmp_path / "schema.toml").write_text(Schema.infer(own.public, LABEL).to_toml())
    return own


@pytest.mark.slow
def test_a_networked_run_on_own_files_writes_a_model_that_evaluate_scores(tmp_path, files):
    parquet = tmp_path / "c.parquet"
    pq.write_table(pv.read_csv(files.sites[2]), parquet)
    (tmp_path / "job.toml").write_text(SHORT_JOB)
    run = privadapt("simulate", "--public", "public.csv", "--data", "a.csv", "b.csv",
                    "c.parquet", "--schema", "schema.toml", "--workdir", "run", "--job",
                    "job.toml", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert ("public source public.csv 600 records; private data over 3 sites: "
            "site-1=a.csv (200), site-2=b.csv (200), site-3=c.parquet (200)") in run.stdout
    assert "short  noisy_gd  succeeded  rounds=10" in run.stdout
    model = tmp_path / "run" / "results" / "job" / "model.npz"
    assert f"short (noisy_gd, epsilon 1): {model}" in run.stdout
    assert (model.parent / "privacy_report.json").exists()
    headline = r"short site-\d: this job epsilon 0\.99\d* at delta 1e-06"
    assert len(re.findall(headline, run.stdout)) == 3
    # The outlier (age 1000000) is clipped at site-1, and only site-1's log says so.
    logs = {p.name: p.read_text() for p in (tmp_path / "run" / "logs").glob("*.log")}
    assert re.search(r"a\.csv: clipped \d+ value\(s\) to the schema's declared ranges "
                     r"\('age' 1 above 89", logs["site-1.log"])
    assert "'age' 1 above" not in run.stdout + run.stderr + logs["coordinator.log"]
    scored = privadapt("evaluate", "--model", str(model), "--data", "test.csv", "--schema",
                       "schema.toml", cwd=tmp_path)
    assert scored.returncode == 0, scored.stderr
    accuracy = float(re.search(r"accuracy\s+(\d\.\d{4})", scored.stdout).group(1))
    assert 0.5 < accuracy <= 1.0


def simulate_refusal(tmp_path: Path, capsys, *args: str) -> str:
    """Run simulate in this process; it must refuse (exit 2) without creating its workdir."""
    workdir = tmp_path / "run"
    assert main(["simulate", *args, "--workdir", str(workdir)]) == 2
    assert not workdir.exists()
    return capsys.readouterr().err


def own_args(files, schema: Path | None = None) -> list[str]:
    return ["--public", str(files.public), "--data", *map(str, files.sites), "--schema",
            str(schema or files.public.with_name("schema.toml"))]


def test_files_need_all_three_flags(tmp_path, capsys, files):
    err = simulate_refusal(tmp_path, capsys, "--public", str(files.public), "--data",
                           str(files.sites[0]))
    assert "needs --public, --data and --schema; missing --schema" in err


def test_the_demos_flags_are_refused_with_own_files(tmp_path, capsys, files):
    err = simulate_refusal(tmp_path, capsys, *own_args(files), "--sites", "2")
    assert "--sites belong to the Adult demo; with --data there is one site per file" in err


def test_a_site_file_with_an_undeclared_category_is_refused_naming_file_and_row(
        tmp_path, capsys, files):
    site = files.sites[1]
    site.write_text(site.read_text().replace(",north,", ",mars,", 1))
    err = simulate_refusal(tmp_path, capsys, *own_args(files))
    assert re.search(rf"{re.escape(str(site))}: row \d+, column 'region': value 'mars' is not "
                     r"declared in the schema", err)


def test_a_numeric_label_without_a_job_file_is_refused_saying_to_pass_one(
        tmp_path, capsys, files):
    numeric_label = tmp_path / "numeric.toml"
    numeric_label.write_text(Schema(label="visits", numeric=("age",)).to_toml())
    err = simulate_refusal(tmp_path, capsys, *own_args(files, numeric_label))
    assert "the label is a number (regression)" in err and "Pass --job JOB.toml" in err


def test_own_files_without_a_kept_work_directory_are_refused(tmp_path, capsys, files):
    assert main(["simulate", *own_args(files)]) == 2
    assert "pass --workdir DIR" in capsys.readouterr().err
