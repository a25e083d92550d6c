"""A quick run never overwrites the committed results the papers' pages
show: without --out it writes to a quick/ folder beside them."""

from pathlib import Path

from experiments.seed000.reporting import output_path


def test_a_quick_run_writes_beside_the_committed_results_and_out_wins():
    folder, table = Path("experiments/seed000/results"), Path("experiments/results/x.csv")
    assert output_path(None, folder, quick=False) == folder
    assert output_path(None, folder, quick=True) == folder / "quick"
    assert output_path(None, table, quick=True) == Path("experiments/results/quick/x.csv")
    assert output_path(Path("/tmp/mine"), folder, quick=True) == Path("/tmp/mine")
