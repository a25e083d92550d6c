"""The README's Python example: under ten lines, one import of the library,
and it runs (in a temporary directory, as a reader would paste it)."""

import ast
import re
import subprocess
import sys

from tests.paths import REPO_ROOT

README = REPO_ROOT / "README.md"


def example() -> str:
    section = README.read_text().split("## In ten lines of Python", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)


def test_the_example_is_short_with_one_import_line():
    lines = [line for line in example().splitlines() if line.strip()]
    assert len(lines) < 10
    imports = [line for line in lines if re.match(r"(import|from) ", line)]
    assert imports == ["import privadapt as pa"]


def test_the_example_runs_and_prints_an_accuracy_and_each_sites_epsilon(tmp_path):
    result = subprocess.run([sys.executable, "-c", example()], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    first, second = result.stdout.strip().splitlines()[0], result.stdout.strip().splitlines()[-1]
    assert 0.8 < float(first.split()[0]) <= 1.0
    spent = ast.literal_eval(second)
    assert sorted(spent) == ["site-1", "site-2", "site-3"]
    assert all(0.99 <= eps <= 1.0 for eps in spent.values())
    assert list(tmp_path.iterdir()) == []  # the ledgers went to a temporary directory
