"""Launch checks against real site daemons (mutual TLS, in-process threads):
schema agreement, delta against the sites' public sizes, dry runs, and a
failed launch leaving its job id free."""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from privadapt.cli import main as cli
from privadapt.client.policy import SitePolicy
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.wire.messages import params_to_proto
from privadapt.simulation.local_deployment import LOCALHOST, LocalDeployment
from tests.network_harness import (
    ThreadSites,
    in_process_coordinator,
    make_pki,
    operator_stub,
    wait_for_sites,
    watch_until_done,
    write_coordinator_config,
)
from tests.synthetic_data import synthetic_dataset

SITES = ("site-a", "site-b")
SCHEMA = """label = "y"
numeric = ["a"]
intercept = false
[categorical]
c = {categories}
[label_map]
no = {no}
yes = {yes}
"""
AGREEING = SCHEMA.format(categories='["x", "y"]', no=-1.0, yes=1.0)
FLIPPED = SCHEMA.format(categories='["y", "x"]', no=1.0, yes=-1.0)
HYPER = {"loss": "logistic", "iterations": 2, "learning_rate": 1.0, "radius": 5.0,
         "clip_norm": 1.0}


@pytest.fixture
def federation(tmp_path):
    """start(schema of site-b) -> operator stub; site-a always has AGREEING."""
    pki = make_pki(tmp_path / "pki", SITES)
    config = write_coordinator_config(tmp_path, pki, site_wait_timeout_s=1.0)
    sites = ThreadSites()
    with in_process_coordinator(config) as coordinator:
        def start(schema_b: str = AGREEING):
            deployment = LocalDeployment(tmp_path, pki)
            for k, (name, text) in enumerate(zip(SITES, (AGREEING, schema_b), strict=True)):
                data = synthetic_dataset(60 + 20 * k, 3, seed=k)
                path = tmp_path / f"{name}.npz"
                np.savez(path, features=data.features, labels=data.labels)
                schema = tmp_path / f"{name}.schema.toml"
                schema.write_text(text)
                policy = SitePolicy(name, 10.0, 1e-5, min_participants=2)
                sites.start(deployment.write_site(policy, path, f"{LOCALHOST}:{coordinator.port}",
                                                  schema=schema))
            stub = operator_stub(pki, coordinator.port)
            wait_for_sites(stub, SITES)
            return stub
        try:
            yield start, tmp_path, coordinator.port
        finally:
            sites.stop()


def _spec(delta: float = 1e-6, sites=SITES) -> pb.JobSpec:
    spec = pb.JobSpec(algorithm="noisy_gd", epsilon=1.0, delta=delta, sites=sites, seed=1)
    params_to_proto(HYPER, spec.hyperparameters)
    return spec


def _refusal(stub, spec, job_id="j", dry_run=False) -> str:
    with pytest.raises(grpc.RpcError) as refused:
        stub.Launch(pb.LaunchRequest(spec=spec, job_id=job_id, dry_run=dry_run), timeout=10)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    return refused.value.details()


def test_a_site_with_a_flipped_label_map_and_reordered_categories_is_refused(federation):
    start, _, _ = federation
    stub = start(FLIPPED)
    message = _refusal(stub, _spec())
    assert "compared with site 'site-a': site 'site-b' differs in 'categorical.c' " \
           "(also: 'label_map'" in message
    # Refused at launch: nothing stored, the id is still free.
    assert not stub.Status(pb.StatusRequest(), timeout=10).jobs
    assert "differs in 'categorical.c'" in _refusal(stub, _spec(), dry_run=True)


def test_delta_above_one_over_the_smallest_site_is_refused_naming_it(federation):
    start, _, _ = federation
    stub = start()
    spec = _spec(delta=0.02)
    spec.allow_large_delta = True  # lifts the 1e-3 rule, not the 1/n one
    message = _refusal(stub, spec)
    assert "delta = 0.02 is not below 1/n = 0.0167 of site 'site-a' (n = 60 records" in message


def test_dry_run_prints_the_checks_and_stores_nothing(federation, capsys):
    start, tmp_path, port = federation
    stub = start()
    reply = stub.Launch(pb.LaunchRequest(spec=_spec(), job_id="plan", dry_run=True), timeout=10)
    assert not reply.job_id and "dry run of plan: noisy_gd" in reply.plan
    assert "site-a" in reply.plan and "n=60" in reply.plan and "connected" in reply.plan
    assert not stub.Status(pb.StatusRequest(), timeout=10).jobs
    operator = tmp_path / "operator.toml"
    operator.write_text(f'[operator]\ncoordinator = "127.0.0.1:{port}"\n[tls]\n'
                        'cert = "pki/operator.crt"\nkey = "pki/operator.key"\nca = "pki/ca.crt"\n')
    job = tmp_path / "job.toml"
    job.write_text('[job]\nalgorithm = "noisy_gd"\nepsilon = 1.0\ndelta = 1e-6\n'
                   'sites = ["site-a", "site-b"]\n[hyperparameters]\nloss = "logistic"\n'
                   "iterations = 0\nlearning_rate = 1.0\nradius = 5.0\nclip_norm = 1.0\n")
    args = ["launch", str(job), "--config", str(operator), "--id", "cli-plan"]
    assert cli.main([*args, "--dry-run"]) == 2
    assert "'iterations' must be an int in [1, inf), got 0" in capsys.readouterr().err
    assert cli.main([*args, "--dry-run", "--set", "iterations=2"]) == 0
    assert "dry run of cli-plan" in capsys.readouterr().out
    assert not stub.Status(pb.StatusRequest(), timeout=10).jobs


def test_a_job_that_failed_before_its_first_round_frees_its_id(federation):
    start, _, _ = federation
    stub = start()
    spec = _spec(sites=(*SITES, "ghost"))
    spec.min_participants = 3
    job_id = stub.Launch(pb.LaunchRequest(spec=spec, job_id="retry"), timeout=10).job_id
    failed = watch_until_done(stub, job_id)
    assert failed.state == pb.JOB_STATE_FAILED and "ghost" in failed.message
    job_id = stub.Launch(pb.LaunchRequest(spec=_spec(), job_id="retry"), timeout=10).job_id
    assert watch_until_done(stub, job_id).state == pb.JOB_STATE_SUCCEEDED


def test_sites_report_their_budget_and_the_dry_run_prints_the_plan(federation):
    start, _, _ = federation
    stub = start()
    listed = {s.site_name: s for s in stub.ListSites(pb.ListSitesRequest(), timeout=10).sites}
    for site in listed.values():
        assert (site.budget.epsilon_cap, site.budget.delta_cap, site.budget.epsilon_spent,
                site.budget.accounting) == (10.0, 1e-5, 0.0, "pld")
        assert site.adjacency == "replace_one"
    reply = stub.Launch(pb.LaunchRequest(spec=_spec(), job_id="plan", dry_run=True), timeout=10)
    assert "privacy plan: 2 release(s)" in reply.plan
    assert "releases 1-2 (2x): kernel linear_gradient, secure_sum, gaussian z=" in reply.plan
    assert "blocks=[[2.00" in reply.plan  # sensitivity 2C plus rounding, then sigma
    assert "a preview: each site's own ledger" in reply.plan
    job_epsilon = {}
    for name in SITES:
        (line,) = [row for row in reply.plan.splitlines() if row.strip().startswith(name)
                   and "this job" in row]
        job_epsilon[name] = float(line.split("this job ")[1].split()[0])
        assert "at delta 1e-05 (PLD, replace_one); spent 0 of cap 10, left 10" in line
    # The job runs and each ledger charges what the plan previewed.
    job_id = stub.Launch(pb.LaunchRequest(spec=_spec(), job_id="ran"), timeout=10).job_id
    assert watch_until_done(stub, job_id).state == pb.JOB_STATE_SUCCEEDED
    reports = stub.Result(pb.ResultRequest(job_id=job_id), timeout=10).privacy
    assert len(reports) == 2
    for report in reports:
        # The only job so far: its total is this job's epsilon at the cap's delta.
        assert report.total_delta == 1e-5
        assert report.total_epsilon == pytest.approx(job_epsilon[report.site_name], rel=1e-3)


def test_a_launch_over_a_sites_remaining_budget_is_refused_naming_it(federation):
    start, _, _ = federation
    stub = start()
    spec = _spec()
    spec.epsilon = 25.0  # above both sites' cap of 10, also at their delta 1e-5
    message = _refusal(stub, spec)
    assert "would exceed the remaining privacy budget of 2 site(s)" in message
    assert "site 'site-a' has epsilon 10 left of its cap 10 at delta 1e-05" in message
    assert "site 'site-b'" in message
    assert not stub.Status(pb.StatusRequest(), timeout=10).jobs
    assert "site 'site-a' has epsilon 10 left" in _refusal(stub, spec, dry_run=True)


def test_a_slow_plan_refuses_the_job_before_its_first_round_instead(federation, monkeypatch):
    """A plan not ready when the launch call returns (the adaptation
    estimators' warm start) is waited for by the job before any key is
    published: the job fails naming the site, no round ran, the id is free."""
    import threading

    from privadapt.server.jobs import manager as jobs

    # The plan is held until the launch call has returned: "not ready in
    # time" by construction, not by a race against a fast plan. (plan_job is
    # looked up at each call; the coordinator already exists.)
    launched = threading.Event()
    plan = jobs.plan_job

    def slow_plan(*args, **kwargs):
        launched.wait(30)
        return plan(*args, **kwargs)

    monkeypatch.setattr(jobs, "plan_job", slow_plan)
    monkeypatch.setattr("privadapt.server.jobs.launch_plans.PLAN_WAIT_S", 0.0)
    start, _, _ = federation
    stub = start()
    spec = _spec()
    spec.epsilon = 25.0
    job_id = stub.Launch(pb.LaunchRequest(spec=spec, job_id="late"), timeout=10).job_id
    launched.set()
    failed = watch_until_done(stub, job_id)
    assert failed.state == pb.JOB_STATE_FAILED and not failed.rounds
    assert "site 'site-a' has epsilon 10 left of its cap 10" in failed.message
    job_id = stub.Launch(pb.LaunchRequest(spec=_spec(), job_id="late"), timeout=10).job_id
    assert watch_until_done(stub, job_id).state == pb.JOB_STATE_SUCCEEDED
    assert launched.is_set()
