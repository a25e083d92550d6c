"""PCnvxAdap and PNCnvxAdap: the estimator is the solver function with flat
hyperparameters, plus the public shape."""

import math
from dataclasses import replace

import numpy as np
import pytest

from privadapt.client.local_federation import LocalFederation
from privadapt.common.data.dataset import Dataset
from privadapt.server.algorithms.public_erm import fit_linear
from privadapt.server.algorithms.reweighting.cnvx_adap import pcnvx_adap
from privadapt.server.algorithms.reweighting.descent import DataBounds
from privadapt.server.algorithms.reweighting.estimators import PCnvxAdap, PNCnvxAdap
from privadapt.server.algorithms.reweighting.ncnvx_adap import pncnvx_adap
from privadapt.server.algorithms.reweighting.noise_aware_plan import (
    auto_clip_radius,
    auto_iterations,
)
from privadapt.server.algorithms.reweighting.objectives import ReweightingHyperparameters
from tests.synthetic_data import synthetic_dataset

DIM = 3
DATASETS = [synthetic_dataset(60 + 10 * k, DIM, seed=k) for k in range(2)]
PUBLIC = synthetic_dataset(80, DIM, seed=42)
BOUNDS = dict(feature_norm=1.0, label_bound=1.0, radius=4.0)
RUN = dict(epsilon=3.0, delta=1e-5, iterations=12, step_scale=2.0)
# The plan settings the estimators default, which the solvers take explicitly.
PLAN = {name: PCnvxAdap.parameter_defaults()[name] for name in
        ("step_scale", "step_distance", "calibration", "aggregate_noise_ratio", "chain")}
# The solver functions' own plan (the estimators' earlier defaults), spelt out
# so that an estimator runs exactly what the function runs.
FUNCTION_PLAN = dict(warm_start=False, clip_radius=None, step_sizes="curvature",
                     weight_noise=True)


@pytest.fixture
def federation(tmp_path):
    def build(name, noise_seed=5):
        return LocalFederation.from_datasets(DATASETS, epsilon_cap=20.0, delta_cap=1e-5,
                                             ledger_dir=tmp_path / name, noise_seed=noise_seed)
    return build


def test_pcnvx_adap_estimator_equals_the_function_at_a_fixed_noise_seed(federation):
    penalties = dict(k1=0.01, k2=0.02, kinf=0.01, mu=50.0, discrepancy=0.05)
    expected = pcnvx_adap(federation("function"), PUBLIC.features, PUBLIC.labels,
                          hyper=ReweightingHyperparameters(alpha=0.4, **penalties),
                          bounds=DataBounds(**BOUNDS), **{**PLAN, **RUN})
    model = PCnvxAdap(alpha=0.4, **penalties, **BOUNDS, **RUN, **FUNCTION_PLAN)
    assert model.fit(federation("estimator"), PUBLIC) is model
    np.testing.assert_array_equal(model.coef_, expected.weights)
    np.testing.assert_array_equal(model.public_weights_, expected.public_weights)
    np.testing.assert_array_equal(model.average_coef_, expected.average_weights)
    np.testing.assert_array_equal(model.last_coef_, expected.last_weights)
    assert model.noise_multiplier_ == expected.noise_plan.noise_multiplier
    assert model.step_sizes_ == expected.step_sizes
    assert model.history_ == expected.history
    assert {n: p.job.epsilon for n, p in model.privacy_.items()} == {
        n: p.job.epsilon for n, p in expected.privacy.items()}
    assert set(model.model_arrays()) == {"weights", "public_weights", "average_weights",
                                         "last_weights"}


def test_pncnvx_adap_estimator_equals_the_function_with_its_seed(federation):
    penalties = dict(l1=0.01, l2=0.01, linf=0.01, mu=100.0)
    expected = pncnvx_adap(
        federation("function"), PUBLIC.features, PUBLIC.labels,
        hyper=ReweightingHyperparameters(alpha=0.5, k1=0.01, k2=0.01, kinf=0.01, mu=100.0),
        bounds=DataBounds(**BOUNDS), loss=PNCnvxAdap.parameter_defaults()["loss"], seed=3,
        weight_noise=False, **{**PLAN, **RUN})
    model = PNCnvxAdap(alpha=0.5, seed=3, return_average=False,
                       **penalties, **BOUNDS, **RUN, **{**FUNCTION_PLAN, "weight_noise": False})
    model.fit(federation("estimator"), (PUBLIC.features, PUBLIC.labels))  # a pair works too
    np.testing.assert_array_equal(model.coef_, expected.weights)
    assert model.output_iteration_ == expected.output_iteration
    assert model.predict(PUBLIC.features).tolist() == np.where(
        PUBLIC.features @ model.coef_ >= 0, 1.0, -1.0).tolist()


def test_warm_start_and_progress_are_fit_arguments(federation):
    warm = np.full(DIM, 0.3)
    progress = []
    model = PCnvxAdap(alpha=0.5, **BOUNDS, **{**RUN, "epsilon": math.inf}, warm_start=False)
    with LocalFederation.from_datasets(DATASETS, epsilon_cap=math.inf, delta_cap=1e-5,
                                       allow_non_private=True) as sites:
        model.fit(sites, PUBLIC, initial_weights=warm, progress=progress.append,
                  progress_every=4)
        cold = PCnvxAdap(alpha=0.5, **BOUNDS, **{**RUN, "epsilon": math.inf},
                         warm_start=False)
        cold.fit(sites.new_job(), PUBLIC)
    assert [r.iteration for r in progress] == [4, 8, 12]
    assert not np.allclose(cold.coef_, model.coef_)


def test_the_public_source_is_required(federation):
    with pytest.raises(ValueError, match="PNCnvxAdap needs the public source sample"):
        PNCnvxAdap(alpha=0.5, **BOUNDS, **RUN).fit(federation("none"))
    assert PCnvxAdap.requires_public_source and PNCnvxAdap.requires_public_source


def test_softmax_predicts_class_indices_and_scores_accuracy():
    rng = np.random.default_rng(0)

    def sample(n):
        features = rng.normal(size=(n, DIM)) / 2
        features /= np.maximum(1.0, np.linalg.norm(features, axis=1))[:, None]
        return features, np.argmax(features, axis=1).astype(float)  # class = largest feature

    private = [Dataset(*sample(50), ("a", "b", "c")) for _ in range(2)]
    with LocalFederation.from_datasets(private, epsilon_cap=math.inf, delta_cap=1e-5,
                                       allow_non_private=True) as federation:
        model = PNCnvxAdap(alpha=0.5, loss="softmax_cross_entropy", num_classes=3, seed=0,
                           **BOUNDS, **{**RUN, "epsilon": math.inf, "step_scale": 20.0})
        model.fit(federation, sample(80))
    test_features, test_labels = sample(100)
    assert model.coef_.shape == (DIM, 3)
    predictions = model.predict(test_features)
    assert set(predictions.tolist()) <= {0, 1, 2}
    assert model.score(test_features, test_labels) == np.mean(predictions == test_labels)


def test_the_default_plan_is_the_function_with_the_public_rules_spelt_out(federation):
    """The estimators' defaults: warm start at the public fit, the clip
    radius and T from public quantities, noise-aware w steps, no u-noise, the
    average iterate. Each rule reads only public data, so the function given
    the same plan releases the same blocks, and each site's ledger the same spend."""
    hyper = ReweightingHyperparameters(alpha=0.4)
    warm = fit_linear(PUBLIC.features, PUBLIC.labels, "squared", BOUNDS["radius"])
    bounds = DataBounds(**BOUNDS)
    clip = auto_clip_radius("squared", bounds, PUBLIC.features, PUBLIC.labels, warm)
    iterations = auto_iterations(3.0, 1e-5, sum(len(d.labels) for d in DATASETS), DIM)
    # ceil(3 * 130 / sqrt(3 log(1e5))) = 67 steps; the public gradients need less than Lambda
    assert 0 < clip < BOUNDS["radius"] and iterations == 67
    expected = pcnvx_adap(federation("function"), PUBLIC.features, PUBLIC.labels, hyper=hyper,
                          bounds=replace(bounds, clip_radius=clip), epsilon=3.0, delta=1e-5,
                          iterations=iterations, step_sizes="noise_aware", weight_noise=False,
                          initial_weights=warm, **PLAN)
    model = PCnvxAdap(alpha=0.4, epsilon=3.0, delta=1e-5, **BOUNDS)
    model.fit(federation("estimator"), PUBLIC)
    np.testing.assert_array_equal(model.coef_, expected.weights)
    assert model.iterations_ == iterations and model.clip_radius_ == clip
    assert model.step_sizes_ == expected.step_sizes
    assert {n: p.job.epsilon for n, p in model.privacy_.items()} == {
        n: p.job.epsilon for n, p in expected.privacy.items()}
    assert all(p.job.epsilon <= 3.0 for p in model.privacy_.values())
    assert PNCnvxAdap.parameter_defaults()["return_average"] is True


def test_the_smooth_noise_aware_step_is_a_public_plan_choice(federation):
    """``step_sizes="noise_aware_smooth"`` changes only the w step (larger, a public
    rule): the same releases, so each site's ledger charges the same spend, and
    the estimator still runs the function."""
    settings = dict(alpha=0.4, epsilon=3.0, delta=1e-5, **BOUNDS)
    default = PCnvxAdap(**settings).fit(federation("default"), PUBLIC)
    smooth = PCnvxAdap(**settings, step_sizes="noise_aware_smooth")
    smooth.fit(federation("smooth"), PUBLIC)
    assert smooth.step_sizes_.weights > default.step_sizes_.weights
    assert smooth.noise_multiplier_ == default.noise_multiplier_
    assert {n: p.job.epsilon for n, p in smooth.privacy_.items()} == {
        n: p.job.epsilon for n, p in default.privacy_.items()}
    warm = fit_linear(PUBLIC.features, PUBLIC.labels, "squared", BOUNDS["radius"])
    expected = pcnvx_adap(federation("function"), PUBLIC.features, PUBLIC.labels,
                          hyper=ReweightingHyperparameters(alpha=0.4),
                          bounds=replace(DataBounds(**BOUNDS), clip_radius=smooth.clip_radius_),
                          epsilon=3.0, delta=1e-5, iterations=smooth.iterations_,
                          step_sizes="noise_aware_smooth", weight_noise=False,
                          initial_weights=warm, **PLAN)
    np.testing.assert_array_equal(smooth.coef_, expected.weights)
    with pytest.raises(ValueError, match="noise_aware_smooth"):
        pcnvx_adap(federation("refused"), PUBLIC.features, PUBLIC.labels,
                   hyper=ReweightingHyperparameters(alpha=0.4), bounds=DataBounds(**BOUNDS),
                   epsilon=3.0, delta=1e-5, iterations=2, step_sizes="smooth", **PLAN)
