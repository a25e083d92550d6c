"""The privacy plan of a dry run: the job's own algorithm run on stand-ins,
each site's charge previewed at its cap's delta, the budget refusal, and the
budget a site reports."""

import math

import pytest

from privadapt.common.accounting.accountant import PrivacyAccountant
from privadapt.common.errors import ConfigError, WireError
from privadapt.common.mechanisms import Adjacency
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.wire.messages import params_to_proto
from privadapt.server.coordinator.site_messages import check_heartbeat_request, check_site_budget
from privadapt.server.coordinator.site_registry import SiteRegistry
from privadapt.server.jobs.dry_run import plan_releases
from privadapt.server.jobs.privacy_plan import (
    charged_at_site,
    plan_lines,
    preview_site,
    previews_for,
    refuse_over_budget,
)
from privadapt.server.jobs.spec import hyperparameters
from tests.synthetic_data import synthetic_dataset

NOISY_GD = {"loss": "logistic", "iterations": 4, "learning_rate": 1.0, "radius": 5.0,
            "clip_norm": 1.0}
ADAPT = {"alpha": 0.5, "iterations": 5, "feature_norm": 1.0, "label_bound": 1.0,
         "radius": 5.0, "l1": 0.01, "mu": 100.0, "step_scale": 10}


def job(algorithm="noisy_gd", hyper=NOISY_GD, epsilon=1.0) -> pb.JobSpec:
    spec = pb.JobSpec(algorithm=algorithm, epsilon=epsilon, delta=1e-6, sites=["a", "b"],
                      seed=3)
    params_to_proto(hyper, spec.hyperparameters)
    return spec


def budget(cap=3.0, spent=0.0, delta=1e-5, accounting="pld") -> pb.SiteBudget:
    return pb.SiteBudget(epsilon_cap=cap, delta_cap=delta, epsilon_spent=spent,
                         accounting=accounting)


def test_noisy_gd_plans_one_gaussian_release_per_iteration_at_its_target():
    spec = job()
    releases = plan_releases(spec, hyperparameters(spec), {"a": 100, "b": 200}, 3, None)
    assert len(releases) == 4
    assert {r.kernel for r in releases} == {"linear_gradient"}
    assert len({r.mechanism for r in releases}) == 1
    accountant = PrivacyAccountant(Adjacency.REPLACE_ONE)
    accountant.compose(releases[0].mechanism, 4)
    # Calibrated to the job's (epsilon, delta): the accountant's figure meets it.
    assert accountant.get_epsilon(1e-6) == pytest.approx(1.0, rel=2e-3)


def test_the_adaptation_algorithms_plan_on_the_public_sample_without_any_site():
    spec = job("pncnvx_adap", ADAPT)
    public = synthetic_dataset(40, 3, seed=1)
    releases = plan_releases(spec, hyperparameters(spec), {"a": 100, "b": 200}, 3, public)
    assert len(releases) >= 5
    assert {r.kernel for r in releases} == {"reweighted_gradient"}


def test_each_site_is_previewed_at_its_own_cap_delta_and_method():
    spec = job()
    releases = plan_releases(spec, hyperparameters(spec), {"a": 100, "b": 200}, 3, None)
    loose = preview_site("a", Adjacency.REPLACE_ONE, budget(delta=1e-5), releases, 3)
    tight = preview_site("b", Adjacency.REPLACE_ONE, budget(delta=1e-9, accounting="rdp"),
                         releases, 3)
    # What the site charges: its own sensitivities on the job's grid, at most
    # what the algorithm planned for the coarsest grid and 2^20 records.
    charged = charged_at_site(releases[0], Adjacency.REPLACE_ONE, 3)
    assert charged.sensitivities[0] <= releases[0].mechanism.sensitivities[0]
    assert charged.sensitivities[0] == pytest.approx(releases[0].mechanism.sensitivities[0],
                                                     rel=1e-4)
    exact = PrivacyAccountant(Adjacency.REPLACE_ONE, "rdp")
    exact.compose(charged, 4)
    assert tight.job_epsilon == pytest.approx(exact.get_epsilon(1e-9))
    assert loose.job_epsilon < 1.0 < tight.job_epsilon  # the job's target is at 1e-6
    assert loose.remaining == 3.0 and loose.left_after == pytest.approx(3.0 - loose.job_epsilon)


def test_a_replace_one_release_at_an_add_remove_site_is_charged_at_its_own_sensitivity():
    spec = job()
    (release, *_) = plan_releases(spec, hyperparameters(spec), {"a": 100}, 3, None)
    planned = release.mechanism.sensitivities[0]
    charged = charged_at_site(release, Adjacency.ADD_REMOVE_ONE, 3)
    assert charged.adjacency == Adjacency.ADD_REMOVE_ONE
    assert charged.sensitivities[0] == pytest.approx(planned / 2, rel=1e-3)  # C, not 2C
    assert charged.noise_scales == release.mechanism.noise_scales


def test_a_job_over_a_sites_remaining_budget_is_refused_naming_only_that_site():
    spec = job(epsilon=2.0)
    releases = plan_releases(spec, hyperparameters(spec), {"a": 100, "b": 200}, 3, None)
    adjacencies = {"a": Adjacency.REPLACE_ONE, "b": Adjacency.REPLACE_ONE}
    previews = previews_for(releases, ["a", "b"], adjacencies,
                            {"a": budget(spent=0.5), "b": budget(spent=2.0)}, 3)
    with pytest.raises(ConfigError) as refused:
        refuse_over_budget(previews)
    message = str(refused.value)
    assert "remaining privacy budget of 1 site(s): site 'b' has epsilon 1 left of its cap 3 " \
           "at delta 1e-05 (its ledger)" in message and "site 'a'" not in message
    text = "\n".join(plan_lines(releases, previews))
    assert "releases 1-4 (4x): kernel linear_gradient, secure_sum, gaussian z=" in text
    assert "EXCEEDS" in text and "a preview" in text


def test_sites_without_a_reported_budget_or_an_infinite_cap_are_not_refused():
    spec = job(epsilon=math.inf)
    releases = plan_releases(spec, hyperparameters(spec), {"a": 100, "b": 200}, 3, None)
    previews = previews_for(releases, ["a", "b", "ghost"],
                            {"a": Adjacency.REPLACE_ONE, "b": Adjacency.REPLACE_ONE},
                            {"a": budget(cap=math.inf)}, 3)
    assert [p.site for p in previews] == ["a", "b"]  # ghost never registered
    assert previews[0].job_epsilon == math.inf and previews[1].budget is None
    refuse_over_budget(previews)
    assert "budget not reported" in "\n".join(plan_lines(releases, previews))


@pytest.mark.parametrize("bad, field", [
    (budget(cap=0.0), "epsilon_cap"), (budget(cap=math.nan), "epsilon_cap"),
    (budget(delta=0.0), "delta_cap"), (budget(delta=1.0), "delta_cap"),
    (budget(spent=-1.0), "epsilon_spent"), (budget(spent=math.nan), "epsilon_spent"),
    (budget(accounting="guess"), "accounting"),
])
def test_a_malformed_budget_is_refused_on_the_wire(bad, field):
    with pytest.raises(WireError, match=f"budget.{field}"):
        check_site_budget(bad)
    with pytest.raises(WireError, match=f"budget.{field}"):
        check_heartbeat_request(pb.HeartbeatRequest(session_id="s", budget=bad))


def test_a_simulation_sites_budget_and_spent_infinity_pass():
    check_site_budget(budget(cap=math.inf, spent=math.inf))


def test_the_registry_keeps_the_last_budget_a_site_stated():
    registry = SiteRegistry()
    session = registry.register("a", pb.RegisterRequest(site_name="a", budget=budget()))
    assert registry.budgets()["a"].epsilon_spent == 0.0
    assert registry.touch("a", session.session_id, budget(spent=1.25))
    assert registry.budgets()["a"].epsilon_spent == 1.25
    assert registry.touch("a", session.session_id)  # an older site: the budget stays
    assert registry.budgets()["a"].epsilon_spent == 1.25
    assert not registry.touch("a", "stale", budget(spent=2.0))
    assert registry.budgets()["a"].epsilon_spent == 1.25
