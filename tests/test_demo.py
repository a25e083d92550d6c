"""``make demo`` end to end: the table, and each site's epsilon from its ledger."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

DEMO = Path(__file__).resolve().parents[1] / "experiments" / "demo.py"


@pytest.mark.slow
def test_demo_prints_accuracies_and_ledger_epsilons(tmp_path):
    result = subprocess.run(
        [sys.executable, str(DEMO), "--workdir", str(tmp_path)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for method in ("majority class", "source only", "target only, non-private", "noisy GD"):
        assert method in out
    accuracies = [float(a) for a in re.findall(r"\s(0\.\d{4})\n", out)]
    assert len(accuracies) == 5 and all(0.85 < a < 1.0 for a in accuracies)
    per_job = re.findall(r"noisy-gd-eps(\d)-\w+ (\d\.\d{3})", out)
    assert len(per_job) == 6
    for target, spent in per_job:
        assert float(spent) <= float(target)
        assert float(spent) > 0.99 * float(target)
    assert (tmp_path / "site-a.ledger.db").exists()


@pytest.mark.slow
def test_rerunning_the_demo_on_the_same_ledgers_hits_the_cap_loudly(tmp_path):
    # Each run spends about 2.9 of the sites' cap of 5 (composed): the third must fail.
    codes = []
    for _ in range(3):
        result = subprocess.run(
            [sys.executable, str(DEMO), "--workdir", str(tmp_path)],
            capture_output=True, text=True, timeout=300, check=False,
        )
        codes.append(result.returncode)
    assert codes == [0, 0, 2]
    assert "cap" in result.stderr and "site-a" in result.stderr
    assert "Traceback" not in result.stderr
