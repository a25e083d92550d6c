"""Running an experiment grid's independent units: serially, over a process pool, or on Ray.

Every grid here is a list of units (a split, a (task, split, epsilon, method)
cell, a run) whose randomness depends on the unit's own key only, so the
units can run anywhere and in any order. ``Runner.map`` computes them and
yields their results **in the units' order**, whatever order they finish in:

* one worker (``--workers 1``): in this process, one after the other;
* several (the default, one per core): a process pool (each worker loads
  what its units need once, and uses the grid's temporary directory);
* ``--ray-address`` (``auto``, ``ray://head:10001``, or ``local`` for a new
  instance on this machine): one Ray task per unit, on every node of the
  cluster (needs the ray extra; docs/how-to/simulate.md). The ``experiments``
  package travels with the tasks; privadapt must be installed on every node.

``run_logged`` is the loop of a grid with a run log (experiments/run_log.py):
it skips the units already logged, runs the others through a ``Runner`` and
appends each result to the log in the units' order, so the log, and the
tables derived from it, are those of a serial run, and a run stopped at any
point resumes from the log whichever runner it resumes with.
"""

from __future__ import annotations

import argparse
import collections
import functools
import importlib
import multiprocessing
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from experiments.run_log import RunLog

Unit = TypeVar("Unit")
Result = TypeVar("Result")

# What a Ray task needs of the experiments package: its code, not its results.
SHIPPED_EXCLUDES = ["results/", "*/results/", "__pycache__/"]


@dataclass(frozen=True)
class Runner:
    """Where a grid's units run: ``workers`` processes here, or Ray at ``ray_address``."""

    workers: int = 1
    ray_address: str | None = None

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"workers must be at least 1, got {self.workers}")

    @property
    def description(self) -> str:
        if self.ray_address is not None:
            return f"Ray tasks ({self.ray_address})"
        return "serial" if self.workers == 1 else f"{self.workers} processes"

    def map(self, compute: Callable[[Unit], Result], units: Sequence[Unit]
            ) -> Iterator[Result]:
        """``compute(unit)`` for every unit, yielded in the units' order.
        ``compute`` must be picklable (a module-level function, or a
        ``functools.partial`` of one) unless the units run serially."""
        if self.ray_address is not None:
            return _ray_map(compute, units, self.ray_address)
        if self.workers == 1 or len(units) <= 1:
            return map(compute, units)
        return _pool_map(compute, units, min(self.workers, len(units)))


def add_runner_options(parser: argparse.ArgumentParser) -> None:
    """``--workers`` and ``--ray-address``, read back by ``runner_from``."""
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="processes the grid's units run in (default: one per core; "
                             "1: serially, in this process)")
    parser.add_argument("--ray-address", default=None,
                        help="run the units as Ray tasks on this cluster instead (ray.init's "
                             "address: auto, ray://head:10001, or local for a new instance "
                             "here; needs the ray extra)")


def runner_from(args: argparse.Namespace) -> Runner:
    return Runner(workers=args.workers, ray_address=args.ray_address)


def run_logged(log: RunLog, units: Sequence[dict[str, Any]],
               compute: Callable[[dict[str, Any]], dict[str, Any]], runner: Runner, *,
               describe: Callable[[dict[str, Any], dict[str, Any]], str] = lambda unit, row:
               str(unit),
               twin: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None,
               from_twin: Callable[[dict[str, Any], dict[str, str]], dict[str, Any]] | None
               = None,
               after: Callable[[int, list[dict[str, Any]]], None] | None = None) -> int:
    """Compute the units of ``units`` not yet in ``log`` and append their rows
    in order; the number computed.

    ``twin(unit)``, if given, names a unit whose row this one's is derived from
    (``from_twin(unit, twin_row)``) without computing: used when that twin is
    logged already or comes earlier in this run. ``after(number, todo)`` runs
    once the ``number``-th row of ``todo`` is logged (e.g. to rewrite the
    tables between runs). Progress goes to stderr, one line per unit, saying
    ``describe(unit, row)``."""
    todo = [unit for unit in units if log.key(unit) not in log]
    print(f"{log.path}: {len(log)} units already done, {len(todo)} to do "
          f"({runner.description})", file=sys.stderr, flush=True)
    derived = _derived_units(log, todo, twin)
    results = runner.map(compute, [u for i, u in enumerate(todo) if i not in derived])
    started = time.time()
    try:
        for number, unit in enumerate(todo, 1):
            if number - 1 in derived:
                row = from_twin(unit, log.row(log.key(twin(unit))))
            else:
                row = next(results)
            log.append(row)
            elapsed = time.time() - started
            print(f"[{number}/{len(todo)}] {describe(unit, row)} done ({elapsed:.0f} s, about "
                  f"{elapsed / number * (len(todo) - number):.0f} s left)", file=sys.stderr,
                  flush=True)
            if after is not None:
                after(number, todo)
    finally:
        close = getattr(results, "close", None)
        if close is not None:  # a pool's or Ray's pending units are cancelled
            close()
    return len(todo)


def _derived_units(log: RunLog, todo: list[dict[str, Any]],
                   twin: Callable[[dict[str, Any]], dict[str, Any] | None] | None) -> set[int]:
    """The positions in ``todo`` of units whose twin is logged or comes earlier."""
    if twin is None:
        return set()
    derived, earlier = set(), set()
    for position, unit in enumerate(todo):
        other = twin(unit)
        if other is not None and (log.key(other) in log or log.key(other) in earlier):
            derived.add(position)
        earlier.add(log.key(unit))
    return derived


def _pool_map(compute: Callable[[Unit], Result], units: Sequence[Unit], workers: int
              ) -> Iterator[Result]:
    # Spawned, not forked: a grid's process may hold gRPC's threads and state
    # (site daemons, a networked check), which a forked child inherits and can
    # spin on; and not a fork server, whose socket lives in a temporary
    # directory a script may remove. Each worker imports what its units need.
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=context,
                               initializer=_use_temporary_directory,
                               initargs=(tempfile.gettempdir(),))
    try:
        yield from pool.map(compute, units)
    finally:  # on an error or an early stop, the units not yet started never start
        pool.shutdown(wait=True, cancel_futures=True)


def _use_temporary_directory(path: str) -> None:
    """The grid's own temporary directory (a script may move it to RAM)."""
    tempfile.tempdir = path


def _ray_map(compute: Callable[[Unit], Result], units: Sequence[Unit], address: str
             ) -> Iterator[Result]:
    import ray  # the optional extra, only when a grid runs on Ray

    if not ray.is_initialized():
        import experiments

        ray.init(address=None if address == "local" else address,
                 include_dashboard=False, log_to_driver=False,
                 runtime_env={"py_modules": [experiments], "excludes": SHIPPED_EXCLUDES})
    task = ray.remote(_call)
    shared = ray.put(_importable(compute))  # serialised once for every unit
    pending = collections.deque(task.remote(shared, unit) for unit in units)
    try:
        while pending:
            result = ray.get(pending[0])
            pending.popleft()  # read: no longer to cancel, even if the caller stops here
            yield result
    finally:  # on an error or an early stop, only the units not yet read are cancelled
        for ref in pending:
            ray.cancel(ref)


def _importable(compute: Callable[[Unit], Result]) -> Callable[[Unit], Result]:
    """``compute``, taken from its module's importable name when the grid runs
    as ``python -m experiments...``: Ray pickles a ``__main__`` function by
    value, with the module's globals by reference to a ``__main__`` a worker
    does not have."""
    function = getattr(compute, "func", compute)
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    if function.__module__ != "__main__" or spec is None:
        return compute
    same = getattr(importlib.import_module(spec.name), function.__name__)
    if isinstance(compute, functools.partial):
        return functools.partial(same, *compute.args, **compute.keywords)
    return same


def _call(compute: Callable[[Unit], Result], unit: Unit) -> Result:
    return compute(unit)
