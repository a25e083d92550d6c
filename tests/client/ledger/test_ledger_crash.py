"""A site killed (SIGKILL) at random points of 1,000 charges never loses a
charge for a query it answered: the child charges, then
"releases" by printing the query id; every printed id must be in the ledger,
and every restart must open the ledger (a head file one charge behind is the
legitimate crash case)."""

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.common.mechanisms import LaplaceMechanism

TOTAL = 1000
# Seconds a run of at most 150 charges may take before it counts as hung.
HANG_GUARD_S = 300
_SITE = textwrap.dedent("""
    import sys
    from privadapt.client.ledger.privacy_ledger import PrivacyLedger
    from privadapt.client.policy import SitePolicy
    from privadapt.common.errors import ReplayError
    from privadapt.common.mechanisms import LaplaceMechanism
    ledger = PrivacyLedger(sys.argv[1], SitePolicy("st-mary", 1e6, 0.0))
    print("ready", flush=True)
    for i in range(int(sys.argv[2]), int(sys.argv[3])):
        try:
            ledger.charge("job", f"q{i}", LaplaceMechanism(1.0, 100.0))
        except ReplayError:
            continue  # charged, but killed before it was released: never answered
        print(f"q{i}", flush=True)  # the release
""")


@pytest.mark.slow
def test_no_answered_query_is_missing_after_random_sigkills(tmp_path):
    # SIGKILL loses no page cache, so memory-backed storage tests the same
    # thing as a disk, without a disk's fsync time (1,000 charges in the budget).
    memory = Path("/dev/shm")
    directory = Path(tempfile.mkdtemp(dir=memory)) if memory.is_dir() else tmp_path
    try:
        _kill_and_restart(directory / "site.db")
    finally:
        if directory != tmp_path:
            shutil.rmtree(directory, ignore_errors=True)


def _kill_and_restart(db):
    PrivacyLedger(db, SitePolicy("st-mary", 1e6, 0.0), create=True).close()
    rng = random.Random(12)
    answered: list[str] = []
    restarts = 0
    finished = False
    # Every run but the last answers at least 20 queries before its kill, so
    # the charges end within this many runs: the loop's bound is work, not time.
    for _ in range(TOTAL // 20 + 1):
        start = int(answered[-1][1:]) + 1 if answered else 0
        child = subprocess.Popen([sys.executable, "-c", _SITE, str(db), str(start), str(TOTAL)],
                                 stdout=subprocess.PIPE, text=True)
        # Only a hang guard (a child stuck in a charge would block the reads
        # below for ever); it ends the run as a failure, never as a pass.
        hang_guard = threading.Timer(HANG_GUARD_S, child.kill)
        hang_guard.start()
        try:
            assert child.stdout.readline().strip() == "ready", \
                "the ledger must reopen after a kill"
            for _ in range(rng.randint(20, 150)):
                line = child.stdout.readline().strip()
                if not line:
                    finished = True  # the child charged up to TOTAL and exited
                    break
                answered.append(line)
            if not finished:
                time.sleep(rng.random() * 0.01)  # kill somewhere inside a later charge
                os.kill(child.pid, signal.SIGKILL)
                answered.extend(line.strip() for line in child.stdout if line.strip())
                restarts += 1
            code = child.wait()
        finally:
            hang_guard.cancel()
        if finished:
            assert code == 0, f"the last run ended with {code}, not by charging up to {TOTAL}"
            break
    assert finished and restarts >= 3
    with PrivacyLedger(db, SitePolicy("st-mary", 1e6, 0.0)) as ledger:
        charged = {c.query_id for c in ledger.charges()}
        assert set(answered) <= charged
        assert ledger.spent().epsilon == pytest.approx(len(charged) * 0.01)
        assert all(c.mechanism == LaplaceMechanism(1.0, 100.0) for c in ledger.charges())
    print(f"{len(answered)} answered, {len(charged)} charged, {restarts} restarts")
