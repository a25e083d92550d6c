"""Noisy projected gradient descent through the Federation protocol."""

import math

import numpy as np
import pytest

from privadapt.client.local_federation import LocalFederation
from privadapt.common.errors import BudgetExceededError
from privadapt.common.numerics.geometry import project_to_ball
from privadapt.server.algorithms.gradient_descent.estimators import NoisyGD
from privadapt.server.algorithms.gradient_descent.noisy_gd import noisy_gd, paper_noise_multiplier
from privadapt.server.algorithms.public_erm import accuracy, fit_linear

DIM = 5
SETTINGS = {"dim": DIM, "loss": "logistic", "learning_rate": 2.0, "radius": 5.0, "clip_norm": 1.0,
            "calibration": "accountant"}


def sites(make_site, count=3, **fields):
    return [make_site(f"site-{k}", num_records=300, seed=k, **fields) for k in range(count)]


def pooled(site_list):
    return (np.vstack([s._data.features for s in site_list]),
            np.concatenate([s._data.labels for s in site_list]))


def test_non_private_run_reaches_the_constrained_optimum(make_site):
    site_list = sites(make_site, epsilon_cap=math.inf)
    result = noisy_gd(LocalFederation(site_list), epsilon=math.inf, delta=1e-6, iterations=400,
                      **SETTINGS)
    features, labels = pooled(site_list)
    optimum = fit_linear(features, labels, "logistic", SETTINGS["radius"])
    assert np.linalg.norm(result.weights - optimum) < 0.05 * np.linalg.norm(optimum)


def test_private_run_charges_the_planned_epsilon_at_every_site(make_site):
    site_list = sites(make_site, epsilon_cap=2.0, delta_cap=1e-5)
    result = noisy_gd(LocalFederation(site_list), epsilon=2.0, delta=1e-5, iterations=30,
                      **SETTINGS)
    for spent in result.privacy.values():
        assert spent.job.epsilon <= 2.0
        assert spent.job.epsilon == pytest.approx(2.0, rel=2e-3)
        assert spent.job.method.value == "pld"
        assert len(spent.mechanisms) == 30


def test_private_run_is_useful_on_easy_data(make_site):
    site_list = sites(make_site)
    result = noisy_gd(LocalFederation(site_list), epsilon=5.0, delta=1e-5, iterations=30,
                      **SETTINGS)
    features, labels = pooled(site_list)
    assert accuracy(result.weights, features, labels) > 0.8


def test_weights_never_leave_the_ball(make_site):
    settings = {**SETTINGS, "radius": 0.3, "learning_rate": 50.0}
    result = noisy_gd(LocalFederation(sites(make_site)), epsilon=1.0, delta=1e-5, iterations=20,
                      **settings)
    assert all(r.weights_norm <= 0.3 + 1e-12 for r in result.history)
    assert len(result.history) == 20


def test_job_larger_than_a_site_cap_fails_naming_that_site(make_site):
    site_list = [*sites(make_site, count=2), make_site("small-cap", seed=9, epsilon_cap=0.5)]
    with pytest.raises(BudgetExceededError, match="small-cap"):
        noisy_gd(LocalFederation(site_list), epsilon=1.0, delta=1e-6, iterations=10, **SETTINGS)


def test_paper_calibration_is_looser_than_the_accountant(make_site):
    result = noisy_gd(LocalFederation(sites(make_site)), epsilon=1.0, delta=1e-5, iterations=10,
                      **{**SETTINGS, "calibration": "paper"})
    assert result.noise_multiplier == pytest.approx(paper_noise_multiplier(1.0, 1e-5, 10))
    for spent in result.privacy.values():
        assert spent.job.epsilon < 1.0


def test_progress_is_reported_per_block(make_site):
    seen = []
    noisy_gd(LocalFederation(sites(make_site)), epsilon=1.0, delta=1e-5, iterations=25,
             progress=seen.append, progress_every=10, **SETTINGS)
    assert [r.iteration for r in seen] == [10, 20, 25]


@pytest.mark.parametrize("field,value", [("iterations", 0), ("learning_rate", 0.0),
                                         ("radius", -1.0), ("epsilon", 0.0)])
def test_bad_arguments_are_refused(make_site, field, value):
    arguments = {**SETTINGS, "epsilon": 1.0, "delta": 1e-5, "iterations": 5, field: value}
    del arguments["dim"]
    with pytest.raises(ValueError, match=field):  # the estimator checks what the solver takes
        NoisyGD(**arguments).fit(LocalFederation(sites(make_site, count=1)))


def test_projection_scales_onto_the_sphere():
    np.testing.assert_allclose(project_to_ball(np.array([3.0, 4.0]), 1.0), [0.6, 0.8])
    np.testing.assert_array_equal(project_to_ball(np.array([0.3, 0.4]), 1.0), [0.3, 0.4])
