"""NoisyGD and NoisySGD: the estimator is the solver function, plus the public shape."""

import math

import numpy as np
import pytest

from privadapt.client.local_federation import LocalFederation
from privadapt.common.data.dataset import Dataset
from privadapt.common.errors import QueryRefusedError
from privadapt.server.algorithms.base import InvalidParameterError, NotFittedError
from privadapt.server.algorithms.gradient_descent.estimators import NoisyGD, NoisySGD
from privadapt.server.algorithms.gradient_descent.noisy_gd import noisy_gd
from privadapt.server.algorithms.gradient_descent.noisy_sgd import noisy_sgd
from privadapt.server.algorithms.public_erm import fit_linear
from tests.synthetic_data import synthetic_dataset

DIM = 4
DATASETS = [synthetic_dataset(120 + 20 * k, DIM, seed=k) for k in range(3)]
SETTINGS = dict(loss="logistic", epsilon=2.0, delta=1e-6, iterations=15, learning_rate=2.0,
                radius=5.0, clip_norm=1.0)


@pytest.fixture
def federation(tmp_path):
    """Sites over DATASETS with seeded noise; each call a fresh set of ledgers."""
    def build(noise_seed=7, name="run", **policy):
        return LocalFederation.from_datasets(
            DATASETS, epsilon_cap=policy.pop("epsilon_cap", 10.0), delta_cap=1e-5,
            ledger_dir=tmp_path / name, noise_seed=noise_seed, **policy)
    return build


def test_fit_returns_self_and_equals_noisy_gd_at_a_fixed_noise_seed(federation):
    expected = noisy_gd(federation(name="function"), dim=DIM, calibration="accountant", **SETTINGS)
    model = NoisyGD(**SETTINGS)
    assert model.fit(federation(name="estimator")) is model
    np.testing.assert_array_equal(model.coef_, expected.weights)
    np.testing.assert_array_equal(model.average_coef_, expected.average_weights)
    assert model.noise_multiplier_ == expected.noise_multiplier
    assert model.history_ == expected.history
    assert model.n_features_in_ == DIM
    assert sorted(model.privacy_) == ["site-1", "site-2", "site-3"]
    for name, spent in model.privacy_.items():
        assert spent.job.epsilon == expected.privacy[name].job.epsilon
        assert 0.99 * SETTINGS["epsilon"] <= spent.job.epsilon <= SETTINGS["epsilon"]


def test_noisy_sgd_equals_the_function_and_records_its_sampling(federation):
    settings = {**SETTINGS, "expected_batch_size": 40.0}
    sites = dict(adjacency="add_remove_one")
    expected = noisy_sgd(federation(name="function", **sites), dim=DIM, num_records=None,
                         count_budget_fraction=0.05, **settings)
    model = NoisySGD(**settings).fit(federation(name="estimator", **sites))
    np.testing.assert_array_equal(model.coef_, expected.weights)
    assert model.sampling_rate_ == expected.sampling_rate
    assert model.num_records_ == expected.num_records
    assert set(model.model_arrays()) == {"weights", "average_weights", "noise_multiplier",
                                         "sampling_rate", "num_records"}


def test_callbacks_are_keyword_arguments_of_fit(federation):
    progress, checkpoints = [], []
    NoisyGD(**SETTINGS).fit(federation(), progress=progress.append, progress_every=5,
                            checkpoint=lambda step, weights: checkpoints.append(step))
    assert [r.iteration for r in progress] == [5, 10, 15]
    assert checkpoints == list(range(1, 16))


def test_dim_comes_from_the_public_source_when_given(federation):
    public = synthetic_dataset(30, DIM, seed=9)
    model = NoisyGD(**SETTINGS).fit(federation(), public)
    assert model.coef_.shape == (DIM,)
    wrong = (np.zeros((5, DIM + 1)), np.ones(5))
    with pytest.raises(QueryRefusedError, match=rf"'weights' must have shape \({DIM},\)"):
        NoisyGD(**SETTINGS).fit(federation(name="wrong"), wrong)


def test_predict_and_score_follow_the_loss(federation):
    model = NoisyGD(**SETTINGS).fit(federation())
    test = synthetic_dataset(200, DIM, seed=11)
    predictions = model.predict(test.features)
    assert set(np.unique(predictions)) <= {-1.0, 1.0}
    assert model.score(test.features, test.labels) == np.mean(predictions == test.labels)
    assert model.score(test.features, test.labels) > 0.8

    squared = NoisyGD(**{**SETTINGS, "loss": "squared", "epsilon": math.inf})
    squared.fit(federation(name="squared", epsilon_cap=math.inf, allow_non_private=True))
    values = squared.predict(test.features)
    np.testing.assert_allclose(values, test.features @ squared.coef_)
    r2 = 1 - np.sum((test.labels - values) ** 2) / np.sum((test.labels - test.labels.mean()) ** 2)
    assert squared.score(test.features, test.labels) == pytest.approx(r2)


def test_predict_before_fit_and_on_the_wrong_shape_is_refused(federation):
    model = NoisyGD(**SETTINGS)
    with pytest.raises(NotFittedError, match="not fitted"):
        model.predict(np.zeros((2, DIM)))
    model.fit(federation())
    with pytest.raises(ValueError, match=rf"shape \(m, {DIM}\)"):
        model.predict(np.zeros((2, DIM + 1)))


def test_noise_free_model_arrays_omit_the_noise_multiplier(federation):
    model = NoisyGD(**{**SETTINGS, "epsilon": math.inf})
    model.fit(federation(epsilon_cap=math.inf, allow_non_private=True))
    assert set(model.model_arrays()) == {"weights", "average_weights"}
    assert math.isinf(model.noise_multiplier_)


def test_sites_of_different_dimensions_have_no_dim(tmp_path):
    data = [synthetic_dataset(20, DIM, seed=0),
            Dataset(np.zeros((20, 2)), np.ones(20), ("a", "b"))]
    federation = LocalFederation.from_datasets(data, epsilon_cap=1.0, delta_cap=1e-5,
                                               ledger_dir=tmp_path)
    with pytest.raises(ValueError, match="different dimensions"):
        NoisyGD(**SETTINGS).fit(federation)


PUBLIC = synthetic_dataset(300, DIM, seed=9)


def ball(**changes):
    """NoisyGD in the ball of radius 0.5 around the source-only model, tail-averaged."""
    return NoisyGD(**{**SETTINGS, "center": "source_only", "radius": 0.5,
                      "source_radius": 5.0, "average": "tail", **changes})


def test_a_ball_around_source_only_charges_every_ledger_exactly_as_plain_noisy_gd(federation):
    plain = NoisyGD(**SETTINGS).fit(federation(name="plain"), PUBLIC)
    centred = ball().fit(federation(name="ball"), PUBLIC)
    assert sorted(centred.privacy_) == sorted(plain.privacy_)
    for site, spent in centred.privacy_.items():
        assert spent.mechanisms == plain.privacy_[site].mechanisms
        assert len(spent.mechanisms) == SETTINGS["iterations"]
        assert spent.job.epsilon == plain.privacy_[site].job.epsilon
    assert centred.noise_multiplier_ == plain.noise_multiplier_


def test_center_source_only_fits_the_public_model_and_delivers_the_tail_average(federation):
    model = ball().fit(federation(), PUBLIC)
    np.testing.assert_allclose(model.center_, fit_linear(PUBLIC.features, PUBLIC.labels,
                                                         "logistic", 5.0))
    np.testing.assert_array_equal(model.coef_, model.tail_average_coef_)
    for weights in (model.coef_, model.average_coef_):
        assert np.linalg.norm(weights - model.center_) <= 0.5 + 1e-9
    np.testing.assert_array_equal(model.model_arrays()["center"], model.center_)
    last = ball(average="none").fit(federation(name="last"), PUBLIC)
    assert not np.array_equal(last.coef_, last.tail_average_coef_)


def test_a_public_model_given_as_the_center_is_used_as_it_is(federation):
    center = np.full(DIM, 0.3)
    model = ball(center=center).fit(federation())
    np.testing.assert_array_equal(model.center_, center)
    assert np.linalg.norm(model.coef_ - center) <= 0.5 + 1e-9


@pytest.mark.parametrize("changes,message", [
    ({}, "pass public_source to fit"),
    ({"center": np.zeros(DIM + 1)}, r"'center' must be a finite model of shape \(4,\)"),
    ({"center": np.full(DIM, np.nan)}, "'center' must be a finite model"),
    ({"radius": "auto"}, "radius='auto' searches balls around the origin"),
    ({"center": "source-only"}, "'center' must be one of 'zero', 'source_only'"),
    ({"average": "last"}, "'average' must be one of 'none', 'tail'"),
])
def test_a_bad_center_is_refused_before_any_release(federation, changes, message):
    fed = federation()
    with pytest.raises(InvalidParameterError, match=message):
        ball(**changes).fit(fed)
    assert all(not spent.mechanisms for spent in fed.privacy_spent(1e-6).values())
