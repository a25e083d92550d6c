"""ConfidenceBoosting: each site's ledger holds exactly its own model's
releases plus the one selection (the plan, per site), the site whose
records match the target wins where they clearly do, the free source-only
model is kept where nothing beats it, and the estimator plans as a job."""

import math

import numpy as np
import pytest

from privadapt import Dataset, LocalFederation
from privadapt.common.accounting.accountant import epsilon_spent
from privadapt.common.accounting.calibration import calibrate_noise_multiplier
from privadapt.common.data.record_parts import RecordPart, RecordSplitter
from privadapt.common.mechanisms import Adjacency
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.wire.messages import params_to_proto
from privadapt.server.algorithms.base import InvalidParameterError, clone
from privadapt.server.algorithms.model_selection.confidence_boosting import (
    SOURCE_ONLY,
    ConfidenceBoosting,
)
from privadapt.server.algorithms.public_erm import public_constant_model
from privadapt.server.jobs.dry_run import plan_releases
from privadapt.server.jobs.privacy_plan import preview_site
from privadapt.server.jobs.spec import hyperparameters
from tests.server.algorithms.model_selection.test_selected_adaptation_grid import (
    majority_over_source_only,
)
from tests.synthetic_data import synthetic_dataset

DIM = 5
TARGET = np.array([1.0, -2.0, 0.5, 1.5, 1.0])
SOURCE = np.array([-1.0, 2.0, 0.5, 1.5, 1.0])  # the shift: two signs flipped
DELTA = 1e-5


def logistic(n, weights, seed):
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(n, DIM)) / np.sqrt(DIM)
    labels = np.where(features @ weights + 0.1 * rng.normal(size=n) >= 0, 1.0, -1.0)
    return features, labels


PUBLIC = logistic(2000, SOURCE, seed=99)
NAMES = tuple(f"x{i}" for i in range(DIM))


def federation(sizes, seed, weights=None):
    """One site per size; site k's records follow ``weights[k]`` (TARGET by default)."""
    weights = weights or [TARGET] * len(sizes)
    datasets = [Dataset(*logistic(n, w, seed * 10 + k), NAMES)
                for k, (n, w) in enumerate(zip(sizes, weights, strict=True))]
    return LocalFederation.from_datasets(datasets, noise_seed=seed, epsilon_cap=20.0,
                                         delta_cap=1e-3)


def booster(**params):
    # Seed 004's score (the clipped loss, one selection release) among the
    # per-site models: the paper's structure these tests check; the paired
    # default and the average have their own.
    settings = {"loss": "logistic", "radius": 10.0, "epsilon": 2.0, "delta": DELTA,
                "learning_rate": 4.0, "iterations": 15, "loss_bound": 2.0,
                "selection_score": "loss", "combine": "select"}
    return ConfidenceBoosting(**{**settings, **params})


def test_each_sites_ledger_holds_its_own_model_and_the_selection_only():
    model = booster(selection_share=0.3, baseline_confidence=None)
    with federation([400, 300, 200], seed=0) as fed:
        model.fit(fed, PUBLIC)
        spent = fed.privacy_spent(DELTA)
    train_eps, train_delta = model.budget_plan_["train"]
    assert model.budget_plan_ == {"train": pytest.approx((1.4, 0.7 * DELTA)),
                                  "selection": pytest.approx((0.6, 0.3 * DELTA))}
    # The plan's mechanisms, rebuilt from the learner's own calibration: T gradient
    # releases at the site's training budget, then one selection release.
    multiplier = calibrate_noise_multiplier(train_eps, train_delta, 15)
    for site, privacy in spent.items():
        charged = privacy.mechanisms
        assert len(charged) == 15 + 1  # its own T steps and the selection, nobody else's
        gradient = charged[0]
        assert all(mechanism == gradient for mechanism in charged[:15])
        # As calibrated (the site's charge adds only its grid-rounding allowance).
        assert gradient.noise_multiplier == pytest.approx(multiplier, rel=1e-4)
        assert epsilon_spent(charged[:15], train_delta).epsilon == pytest.approx(train_eps,
                                                                                rel=2e-3)
        selection_eps, selection_delta = model.budget_plan_["selection"]
        assert epsilon_spent(charged[15:], selection_delta).epsilon == pytest.approx(
            selection_eps, rel=2e-3)
        assert model.site_train_epsilon_[site] == pytest.approx(train_eps, rel=2e-3)
        assert model.site_train_epsilon_[site] <= train_eps
        assert privacy.job.epsilon <= 2.0
        assert privacy.job.epsilon == pytest.approx(
            epsilon_spent(charged, DELTA).epsilon)
    assert model.privacy_.keys() == spent.keys()


def test_the_site_whose_records_match_the_target_is_chosen():
    test = logistic(2000, TARGET, seed=12345)
    for seed in range(3):
        # site-1 holds the target's distribution, the others the source's. Two
        # signs flipped put the target's model beyond any ball around
        # source-only, so the sites learn from zero (the paper's learner).
        with federation([3000, 300, 300], seed, [TARGET, SOURCE, SOURCE]) as fed:
            model = booster(epsilon=10.0, radius_factor=None).fit(fed, PUBLIC)
        assert model.chosen_ == "site-1"
        assert model.candidate_names_ == [SOURCE_ONLY, "site-1", "site-2", "site-3"]
        np.testing.assert_array_equal(model.coef_, model.learners_["site-1"].coef_)
        assert model.score(*test) > 0.9


def test_tiny_sites_keep_the_free_source_only_model():
    chosen = []
    for seed in range(6):
        with federation([30, 30], seed, [SOURCE, SOURCE]) as fed:
            chosen.append(booster(epsilon=3.0).fit(fed, PUBLIC).chosen_)
    assert chosen.count(SOURCE_ONLY) >= 5


def test_a_single_site_boosts_against_the_source_only_model_alone():
    with federation([1500], seed=3) as fed:
        model = booster(epsilon=5.0, baseline_confidence=None).fit(fed, PUBLIC)
        assert len(fed.privacy_spent()["site-1"].mechanisms) == 15 + 1
    assert model.candidates_.shape == (2, DIM)
    assert model.noisy_losses_ is None  # the site ran the exponential mechanism itself


def test_a_record_part_view_is_refused_before_any_query():
    with federation([100, 100], seed=0) as fed:
        view = fed.restricted_to(RecordPart.ALL)
        with pytest.raises(InvalidParameterError, match="one site alone"):
            booster().fit(view, PUBLIC)
        assert not fed.privacy_spent()["site-1"].mechanisms


def test_the_public_source_is_required():
    with federation([100, 100], seed=0) as fed, pytest.raises(ValueError, match="public"):
        booster().fit(fed)


def test_model_arrays_get_params_and_clone():
    with federation([300, 300], seed=1) as fed:
        model = booster().fit(fed, PUBLIC)
    arrays = model.model_arrays()
    assert arrays["candidates"].shape == (3, DIM)
    assert int(arrays["best_index"]) == model.best_index_
    np.testing.assert_array_equal(arrays["weights"], model.coef_)
    copy = clone(model)
    assert copy.get_params() == model.get_params()
    assert not hasattr(copy, "coef_")


def test_the_noise_free_oracle_plans_no_budget():
    assert booster(epsilon=math.inf).budget_plan() == {"train": (math.inf, 0.0),
                                                       "selection": (math.inf, 0.0)}


def test_the_job_plan_charges_each_site_its_own_model_and_the_selection():
    spec = pb.JobSpec(algorithm="confidence_boosting", epsilon=2.0, delta=1e-6,
                      sites=["a", "b"], seed=3)
    params_to_proto({"loss": "logistic", "radius": 5.0, "iterations": 4}, spec.hyperparameters)
    public = synthetic_dataset(40, 3, seed=1)
    releases = plan_releases(spec, hyperparameters(spec), {"a": 100, "b": 200}, 3, public)
    # Each site's own model, then the classifier's error score: one release
    # of the candidates' validation error counts, of every site.
    assert [r.sites for r in releases] == [("a",)] * 4 + [("b",)] * 4 + [None]
    assert releases[-1].kernel == "validation_loss"
    budget = pb.SiteBudget(epsilon_cap=5.0, delta_cap=1e-6, accounting="pld")
    for site in ("a", "b"):
        preview = preview_site(site, Adjacency.REPLACE_ONE, budget, releases, 3)
        assert preview.job_epsilon <= 2.0
        own = [r.mechanism for r in releases if r.sites in (None, (site,))]
        # The preview charges as the site does (its own rounding term at its
        # record bound): at most the declared mechanisms, within 1e-4 of them.
        declared = epsilon_spent(own, 1e-6).epsilon
        assert declared * (1 - 1e-4) <= preview.job_epsilon <= declared * (1 + 1e-12)


def test_a_source_only_model_already_fitted_is_candidate_0():
    given = np.full(DIM, 0.25)
    with federation([200, 200], seed=5) as fed:
        model = booster().fit(fed, PUBLIC, source_only=given)
    np.testing.assert_array_equal(model.candidates_[0], given)


def test_the_error_score_counts_each_candidates_validation_errors():
    """selection_score="error": without noise each candidate's score is its
    error count on the validation records, so the guarantee is on accuracy."""
    datasets = [Dataset(*logistic(n, TARGET, 70 + k), NAMES) for k, n in enumerate((300, 300))]
    with LocalFederation.from_datasets(datasets, noise_seed=7, epsilon_cap=math.inf,
                                       delta_cap=0.5, allow_non_private=True) as fed:
        model = booster(epsilon=math.inf, delta=0.0, selection_score="error",
                        combine="average").fit(fed, PUBLIC)
        part = RecordPart("validation", 0.25, fed.job_id)
        planned = sum(fed.restricted_to(part).site_sizes.values())
    validation = [RecordSplitter(data).records(part) for data in datasets]
    features = np.concatenate([p.features for p in validation])
    labels = np.concatenate([p.labels for p in validation])
    errors = [np.sum(np.where(features @ w >= 0, 1.0, -1.0) != labels)
              for w in model.candidates_]
    np.testing.assert_allclose(model.noisy_losses_ * planned, errors, atol=0.5)
    assert model.loss_bound_ == 1.0
    assert model.best_index_ == int(np.argmin(errors))


def test_the_error_score_is_for_classifiers_only():
    with federation([100, 100], seed=0) as fed:
        with pytest.raises(InvalidParameterError, match="selection_score 'error'"):
            booster(loss="squared", selection_score="error").fit(fed, PUBLIC)
        assert not fed.privacy_spent()["site-1"].mechanisms


def test_a_classifier_has_the_public_constant_among_its_candidates_by_default():
    features, labels = PUBLIC
    with_intercept = Dataset(np.hstack([features[:, :-1], np.ones((len(labels), 1))]), labels,
                             (*NAMES[:-1], "intercept"))
    with federation([200, 200], seed=2) as fed:
        model = ConfidenceBoosting(loss="logistic", radius=10.0, epsilon=2.0, delta=DELTA,
                                   iterations=5).fit(fed, with_intercept)
    assert model.candidate_names_ == [SOURCE_ONLY, "public_constant", "average",
                                      "average:shrink=0.25"]
    assert model.loss_bound_ == 1.0  # the error score


def test_a_classifier_is_not_less_accurate_than_the_majority_label_where_it_beats_source_only():
    public, datasets, (features, labels) = majority_over_source_only(seed=3)
    with LocalFederation.from_datasets(datasets, noise_seed=3, epsilon_cap=20.0,
                                       delta_cap=1e-3) as fed:
        model = ConfidenceBoosting(loss="logistic", radius=10.0, epsilon=1.0, delta=DELTA,
                                   iterations=20).fit(fed, public)
    accuracy = [np.mean(np.where(features @ w >= 0, 1.0, -1.0) == labels)
                for w in [*model.candidates_, model.coef_]]
    assert accuracy[1] > accuracy[0] + 0.5  # the majority label beats source-only
    assert accuracy[-1] >= accuracy[1] - 0.01, (model.chosen_, accuracy)


def test_the_public_constant_is_candidate_1_when_asked_for():
    features, labels = PUBLIC
    with_intercept = Dataset(np.hstack([features[:, :-1], np.ones((len(labels), 1))]), labels,
                             (*NAMES[:-1], "intercept"))
    with federation([200, 200], seed=2) as fed:
        model = booster(constant_candidate=True, combine="average").fit(fed, with_intercept)
    assert model.candidate_names_[:2] == [SOURCE_ONLY, "public_constant"]
    np.testing.assert_allclose(model.candidates_[1], public_constant_model(
        with_intercept.features, labels, "logistic", 10.0, with_intercept.feature_names))
    assert np.count_nonzero(model.candidates_[1]) == 1


def test_a_zero_source_only_model_is_refused_under_the_error_score_before_any_release():
    # Its errors cannot be counted (every record scores log 2), and every
    # learned model is certified against it.
    with federation([200, 200], seed=2) as fed:
        with pytest.raises(InvalidParameterError, match="source-only model is 0 here"):
            ConfidenceBoosting(loss="logistic", radius=10.0, epsilon=2.0, delta=DELTA,
                               iterations=5).fit(fed, Dataset(*PUBLIC, NAMES),
                                                 source_only=np.zeros(DIM))
        assert not any(spent.mechanisms for spent in fed.privacy_spent(DELTA).values())


def test_a_public_source_without_a_majority_label_gives_the_error_score_no_constant():
    # Both labels equally frequent: the constant fits to exactly 0, whose
    # errors the error score cannot count (every record scores log 2).
    features, _ = PUBLIC
    labels = np.where(np.arange(len(features)) % 2 == 0, 1.0, -1.0)
    balanced = Dataset(np.hstack([features[:, :-1], np.ones((len(labels), 1))]), labels,
                       (*NAMES[:-1], "intercept"))
    with federation([200, 200], seed=2) as fed:
        model = ConfidenceBoosting(loss="logistic", radius=10.0, epsilon=2.0, delta=DELTA,
                                   iterations=5).fit(fed, balanced)
    assert model.candidate_names_ == [SOURCE_ONLY, "average", "average:shrink=0.25"]
