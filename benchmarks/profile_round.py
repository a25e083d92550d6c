"""Where a networked round's CPU goes, process by process.

Runs the 3-site, 1e5-float case of ``network_round.py`` with every thread of
the coordinator and of each site daemon under cProfile in thread CPU time
(``thread_profiles.py``), and prints, per round, the CPU of the steps that
matter: the coordinator's round engine, answer store, handlers and gRPC
event loop; each site's announcement and roster handling, its answer (policy,
ledger, kernel, noise share) and masks. The profiler adds its own cost to
every Python call (steps made of many small calls look dearer than they are):
read the figures as shares of a process's time, next to the unprofiled CPU
column of ``network_round.py``.

Run: ``.venv/bin/python benchmarks/profile_round.py [--sites 3] [--floats 100000]
[--rounds 60]`` (about half a minute).
"""

from __future__ import annotations

# isort: off
import federation_processes  # noqa: F401 -- single-threaded BLAS, before numpy loads
# isort: on
import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from network_round import WARM_UP, networked
from thread_profiles import child_environment, install, per_call_costs

COORDINATOR_STEPS = [
    ("server/network_federation.py", "_attempt"),
    ("server/network_federation.py", "_fingerprint"),
    ("server/rounds.py", "run_round"),
    ("common/query_digest.py", "query_digest"),
    ("server/rounds.py", "_aggregate"),
    ("server/store/rounds.py", "start_round"),
    ("server/store/rounds.py", "save_answer"),
    ("server/federation_service.py", "_caller"),
    ("server/rounds.py", "deliver_key"),
    ("server/rounds.py", "deliver_share"),
    ("asyncio/base_events.py", "_run_once"),
]
SITE_STEPS = [
    ("client/site_worker.py", "handle"),
    ("client/site_worker.py", "_on_announcement"),
    ("common/wire.py", "query_from_proto"),
    ("common/query_digest.py", "query_digest"),
    ("client/site_worker.py", "_on_roster"),
    ("common/roster.py", "verify_roster"),
    ("client/site.py", "answer"),
    ("client/query_admission.py", "admit"),
    ("client/ledger.py", "check_charge"),
    ("common/kernels/linear_gradient.py", "compute"),
    ("common/noise.py", "gaussian_noise"),
    ("client/ledger.py", "charge"),
    ("common/secagg.py", "mask_share"),
    ("common/secagg.py", "mask_integrity_check"),
    ("client/ledger.py", "spent_by_job"),
]


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sites", type=int, default=3)
    parser.add_argument("--floats", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=60)
    return parser.parse_args(argv)


def _print_steps(title: str, profile: Path, steps: list[tuple[str, str]], calls: int) -> None:
    costs = per_call_costs(profile, steps, calls)
    print(f"\n{title}, profiled thread CPU per round:")
    for step in steps:
        if step in costs:
            print(f"  {costs[step]:7.2f} ms  {step[0]}:{step[1]}")


def main(argv: list[str] | None = None) -> int:
    arguments = _arguments(sys.argv[1:] if argv is None else argv)
    print(__doc__.split("\n\n")[0])
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        profiles = root / "profiles"
        profiles.mkdir()
        os.environ.update(child_environment(profiles))
        dump = install(profiles)
        net = networked(root, arguments.sites, arguments.floats, arguments.rounds)
        dump()
        # Every timed round, the warm-up rounds and the first one.
        calls = arguments.rounds + WARM_UP + 1
        print(f"\n{arguments.sites} sites, {arguments.floats} floats, {calls} rounds; "
              f"unprofiled-equivalent CPU per round (from /proc, profiler included): "
              f"sites {1e3 * net['site_cpu']:.1f} + coordinator "
              f"{1e3 * net['coordinator_cpu']:.1f} ms")
        own = profiles / f"{os.getpid()}.prof"
        deadline = time.monotonic() + 30
        while (len(list(profiles.glob("*.prof"))) < arguments.sites + 1
               and time.monotonic() < deadline):
            time.sleep(0.1)  # the site daemons write theirs as they exit
        _print_steps("coordinator", own, COORDINATOR_STEPS, calls)
        for index, site in enumerate(sorted(p for p in profiles.glob("*.prof") if p != own)):
            _print_steps(f"site {index + 1}", site, SITE_STEPS, calls)
    return 0


if __name__ == "__main__":
    sys.exit(main())
