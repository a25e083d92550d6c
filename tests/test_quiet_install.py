"""Installing privadapt prints no setuptools warning (no
deprecated license table, no bundled-data folder that "would be ignored"), and
the wheel carries the bundled UCI Adult files."""

from __future__ import annotations

import subprocess
import sys
import zipfile

import pytest

from tests.paths import REPO_ROOT


@pytest.mark.slow
def test_building_the_wheel_is_quiet_and_ships_the_data(tmp_path):
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--no-index", "-w", str(tmp_path), str(REPO_ROOT)],
        capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    output = built.stdout + built.stderr
    for warning in ("deprecated", "would be ignored", "SetuptoolsDeprecationWarning"):
        assert warning not in output, output
    (wheel,) = tmp_path.glob("privadapt-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"privadapt/common/data/datasets/adult/adult.data.gz",
            "privadapt/common/data/datasets/adult/adult.test.gz",
            "privadapt/common/data/datasets/adult/adult.names"} <= names
