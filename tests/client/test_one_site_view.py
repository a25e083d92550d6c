"""OneSiteView (common/federation.py): a query through it is asked of one
site alone, with that site's full noise, charged to its ledger only; an
unknown site is refused before any site is asked; the job plan charges a
one-site release to that site only."""

import math

import numpy as np
import pytest

from privadapt import Dataset, LocalFederation
from privadapt.common.data.record_parts import RecordPart
from privadapt.common.errors import QueryRefusedError
from privadapt.common.federation import OneSiteView, ReleaseForm
from privadapt.common.kernels.linear_gradient import LinearGradient, LinearGradientParams
from privadapt.common.mechanisms import Adjacency
from privadapt.common.proto import federation_pb2 as pb
from privadapt.server.federation.planning import PlanningFederation
from privadapt.server.jobs.privacy_plan import plan_lines, preview_site

DIM = 3
KERNEL = LinearGradient()


def federation(noise_seed=0, epsilon_cap=10.0):
    rng = np.random.default_rng(0)
    datasets = [Dataset(rng.normal(size=(n, DIM)) / 3, np.sign(rng.normal(size=n)),
                        ("a", "b", "c"))
                for n in (50, 70, 90)]
    return LocalFederation.from_datasets(datasets, noise_seed=noise_seed, epsilon_cap=epsilon_cap,
                                         delta_cap=1e-3)


def gradient_query(multiplier=2.0):
    params = LinearGradientParams(np.zeros(DIM), "logistic", 1.0)
    return KERNEL.name, params.to_wire(), KERNEL.mechanism(params, multiplier,
                                                           Adjacency.REPLACE_ONE, dim=DIM)


def test_a_query_is_charged_at_the_one_site_only():
    with federation() as fed:
        view = OneSiteView(fed, "site-2")
        answer = view.query(*gradient_query())
        assert answer.participants == ("site-2",)
        spent = fed.privacy_spent()
        assert [len(spent[s].mechanisms) for s in ("site-1", "site-2", "site-3")] == [0, 1, 0]
        assert view.privacy_spent().keys() == {"site-2"}
        assert view.num_sites == 1 and view.site_sizes == {"site-2": 70}


def test_the_one_site_adds_the_full_noise():
    """Over many draws the answer's spread is the mechanism's whole sigma,
    not a share sigma / sqrt(K) of it."""
    kernel, params, mechanism = gradient_query(multiplier=1.0)
    with federation(noise_seed=5, epsilon_cap=math.inf) as fed:
        view = OneSiteView(fed, "site-1")
        draws = np.array([view.query(kernel, params, mechanism).value for _ in range(400)])
    sigma = mechanism.noise_scales[0]
    assert np.std(draws[:, 0]) == pytest.approx(sigma, rel=0.15)


def test_a_record_part_goes_with_the_query():
    with federation() as fed:
        part = RecordPart("train", 0.25, fed.job_id)
        view = OneSiteView(fed, "site-3").restricted_to(part)
        assert view.records == part and view.site_name == "site-3"
        assert view.site_sizes == {"site-3": part.public_size(90)}
        view.query(*gradient_query())
        assert len(fed.privacy_spent()["site-3"].mechanisms) == 1


def test_an_unknown_site_is_refused_before_any_site_is_asked():
    with federation() as fed:
        with pytest.raises(ValueError, match="site-9"):
            OneSiteView(fed, "site-9").query(*gradient_query())
        assert all(not p.mechanisms for p in fed.privacy_spent().values())


def test_the_job_plan_charges_a_one_site_release_to_that_site_only():
    planning = PlanningFederation("plan", {"a": 10, "b": 20}, DIM)
    OneSiteView(planning, "b").query(*gradient_query())
    (release,) = planning.releases
    assert release.sites == ("b",) and release.form == ReleaseForm.PER_SITE
    budget = pb.SiteBudget(epsilon_cap=10.0, delta_cap=1e-5, accounting="pld")
    costs = {site: preview_site(site, Adjacency.REPLACE_ONE, budget, planning.releases,
                                DIM).job_epsilon for site in ("a", "b")}
    assert costs["a"] == 0.0 < costs["b"]
    previews = [preview_site(s, Adjacency.REPLACE_ONE, budget, planning.releases, DIM)
                for s in ("a", "b")]
    assert "(only b)" in plan_lines(planning.releases, previews)[1]


def test_a_site_that_needs_other_participants_refuses_a_round_of_itself_alone():
    rng = np.random.default_rng(1)
    datasets = [Dataset(rng.normal(size=(30, DIM)), np.sign(rng.normal(size=30)),
                        ("a", "b", "c")) for _ in range(2)]
    with LocalFederation.from_datasets(datasets, epsilon_cap=10.0, delta_cap=1e-3,
                                       min_participants=2) as fed:
        with pytest.raises(QueryRefusedError, match="participants"):
            OneSiteView(fed, "site-1").query(*gradient_query())
        fed.query(*gradient_query())  # a round of both is answered
        assert [len(p.mechanisms) for p in fed.privacy_spent().values()] == [1, 1]
