"""OutputPerturbation: one release per site, charged as planned (at most the
target epsilon, within the accountant's discretisation of it); without noise
it is the site's certified solution; at a large epsilon it learns; several
sites each release their own model; a record-part view sizes the solver for
the whole site; confidence boosting can use it as its per-site learner."""

import math

import numpy as np
import pytest

from privadapt import Dataset, LocalFederation
from privadapt.common.accounting.calibration import calibrate_noise_multiplier
from privadapt.common.data.record_parts import RecordPart
from privadapt.common.kernels.regularized_erm import (
    RegularizedERM,
    RegularizedERMParams,
    solver_error,
)
from privadapt.server.algorithms.base import clone
from privadapt.server.algorithms.model_selection.confidence_boosting import ConfidenceBoosting
from privadapt.server.algorithms.output_perturbation.estimators import OutputPerturbation
from privadapt.server.algorithms.output_perturbation.perturbed_erm import record_bound

DIM = 5
TARGET = np.array([1.0, -2.0, 0.5, 1.5, 1.0])
NAMES = tuple(f"x{i}" for i in range(DIM))
DELTA = 1e-5


def logistic(n, seed, weights=TARGET):
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(n, DIM)) / np.sqrt(DIM)
    labels = np.where(features @ weights + 0.1 * rng.normal(size=n) >= 0, 1.0, -1.0)
    return features, labels


def federation(sizes, seed=0, epsilon_cap=20.0, **options):
    datasets = [Dataset(*logistic(n, seed * 10 + k), NAMES) for k, n in enumerate(sizes)]
    return LocalFederation.from_datasets(datasets, noise_seed=seed, epsilon_cap=epsilon_cap,
                                         delta_cap=1e-3, **options)


def model(**params):
    settings = {"loss": "logistic", "regularization": 5.0, "radius": 10.0, "epsilon": 2.0,
                "delta": DELTA}
    return OutputPerturbation(**{**settings, **params})


def test_a_single_holder_is_charged_one_release_at_the_target():
    with federation([800]) as fed:
        fitted = model().fit(fed)
        spent = fed.privacy_spent(DELTA)["site-1"]
    assert len(spent.mechanisms) == 1
    assert spent.job.epsilon <= 2.0
    assert spent.job.epsilon == pytest.approx(2.0, rel=2e-3)
    assert fitted.tolerance_ <= 1e-3 * (1.0 / 5.0) * 1.01  # the share of G / lambda asked
    assert set(fitted.site_coefs_) == {"site-1"}
    np.testing.assert_array_equal(fitted.coef_, fitted.site_coefs_["site-1"])


def test_without_noise_it_is_the_sites_certified_solution():
    with federation([300], epsilon_cap=math.inf, allow_non_private=True) as fed:
        fitted = model(epsilon=math.inf, delta=0.0).fit(fed)
    params = RegularizedERMParams("logistic", 5.0, 10.0, 1.0, 1.0, fitted.iterations_)
    (exact,) = RegularizedERM().compute(Dataset(*logistic(300, 0), NAMES), params, {})
    np.testing.assert_allclose(fitted.coef_, exact, atol=2.0**-30)


def test_it_learns_at_a_large_epsilon():
    test = logistic(2000, seed=12345)
    with federation([3000], seed=1) as fed:
        fitted = model(epsilon=10.0, regularization=20.0).fit(fed)
    assert fitted.score(*test) > 0.9


def test_several_sites_each_release_their_own_model_once():
    with federation([300, 600], seed=2) as fed:
        fitted = model().fit(fed)
        spent = fed.privacy_spent(DELTA)
    assert [len(spent[s].mechanisms) for s in ("site-1", "site-2")] == [1, 1]
    average = (300 * fitted.site_coefs_["site-1"] + 600 * fitted.site_coefs_["site-2"]) / 900
    np.testing.assert_allclose(fitted.coef_, average)
    assert clone(fitted).get_params() == fitted.get_params()
    assert fitted.model_arrays()["site_weights"].shape == (2, DIM)


def test_a_record_part_is_sized_for_the_whole_site():
    with federation([1000], seed=3) as fed:
        part = RecordPart("train", 0.25, fed.job_id)
        view = fed.restricted_to(part)
        bound = record_bound(view, view.site_sizes["site-1"])
        assert bound >= 1000
        fitted = model().fit(view)
        spent = fed.privacy_spent(DELTA)["site-1"]
    # The site charges at its own n (<= the planned bound): at most the target.
    assert spent.job.epsilon <= 2.0
    params = RegularizedERMParams("logistic", 5.0, 10.0, 1.0, 1.0, fitted.iterations_)
    assert solver_error(params, DIM, 1000) <= fitted.tolerance_


def test_confidence_boosting_with_output_perturbation_charges_each_site_twice():
    public = logistic(1000, seed=99, weights=-TARGET)
    with federation([600, 400], seed=4) as fed:
        boosted = ConfidenceBoosting(loss="logistic", radius=10.0, epsilon=2.0, delta=DELTA,
                                     learner="output_perturbation", regularization=5.0,
                                     selection_score="loss", loss_bound=2.0).fit(fed, public)
        spent = fed.privacy_spent(DELTA)
    for site in ("site-1", "site-2"):
        assert len(spent[site].mechanisms) == 2  # its own model, then the selection
        assert spent[site].job.epsilon <= 2.0
    assert isinstance(boosted.learners_["site-1"], OutputPerturbation)


def test_too_many_iterations_for_a_site_are_refused_before_any_query():
    with federation([200]) as fed:
        with pytest.raises(ValueError, match="iterations"):
            model(iterations=10**6).fit(fed)
        assert not fed.privacy_spent()["site-1"].mechanisms


def test_the_automatic_regularization_is_the_public_rule():
    with federation([800]) as fed:
        fitted = OutputPerturbation(loss="logistic", radius=10.0, epsilon=2.0,
                                    delta=DELTA).fit(fed)
    z = calibrate_noise_multiplier(2.0, DELTA, 1)
    # lambda^3 = 8 n beta_l d z^2 G^2 / R^2 with G = 1, beta_l = 1/4 (logistic, r = Y = 1).
    expected = (8 * 800 * 0.25 * DIM * z**2 / 10.0**2) ** (1 / 3)
    assert fitted.regularization_ == pytest.approx(max(expected, 1.0 / 10.0))
