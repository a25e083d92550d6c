"""The private grid search plans every release before its first one: guesses
whose selection release the federation's fixed-point grid cannot carry are
dropped, a training release it cannot carry refuses the fit with nothing
charged, and the budgets are scaled so that the sites' accountant composes
the whole search to epsilon. epsilon = inf runs it without noise."""

import math

import numpy as np
import pytest

from privadapt import Dataset, LocalFederation, NoisyGD
from privadapt.common.accounting.accountant import epsilon_spent
from privadapt.common.errors import QueryRefusedError
from privadapt.common.numerics.fixed_point import FixedPointCodec
from privadapt.server.algorithms.model_selection.grid_search import PrivateGridSearch

DIM, DELTA = 4, 1e-5
NAMES = tuple(f"x{i}" for i in range(DIM))


def records(n, seed):
    """||x|| = 1, y = w*.x + noise clipped to [-1, 1] (r = Y = 1)."""
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(n, DIM))
    features /= np.linalg.norm(features, axis=1, keepdims=True)
    labels = np.clip(features @ np.full(DIM, 0.4) + 0.1 * rng.normal(size=n), -1, 1)
    return features, labels


def federations(seed, num_sites=3, n=600, epsilon_cap=20.0, **options):
    features, labels = records(n, seed)

    def federation(rows, noise_seed):
        parts = [Dataset(features[r], labels[r], NAMES) for r in np.array_split(rows, num_sites)]
        return LocalFederation.from_datasets(parts, epsilon_cap=epsilon_cap, delta_cap=1e-3,
                                             noise_seed=noise_seed, **options)

    return federation(np.arange(n // 2), seed), federation(np.arange(n // 2, n), seed + 500)


def search(epsilon=1.0, **params):
    learner = NoisyGD(loss="squared", epsilon=1.0, delta=1e-6, iterations=10,
                      learning_rate=0.5, radius=1.0, clip_norm=2.0)
    settings = {"learner": learner, "num_guesses": 5, "epsilon": epsilon, "delta": DELTA,
                "loss": "squared", "label_bound": 1.0, "feature_bound": 1.0}
    return PrivateGridSearch(**{**settings, **params})


def composed_epsilons(train, validation):
    """Each site's two ledgers (S1's and S2's) composed by the ledgers' accountant."""
    return [epsilon_spent([*a.mechanisms, *b.mechanisms], DELTA).epsilon
            for a, b in zip(train.privacy_spent(DELTA).values(),
                            validation.privacy_spent(DELTA).values(), strict=True)]


def test_k5_at_epsilon_1_runs_with_the_paired_score_and_drops_nothing():
    train, validation = federations(0)
    with train, validation:
        model = search().fit(train, validation)
    # Normalised paired entries: noise z 2 sqrt(K') times each clip, far inside the grid.
    assert model.dropped_ == () and len(model.candidates_) == 6


def test_k5_at_epsilon_1_drops_the_guesses_the_grid_cannot_carry_instead_of_refusing():
    # The paper's score: guess j's noise is z Delta(2^j), growing like 4^j.
    train, validation = federations(0)
    with train, validation:
        model = search(composition="basic", selection_score="penalised").fit(train, validation)
    assert model.dropped_ and model.dropped_[-1] == 5  # the largest guess went first
    assert len(model.candidates_) == 1 + 5 - len(model.dropped_)
    assert np.max(model.noise_stds_) <= 2.0**20 / 100  # every selection release fits the 2^-32 grid


def test_the_joint_calibration_spends_the_whole_epsilon_and_no_more():
    train, validation = federations(1)
    with train, validation:
        model = search(epsilon=2.0).fit(train, validation)
        spent = composed_epsilons(train, validation)
        basic = search(epsilon=2.0, composition="basic")
        train2, validation2 = federations(1)
        with train2, validation2:
            basic.fit(train2, validation2)
            spent_basic = composed_epsilons(train2, validation2)
    assert model.budget_scale_ > 1.0  # basic composition left part of epsilon unspent
    assert all(1.9 <= value <= 2.0 for value in spent), spent
    assert all(value < 1.6 for value in spent_basic), spent_basic


def test_a_classifiers_error_scored_search_spends_the_whole_epsilon_and_no_more():
    # The classifier's default: one release of the error counts after training.
    features, labels = records(600, 2)
    signs = np.where(labels >= 0, 1.0, -1.0)

    def federation(rows, noise_seed):
        parts = [Dataset(features[r], signs[r], NAMES) for r in np.array_split(rows, 3)]
        return LocalFederation.from_datasets(parts, epsilon_cap=20.0, delta_cap=1e-3,
                                             noise_seed=noise_seed)

    learner = NoisyGD(loss="logistic", epsilon=1.0, delta=1e-6, iterations=10, radius=1.0,
                      learning_rate=1.0,
                      clip_norm=2.0)
    train, validation = federation(np.arange(300), 2), federation(np.arange(300, 600), 502)
    with train, validation:
        model = search(epsilon=2.0, learner=learner, loss="logistic").fit(train, validation)
        spent = composed_epsilons(train, validation)
        selection = validation.privacy_spent(DELTA)["site-1"].mechanisms
    assert model.candidate_names_[0] == "zero" and len(selection) == 1
    assert all(1.9 <= value <= 2.0 for value in spent), spent


def test_a_training_release_the_grid_cannot_carry_is_refused_before_any_charge():
    train, validation = federations(2)
    train.codec = FixedPointCodec(50)  # grid-safe noise 2^2 / 100: no Gaussian step fits
    with train, validation:
        with pytest.raises(QueryRefusedError, match=r"planned refusal, nothing was charged: "
                                                     r"the sites would refuse the training "
                                                     r"release 1 \(linear_gradient"):
            search().fit(train, validation)
        assert all(not spent.mechanisms for spent in train.privacy_spent().values())
        assert all(not spent.mechanisms for spent in validation.privacy_spent().values())


def test_a_selection_no_guess_of_which_fits_the_grid_is_refused_before_any_charge():
    train, validation = federations(3)
    validation.codec = FixedPointCodec(48)  # grid-safe noise 0.16: below z Delta(2)
    with train, validation:
        with pytest.raises(QueryRefusedError, match="the selection release"):
            search(selection_score="penalised").fit(train, validation)
        assert all(not spent.mechanisms for spent in train.privacy_spent().values())


def test_epsilon_inf_runs_the_search_without_noise():
    train, validation = federations(4, epsilon_cap=math.inf, allow_non_private=True)
    with train, validation:
        model = search(epsilon=math.inf).fit(train, validation)
    assert model.dropped_ == () and model.budget_scale_ == 1.0
    features, labels = records(500, 99)
    assert model.score(features, labels) > 0.8
