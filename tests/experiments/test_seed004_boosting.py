"""experiments/seed004/boosting.py runs end to end with ``--quick`` (about
15 s), writes its CSV, and the boosted models never fall more than 1% below
source-only (the usefulness target, 90th percentile over splits): with the free
model a candidate and the baseline margin, small private samples keep it."""

import csv

import pytest

from tests.experiments.script_runs import run_script


@pytest.mark.slow
def test_boosting_quick_writes_the_table(tmp_path):
    result = run_script("experiments.seed004.boosting", "--quick", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "p90 shortfall %" in result.stdout
    with open(tmp_path / "boosting_quick.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len({r["dataset"] for r in rows}) == 2 and len(rows) == 2 * 6 * 3
    for row in rows:
        if row["method"].startswith("boost"):
            assert float(row["p90_shortfall_percent"]) <= 1.0, row
