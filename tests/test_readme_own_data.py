"""The README's "Your own data" quickstart, run exactly as written (parsed out
of README.md, so it cannot drift) on three site CSV files, a public CSV and a
test CSV the test writes where the quickstart says they are (``~/my-files``):
from the clone to an evaluated private model."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.own_data_files import write_own_data
from tests.paths import REPO_ROOT

README = REPO_ROOT / "README.md"


def quickstart() -> str:
    section = README.read_text().split("## Your own data", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```sh\n(.*?)```", section, re.DOTALL).group(1)


def commands(block: str) -> list[str]:
    return [line.split("#", 1)[0].strip() for line in block.splitlines()
            if line.split("#", 1)[0].strip()]


def test_the_quickstart_is_at_most_ten_commands_from_the_clone():
    lines = commands(quickstart())
    assert 3 <= len(lines) <= 10
    assert lines[0] == "make venv && source .venv/bin/activate"  # the Makefile's own setup
    assert sum(line.startswith("privadapt ") for line in lines) == 3


@pytest.mark.slow
def test_the_quickstart_goes_from_csv_files_to_an_evaluated_private_model(tmp_path):
    files = write_own_data(tmp_path / "my-files")  # ~/my-files, HOME being tmp_path
    result = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", quickstart()], cwd=REPO_ROOT,
                            env={**os.environ, "HOME": str(tmp_path),
                                 "OPENBLAS_NUM_THREADS": "1"},
                            capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    work = files.public.parent
    assert (work / "run" / "results" / "selected-eps1" / "privacy_report.json").exists()
    assert "selected_adaptation  succeeded" in result.stdout
    report = result.stdout.split("on test.csv: ", 1)[1]
    assert report.startswith("400 records, binary classification")
    figures = {name: float(value) for name, value
               in re.findall(r"^  (accuracy|balanced accuracy|ROC AUC)\s+(\d\.\d{4})$", report,
                             re.MULTILINE)}
    assert sorted(figures) == ["ROC AUC", "accuracy", "balanced accuracy"]
    assert figures["accuracy"] > 0.5 and figures["ROC AUC"] > 0.5
    # The outlier of site-1's file is clipped, and counted in site-1's own log.
    assert "'age' 1 above" in (work / "run" / "logs" / "site-1.log").read_text()
