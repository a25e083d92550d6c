"""Thread CPU of chosen functions, in every process, without a profiler.

Why: cProfile (``thread_profiles.py``) charges its own cost to every Python
call, so steps made of many small calls look several times dearer than they
are, and C work (hashing, SQLite, crypto) looks cheap beside them. Here only
the listed functions are wrapped, each call timed with ``time.thread_time``
and ``time.perf_counter`` (a few microseconds per call), so the figures are
the steps' real CPU (and wall time, waits included),
inclusive of what they call, and comparable with the unprofiled CPU column of
``network_round.py``.

A step is ``(module, qualified name)``, e.g. ``("privadapt.client.site",
"Site.answer")``. Functions imported by name elsewhere (``from m import f``)
are replaced in every loaded module that holds them. Child processes (site
daemons) time themselves through :func:`child_environment` (a
``sitecustomize`` on their path); each process writes
``<directory>/<pid>.json`` at exit.
"""

from __future__ import annotations

import atexit
import functools
import importlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from thread_profiles import dump_when_site_daemon_returns

DIRECTORY_VARIABLE = "PRIVADAPT_STEP_TIMERS"
STEPS_VARIABLE = "PRIVADAPT_STEP_TIMER_STEPS"
_SITECUSTOMIZE = (
    "import sys\n"
    f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
    "import step_timers\n"
    "step_timers.install_from_environment()\n"
)

Step = tuple[str, str]


def _wrap(function: Callable, totals: dict[str, list[float]], key: str) -> Callable:
    local = threading.local()

    @functools.wraps(function)
    def timed(*args, **kwargs):
        # Recursive or re-entrant calls are counted once, at the outermost.
        if getattr(local, "depth", 0):
            return function(*args, **kwargs)
        local.depth = 1
        started, wall = time.thread_time(), time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            local.depth = 0
            entry = totals[key]
            entry[0] += time.thread_time() - started
            entry[1] += 1
            entry[2] += time.perf_counter() - wall

    return timed


def install(directory: Path, steps: Sequence[Step]) -> Callable[[], None]:
    """Time every step in this process from now on; write the totals (seconds,
    calls) to ``directory/<pid>.json`` at exit or when the returned function is
    called (once)."""
    totals: dict[str, list[float]] = {}
    for module_name, qualified in steps:
        module = importlib.import_module(module_name)
        owner: object = module
        *path, name = qualified.split(".")
        for part in path:
            owner = getattr(owner, part)
        original = getattr(owner, name)
        key = f"{module_name}:{qualified}"
        totals[key] = [0.0, 0, 0.0]  # thread CPU seconds, calls, wall seconds
        timed = _wrap(original, totals, key)
        setattr(owner, name, timed)
        if not path:  # a module-level function: also where it was imported by name
            for other in list(sys.modules.values()):
                for attribute, value in list(getattr(other, "__dict__", {}).items()):
                    if value is original:
                        setattr(other, attribute, timed)
    written: list[bool] = []

    def dump() -> None:
        # A process that ran none of the steps (a site fork server) writes nothing.
        if not written and any(entry[1] for entry in totals.values()):
            written.append(True)
            (Path(directory) / f"{os.getpid()}.json").write_text(json.dumps(totals))

    atexit.register(dump)
    return dump


def install_from_environment() -> None:
    """:func:`install` if the environment names a directory (child processes)."""
    directory = os.environ.get(DIRECTORY_VARIABLE)
    if directory:
        steps = [tuple(step) for step in json.loads(os.environ[STEPS_VARIABLE])]
        dump = install(Path(directory), steps)  # type: ignore[arg-type]
        dump_when_site_daemon_returns(dump)


def child_environment(directory: Path, steps: Sequence[Step]) -> dict[str, str]:
    """Variables that make a child Python process time ``steps`` into ``directory``."""
    (directory / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    path = [str(directory), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {DIRECTORY_VARIABLE: str(directory), STEPS_VARIABLE: json.dumps(list(steps)),
            "PYTHONPATH": os.pathsep.join(path)}


def per_call_costs(path: Path, calls: int) -> dict[str, tuple[float, float, float]]:
    """Each step's thread CPU and wall time in milliseconds per ``calls``
    (rounds), and its calls per round. Wall time includes waits (fsync, the
    peers, other processes' time slices on a busy machine)."""
    totals = json.loads(Path(path).read_text())
    return {key: (1e3 * cpu / calls, count / calls, 1e3 * wall / calls)
            for key, (cpu, count, wall) in totals.items()}
