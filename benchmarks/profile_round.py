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
[--rounds 60] [--keep DIR] [--timers]`` (about half a minute; ``--keep`` saves
the profiles for ``pstats``; ``--timers`` times the steps without a profiler,
:mod:`step_timers`, for their real CPU).
"""

from __future__ import annotations

# isort: off
import federation_processes  # noqa: F401 -- single-threaded BLAS, before numpy loads
# isort: on
import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import step_timers
from network_round import WARM_UP, networked
from thread_profiles import child_environment, install, per_call_costs

COORDINATOR_STEPS = [
    ("server/federation/network.py", "_attempt"),
    ("server/federation/network.py", "_fingerprint"),
    ("server/federation/rounds.py", "run_round"),
    ("common/secure/query_digest.py", "query_digest"),
    ("server/federation/rounds.py", "_aggregate"),
    ("server/store/rounds.py", "start_round"),
    ("server/store/rounds.py", "save_answer"),
    ("server/coordinator/federation_service.py", "_caller"),
    ("server/federation/rounds.py", "deliver_key"),
    ("server/federation/rounds.py", "deliver_share"),
    ("asyncio/base_events.py", "_run_once"),
]
SITE_STEPS = [
    ("client/daemon/worker.py", "handle"),
    ("client/daemon/worker.py", "_on_announcement"),
    ("common/wire/messages.py", "query_from_proto"),
    ("common/secure/query_digest.py", "query_digest"),
    ("client/daemon/worker.py", "_on_roster"),
    ("common/secure/roster.py", "verify_roster"),
    ("client/site.py", "answer"),
    ("client/query_admission.py", "admit"),
    ("client/ledger/privacy_ledger.py", "check_charge"),
    ("common/kernels/linear_gradient.py", "compute"),
    ("common/noise/floating.py", "gaussian_noise"),
    ("client/ledger/privacy_ledger.py", "charge"),
    ("common/secure/secagg.py", "mask_share"),
    ("common/secure/secagg.py", "mask_integrity_check"),
    ("client/ledger/privacy_ledger.py", "spent_by_job"),
]

# --timers: the same steps by module and qualified name, timed without a
# profiler (step_timers.py). Indented names run inside the one above them.
TIMED_COORDINATOR_STEPS = [
    ("privadapt.server.federation.network", "NetworkFederation._attempt"),
    ("privadapt.server.federation.network", "_fingerprint"),
    ("privadapt.server.federation.rounds", "RoundHub.run_round"),
    ("privadapt.common.wire.messages", "query_to_proto"),
    ("privadapt.common.wire.messages", "query_from_proto"),
    ("privadapt.common.secure.query_digest", "query_digest"),
    ("privadapt.server.federation.rounds", "RoundHub._aggregate"),
    ("privadapt.server.store.rounds", "RoundTable.start_round"),
    ("privadapt.server.store.rounds", "RoundTable.save_answer"),
    ("privadapt.server.store.arrays", "write_arrays"),
    ("privadapt.server.coordinator.federation_service", "FederationServicer.PublishKey"),
    ("privadapt.server.federation.rounds", "RoundHub.deliver_key"),
    ("privadapt.server.coordinator.federation_service", "FederationServicer.SubmitShare"),
    ("privadapt.server.federation.rounds", "RoundHub.deliver_share"),
]
TIMED_SITE_STEPS = [
    ("privadapt.client.daemon.main", "_read_or_mark"),
    ("privadapt.client.daemon.job_lanes", "JobLanes.submit"),
    ("privadapt.client.daemon.worker", "SiteWorker.handle"),
    ("privadapt.client.daemon.worker", "SiteWorker._on_announcement"),
    ("privadapt.common.wire.messages", "query_from_proto"),
    ("privadapt.common.secure.query_digest", "query_digest"),
    ("privadapt.client.daemon.round_progress", "RoundProgress.enter_round"),
    ("privadapt.common.secure.secagg", "RoundKeys.sign"),
    ("privadapt.client.daemon.worker", "SiteWorker._on_roster"),
    ("privadapt.common.secure.roster", "verify_roster"),
    ("privadapt.client.site", "Site.answer"),
    ("privadapt.client.query_admission", "QueryAdmission.admit"),
    ("privadapt.client.ledger.privacy_ledger", "PrivacyLedger.check_charge"),
    ("privadapt.common.kernels.linear_gradient", "LinearGradient.compute"),
    ("privadapt.common.noise.floating", "gaussian_noise"),
    ("privadapt.common.numerics.fixed_point", "FixedPointCodec.encode"),
    ("privadapt.common.numerics.fixed_point", "FixedPointCodec.encode_saturating"),
    ("privadapt.client.ledger.privacy_ledger", "PrivacyLedger.charge"),
    ("privadapt.client.ledger.privacy_ledger", "PrivacyLedger._publish_head"),
    ("privadapt.client.ledger.privacy_ledger", "PrivacyLedger.release"),
    ("privadapt.common.secure.secagg", "mask_share"),
    ("privadapt.common.secure.secagg", "mask_integrity_check"),
    ("privadapt.client.ledger.view", "LedgerView.spent_by_job"),
    ("privadapt.common.wire.messages", "fill_tensor"),
]


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sites", type=int, default=3)
    parser.add_argument("--floats", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--keep", type=Path, default=None,
                        help="copy every process's merged profile (<pid>.prof) here, to read "
                             "with pstats beyond the steps printed")
    parser.add_argument("--timers", action="store_true",
                        help="time the steps' thread CPU without a profiler (step_timers.py): "
                             "real figures, but only of the listed steps")
    return parser.parse_args(argv)


def _print_steps(title: str, profile: Path, steps: list[tuple[str, str]], calls: int) -> None:
    costs = per_call_costs(profile, steps, calls)
    print(f"\n{title}, profiled thread CPU per round:")
    for step in steps:
        if step in costs:
            print(f"  {costs[step]:7.2f} ms  {step[0]}:{step[1]}")


def _print_timed(title: str, path: Path, calls: int) -> None:
    print(f"\n{title}, per round: thread CPU, wall time (calls):")
    for key, (ms, count, wall) in step_timers.per_call_costs(path, calls).items():
        print(f"  {ms:7.2f} ms {wall:7.2f} ms  ({count:4.1f})  {key}")


def _timed(arguments: argparse.Namespace) -> int:
    """The --timers run: real CPU of the listed steps, next to each process's total."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        timers = root / "timers"
        timers.mkdir()
        os.environ.update(step_timers.child_environment(timers, TIMED_SITE_STEPS))
        dump = step_timers.install(timers, TIMED_COORDINATOR_STEPS)
        net = networked(root, arguments.sites, arguments.floats, arguments.rounds)
        dump()
        calls = arguments.rounds + WARM_UP + 1
        print(f"\n{arguments.sites} sites, {arguments.floats} floats, {calls} rounds; process "
              f"CPU per timed round (from /proc): sites {1e3 * net['site_cpu']:.1f} + "
              f"coordinator {1e3 * net['coordinator_cpu']:.1f} ms; {os.getloadavg()[0]:.1f} "
              "load average")
        own = timers / f"{os.getpid()}.json"
        deadline = time.monotonic() + 30
        while (len(list(timers.glob("*.json"))) < arguments.sites + 1
               and time.monotonic() < deadline):
            time.sleep(0.1)  # the site daemons write theirs as they exit
        _print_timed("coordinator", own, calls)
        for index, site in enumerate(sorted(p for p in timers.glob("*.json") if p != own)):
            _print_timed(f"site {index + 1}", site, calls)
    return 0


def main(argv: list[str] | None = None) -> int:
    arguments = _arguments(sys.argv[1:] if argv is None else argv)
    print(__doc__.split("\n\n")[0])
    if arguments.timers:
        return _timed(arguments)
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
        if arguments.keep is not None:
            arguments.keep.mkdir(parents=True, exist_ok=True)
            shutil.copy(own, arguments.keep / "coordinator.prof")
            for index, site in enumerate(sorted(p for p in profiles.glob("*.prof") if p != own)):
                shutil.copy(site, arguments.keep / f"site{index + 1}.prof")
    return 0


if __name__ == "__main__":
    sys.exit(main())
