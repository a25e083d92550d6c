"""``privadapt launch | status | result | cancel | sites`` against a running
coordinator with three site daemons (threads, real mutual-TLS gRPC)."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from privadapt.cli import main as cli
from privadapt.client.daemon.config import SiteConfig
from privadapt.client.daemon.main import SiteDaemon
from privadapt.common.proto import federation_pb2 as pb
from privadapt.server.coordinator.main import Coordinator, CoordinatorConfig
from tests.network_harness import (
    ThreadSites,
    in_process_coordinator,
    make_pki,
    operator_stub,
    write_coordinator_config,
    write_site,
)
from tests.synthetic_data import synthetic_dataset

SITES = ("site-a", "site-b", "site-c")


@pytest.fixture
def running(tmp_path):
    pki = make_pki(tmp_path / "pki", SITES)
    sites = ThreadSites()
    with in_process_coordinator(write_coordinator_config(tmp_path, pki)) as coordinator:
        for k, name in enumerate(SITES):
            sites.start(write_site(tmp_path, pki, name, synthetic_dataset(50, 4, seed=k),
                                   coordinator.port, epsilon_cap=50.0))
        operator = tmp_path / "operator.toml"
        operator.write_text(
            f'[operator]\ncoordinator = "127.0.0.1:{coordinator.port}"\n[tls]\n'
            f'cert = "pki/operator.crt"\nkey = "pki/operator.key"\nca = "pki/ca.crt"\n')
        try:
            yield coordinator, operator, pki
        finally:
            sites.stop()


def _job_file(tmp_path, job_id: str, iterations: int) -> str:
    path = tmp_path / f"{job_id}.toml"
    path.write_text(
        f'[job]\nid = "{job_id}"\nalgorithm = "noisy_gd"\nepsilon = 1.0\ndelta = 1e-6\n'
        f'sites = ["site-a", "site-b", "site-c"]\nseed = 3\n[hyperparameters]\n'
        f'loss = "logistic"\niterations = {iterations}\nlearning_rate = 1.0\nradius = 5.0\n'
        "clip_norm = 1.0\n")
    return str(path)


def test_launch_follow_status_result_and_sites(running, tmp_path, capsys):
    _, operator, _ = running
    config = ["--config", str(operator)]
    assert cli.main(["launch", _job_file(tmp_path, "cli-job", 5), "--follow", *config]) == 0
    out = capsys.readouterr().out
    assert "launched cli-job" in out and "succeeded" in out
    assert out.count("epsilon so far") == 5
    assert cli.main(["status", "cli-job", *config]) == 0
    status = capsys.readouterr().out
    assert "cli-job  noisy_gd  succeeded  rounds=5" in status and "sites=3" in status
    assert cli.main(["result", "cli-job", "--out", str(tmp_path / "out"), *config]) == 0
    assert "site-a: this job epsilon" in capsys.readouterr().out
    model = np.load(tmp_path / "out" / "model.npz")
    assert model["weights"].shape == (4,)
    report = json.loads((tmp_path / "out" / "privacy_report.json").read_text())
    assert sorted(report["sites"]) == list(SITES) and report["aborted_rounds"] == []
    assert cli.main(["sites", *config]) == 0
    listed = capsys.readouterr().out
    assert listed.count("connected") == 3
    # Each site's budget as its ledger reported it at registration (cap 50 at 1e-5).
    assert listed.count("at delta 1e-05 (the cap's), cap 50") == 3


def test_a_cancelled_job_keeps_its_privacy_report_and_its_reason(running, tmp_path, capsys):
    coordinator, operator, pki = running
    config = ["--config", str(operator)]
    assert cli.main(["launch", _job_file(tmp_path, "long-job", 5000), *config]) == 0
    stub = operator_stub(pki, coordinator.port)
    started = threading.Event()
    for status in stub.Watch(pb.StatusRequest(job_id="long-job"), timeout=30):
        if len(status.rounds) >= 3:
            started.set()
            break
    assert started.is_set()
    assert cli.main(["cancel", "long-job", "--reason", "wrong cohort", *config]) == 0
    assert "long-job: cancelled" in capsys.readouterr().out
    events = {e.event: e.detail for e in stub.Logs(pb.StatusRequest(job_id="long-job")).events}
    assert events["job_cancelled"] == "wrong cohort"
    # Every round it ran was charged: each site's charge is kept, without a model.
    assert cli.main(["result", "long-job", "--out", str(tmp_path / "o"), *config]) == 0
    text = capsys.readouterr().out
    assert "job 'long-job' cancelled: no model" in text
    assert all(f"{name}: this job epsilon" in text for name in SITES)
    assert not (tmp_path / "o" / "model.npz").exists()
    report = json.loads((tmp_path / "o" / "privacy_report.json").read_text())
    assert report["outcome"] == "cancelled" and sorted(report["sites"]) == list(SITES)
    assert all(site["releases"] >= 3 and site["job_epsilon"] > 0
               for site in report["sites"].values())
    page = (tmp_path / "o" / "report.html").read_text()
    assert "without a model" in page and page.count('class="site"') == 3
    assert cli.main(["result", "long-job", "--out", str(tmp_path / "j"), "--json",
                     *config]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["state"] == "cancelled" and document["model"] is None
    assert document["privacy_report"]["sites"] == report["sites"]


def test_operator_errors_are_one_line_without_traceback(running, tmp_path, capsys):
    _, operator, _ = running
    bad = tmp_path / "bad.toml"
    bad.write_text('[job]\nalgorithm = "no-such"\nepsilon = 1.0\ndelta = 1e-6\n')
    assert cli.main(["launch", str(bad), "--config", str(operator)]) == 2
    err = capsys.readouterr().err
    assert "unknown algorithm 'no-such'" in err and "Traceback" not in err
    assert cli.main(["status", "absent-job", "--config", str(operator)]) == 2
    assert "NOT_FOUND" in capsys.readouterr().err
    assert cli.main(["sites", "--config", str(tmp_path / "none.toml")]) == 2
    assert "none.toml" in capsys.readouterr().err


def test_insecure_flag_reaches_a_coordinator_started_with_insecure(tmp_path, capsys):
    pki = make_pki(tmp_path / "pki", SITES)
    config = CoordinatorConfig.from_toml(write_coordinator_config(tmp_path, pki))
    coordinator = Coordinator(config, insecure=True)
    coordinator.start()
    daemons = [SiteDaemon(SiteConfig.from_toml(write_site(
        tmp_path, pki, name, synthetic_dataset(50, 4, seed=k), coordinator.port,
        epsilon_cap=50.0)), insecure=True) for k, name in enumerate(SITES)]
    threads = [threading.Thread(target=daemon.run, daemon=True) for daemon in daemons]
    for thread in threads:
        thread.start()
    try:
        operator = tmp_path / "operator.toml"  # no [tls]: plaintext needs no certificate
        operator.write_text(f'[operator]\ncoordinator = "127.0.0.1:{coordinator.port}"\n')
        config_args = ["--config", str(operator), "--insecure"]
        job = _job_file(tmp_path, "plain-job", 2)
        assert cli.main(["launch", job, "--follow", *config_args]) == 0
        captured = capsys.readouterr()
        assert "launched plain-job" in captured.out and "succeeded" in captured.out
        assert "WARNING: --insecure" in captured.err
        assert cli.main(["status", "plain-job", *config_args]) == 0
        assert "plain-job  noisy_gd  succeeded  rounds=2" in capsys.readouterr().out
        assert cli.main(["result", "plain-job", "--out", str(tmp_path / "out"), *config_args]) == 0
        assert "site-a: this job epsilon" in capsys.readouterr().out
        assert cli.main(["sites", *config_args]) == 0
        assert capsys.readouterr().out.count("connected") == 3
        # Without the flag the same file names no certificate to present.
        assert cli.main(["sites", "--config", str(operator)]) == 2
        assert "missing required key [tls] cert" in capsys.readouterr().err
    finally:
        for daemon in daemons:
            daemon.stop()
        for thread in threads:
            thread.join(timeout=10)
        coordinator.stop(grace=0.5)


def test_json_output_of_status_sites_and_result(running, tmp_path, capsys):
    _, operator, _ = running
    config = ["--config", str(operator)]
    assert cli.main(["launch", _job_file(tmp_path, "json-job", 2), "--follow", *config]) == 0
    capsys.readouterr()
    assert cli.main(["status", "json-job", "--json", *config]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["jobs"][0]["job_id"] == "json-job"
    assert status["jobs"][0]["state"] == "JOB_STATE_SUCCEEDED"
    assert len(status["jobs"][0]["rounds"]) == 2
    assert cli.main(["sites", "--json", *config]) == 0
    sites = json.loads(capsys.readouterr().out)["sites"]
    assert sorted(s["site_name"] for s in sites) == list(SITES)
    assert all(s["connected"] for s in sites)
    assert all(s["budget"]["epsilon_cap"] == 50.0 and s["budget"]["accounting"] == "pld"
               for s in sites)
    assert all(s["num_records"] == 50 for s in sites)  # a number, not a string
    assert cli.main(["result", "json-job", "--out", str(tmp_path / "r"), "--json", *config]) == 0
    result = json.loads(capsys.readouterr().out)
    assert sorted(result["privacy_report"]["sites"]) == list(SITES)
    assert result["model"].endswith("model.npz")


def test_launch_with_id_and_set_overrides_the_file(running, tmp_path, capsys):
    _, operator, _ = running
    config = ["--config", str(operator)]
    job = _job_file(tmp_path, "file-id", 0)  # iterations = 0: refused, the id stays free
    assert cli.main(["launch", job, *config]) == 2
    assert "'iterations' must be an int in [1, inf), got 0" in capsys.readouterr().err
    assert cli.main(["launch", job, "--set", "iterations=2", *config]) == 0
    assert "launched file-id" in capsys.readouterr().out
    assert cli.main(["launch", job, "--id", "retry", "--set", "iterations=2", "--follow",
                     *config]) == 0
    assert "launched retry" in capsys.readouterr().out


def test_logs_planned_rounds_and_result_files_of_a_job(running, tmp_path, capsys):
    coordinator, operator, _ = running
    config = ["--config", str(operator)]
    assert cli.main(["launch", _job_file(tmp_path, "logged-job", 3), "--follow", *config]) == 0
    assert cli.main(["launch", _job_file(tmp_path, "other-job", 2), "--follow", *config]) == 0
    capsys.readouterr()
    assert cli.main(["status", "logged-job", "--json", *config]) == 0
    assert json.loads(capsys.readouterr().out)["jobs"][0]["planned_rounds"] == 3
    assert cli.main(["logs", "logged-job", *config]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("logged-job  noisy_gd  succeeded  rounds=3")
    stored = [e.event for e in coordinator.store.audit_log("logged-job")]
    assert [line.split()[2] for line in lines[1:1 + len(stored)]] == stored
    assert "job_launched" in stored and "job_succeeded" in stored
    assert sum(line.lstrip().startswith("round ") for line in lines) == 3
    assert cli.main(["logs", "logged-job", "--json", *config]) == 0
    log = json.loads(capsys.readouterr().out)
    assert [e["event"] for e in log["events"]] == stored
    out = tmp_path / "results"
    assert cli.main(["result", "logged-job", "--out", str(out), *config]) == 0
    with np.load(out / "model.npz", allow_pickle=False) as model:
        assert str(model["job_id"]) == "logged-job"
        # No public sample: the sites' .npz arrays agree on placeholder names.
        assert list(model["feature_names"]) == ["x0", "x1", "x2", "x3"]
        assert str(model["feature_names_source"]) == (
            "placeholder: the parties hold plain arrays without a schema file, which name no "
            "features")
        digest = coordinator.registry.session("site-a").registration.schema.digest
        assert str(model["schema_digest"]) == digest
    capsys.readouterr()
    assert cli.main(["result", "other-job", "--out", str(out), *config]) == 2
    assert "already holds the result of job 'logged-job'" in capsys.readouterr().err
    with np.load(out / "model.npz", allow_pickle=False) as model:
        assert str(model["job_id"]) == "logged-job"  # untouched


def test_launch_json_prints_the_job_id_the_plan_or_the_final_status(running, tmp_path, capsys):
    _, operator, _ = running
    config = ["--config", str(operator), "--json"]
    assert cli.main(["launch", _job_file(tmp_path, "json-plan", 2), "--dry-run", *config]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["dry_run"] is True and "privacy plan: 2 release(s)" in plan["plan"]
    assert cli.main(["launch", _job_file(tmp_path, "json-launch", 2), "--follow", *config]) == 0
    launched = json.loads(capsys.readouterr().out)
    assert launched["job_id"] == "json-launch"
    assert launched["status"]["state"] == "JOB_STATE_SUCCEEDED"
    assert [r["round"] for r in launched["status"]["rounds"]] == [1, 2]
    assert cli.main(["launch", _job_file(tmp_path, "json-quick", 1), *config]) == 0
    assert json.loads(capsys.readouterr().out) == {"job_id": "json-quick"}
