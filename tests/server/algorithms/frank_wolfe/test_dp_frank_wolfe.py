"""Private Frank-Wolfe on the l1 ball (seed 002): without noise it is plain
Frank-Wolfe on the clipped gradients, both routes; the selection and the noise
are as planned on tiny instances; each site's ledger holds exactly the planned
charges."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privadapt import Dataset, LocalFederation
from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.client.site import Site
from privadapt.common.accounting.calibration import calibrate_noise_multiplier
from privadapt.common.kernels.grid_rounding import COARSEST_FRACTIONAL_BITS
from privadapt.common.mechanisms import ReportNoisyMin
from privadapt.common.noise.floating import SeededRandomBits
from privadapt.common.numerics.fixed_point import FixedPointCodec
from privadapt.server.algorithms.base import InvalidParameterError
from privadapt.server.algorithms.frank_wolfe.dp_frank_wolfe import (
    dp_frank_wolfe,
    plan_queries,
    resolve_route,
    selection_multiplier,
)
from privadapt.server.algorithms.frank_wolfe.estimators import DPFrankWolfe

DIM = 6
DELTA = 1e-6
TRUTH = np.array([1.0, -0.5, 0.0, 0.0, 0.25, 0.0])


def regression(n: int, seed: int, truth=TRUTH) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    features = rng.uniform(-1, 1, size=(n, len(truth)))
    return features, features @ truth + 0.1 * rng.normal(size=n)


def federation(n=400, seed=0, num_sites=1, epsilon_cap=10.0, noise_seed=0, **options):
    features, labels = regression(n, seed)
    names = tuple(f"x{i}" for i in range(DIM))
    parts = [Dataset(features[rows], labels[rows], names)
             for rows in np.array_split(np.arange(n), num_sites)]
    if math.isinf(epsilon_cap):
        options["allow_non_private"] = True
    return LocalFederation.from_datasets(parts, epsilon_cap=epsilon_cap, delta_cap=1e-4,
                                         noise_seed=noise_seed, **options)


def reference_frank_wolfe(features, labels, radius, clip, iterations, center=None):
    """Non-private Frank-Wolfe on the infinity-norm clipped squared-loss gradients."""
    dim = features.shape[1]
    center = np.zeros(dim) if center is None else center
    offset = np.zeros(dim)
    for t in range(1, iterations + 1):
        rows = 2.0 * (features @ (center + offset) - labels)[:, None] * features
        largest = np.abs(rows).max(axis=1)
        gradient = (rows * np.minimum(1.0, clip / np.maximum(largest, 1e-300))[:, None]).sum(0)
        j = int(np.argmax(np.abs(gradient)))
        chosen = np.zeros(dim)
        chosen[j] = -radius * np.sign(gradient[j])
        mu = 2.0 / (t + 2.0)
        offset = (1 - mu) * offset + mu * chosen
    return center + offset


def model(**params) -> DPFrankWolfe:
    settings = {"radius": 2.0, "clip_norm": 1.0, "epsilon": 1.0, "delta": DELTA,
                "iterations": 30}
    return DPFrankWolfe(**{**settings, **params})


@pytest.mark.parametrize("num_sites", [1, 3])
def test_without_noise_it_is_plain_frank_wolfe_on_the_clipped_gradients(num_sites):
    features, labels = regression(400, 0)
    expected = reference_frank_wolfe(features, labels, 2.0, 1.0, 30)
    with federation(num_sites=num_sites, epsilon_cap=math.inf) as sites:
        fitted = model(epsilon=math.inf, delta=0.0).fit(sites)
    np.testing.assert_allclose(fitted.coef_, expected, atol=1e-12)
    assert fitted.noise_scale_ == 0
    assert math.fsum(np.abs(fitted.coef_)) <= 2.0 * (1 + 1e-12)


def test_a_public_center_moves_the_ball_without_noise():
    features, labels = regression(400, 0)
    center = np.array([0.8, -0.4, 0.1, 0.0, 0.0, 0.0])
    expected = reference_frank_wolfe(features, labels, 0.5, 1.0, 20, center)
    with federation(epsilon_cap=math.inf) as sites:
        result = dp_frank_wolfe(sites, dim=DIM, radius=0.5, clip_norm=1.0, epsilon=math.inf,
                                delta=0.0, iterations=20, loss="squared",
                                calibration="accountant", route="auto", center=center)
    np.testing.assert_allclose(result.weights, expected, atol=1e-12)
    assert math.fsum(np.abs(result.offset)) <= 0.5 * (1 + 1e-12)


def test_auto_selects_at_a_single_holder_and_sums_across_sites():
    assert resolve_route("auto", 1, 1.0) == "selection"
    assert resolve_route("auto", 3, 1.0) == "secure_sum"
    assert resolve_route("selection", 1, math.inf) == "secure_sum"
    with pytest.raises(ValueError, match="single data holder"):
        resolve_route("selection", 2, 1.0)


def test_the_selection_plan_is_report_noisy_min_at_the_calibrated_scale():
    plan = plan_queries(route="selection", dim=DIM, radius=2.0, clip_norm=0.5, epsilon=1.0,
                        delta=DELTA, iterations=50, calibration="accountant", num_records=100)
    assert isinstance(plan.mechanism, ReportNoisyMin)
    sensitivity = plan.mechanism.sensitivity
    assert 2 * 2.0 * 0.5 <= sensitivity <= 2.0 * (1 + 1e-3)  # 2hC plus the coarsest grid step
    assert plan.noise_scale == pytest.approx(selection_multiplier(1.0, DELTA, 50) * sensitivity)
    # 50 per-step epsilons 2 Delta / b compose to the target under the accountant.
    assert calibrate_noise_multiplier(1.0, DELTA, 50, lambda z: ReportNoisyMin(1.0, z)) == \
        pytest.approx(plan.noise_scale / sensitivity)


def test_the_paper_scale_is_l1_h_sqrt_8t_log_over_epsilon_in_sum_units():
    plan = plan_queries(route="selection", dim=DIM, radius=2.0, clip_norm=0.5, epsilon=1.0,
                        delta=DELTA, iterations=50, calibration="paper", num_records=100)
    assert plan.noise_scale == pytest.approx(0.5 * 2.0 * math.sqrt(8 * 50 * math.log(1e6)))


def test_the_secure_sum_plan_is_a_gaussian_on_the_clipped_gradient():
    plan = plan_queries(route="secure_sum", dim=DIM, radius=2.0, clip_norm=0.5, epsilon=1.0,
                        delta=DELTA, iterations=50, calibration="accountant", num_records=100)
    (sensitivity,) = plan.mechanism.sensitivities
    assert sensitivity == pytest.approx(2 * math.sqrt(DIM) * 0.5, rel=1e-3)
    assert plan.noise_scale == pytest.approx(
        calibrate_noise_multiplier(1.0, DELTA, 50) * sensitivity)


def test_a_clear_best_vertex_is_selected_at_moderate_noise():
    # y = 3 x_0: at theta = 0 the gradient's first entry dominates, so -h e_0
    # is the best vertex by far in the first step.
    rng = np.random.default_rng(3)
    features = rng.uniform(-1, 1, size=(2000, DIM))
    data = Dataset(features, 3.0 * features[:, 0], tuple(f"x{i}" for i in range(DIM)))
    first = []
    for seed in range(10):
        with LocalFederation.from_datasets([data], epsilon_cap=10.0, delta_cap=1e-4,
                                           noise_seed=seed) as sites:
            fitted = model(iterations=5, epsilon=2.0).fit(sites)
        first.append(fitted.selected_[0])
    assert first.count(0) >= 9  # vertex 0 is +h e_0: the descent direction for y = 3 x_0


def test_each_ledger_holds_exactly_the_planned_selections(tmp_path):
    features, labels = regression(300, 1)
    policy = SitePolicy("only", 10.0, 1e-4)
    site = Site(Dataset(features, labels, tuple(f"x{i}" for i in range(DIM))), policy,
                PrivacyLedger(tmp_path / "only.db", policy, create=True), SeededRandomBits(0))
    # The coarsest grid, the one the plan is sized for: the charge is the plan itself.
    sites = LocalFederation([site], codec=FixedPointCodec(COARSEST_FRACTIONAL_BITS))
    result = dp_frank_wolfe(sites, dim=DIM, radius=2.0, clip_norm=0.5, epsilon=0.8,
                            delta=DELTA, iterations=40, loss="squared",
                            calibration="accountant", route="auto")
    spent = result.privacy["only"]
    assert spent.mechanisms == (result.plan.mechanism,) * 40
    assert spent.job.epsilon <= 0.8
    assert spent.job.epsilon == pytest.approx(0.8, rel=5e-3)


def test_each_site_is_charged_the_planned_gaussians_across_sites():
    with federation(num_sites=3) as sites:
        fitted = model(epsilon=0.5, iterations=25).fit(sites)
    assert fitted.route_ == "secure_sum"
    for spent in fitted.privacy_.values():
        assert len(spent.mechanisms) == 25
        assert spent.job.epsilon <= 0.5
        assert spent.job.epsilon == pytest.approx(0.5, rel=5e-3)


def test_the_private_fit_beats_the_zero_model_with_enough_records():
    features, labels = regression(3000, 5)
    test_features, test_labels = regression(1000, 6)
    with LocalFederation.from_datasets(
            [Dataset(features, labels, tuple(f"x{i}" for i in range(DIM)))],
            epsilon_cap=10.0, delta_cap=1e-4, noise_seed=2) as sites:
        fitted = model(iterations=40, epsilon=1.0).fit(sites)
    assert fitted.score(test_features, test_labels) > 0.5
    assert fitted.model_arrays()["weights"].shape == (DIM,)


def test_bad_hyperparameters_are_refused_before_any_query():
    with federation() as sites, pytest.raises(InvalidParameterError, match="route"):
        model(route="broadcast").fit(sites)
