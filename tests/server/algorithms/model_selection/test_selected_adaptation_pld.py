"""SelectedAdaptation's default joint calibration (composition="pld"): every
site's ledger total for the job is at most epsilon and at least 0.97 epsilon,
and every ledger holds exactly the calibrated plan's releases."""

import math

import numpy as np
import pytest

from privadapt import Dataset, LocalFederation
from privadapt.common.mechanisms import Adjacency
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.wire.messages import params_to_proto
from privadapt.server.algorithms.base import InvalidParameterError
from privadapt.server.algorithms.joint_calibration import composed_epsilon
from privadapt.server.jobs.dry_run import plan_releases
from privadapt.server.jobs.privacy_plan import charged_at_site
from privadapt.server.jobs.spec import hyperparameters
from tests.server.algorithms.model_selection.test_selected_adaptation import (
    PUBLIC,
    parts,
    selector,
    sites,
)

DIM = 5


def assert_ledgers_hold_the_plan(model, privacy, epsilon):
    """Each ledger's job total in [0.97, 1] epsilon; its charges are the
    plan's releases one for one: the same kind and noise, and the site's own
    sensitivity at most the declared one (it recomputes it on its own grid)."""
    calibration = model.joint_calibration_
    planned = [charged_at_site(r, Adjacency.REPLACE_ONE, DIM) for r in calibration.releases]
    assert 0.99 * epsilon <= calibration.epsilon_total <= epsilon
    for spent in privacy.values():
        assert 0.97 * epsilon <= spent.job.epsilon <= epsilon
        assert spent.job.epsilon <= calibration.epsilon_total * (1 + 1e-12)
        assert len(spent.mechanisms) == len(planned)
        for charged, plan in zip(spent.mechanisms, planned, strict=True):
            assert (charged.kind, charged.adjacency) == (plan.kind, plan.adjacency)
            ours, theirs = charged.to_dict(), plan.to_dict()
            if "blocks" not in ours:  # a selection: its own fields
                assert ours == pytest.approx(theirs, rel=1e-4)
                continue
            for (sensitivity, sigma), (declared, planned_sigma) in zip(
                    ours["blocks"], theirs["blocks"], strict=True):
                assert sigma == planned_sigma
                assert declared * (1 - 1e-4) <= sensitivity <= declared


@pytest.mark.parametrize("epsilon", [1.0, 3.0])
def test_the_job_spends_its_whole_epsilon_and_the_ledgers_hold_the_plan(epsilon):
    model = selector(epsilon=epsilon, candidates="noisy_gd,pncnvx_adap_smooth",
                     adapter_iterations=10)
    with parts(1200, seed=0) as (train, validation):
        model.fit(train, validation, PUBLIC)
    assert model.composition == "pld" and model.budget_scale_ > 1.2
    assert model.budget_plan_ == model.budget_plan(model.budget_scale_)
    basic = model.budget_plan()
    for step, (spent, delta) in model.budget_plan_.items():  # epsilons scaled, deltas kept
        assert spent == pytest.approx(model.budget_scale_ * basic[step][0])
        assert delta == basic[step][1]
    assert_ledgers_hold_the_plan(model, model.privacy_, epsilon)
    assert model.joint_calibration_.evaluations <= 6


def test_one_site_is_calibrated_too():
    """One site holding everything: the same plan, one ledger."""
    with parts(600, seed=3, num_sites=1) as (train, validation):
        model = selector(epsilon=2.0).fit(train, validation, PUBLIC)
    assert list(model.privacy_) == ["site-1"]
    assert_ledgers_hold_the_plan(model, model.privacy_, 2.0)


@pytest.mark.slow
def test_default_iterations_calibrate_in_a_few_stand_in_runs():
    """T = 100 noisy GD steps and the adapter's auto T: a plan of about 300
    releases, calibrated in at most 6 runs on stand-ins (about 1.5 s; the
    sites' real run takes 9 s here)."""
    model = selector(epsilon=3.0, candidates="noisy_gd,pncnvx_adap_smooth", iterations=100)
    with LocalFederation.from_datasets(sites(2000, 4), noise_seed=4, epsilon_cap=20.0,
                                       delta_cap=1e-3) as federation:
        model.fit(federation, None, PUBLIC)
    calibration = model.joint_calibration_
    assert len(calibration.releases) >= 150
    assert calibration.evaluations <= 6
    assert_ledgers_hold_the_plan(model, model.privacy_, 3.0)


def test_noise_free_and_zero_delta_runs_are_not_calibrated():
    with LocalFederation.from_datasets(sites(300, 5), noise_seed=5, epsilon_cap=math.inf,
                                       delta_cap=0.5, allow_non_private=True) as federation:
        model = selector(epsilon=math.inf, delta=0.0).fit(federation, None, PUBLIC)
    assert model.joint_calibration_ is None and model.budget_scale_ == 1.0


@pytest.mark.parametrize("composition", ["PLD", "exact", None, 1])
def test_an_unknown_composition_is_refused_before_any_query(composition):
    model = selector(composition=composition)
    with parts(60, seed=0) as (train, validation):
        with pytest.raises(InvalidParameterError, match="parameter 'composition' must be"):
            model.fit(train, validation, PUBLIC)
        assert not train.privacy_spent()["site-1"].mechanisms


def test_calibration_asks_nothing_of_the_sites():
    """The calibration's runs are on stand-ins: the sites see the real run's
    releases only (as many as the plan), and the same split as basic."""
    data = [Dataset(*pair, tuple(f"x{i}" for i in range(DIM)))
            for pair in [(np.ones((10, DIM)) / DIM, np.ones(10))] * 3]
    with LocalFederation.from_datasets(data, noise_seed=0, epsilon_cap=20.0,
                                       delta_cap=1e-3) as federation:
        # The clipped-loss score: 30 records are too few for the paired one to
        # release anything (test_selected_adaptation_paired.py).
        model = selector(iterations=5, selection_score="loss").fit(federation, None, PUBLIC)
        charged = len(federation.privacy_spent()["site-1"].mechanisms)
    assert charged == len(model.joint_calibration_.releases) == 6


def test_the_dry_run_plans_the_calibrated_job():
    """``launch --dry-run`` (plan_releases) runs the job, calibration included,
    on stand-ins: its plan composes to the job's epsilon within the window,
    the releases on each record part as the sites will see them."""
    spec = pb.JobSpec(algorithm="selected_adaptation", epsilon=2.0, delta=1e-6,
                      sites=["a", "b"], seed=3)
    params_to_proto({"loss": "logistic", "radius": 8.0, "iterations": 6, "loss_bound": 2.0,
                     "candidates": "noisy_gd,pncnvx_adap_smooth", "adapter_iterations": 4},
                    spec.hyperparameters)
    public = Dataset(*PUBLIC, tuple(f"x{i}" for i in range(DIM)))
    releases = plan_releases(spec, hyperparameters(spec), {"a": 400, "b": 300}, DIM, public)
    # Noisy GD's 6, the adapter's 4, the error score's one release of the counts.
    assert len(releases) == 6 + 4 + 1
    assert releases[-1].kernel == "validation_loss"
    assert {r.records.part for r in releases} == {"train", "validation"}
    assert 0.99 * 2.0 <= composed_epsilon(releases, 1e-6, DIM) <= 2.0
    # The paired score: its histogram and sums; with too few validation
    # records to certify a gain, the plan releases nothing.
    params_to_proto({"selection_score": "paired"}, spec.hyperparameters)
    releases = plan_releases(spec, hyperparameters(spec), {"a": 400, "b": 300}, DIM, public)
    assert [r.kernel for r in releases[-2:]] == ["loss_difference_histogram", "validation_loss"]
    assert 0.99 * 2.0 <= composed_epsilon(releases, 1e-6, DIM) <= 2.0
    with pytest.warns(UserWarning, match="nothing was released"):
        assert plan_releases(spec, hyperparameters(spec), {"a": 40, "b": 30}, DIM, public) == []
