"""experiments/epsilon_monotonicity.py runs end to end with ``--quick``
(about 6 s): boosting's per-split rows and the scan of the study CSVs are
written, and the scan flags a row that gets worse with epsilon by more
than one standard error but not one within it."""

import csv

import pytest

from experiments.epsilon_monotonicity import scan
from tests.experiments.script_runs import run_script
from tests.paths import REPO_ROOT


@pytest.mark.slow
def test_quick_writes_the_per_split_rows_and_the_scan(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)  # the scan reads the committed study CSVs by relative path
    result = run_script("experiments.epsilon_monotonicity", "--quick", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "paired change" in result.stdout
    with open(tmp_path / "boosting_by_epsilon_quick.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 3 * 3
    assert all(0.0 <= float(r["accuracy"]) <= 1.0 for r in rows)
    assert (tmp_path / "epsilon_drops_quick.csv").is_file()


def test_the_scan_flags_drops_beyond_one_standard_error_only(tmp_path):
    path = tmp_path / "study.csv"
    header = "dataset,n,method,epsilon,metric_mean,metric_std,splits\n"
    rows = ["adult x,200,real drop,1.0,0.90,0.01,4", "adult x,200,real drop,3.0,0.85,0.01,4",
            "adult x,200,noise,1.0,0.90,0.05,4", "adult x,200,noise,3.0,0.89,0.05,4",
            "synthetic,200,mse up,1.0,0.01,0.001,4", "synthetic,200,mse up,3.0,0.02,0.001,4",
            "synthetic,200,source-only,1.0,0.01,0.0,4",
            "synthetic,200,source-only,3.0,0.02,0.0,4"]
    path.write_text(header + "\n".join(rows) + "\n")
    assert [row[3] for row in scan([path, tmp_path / "absent.csv"])] == ["real drop", "mse up"]
