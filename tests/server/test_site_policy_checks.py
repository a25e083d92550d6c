"""A job that a site's own policy would refuse every round of is refused at
launch (and at its start), naming the site, before any key is published: its
``peers`` leave out another of the job's sites, its ``min_participants`` is
above the job's number of sites, or the job queries a kernel it does not
allow (issue 18, section 1). The terms travel checked at registration."""

from __future__ import annotations

import pytest

from privadapt.common.errors import ConfigError, WireError
from privadapt.common.federation import ReleaseForm
from privadapt.common.mechanisms import GaussianMechanism
from privadapt.common.proto import federation_pb2 as pb
from privadapt.server.launch_checks import check_kernels_allowed, check_site_policies
from privadapt.server.planning_federation import PlannedRelease
from privadapt.server.site_messages import check_register_request
from privadapt.server.site_registry import SiteRegistry

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
