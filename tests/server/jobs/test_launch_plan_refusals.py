"""What a job's plan on stand-ins finds is refused at launch and dry run, not
at run time: a seed-001 baseline job that also sets ``rho`` (its
estimator refuses two budgets), and a ``noise = "discrete"`` k-means job is
planned on the job's fixed-point grid instead of "no plan"."""

from __future__ import annotations

import pytest

from privadapt.common.errors import ConfigError
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.wire.messages import params_to_proto
from privadapt.server.coordinator.site_registry import SiteRegistry
from privadapt.server.jobs.launch_checks import dry_run_plan, plan_job
from privadapt.server.jobs.spec import hyperparameters
from privadapt.server.store import SiteRecord

SITES = ("site-a", "site-b")


def _sessions():
    registry = SiteRegistry()
    for name in SITES:
        registry.register(name, pb.RegisterRequest(
            site_name=name, num_features=3, adjacency="add_remove_one",
            budget=pb.SiteBudget(epsilon_cap=10.0, delta_cap=1e-5, epsilon_spent=0.0,
                                 accounting="pld")))
    return registry.sessions()


def _spec(algorithm: str, hyper: dict) -> pb.JobSpec:
    spec = pb.JobSpec(algorithm=algorithm, epsilon=2.0, delta=1e-6, sites=SITES,
                      min_participants=2)
    params_to_proto(hyper, spec.hyperparameters)
    return spec


@pytest.mark.parametrize("algorithm, hyper", [
    ("dp_lloyd_kmeans", {"n_clusters": 5, "iterations": 2, "rho": 1.0}),
    ("dp_mixture", {"n_components": 4, "iterations": 3, "n_samples": 20, "rho": 1.0}),
])
def test_a_baseline_job_that_sets_rho_is_refused_by_its_plan(algorithm, hyper):
    spec = _spec(algorithm, hyper)
    with pytest.raises(ConfigError, match=r"^job: .*give exactly one of 'epsilon'.*"
                       r"leave 'rho' out of its hyperparameters"):
        plan_job(spec, hyperparameters(spec), _sessions(), None)


def test_a_discrete_kmeans_job_is_planned_on_the_jobs_grid():
    spec = _spec("dp_lloyd_kmeans", {"n_clusters": 5, "iterations": 2, "noise": "discrete"})
    plan = plan_job(spec, hyperparameters(spec), _sessions(), None)
    assert not plan.note and len(plan.releases) == 2
    assert all(p.job_epsilon == pytest.approx(2.0, rel=1e-2) and p.job_epsilon <= 2.0
               for p in plan.previews)
    records = [SiteRecord(name, 0, 3, (), "", None, 0.0, 0.0) for name in SITES]
    text = dry_run_plan(spec, "", records, set(SITES), None, plan)
    assert "no plan" not in text
    assert ("releases 1-2 (2x): kernel nearest_target_sums, secure_sum, discrete laplace eps=1 "
            in text) and "fractional_bits=32" in text
