"""The private grid search with a public source never delivers a model below
the free ones: on a small heavy-tailed regression (source-only's loss bitten
by outlying covariates) and on a small classification shift (source-only
below the majority class), at epsilon 1, 10 and inf, the delivered model's
target loss is at most source-only's (the certified guarantee) and the
public constant's, and its accuracy at least the majority class's (the
classifier's error score certifies a guess against both free models and
otherwise delivers the one of fewer noisy errors)."""

import functools
import math

import numpy as np
import pytest

from privadapt import Dataset, LocalFederation, NoisyGD
from privadapt.common.losses import loss_values
from privadapt.server.algorithms.model_selection.grid_search import PrivateGridSearch

DELTA = 1e-5
SLACK = 0.02  # relative: the choice is made on validation records, scored on test ones


def heavy_tailed(rng, n):
    """Target: 88% bulk x ~ N(0, 0.35^2 I), slope 0.35 w*; 12% outlying
    covariates x ~ N(0, 2.5^2 I), slope w* + 0.8 (e_1 - e_5); Student-t noise;
    an intercept column last."""
    truth = np.array([1.0, -0.5, 0.5, 0.25, -1.0])
    outlying = rng.random(n) < 0.12
    features = rng.normal(size=(n, 5)) * np.where(outlying, 2.5, 0.35)[:, None]
    slope = np.where(outlying[:, None], truth + 0.8 * np.array([1, 0, 0, 0, -1.0]),
                     0.35 * truth)
    labels = np.sum(features * slope, axis=1) + 0.3 * rng.standard_t(3, size=n)
    return np.column_stack([features, np.ones(n)]), labels


def heavy_tailed_source(rng, m):
    truth = np.array([1.0, -0.5, 0.5, 0.25, -1.0])
    features = rng.normal(size=(m, 5))
    return np.column_stack([features, np.ones(m)]), features @ truth + 0.5 * rng.normal(size=m)


def shifted_classes(rng, n, source):
    """Labels +-1 with the positive class the majority on both sides; the
    source's labels follow x_1, the target's x_2 - x_1."""
    features = rng.normal(size=(n, 3))
    score = features[:, 0] if source else features[:, 1] - features[:, 0]
    labels = np.where(score + 0.6 + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)
    return np.column_stack([features, np.ones(n)]), labels


def row(name, seed):
    rng = np.random.default_rng(seed)
    if name == "heavy-tail":
        target, test = heavy_tailed(rng, 1200), heavy_tailed(rng, 4000)
        return "squared", target, test, heavy_tailed_source(rng, 500)
    return ("logistic", shifted_classes(rng, 1200, False), shifted_classes(rng, 4000, False),
            shifted_classes(rng, 500, True))


def federations(target, seed, epsilon):
    features, labels = target
    names = tuple(f"x{i}" for i in range(features.shape[1]))
    finite = math.isfinite(epsilon)

    def federation(rows, noise_seed):
        parts = [Dataset(features[r], labels[r], names) for r in np.array_split(rows, 3)]
        return LocalFederation.from_datasets(
            parts, epsilon_cap=20.0 if finite else math.inf, delta_cap=1e-3,
            noise_seed=noise_seed, allow_non_private=not finite)

    split = len(labels) * 3 // 4
    return federation(np.arange(split), seed), federation(np.arange(split, len(labels)),
                                                          seed + 1)


@functools.cache  # both tests read the same fit
def fit(name, epsilon, seed):
    loss, target, test, source = row(name, seed)
    finite = math.isfinite(epsilon)
    learner = NoisyGD(loss=loss, epsilon=epsilon, delta=DELTA if finite else 0.0,
                      iterations=30, learning_rate=0.5 if loss == "squared" else 1.0,
                      radius=1.0, clip_norm=2.0)
    search = PrivateGridSearch(learner=learner, num_guesses=3, epsilon=epsilon,
                               delta=DELTA if finite else 0.0, loss=loss, label_bound=3.0,
                               feature_bound=3.0)
    train, validation = federations(target, seed, epsilon)
    with train, validation:
        search.fit(train, validation, source)
    return loss, search, test


def target_loss(loss, weights, test):
    features, labels = test
    return float(np.mean(loss_values(loss, features @ weights, labels)))


ROWS = [(name, epsilon) for name in ("heavy-tail", "classes")
        for epsilon in (1.0, 10.0, math.inf)]


@pytest.mark.parametrize(("name", "epsilon"), ROWS)
def test_the_delivered_model_is_never_worse_than_source_only(name, epsilon):
    loss, search, test = fit(name, epsilon, seed=7)
    assert search.candidate_names_[:2] == ["source_only", "public_constant"]
    source_only = target_loss(loss, search.candidates_[0], test)
    delivered = target_loss(loss, search.coef_, test)
    assert delivered <= source_only * (1 + SLACK), (
        search.candidate_names_[search.best_index_], delivered, source_only)


@pytest.mark.parametrize(("name", "epsilon"), ROWS)
def test_the_delivered_model_is_never_worse_than_the_public_constant(name, epsilon):
    loss, search, test = fit(name, epsilon, seed=7)
    constant = target_loss(loss, search.candidates_[1], test)
    delivered = target_loss(loss, search.coef_, test)
    assert delivered <= constant * (1 + SLACK), (
        search.candidate_names_[search.best_index_], delivered, constant)
    if loss == "logistic":  # the constant predicts the majority class
        features, labels = test
        majority = max(np.mean(labels > 0), np.mean(labels < 0))
        accuracy = np.mean(np.sign(features @ search.coef_) == labels)
        assert accuracy >= majority - SLACK, (accuracy, majority)
