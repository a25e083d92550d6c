"""A job that a site's own policy would refuse every round of is refused at
launch (and at its start), naming the site, before any key is published: its
``peers`` leave out another of the job's sites, its ``min_participants`` is
above the job's number of sites, its ``collusion_tolerance`` is above the
job's, or the job queries a kernel it does not allow.
The terms travel checked at registration."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from privadapt.client.daemon.main import SiteDaemon
from privadapt.client.policy import SitePolicy
from privadapt.client.query_admission import QueryAdmission
from privadapt.common.data.schema_digest import SchemaDigest
from privadapt.common.errors import ConfigError, QueryRefusedError, WireError
from privadapt.common.federation import Query, ReleaseForm
from privadapt.common.kernels import get_kernel
from privadapt.common.mechanisms import GaussianMechanism
from privadapt.common.proto import federation_pb2 as pb
from privadapt.server.coordinator.site_messages import check_register_request
from privadapt.server.coordinator.site_registry import SiteRegistry
from privadapt.server.federation.planning import PlannedRelease
from privadapt.server.jobs.launch_checks import check_kernels_allowed, check_site_policies

SITES = ["st-mary", "st-john", "northside"]


def _registration(name: str, peers=None, min_participants: int = 2,
                  kernels: tuple[str, ...] = ()) -> pb.RegisterRequest:
    return pb.RegisterRequest(
        site_name=name, num_features=3, kernels=list(kernels),
        terms=pb.SitePolicyTerms(peers_listed=peers is not None, peers=peers or [],
                                 min_participants=min_participants))


def test_a_peers_list_that_leaves_out_a_job_site_is_refused_naming_both():
    spec = pb.JobSpec(algorithm="noisy_gd", sites=SITES)
    registrations = {"st-mary": _registration("st-mary", peers=["st-john"]),
                     "st-john": _registration("st-john")}
    with pytest.raises(ConfigError, match=r"site 'st-mary' masks only with its peers \(st-john\) "
                       r"and would refuse every round with 'northside'"):
        check_site_policies(spec, registrations)
    # A job without the stranger passes; so does a site that lists every other site.
    check_site_policies(pb.JobSpec(sites=["st-mary", "st-john"]), registrations)
    check_site_policies(spec, {"st-mary": _registration("st-mary",
                                                        peers=["st-john", "northside"])})


def test_a_minimum_above_the_jobs_sites_is_refused():
    spec = pb.JobSpec(algorithm="noisy_gd", sites=SITES[:2])
    with pytest.raises(ConfigError, match=r"site 'st-john' answers only rounds of at least 3 "
                       r"sites .* the job names 2"):
        check_site_policies(spec, {"st-john": _registration("st-john", min_participants=3)})


def _site_registration(policy: SitePolicy) -> pb.RegisterRequest:
    """What a real site daemon registers for ``policy`` (no daemon started)."""
    daemon = SimpleNamespace(
        site=SimpleNamespace(policy=policy, name=policy.site_name, num_records=50, dim=3),
        schema_digest=SchemaDigest.of(None, 3), budget=pb.SiteBudget)
    return SiteDaemon._registration(daemon)


def test_a_collusion_tolerance_below_a_sites_requirement_is_refused_naming_site_and_field():
    policy = SitePolicy("st-mary", 3.0, 1e-5, collusion_tolerance=1, min_participants=2)
    registrations = {"st-mary": _site_registration(policy),
                     "st-john": _registration("st-john")}
    assert registrations["st-mary"].terms.collusion_tolerance == 1
    spec = pb.JobSpec(algorithm="noisy_gd", sites=SITES[:2], collusion_tolerance=0)
    with pytest.raises(ConfigError, match=r"site 'st-mary' answers only secure sums that "
                       r"tolerate at least 1 colluding site\(s\) \(its policy's "
                       r"collusion_tolerance\) and the job's collusion_tolerance is 0: set "
                       r"\[job\] collusion_tolerance = 1"):
        check_site_policies(spec, registrations)
    # What the launch check foresees is what the site does to every secure sum.
    kernel = get_kernel("record_count")
    params = kernel.Params.from_wire({}, 3)
    query = Query("job", "q", "record_count", {},
                  kernel.mechanism(params, math.inf, policy.adjacency, dim=3),
                  collusion_tolerance=0, form=ReleaseForm.SECURE_SUM)
    with pytest.raises(QueryRefusedError, match="policy requires t >= 1"):
        QueryAdmission(policy, 3, 50).admit(query, 2)
    check_site_policies(pb.JobSpec(algorithm="noisy_gd", sites=SITES[:2],
                                   collusion_tolerance=1), registrations)


def test_a_site_without_terms_is_not_checked():
    check_site_policies(pb.JobSpec(sites=SITES),
                        {"st-mary": pb.RegisterRequest(site_name="st-mary")})


def test_a_kernel_a_site_does_not_allow_is_refused_naming_the_site():
    registry = SiteRegistry()
    strict = registry.register("st-mary", _registration("st-mary", kernels=("second_moments",)))
    lenient = registry.register("st-john", _registration("st-john"))
    release = PlannedRelease("linear_gradient", {}, GaussianMechanism.single(1.0, 2.0),
                             ReleaseForm.SECURE_SUM)
    with pytest.raises(ConfigError, match=r"site 'st-mary' allows only \['second_moments'\], and "
                       r"the job queries \['linear_gradient'\]"):
        check_kernels_allowed([release], [strict, lenient])
    check_kernels_allowed([release], [lenient])


@pytest.mark.parametrize("terms, message", [
    (pb.SitePolicyTerms(peers_listed=False, peers=["a"]), "peers_listed is false"),
    (pb.SitePolicyTerms(peers_listed=True, peers=["a", "a"]), "twice"),
    (pb.SitePolicyTerms(peers_listed=True, peers=["x" * 10_000]), "characters"),
    (pb.SitePolicyTerms(min_participants=10**6), "min_participants"),
])
def test_registered_terms_are_checked(terms, message):
    request = pb.RegisterRequest(site_name="st-mary", num_features=3, terms=terms)
    with pytest.raises(WireError, match=message):
        check_register_request(request)
