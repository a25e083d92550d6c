"""Noisy projected gradient descent through the Federation protocol."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privadapt.client.local_federation import LocalFederation
from privadapt.common.errors import BudgetExceededError
from privadapt.common.numerics.geometry import project_to_ball
from privadapt.server.algorithms.gradient_descent.estimators import NoisyGD
from privadapt.server.algorithms.gradient_descent.noisy_gd import (
    gradient_mechanism,
    noisy_gd,
    paper_noise_multiplier,
    projected_gradient_descent,
)
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


class ScriptedGradients:
    """A federation stand-in whose linear_gradient answers are drawn from a
    seeded generator at ``scale``; it records the weights each query carried."""

    def __init__(self, seed: int, scale: float) -> None:
        self.site_sizes = {"only": 1}
        self.rng, self.scale, self.sent = np.random.default_rng(seed), scale, []

    def query(self, kernel, params, mechanism):
        self.sent.append(np.asarray(params["weights"], dtype=float))
        return SimpleNamespace(value=self.scale * self.rng.normal(size=DIM))


def descend(federation, *, center, radius, iterations=9, learning_rate=1.0,
            initial_weights=None, checkpoint=None):
    mechanism = gradient_mechanism(math.inf, 0.0, iterations, 1.0, "accountant", dim=DIM)
    return projected_gradient_descent(
        federation, mechanism, dim=DIM, loss="squared", clip_norm=1.0, gradient_scale=1.0,
        iterations=iterations, learning_rate=learning_rate, radius=radius,
        initial_weights=initial_weights, progress=None, progress_every=10,
        checkpoint=checkpoint, center=center)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), radius=st.floats(1e-3, 10.0),
       scale=st.floats(1e-3, 1e3), offset=st.floats(-50.0, 50.0))
def test_every_iterate_stays_in_the_ball_around_its_center(seed, radius, scale, offset):
    center = offset + np.random.default_rng(seed).normal(size=DIM)
    iterates = []
    path = descend(ScriptedGradients(seed, scale), center=center, radius=radius,
                   checkpoint=lambda _, w: iterates.append(w.copy()))
    slack = 1e-9 * (1.0 + radius + np.linalg.norm(center))
    for weights in [*iterates, path.average, path.tail_average]:
        assert np.linalg.norm(weights - center) <= radius + slack


def test_the_descent_starts_at_its_center_unless_given_a_start():
    center = np.linspace(-1.0, 1.0, DIM)
    federation = ScriptedGradients(0, 1.0)
    descend(federation, center=center, radius=0.5, iterations=1)
    np.testing.assert_array_equal(federation.sent[0], center)
    step = np.array([1.0, 0.0, 0.0, 0.0, 0.0])
    far = center + 3.0 * step
    federation = ScriptedGradients(0, 1.0)
    descend(federation, center=center, radius=0.5, iterations=1, initial_weights=far)
    np.testing.assert_allclose(federation.sent[0], center + 0.5 * step)


@pytest.mark.parametrize("iterations", [1, 8, 9])
def test_the_tail_average_is_the_mean_of_the_last_half_of_the_iterates(iterations):
    iterates = []
    path = descend(ScriptedGradients(3, 1.0), center=np.ones(DIM), radius=2.0,
                   iterations=iterations, checkpoint=lambda _, w: iterates.append(w.copy()))
    tail = iterates[iterations // 2:]
    assert len(tail) == math.ceil(iterations / 2)
    np.testing.assert_allclose(path.tail_average, np.mean(tail, axis=0), rtol=1e-12)
    np.testing.assert_allclose(path.average, np.mean(iterates, axis=0), rtol=1e-12)
    np.testing.assert_array_equal(path.last, iterates[-1])


def test_without_a_center_the_ball_is_around_the_origin_as_before():
    iterates = []
    path = descend(ScriptedGradients(5, 10.0), center=None, radius=0.3,
                   checkpoint=lambda _, w: iterates.append(w.copy()))
    assert all(np.linalg.norm(w) <= 0.3 + 1e-12 for w in iterates)
    assert np.linalg.norm(path.last) == pytest.approx(0.3)
