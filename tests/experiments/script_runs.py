"""Run an experiment script the way ``python -m experiments.<name> ...`` does,
in this process: its ``main(argv)`` with stdout and stderr captured and a
``SystemExit`` read as the exit status.

Why not a subprocess: every new interpreter imports numpy, scipy,
dp-accounting's PLD modules and matplotlib again (about 1.5 s of CPU each
time, many times over in this folder), while a test process has them loaded
already. The scripts' ``if __name__ == "__main__"`` lines only call ``main``
(``test_every_script_starts_as_a_module`` checks each starts under ``-m``)."""

from __future__ import annotations

import contextlib
import importlib
import io
import shutil
import tempfile
from dataclasses import dataclass


@dataclass(frozen=True)
class ScriptRun:
    returncode: int
    stdout: str
    stderr: str


def run_script(module: str, *args: str) -> ScriptRun:
    """``main([*args])`` of ``module`` (e.g. "experiments.seed000.table1")."""
    main = importlib.import_module(module).main
    out, err = io.StringIO(), io.StringIO()
    temporary = tempfile.tempdir
    # The scripts leave their scratch folders (ledgers, daemons' files) to the
    # system; here they go with the run.
    scratch = tempfile.mkdtemp(prefix="experiment-run-")
    tempfile.tempdir = scratch
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(list(args))
        except SystemExit as stop:
            status = stop.code
        finally:
            tempfile.tempdir = temporary  # a script may also move it (to RAM)
            shutil.rmtree(scratch, ignore_errors=True)
    if isinstance(status, str):  # sys.exit("message"): printed, status 1
        err.write(status + "\n")
        status = 1
    return ScriptRun(status or 0, out.getvalue(), err.getvalue())
