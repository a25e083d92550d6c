"""radius="auto" on NoisyGD and NoisySGD (server/algorithms/model_selection/auto_radius.py):
the norm bound chosen by seed 004's private grid search lands within a factor
2 of ||w*|| on synthetic data, the ledger holds exactly the plan (K trainings
at c epsilon/2K, one paired selection at c epsilon/2, c the joint calibration's
scale) and the learner's epsilon, epsilon = inf runs without noise, a
numeric radius runs the solver as before, the job schema and the dry-run
planner take "auto", and missing bounds are refused clearly."""

import math

import numpy as np
import pytest

from privadapt import Dataset, LocalFederation, NoisyGD, NoisySGD
from privadapt.client.local_federation import LocalFederation as SiteFederation
from privadapt.common.accounting.accountant import PrivacyAccountant, epsilon_spent
from privadapt.common.errors import ConfigError
from privadapt.common.mechanisms import (
    Adjacency,
    GaussianMechanism,
)
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.wire.messages import params_to_proto
from privadapt.server.algorithms.base import InvalidParameterError, clone
from privadapt.server.algorithms.gradient_descent.noisy_gd import noisy_gd
from privadapt.server.algorithms.model_selection.grid_search import PrivateGridSearch
from privadapt.server.jobs.catalog import estimator_for, job_schema, validate_hyperparameters
from privadapt.server.jobs.dry_run import plan_releases
from privadapt.server.jobs.spec import hyperparameters

DIM, DELTA, ITERATIONS = 5, 1e-5, 20
NAMES = tuple(f"x{i}" for i in range(DIM))


def records(n, seed, norm):
    """Features on the unit sphere, y = w*.x + noise, ||w*|| = ``norm``."""
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(n, DIM))
    features /= np.linalg.norm(features, axis=1, keepdims=True)
    weights = rng.normal(size=DIM)
    weights *= norm / np.linalg.norm(weights)
    return features, features @ weights + 0.3 * rng.normal(size=n)


def federation(seed, norm=4.0, num_sites=1, n=3000):
    features, labels = records(n, seed, norm)
    parts = [Dataset(features[rows], labels[rows], NAMES)
             for rows in np.array_split(np.arange(n), num_sites)]
    return LocalFederation.from_datasets(parts, epsilon_cap=20.0, delta_cap=1e-3,
                                         noise_seed=seed)


def learner(norm=4.0, **params):
    settings = {"loss": "squared", "epsilon": 8.0, "delta": DELTA, "iterations": ITERATIONS,
                "learning_rate": 0.5, "radius": "auto", "clip_norm": norm + 2,
                "feature_bound": 1.0, "label_bound": norm + 1}
    return NoisyGD(**{**settings, **params})


@pytest.mark.parametrize(("norm", "num_sites"), [(4.0, 1), (8.0, 1), (8.0, 3)])
def test_the_chosen_ball_is_not_too_small_and_the_delivered_model_fits(norm, num_sites):
    # The paired score certifies the least estimated loss, with no penalty on
    # a large ball: any ball that holds w* may win, one too small loses.
    for seed in range(5):
        with federation(seed, norm, num_sites) as sites:
            model = learner(norm).fit(sites)
        assert model.radius_ == model.norm_search_.radius_
        np.testing.assert_array_equal(model.coef_, model.norm_search_.coef_)
        assert np.linalg.norm(model.coef_) <= model.radius_ * (1 + 1e-12)
        assert model.radius_ >= norm / 2, (seed, model.radius_)
        features, labels = records(3000, seed, norm)  # the federation's records
        assert model.score(features, labels) > 0.9, seed


def test_a_single_site_ledger_is_k_trainings_and_one_paired_release_scaled_to_epsilon():
    model = learner(epsilon=6.0, num_guesses=3)
    with federation(1) as sites:
        model.fit(sites)
    (spent,) = model.privacy_.values()
    *trainings, paired = spent.mechanisms
    assert len(trainings) == 3 * ITERATIONS
    assert all(isinstance(m, GaussianMechanism) for m in trainings)
    scale = model.norm_search_.budget_scale_
    assert scale > 1.0  # basic composition left part of epsilon unspent
    for run in range(3):  # each clone's own releases: (c epsilon / 2K, delta / 2K)
        releases = trainings[run * ITERATIONS:(run + 1) * ITERATIONS]
        epsilon = epsilon_spent(releases, DELTA / 6).epsilon
        assert epsilon <= scale and epsilon == pytest.approx(scale, rel=2e-3)
    # The paired release against the zero model (worst-case clips Delta_j,
    # no histogram), certified: the secure-sum form even at one site.
    selection = epsilon_spent([paired], DELTA / 2).epsilon
    assert isinstance(paired, GaussianMechanism)
    assert selection == pytest.approx(3.0 * scale, rel=2e-3)
    assert 0.98 * 6.0 <= spent.job.epsilon <= 6.0  # the whole job, at the learner's delta
    assert [m.radius for m in model.norm_search_.learners_] == [2.0, 4.0, 8.0]
    assert model.epsilon == 6.0 and model.radius == "auto"  # the learner itself is untouched


def test_several_sites_spend_the_plan_and_at_most_epsilon():
    model = learner(epsilon=6.0, num_guesses=3)
    with federation(2, num_sites=3) as sites:
        model.fit(sites)
    assert model.norm_search_.method_ == "secure_sum"
    scale = model.norm_search_.budget_scale_
    for spent in model.privacy_.values():
        trainings, sums = spent.mechanisms[:3 * ITERATIONS], spent.mechanisms[3 * ITERATIONS:]
        assert len(sums) == 1  # one paired release of the guesses against the zero model
        selection = epsilon_spent(sums, DELTA / 2).epsilon
        assert selection <= 3.0 * scale and selection == pytest.approx(3.0 * scale, rel=2e-3)
        assert epsilon_spent(trainings, DELTA / 2).epsilon <= 3.0 * scale
        assert 0.98 * 6.0 <= spent.job.epsilon <= 6.0


def test_a_numeric_radius_runs_the_solver_exactly_as_before():
    model = learner(radius=4.0)
    with federation(3) as sites:
        model.fit(sites)
    with federation(3) as sites:  # same records, same noise seed
        direct = noisy_gd(sites, loss="squared", epsilon=8.0, delta=DELTA,
                          iterations=ITERATIONS, learning_rate=0.5, radius=4.0, clip_norm=6.0,
                          calibration="accountant", dim=DIM)
    np.testing.assert_array_equal(model.coef_, direct.weights)
    assert not hasattr(model, "radius_") and "radius" not in model.model_arrays()


def test_the_fitted_learner_reports_the_chosen_radius_and_clones():
    model = learner(num_guesses=3)
    with federation(4) as sites:
        model.fit(sites)
    arrays = model.model_arrays()
    assert float(arrays["radius"]) == model.radius_
    assert isinstance(model.norm_search_, PrivateGridSearch)
    copy = clone(model)
    assert copy.get_params() == model.get_params() and not hasattr(copy, "radius_")


def test_when_no_guess_beats_the_zero_model_the_learner_delivers_the_zero_model():
    """Logistic labels independent of the features: the zero model's exact
    loss log 2 (its public score) beats every penalised guess."""
    rng = np.random.default_rng(7)
    features = rng.normal(size=(2000, DIM)) / np.sqrt(DIM)
    labels = rng.choice([-1.0, 1.0], size=2000)
    model = learner(loss="logistic", feature_bound=None, label_bound=None, clip_norm=1.0,
                    num_guesses=3)
    with LocalFederation.from_datasets([Dataset(features, labels, NAMES)], epsilon_cap=20.0,
                                       delta_cap=1e-3, noise_seed=7) as sites:
        model.fit(sites)
    assert model.radius_ == 0.0 and model.norm_search_.best_index_ == 0
    np.testing.assert_array_equal(model.coef_, np.zeros(DIM))
    np.testing.assert_array_equal(model.average_coef_, np.zeros(DIM))
    assert model.history_ == [] and float(model.model_arrays()["radius"]) == 0.0


def test_the_search_stores_no_checkpoints_and_reports_every_runs_progress():
    checkpoints, progress = [], []
    with federation(6) as sites:
        learner(num_guesses=2).fit(sites, checkpoint=lambda *step: checkpoints.append(step),
                                   progress=progress.append, progress_every=10)
    assert checkpoints == []  # K runs would overwrite each other's steps
    assert [record.iteration for record in progress] == [10, 20, 10, 20]


def test_noisy_sgd_on_add_remove_sites_takes_the_public_n_and_stays_within_epsilon(make_site):
    sites = [make_site(f"site-{k}", num_records=600, seed=k, epsilon_cap=10.0, delta_cap=1e-4,
                       adjacency=Adjacency.ADD_REMOVE_ONE) for k in range(2)]
    model = NoisySGD(loss="logistic", epsilon=4.0, delta=DELTA, iterations=10,
                     expected_batch_size=100, learning_rate=1.0, radius="auto", clip_norm=1.0,
                     num_records=1200, num_guesses=3)
    model.fit(SiteFederation(sites))
    assert model.radius_ in (0.0, 2.0, 4.0, 8.0)
    assert model.norm_search_.num_validation_records == 300  # 0.25 of the public n
    for spent in model.privacy_.values():
        assert spent.job.epsilon <= 4.0
    without_n = clone(model).set_params(num_records=None)
    with pytest.raises(InvalidParameterError, match="num_records"):
        without_n.fit(SiteFederation(sites))


@pytest.mark.parametrize(
    ("params", "message"),
    [({"feature_bound": None}, "feature_bound and label_bound"),
     ({"label_bound": None}, "feature_bound and label_bound"),
     ({"epsilon": 1.0, "delta": 0.0}, "delta"),
     ({"radius": "big"}, "radius")])
def test_missing_bounds_and_a_zero_delta_are_refused(params, message):
    with federation(5) as sites, pytest.raises(InvalidParameterError, match=message):
        learner(**params).fit(sites)


def test_epsilon_inf_chooses_the_radius_without_noise():
    features, labels = records(1000, 6, 4.0)
    sites = LocalFederation.from_datasets([Dataset(features, labels, NAMES)],
                                          epsilon_cap=math.inf, delta_cap=1e-3,
                                          allow_non_private=True)
    with sites:
        model = learner(epsilon=math.inf, num_guesses=4).fit(sites)
    assert model.radius_ in (4.0, 8.0)
    assert model.norm_search_.budget_scale_ == 1.0


def test_the_logistic_bounds_default_to_clip_norm_and_unit_labels():
    model = learner(loss="logistic", feature_bound=None, label_bound=None, clip_norm=3.0)
    assert model._norm_search_bounds() == ("logistic", 3.0, 1.0)


def test_a_federation_without_record_parts_is_refused():
    class NoParts:
        job_id = "job"

    with pytest.raises(InvalidParameterError, match="restricted_to"):
        learner().fit(NoParts())


HYPER = {"loss": "logistic", "iterations": 4, "learning_rate": 1.0, "radius": "auto",
         "clip_norm": 1.0, "num_guesses": 3}


def job(epsilon=2.0) -> pb.JobSpec:
    spec = pb.JobSpec(algorithm="noisy_gd", epsilon=epsilon, delta=1e-6, sites=["a", "b"],
                      seed=3)
    params_to_proto(HYPER, spec.hyperparameters)
    return spec


def test_the_job_schema_takes_auto_and_refuses_other_words():
    assert job_schema(NoisyGD).required["radius"] == (int, float, str)
    validate_hyperparameters("noisy_gd", HYPER)
    with pytest.raises(ConfigError, match="radius"):
        validate_hyperparameters("noisy_gd", {**HYPER, "radius": "large"})
    spec = job()
    assert estimator_for(spec, hyperparameters(spec), 0).radius == "auto"


def test_the_dry_run_plans_k_trainings_and_one_paired_release_within_epsilon():
    spec = job()
    releases = plan_releases(spec, hyperparameters(spec), {"a": 400, "b": 200}, 3, None)
    kernels = [r.kernel for r in releases]
    assert kernels == ["linear_gradient"] * 12 + ["validation_loss"]
    assert {r.records.part for r in releases[:12]} == {"train"}
    assert {r.records.part for r in releases[12:]} == {"validation"}
    accountant = PrivacyAccountant(Adjacency.REPLACE_ONE)
    for release in releases:
        accountant.compose(release.mechanism, 1)
    assert accountant.get_epsilon(1e-6) <= 2.0
