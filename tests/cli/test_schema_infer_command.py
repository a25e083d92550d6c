"""``privadapt schema infer PUBLIC.csv --label COLUMN > schema.toml``: the drafted
schema as TOML every party loads, with comments saying where it came from."""

from __future__ import annotations

import subprocess
import sys

from privadapt.cli.main import main
from privadapt.common.data.schema import Schema

PUBLIC = "age,region,outcome\n30,north,no\n50,south,yes\n70,north,yes\n"


def test_the_printed_toml_loads_as_the_inferred_schema(tmp_path, capsys):
    public = tmp_path / "public.csv"
    public.write_text(PUBLIC)
    assert main(["schema", "infer", str(public), "--label", "outcome", "--widen", "0.5"]) == 0
    (tmp_path / "schema.toml").write_text(capsys.readouterr().out)
    loaded = Schema.from_toml(tmp_path / "schema.toml")
    assert loaded == Schema.infer(public, "outcome", widen=0.5)
    assert loaded.numeric_scale == {"age": (10.0, 90.0)}


def test_the_draft_says_it_comes_from_the_public_file_and_how_ranges_were_drawn(
        tmp_path, capsys):
    public = tmp_path / "public.csv"
    public.write_text(PUBLIC)
    main(["schema", "infer", str(public), "--label", "outcome"])
    comments = [line for line in capsys.readouterr().out.splitlines() if line.startswith("#")]
    text = " ".join(comments)
    assert "from public.csv, the coordinator's" in text and "PUBLIC file" in text
    assert "never draft" in text and "clipped" in text and "widened by 0 x" in text


def test_a_missing_label_column_is_one_line_naming_the_columns(tmp_path):
    public = tmp_path / "public.csv"
    public.write_text(PUBLIC)
    result = subprocess.run([sys.executable, "-m", "privadapt.cli.main", "schema", "infer",
                             str(public), "--label", "income"], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "--label names column(s) 'income'" in result.stderr
    assert "'age', 'region', 'outcome'" in result.stderr
