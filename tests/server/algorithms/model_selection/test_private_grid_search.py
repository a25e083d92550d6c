"""private_grid_search (seed 004, Algorithm 1): the accounting is the plan (K
trainings at epsilon/2K on S1, one selection at epsilon/2 on S2, on every
site's ledger), and on synthetic data with ||w*|| = 4 the chosen guess is
4 or 8 in most seeds."""

import inspect
import math

import numpy as np
import pytest

import privadapt
from privadapt import Dataset, LocalFederation, NoisyGD
from privadapt.common.mechanisms import GaussianMechanism, GeneralizedExponentialMechanism
from privadapt.server.algorithms.base import InvalidParameterError, clone
from privadapt.server.algorithms.model_selection.grid_search import PrivateGridSearch
from privadapt.server.algorithms.model_selection.private_grid_search import (
    loss_bound,
    penalty,
    private_grid_search,
)

DIM, NORM, LABEL_BOUND, DELTA = 5, 4.0, 5.0, 1e-5
ITERATIONS = 20
NAMES = tuple(f"x{i}" for i in range(DIM))


def records(n, seed):
    """Features on the unit sphere, y = w*.x + noise with ||w*|| = 4, |y| <= 5."""
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(n, DIM))
    features /= np.linalg.norm(features, axis=1, keepdims=True)
    weights = np.full(DIM, NORM / math.sqrt(DIM))
    labels = np.clip(features @ weights + 0.3 * rng.normal(size=n), -LABEL_BOUND, LABEL_BOUND)
    return features, labels


def federations(seed, num_sites=1, n=2000):
    """S1 and S2: the first and second half of every site's records."""
    features, labels = records(n, seed)

    def federation(rows, noise_seed):
        parts = [Dataset(features[r], labels[r], NAMES)
                 for r in np.array_split(rows, num_sites)]
        return LocalFederation.from_datasets(parts, epsilon_cap=20.0, delta_cap=1e-3,
                                             noise_seed=noise_seed)

    return federation(np.arange(n // 2), seed), federation(np.arange(n // 2, n), seed + 1000)


LEARNER = NoisyGD(loss="squared", epsilon=1.0, delta=1e-6, iterations=ITERATIONS,
                  learning_rate=0.5, radius=1.0, clip_norm=10.0)


def search(train, validation, epsilon=5.0, num_guesses=5, **options):
    return private_grid_search(
        train, validation, num_guesses=num_guesses, learner=LEARNER, loss="squared",
        label_bound=LABEL_BOUND, feature_bound=1.0, epsilon=epsilon, delta=DELTA, beta=0.1,
        method="auto", num_validation_records=None, **options)


def test_the_learners_are_cloned_per_guess_at_epsilon_over_2k():
    train, validation = federations(0)
    with train, validation:
        result = search(train, validation, epsilon=3.0, num_guesses=3)
    assert [m.radius for m in result.learners] == [2.0, 4.0, 8.0]
    assert all(m.epsilon == 0.5 and m.delta == DELTA / 6 for m in result.learners)
    assert LEARNER.radius == 1.0 and LEARNER.epsilon == 1.0  # the template is untouched


def test_the_single_holder_ledgers_are_k_trainings_and_one_gem_at_epsilon_over_2():
    train, validation = federations(1)
    with train, validation:
        result = search(train, validation, epsilon=3.0, num_guesses=3)
    assert result.method == "exponential"
    (trained,) = result.train_privacy.values()
    assert len(trained.mechanisms) == 3 * ITERATIONS
    assert all(isinstance(m, GaussianMechanism) for m in trained.mechanisms)
    # Each run is (0.5, delta/6); the accountant composes the three within (1.5, delta/2).
    assert 0.5 < trained.job.epsilon <= 1.5
    (selected,) = result.validation_privacy.values()
    (gem,) = selected.mechanisms
    assert isinstance(gem, GeneralizedExponentialMechanism)
    assert gem.epsilon == 1.5 and gem.beta == pytest.approx(0.1 / 4)
    assert len(gem.sensitivities) == 4  # the zero model and three guesses
    # Pure 1.5-DP; the accountant's RDP reading at delta may report a hair less.
    assert selected.job.epsilon <= 1.5
    assert selected.job.epsilon == pytest.approx(1.5, rel=2e-3)


def test_several_sites_release_one_gaussian_sum_per_guess_at_epsilon_over_2_in_all():
    train, validation = federations(2, num_sites=3)
    with train, validation:
        result = search(train, validation, epsilon=3.0, num_guesses=3)
    assert result.method == "secure_sum"
    assert np.isnan(result.noisy_sums[0]) and result.noise_stds[0] == 0  # the public zero model
    assert np.all(np.diff(result.noise_stds[1:]) > 0)  # noise in proportion to Delta(B_j)
    for trained, selected in zip(result.train_privacy.values(),
                                 result.validation_privacy.values(), strict=True):
        assert len(trained.mechanisms) == 3 * ITERATIONS
        assert trained.job.epsilon <= 1.5
        assert len(selected.mechanisms) == 3
        assert selected.job.epsilon <= 1.5
        assert selected.job.epsilon == pytest.approx(1.5, rel=2e-3)


def test_the_zero_model_has_a_public_score_and_the_guesses_their_own_bound_and_penalty():
    train, validation = federations(3)
    with train, validation:
        result = search(train, validation, num_guesses=2)
    np.testing.assert_array_equal(result.candidates[0], np.zeros(DIM))
    np.testing.assert_array_equal(result.loss_bounds, [0.0, 49.0, 81.0])  # (B r + Y)^2
    n = result.num_validation_records
    assert result.penalties[0] == LABEL_BOUND**2 * n
    log_term = math.log(4 * 2 / 0.1)
    assert result.penalties[2] == pytest.approx(81 * log_term + math.sqrt(4 * 25 * n * log_term))
    np.testing.assert_array_equal(result.weights, result.candidates[result.best_index])


def test_a_source_model_takes_candidate_zero_with_its_own_private_bound():
    source = np.full(DIM, 0.5)
    train, validation = federations(4)
    with train, validation:
        result = search(train, validation, num_guesses=2, source_model=source)
    bound = loss_bound("squared", float(np.linalg.norm(source)), 1.0, LABEL_BOUND)
    assert result.loss_bounds[0] == pytest.approx((np.linalg.norm(source) + 5) ** 2)
    assert result.loss_bounds[0] == bound
    assert result.penalties[0] == penalty(bound, 25.0, 1000, 2, 0.1)
    np.testing.assert_array_equal(result.candidates[0], source)


@pytest.mark.slow
def test_the_chosen_norm_is_close_to_the_true_norm_in_most_seeds():
    # Measured (20 seeds, n = 2000 split 1000 / 1000, K = 5, epsilon = 5, one
    # site): B = 4 in 18, B = 2 in 2.
    chosen = []
    for seed in range(20):
        train, validation = federations(seed)
        with train, validation:
            result = search(train, validation)
        chosen.append(result.radii[result.best_index - 1] if result.best_index else 0.0)
    assert sum(radius in (4.0, 8.0) for radius in chosen) >= 15


@pytest.mark.parametrize("options, message", [
    ({"loss": "softmax_cross_entropy"}, "'loss' must be one of"),
    ({"num_guesses": 0}, "num_guesses"),
    ({"label_bound": -1.0}, "label_bound"),
])
def test_bad_settings_are_refused(options, message):
    settings = {"num_guesses": 2, "learner": LEARNER, "loss": "squared",
                "label_bound": LABEL_BOUND, "feature_bound": 1.0, "epsilon": 1.0,
                "delta": DELTA}
    train, validation = federations(5)
    with train, validation, pytest.raises(ValueError, match=message):
        PrivateGridSearch(**{**settings, **options}).fit(train, validation)


# ----------------------------------------------------------------- the estimator


def grid_search(**params):
    settings = {"learner": LEARNER, "num_guesses": 5, "epsilon": 5.0, "delta": DELTA,
                "loss": "squared", "label_bound": LABEL_BOUND, "feature_bound": 1.0}
    return PrivateGridSearch(**{**settings, **params})


def test_the_estimator_declares_its_signature_and_clones_its_learner():
    names = [p for p in inspect.signature(PrivateGridSearch.__init__).parameters if p != "self"]
    assert set(PrivateGridSearch._parameter_constraints) == set(names)
    model = grid_search()
    copy = clone(model)
    assert copy.learner is not model.learner
    assert copy.learner.get_params() == model.learner.get_params()
    assert privadapt.PrivateGridSearch is PrivateGridSearch


def test_the_estimator_fits_the_chosen_guess_and_predicts_with_it():
    train, validation = federations(7)
    with train, validation:
        model = grid_search().fit(train, validation)
    guess = model.best_index_ - 1  # after the zero model
    assert guess >= 0 and model.radius_ == model.radii_[guess]
    np.testing.assert_array_equal(model.coef_, model.learners_[guess].coef_)
    features, labels = records(500, seed=99)
    assert model.score(features, labels) > 0.5  # R^2 of the chosen linear model
    assert set(model.model_arrays()) == {"weights", "candidates", "radii", "best_index"}


def test_the_estimator_needs_a_validation_federation():
    train, validation = federations(8)
    with train, validation, pytest.raises(InvalidParameterError, match="validation_federation"):
        grid_search().fit(train)


def test_with_a_public_source_the_free_models_lead_and_the_guesses_are_offsets_around_it():
    train, validation = federations(9)
    public = records(1000, seed=123)
    with train, validation:
        model = grid_search(num_guesses=3).fit(train, validation, public)
    source = model.candidates_[0]
    assert np.linalg.norm(source) > 3  # the public ERM, not the zero model
    assert model.candidate_names_ == ["source_only", "guess 1", "guess 2", "guess 3"]
    np.testing.assert_allclose(model.radii_, np.linalg.norm(source) * np.array([.25, .5, 1]))
    (trained,) = model.learners_  # one model, in the largest ball; the others project it
    # Noisy GD descends in that ball around the source-only model itself.
    assert trained.radius == pytest.approx(model.radii_[-1])
    np.testing.assert_array_equal(trained.center_, source)
    assert np.linalg.norm(trained.coef_ - source) <= model.radii_[-1] * (1 + 1e-12)
    offsets = np.linalg.norm(model.candidates_[1:] - source, axis=1)
    assert np.all(offsets <= model.radii_ * (1 + 1e-12))
    assert np.all(model.loss_bounds_ > 0)  # every candidate scored privately


def test_a_public_source_with_an_intercept_adds_the_public_constant():
    train, validation = federations(12)
    features, labels = records(1000, seed=124)
    public = Dataset(np.column_stack([features[:, :-1], np.ones(1000)]), labels, NAMES)
    with train, validation:
        model = grid_search(num_guesses=2).fit(train, validation, public)
    assert model.candidate_names_[:2] == ["source_only", "public_constant"]
    constant = model.candidates_[1]
    assert np.count_nonzero(constant) == 1 and constant[-1] == pytest.approx(labels.mean())


def test_without_include_source_only_the_zero_model_leads_as_in_the_paper():
    train, validation = federations(13)
    with train, validation:
        model = grid_search(num_guesses=2, include_source_only=False).fit(
            train, validation, records(1000, seed=125))
    assert model.candidate_names_[0] == "zero" and len(model.learners_) == 2


@pytest.mark.parametrize("params, message", [
    ({"learner": "noisy_gd"}, "learner"),
    ({"loss": "softmax_cross_entropy"}, "'loss' must be one of"),
    ({"epsilon": 0.0}, "epsilon"),
])
def test_bad_hyperparameters_are_refused_at_fit(params, message):
    train, validation = federations(10)
    with train, validation, pytest.raises(InvalidParameterError, match=message):
        grid_search(**params).fit(train, validation)


def test_a_classifier_whose_only_free_model_is_zero_is_scored_against_it_in_log_loss():
    # The release cannot count the zero model's errors (each record scores
    # log 2 whatever its label), so "auto" certifies against it in log loss
    # and "error" is refused before any query.
    features, labels = records(800, seed=14)
    labels = np.where(labels >= 0, 1.0, -1.0)

    def federation(rows, noise_seed):
        return LocalFederation.from_datasets(
            [Dataset(features[r], labels[r], NAMES) for r in np.array_split(rows, 2)],
            epsilon_cap=20.0, delta_cap=1e-3, noise_seed=noise_seed)

    learner = NoisyGD(loss="logistic", epsilon=1.0, delta=1e-6, iterations=5,
                      learning_rate=0.5, radius=1.0, clip_norm=1.0)
    settings = {"learner": learner, "loss": "logistic", "label_bound": 1.0, "num_guesses": 2}
    train, validation = federation(np.arange(400), 14), federation(np.arange(400, 800), 15)
    with train, validation:
        with pytest.raises(InvalidParameterError, match="cannot count"):
            grid_search(selection_score="error", **settings).fit(train, validation)
        for ledgers in (train.privacy_spent(), validation.privacy_spent()):
            assert not any(spent.mechanisms for spent in ledgers.values())
        model = grid_search(**settings).fit(train, validation)
    assert model.selection_score_ == "paired" and model.candidate_names_[0] == "zero"
