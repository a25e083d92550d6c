"""A site's registered ``max_job_work`` is checked at launch and dry run: a
job whose planned queries together would cost a site more work than its
policy allows one job is refused naming the site and the figure, instead of
being refused by the site in the middle of the job."""

from __future__ import annotations

import pytest

from privadapt.client.policy import SitePolicy
from privadapt.common.errors import ConfigError
from privadapt.common.proto import federation_pb2 as pb
from privadapt.server.jobs.launch_checks import check_job_work
from tests.server.jobs.test_launch_query_work import DIM, ITERATIONS, WORK, _plan, _sessions


def _with_job_cap(sessions, cap: float):
    for session in sessions:
        if session.name == "site-b":
            session.registration.terms.max_job_work = cap
    return sessions


def test_a_job_whose_rounds_together_exceed_a_sites_job_cap_is_refused_naming_it():
    # Each query fits; twenty of them do not.
    with pytest.raises(ConfigError, match=r"site 'site-b' spends at most 2\.4e\+04 "
                                          r"multiply-adds on one job .*max_job_work"):
        _plan(_with_job_cap(_sessions(0.0), WORK * ITERATIONS / 5))


def test_a_job_within_the_job_cap_is_planned():
    plan = _plan(_with_job_cap(_sessions(0.0), WORK * (ITERATIONS + 1)))
    assert len(plan.releases) <= ITERATIONS + 1


def test_an_add_remove_site_is_checked_by_the_site_itself():
    releases = _plan(_sessions(0.0)).releases
    check_job_work(releases, _with_job_cap(_sessions(0.0, "add_remove_one"), 1.0), DIM)


def test_the_daemon_registers_its_job_cap():
    policy = SitePolicy("s", 1.0, 1e-5, max_job_work=3e10)
    terms = pb.SitePolicyTerms(max_job_work=policy.max_job_work)
    assert pb.SitePolicyTerms.FromString(terms.SerializeToString()).max_job_work == 3e10
