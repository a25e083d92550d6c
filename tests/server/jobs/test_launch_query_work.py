"""A site's registered ``max_query_work`` is checked at launch and dry run:
a job whose planned queries would cost a site more multiply-adds than its
policy allows (by the kernel's public estimate at the site's public n) is
refused naming the site, instead of failing at its first round."""

from __future__ import annotations

import pytest

from privadapt.client.policy import SitePolicy
from privadapt.common.errors import ConfigError
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.wire.messages import params_to_proto
from privadapt.server.coordinator.site_registry import SiteRegistry
from privadapt.server.jobs.launch_checks import check_query_work, plan_job
from privadapt.server.jobs.spec import hyperparameters

SITES = ("site-a", "site-b")
RECORDS, DIM, ITERATIONS = 1000, 3, 20
# noisy_gd's linear_gradient: one pass, n (d + d) multiply-adds per query.
WORK = RECORDS * (DIM + DIM)


def _sessions(cap_b: float, adjacency: str = "replace_one"):
    registry = SiteRegistry()
    for name in SITES:
        cap = cap_b if name == "site-b" else 0.0
        registry.register(name, pb.RegisterRequest(
            site_name=name, num_features=DIM, adjacency=adjacency,
            num_records=RECORDS if adjacency == "replace_one" else 0,
            terms=pb.SitePolicyTerms(min_participants=2, max_query_work=cap),
            budget=pb.SiteBudget(epsilon_cap=10.0, delta_cap=1e-5, epsilon_spent=0.0,
                                 accounting="pld")))
    return registry.sessions()


def _spec() -> pb.JobSpec:
    spec = pb.JobSpec(algorithm="noisy_gd", epsilon=2.0, delta=1e-6, sites=SITES,
                      min_participants=2)
    params_to_proto({"iterations": ITERATIONS, "radius": 5.0, "loss": "logistic",
                     "learning_rate": 0.5, "clip_norm": 1.0}, spec.hyperparameters)
    return spec


def _plan(sessions):
    spec = _spec()
    return plan_job(spec, hyperparameters(spec), sessions, None)


def test_the_planned_queries_match_the_estimate_the_site_makes():
    plan = _plan(_sessions(0.0))
    assert {release.kernel for release in plan.releases} == {"linear_gradient"}


def test_a_job_over_a_sites_registered_cap_is_refused_naming_it():
    with pytest.raises(ConfigError, match=r"site 'site-b' answers only queries of at most "
                                          r".*max_query_work.*linear_gradient"):
        _plan(_sessions(WORK / 2))


def test_a_job_within_the_cap_is_planned():
    assert _plan(_sessions(WORK)).releases


def test_an_add_remove_site_keeps_n_private_and_checks_at_the_round():
    # n is private (registered as 0): the coordinator cannot estimate; the
    # site's own admission still refuses (tests/client/test_query_work_limit.py).
    releases = _plan(_sessions(0.0)).releases
    check_query_work(releases, _sessions(WORK / 2, "add_remove_one"), DIM)


def test_the_daemon_registers_its_policy_cap():
    # The terms a daemon sends carry the cap (0 when the policy has none).
    policy = SitePolicy("s", 1.0, 1e-5, max_query_work=1e9)
    terms = pb.SitePolicyTerms(max_query_work=policy.max_query_work or 0.0)
    assert pb.SitePolicyTerms.FromString(terms.SerializeToString()).max_query_work == 1e9
