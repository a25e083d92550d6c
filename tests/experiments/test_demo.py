"""``make demo`` end to end: the table, and each site's epsilon from its ledger."""

import re
import shutil
import subprocess
import sys

import pytest

from tests.paths import REPO_ROOT

DEMO = REPO_ROOT / "experiments" / "demo.py"


def _balanced(out: str) -> dict[str, float]:
    """The table's rows: method (with its epsilon) -> balanced accuracy."""
    rows = re.findall(r"^  (\S.*?)\s{2,}(\S+)\s+[01]\.\d{4}\s+([01]\.\d{4})\s+[01]\.\d{4}$",
                      out, flags=re.MULTILINE)
    return {f"{method} @ {epsilon}": float(value) for method, epsilon, value in rows}


def run_demo(workdir, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(DEMO), "--workdir", str(workdir), *options],
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def first_demo(tmp_path_factory):
    """One run of the demo on fresh ledgers, and its workdir: the table is
    checked on it, and a second run is made on a copy of its ledgers (the
    demo takes a while; one first run serves both)."""
    workdir = tmp_path_factory.mktemp("demo")
    return run_demo(workdir), workdir


@pytest.mark.slow
def test_demo_prints_accuracies_and_ledger_epsilons(first_demo):
    result, workdir = first_demo
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for method in ("majority class", "source only", "target only, non-private", "noisy GD"):
        assert method in out
    assert "split education-bachelors-plus" in out and "site-a=2000" in out
    balanced = _balanced(out)
    assert len(balanced) == 7 and all(0.5 <= a < 1.0 for a in balanced.values())
    # The demo's split: the majority label scores 0.5 balanced accuracy, the
    # shift costs source-only about 14 points against the target's own model,
    # noisy GD at epsilon 1 and 3 is ahead of both free models, and the
    # private selection never below them: it delivers a trained model only
    # where its release certifies one better than source-only, and otherwise
    # source-only itself (as at epsilon 1 in one CI run).
    majority = balanced["majority class (public source) @ -"]
    source_only = balanced["source only (public data) @ -"]
    assert majority == 0.5 < source_only < 0.7
    assert balanced["target only, non-private @ inf"] > source_only + 0.1
    noisy_gd = [a for m, a in balanced.items() if m.startswith("noisy GD")]
    selection = [a for m, a in balanced.items() if m.startswith("private selection")]
    assert len(noisy_gd) == 2 and all(a > source_only for a in noisy_gd)
    assert len(selection) == 2 and all(a >= source_only for a in selection)
    per_job = re.findall(r"(?:noisy-gd|selected)-eps(\d)-\w+ (\d\.\d{3})", out)
    assert len(per_job) == 12
    for target, spent in per_job:
        assert float(spent) <= float(target)
        assert float(spent) > 0.99 * float(target)
    assert (workdir / "site-a.ledger.db").exists()


@pytest.mark.slow
def test_the_sex_split_stays_available(tmp_path):
    result = run_demo(tmp_path, "--split", "sex")
    assert result.returncode == 0, result.stderr
    assert "split sex: public source (men)" in result.stdout
    balanced = _balanced(result.stdout)
    assert len(balanced) == 7 and all(0.5 <= a < 1.0 for a in balanced.values())


@pytest.mark.slow
def test_rerunning_the_demo_on_the_same_ledgers_hits_the_cap_loudly(first_demo, tmp_path):
    # Each run spends about 4.2 of the sites' cap of 5 (composed): the second
    # is refused part-way. The first run's ledgers are copied, so the other
    # test's workdir stays as its run left it.
    first, workdir = first_demo
    shutil.copytree(workdir, tmp_path / "again")
    codes = [first.returncode]
    while len(codes) < 3 and 2 not in codes:
        result = run_demo(tmp_path / "again")
        codes.append(result.returncode)
    assert codes == [0, 2]
    assert "cap" in result.stderr and "site-a" in result.stderr
    assert "Traceback" not in result.stderr
