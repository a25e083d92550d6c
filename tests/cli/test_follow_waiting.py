"""``--follow`` while a job waits for a site: which site, since when and until
when, every few seconds, instead of silence until the job fails; and the ETA
of the progress bar."""

from __future__ import annotations

import io
import re
from contextlib import redirect_stdout

from privadapt.cli import main as cli
from privadapt.common.proto import federation_pb2 as pb
from privadapt.server.federation import site_wait
from privadapt.server.jobs.progress import Pace, duration_text, progress_bar
from privadapt.simulation.local_deployment import LocalDeployment
from tests.network_harness import (
    ThreadSites,
    in_process_coordinator,
    make_pki,
    operator_stub,
    wait_for_sites,
    write_coordinator_config,
    write_site,
)
from tests.synthetic_data import synthetic_dataset

# Notices this often, so that several come well before the job stops waiting;
# what each says after how long is checked on a stepped clock
# (tests/server/federation/test_site_wait.py), not here on a real one.
NOTICE_S = 0.5
WAIT_S = 4.0
WAITING = re.compile(r"  waiting \d+ s for site\(s\) site-late \(not taking part since "
                     r"\d\d:\d\d:\d\d UTC\), at most until \d\d:\d\d:\d\d UTC "
                     rf"\({WAIT_S:.0f} s in all\)$")


def test_follow_says_every_few_seconds_which_site_the_job_waits_for(tmp_path, monkeypatch):
    monkeypatch.setattr(site_wait, "NOTICE_INTERVAL_S", NOTICE_S)
    pki = make_pki(tmp_path / "pki", ("site-a", "site-late"))
    sites = ThreadSites()
    coordinator_config = write_coordinator_config(tmp_path, pki, site_wait_timeout_s=WAIT_S)
    with in_process_coordinator(coordinator_config) as coordinator:
        sites.start(write_site(tmp_path, pki, "site-a", synthetic_dataset(40, 3, seed=1),
                               coordinator.port))
        # Connected before the launch: the only site the job waits for is the late one.
        wait_for_sites(operator_stub(pki, coordinator.port), ["site-a"])
        operator = LocalDeployment(tmp_path, pki).write_operator(f"127.0.0.1:{coordinator.port}")
        job = tmp_path / "job.toml"
        job.write_text(
            '[job]\nid = "waits"\nalgorithm = "noisy_gd"\nepsilon = 1.0\ndelta = 1e-6\n'
            'sites = ["site-a", "site-late"]\nmin_participants = 2\nseed = 3\n'
            '[hyperparameters]\nloss = "logistic"\niterations = 1\nlearning_rate = 1.0\n'
            "radius = 5.0\nclip_norm = 1.0\n")
        out = io.StringIO()
        try:
            with redirect_stdout(out):
                assert cli.main(["launch", str(job), "--follow", "--config", str(operator)]) == 1
        finally:
            sites.stop()
        lines = out.getvalue().splitlines()
        waiting = [line for line in lines if line.startswith("  waiting")]
        # Said more than once, each time naming the late site and the deadline.
        assert len(waiting) >= 2, lines
        assert all(WAITING.match(line) for line in waiting), waiting
        assert lines[-1].startswith("waits  noisy_gd  failed") and "site-late" in lines[-1]
        events = [e.event for e in coordinator.store.audit_log("waits")]
        assert events.count("waiting_for_sites") == 1


def _status(done: int, planned: int = 10) -> pb.JobStatus:
    status = pb.JobStatus(job_id="j", state=pb.JOB_STATE_RUNNING, planned_rounds=planned)
    for k in range(done):
        status.rounds.add(round=k + 1, epsilon_so_far=0.1)
    return status


def test_the_progress_bar_shows_the_time_left_at_the_pace_so_far():
    pace = Pace()
    assert pace.eta(_status(1), now=100.0) is None  # one observation sets the pace's start
    assert pace.eta(_status(3), now=110.0) == 7 * 5.0  # 2 rounds in 10 s, 7 to go
    bar = progress_bar(_status(3), width=10, eta_s=35.0)
    assert bar.startswith("[###.......]  3/10 rounds  ETA 35s  job epsilon so far 0.1")
    assert [duration_text(s) for s in (4.4, 185, 7620)] == ["4s", "3m05s", "2h07m"]
