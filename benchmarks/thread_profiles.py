"""cProfile of every thread of a process, in thread CPU time, written at exit.

Why: a round's CPU is spread over the coordinator's job thread, its gRPC
handler threads and event loop, and each site daemon's main thread, on a
machine other work keeps busy. cProfile alone sees one thread and counts wall
time (waits and other processes' time slices included); here every thread
started after :func:`install` gets its own profiler on ``time.thread_time``,
and all of them are merged into ``<directory>/<pid>.prof`` when the process
exits. Child processes (site daemons) install it through
:func:`child_environment`, which puts a ``sitecustomize`` on their path.
"""

from __future__ import annotations

import atexit
import cProfile
import functools
import os
import pstats
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

DIRECTORY_VARIABLE = "PRIVADAPT_THREAD_PROFILES"
_SITECUSTOMIZE = (
    "import sys\n"
    f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
    "import thread_profiles\n"
    "thread_profiles.install_from_environment()\n"
)


def install(directory: Path) -> Callable[[], None]:
    """Profile this thread and every thread started from now on; merge and
    dump the profiles into ``directory`` at exit, or when the returned
    function is called (once)."""
    profiles: list[cProfile.Profile] = []
    dumped: list[bool] = []
    lock = threading.Lock()
    run = threading.Thread.run

    def profiled_run(thread: threading.Thread) -> None:
        profile = cProfile.Profile(time.thread_time)
        with lock:
            profiles.append(profile)
        profile.enable()
        try:
            run(thread)
        finally:
            profile.disable()

    def dump() -> None:
        if dumped:
            return
        dumped.append(True)
        main.disable()
        merged = None
        with lock:
            for profile in profiles:
                profile.create_stats()
                if profile.stats:  # type: ignore[attr-defined]
                    merged = pstats.Stats(profile) if merged is None else merged.add(profile)
        if merged is not None:
            merged.dump_stats(Path(directory) / f"{os.getpid()}.prof")

    threading.Thread.run = profiled_run  # type: ignore[method-assign]
    main = cProfile.Profile(time.thread_time)
    profiles.append(main)
    atexit.register(dump)
    main.enable()
    return dump


def install_from_environment() -> None:
    """:func:`install` if the environment names a directory (child processes)."""
    directory = os.environ.get(DIRECTORY_VARIABLE)
    if directory:
        dump_when_site_daemon_returns(install(Path(directory)))


def dump_when_site_daemon_returns(dump: Callable[[], None]) -> None:
    """In the site fork server (api/simulation/forked_sites.py): its forked
    sites end with ``os._exit`` once their daemon's ``main`` returns, so no
    atexit hook runs there, and the server itself runs no site: ``dump`` runs
    on that return instead of at the server's exit."""
    if "privadapt.simulation.forked_sites" not in sys.orig_argv:
        return
    atexit.unregister(dump)
    import privadapt.client.daemon.main as daemon

    original = daemon.main

    @functools.wraps(original)
    def main(*args, **kwargs):
        try:
            return original(*args, **kwargs)
        finally:
            dump()

    daemon.main = main


def child_environment(directory: Path) -> dict[str, str]:
    """Variables that make a child Python process profile itself into
    ``directory`` (a ``sitecustomize`` written there goes first on its path)."""
    (directory / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    path = [str(directory), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {DIRECTORY_VARIABLE: str(directory), "PYTHONPATH": os.pathsep.join(path)}


def per_call_costs(profile: Path, functions: Sequence[tuple[str, str]],
                   calls: int) -> dict[tuple[str, str], float]:
    """Cumulative thread CPU of each (file suffix, function name) in
    ``functions``, in milliseconds per ``calls``; absent ones are left out."""
    stats = pstats.Stats(str(profile), stream=sys.stderr).stats  # type: ignore[attr-defined]
    costs: dict[tuple[str, str], float] = {}
    for (file, _line, function), (_cc, _nc, _tt, cumulative, _callers) in stats.items():
        for wanted in functions:
            if function == wanted[1] and file.endswith(wanted[0]):
                costs[wanted] = costs.get(wanted, 0.0) + 1e3 * cumulative / calls
    return costs

