"""DP Lloyd k-means (seed 001's PrivateKmeans baseline as built here) and the
DP Gaussian mixture sampler (its stand-in for DP-GAN), on in-process
federations of 3 sites: noise off they compute exactly Lloyd's cell means and
moments; with noise, every site's ledger charges what the plan says."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privadapt.client.local_federation import LocalFederation
from privadapt.common.data.dataset import Dataset
from privadapt.common.mechanisms import GaussianMechanism, LaplaceMechanism
from privadapt.server.algorithms.base import InvalidParameterError
from privadapt.server.algorithms.source_target_clustering.private_kmeans import PrivateLloydKMeans
from privadapt.server.algorithms.source_target_clustering.private_lloyd import (
    PrivacyPlan,
    column_weights,
    noisy_cell_statistics,
)
from privadapt.server.algorithms.source_target_clustering.private_mixture_sampler import (
    PrivateGaussianMixtureSampler,
)

TRUE_CENTRES = np.array([[0.25, 0.2], [-0.2, 0.15], [0.0, -0.3]])


def site_data(num: int, seed: int) -> Dataset:
    rng = np.random.default_rng(seed)
    points = TRUE_CENTRES[rng.integers(3, size=num)] + 0.03 * rng.normal(size=(num, 2))
    return Dataset(points, np.zeros(num), ("a", "b"))


SITES = [site_data(300, 1), site_data(200, 2), site_data(250, 3)]
POOLED = np.vstack([d.features for d in SITES])


def federation(epsilon_cap: float = 20.0) -> LocalFederation:
    return LocalFederation.from_datasets(
        SITES, epsilon_cap=epsilon_cap, delta_cap=1e-5, adjacency="add_remove_one",
        noise_seed=7, allow_non_private=math.isinf(epsilon_cap))


def lloyd_by_hand(points: np.ndarray, centres: np.ndarray, rounds: int) -> np.ndarray:
    for _ in range(rounds):
        nearest = np.argmin(((points[:, None, :] - centres[None]) ** 2).sum(axis=2), axis=1)
        for j in range(len(centres)):
            if np.any(nearest == j):
                centres = centres.copy()
                centres[j] = points[nearest == j].mean(axis=0)
    return centres


INITIAL = np.array([[0.1, 0.1], [-0.1, 0.0], [0.0, -0.1], [0.45, -0.2]])


def test_without_noise_dp_lloyd_is_lloyd_on_the_pooled_records():
    model = PrivateLloydKMeans(n_clusters=4, iterations=4, epsilon=math.inf).fit(
        federation(math.inf), initial_centres=INITIAL)
    expected = lloyd_by_hand(POOLED, INITIAL, 4)
    np.testing.assert_allclose(model.all_centres_, expected, atol=1e-12)
    assert model.threshold_ == 0.0
    # The fourth centre never holds a record: it is not a stand-in source point.
    kept = model.counts_ > 0
    np.testing.assert_allclose(model.centres_, expected[kept], atol=1e-12)
    assert model.counts_.sum() == pytest.approx(len(POOLED), abs=1e-6)


def test_with_a_large_budget_the_centres_find_the_clusters():
    model = PrivateLloydKMeans(n_clusters=3, iterations=5, epsilon=15.0).fit(
        federation(), initial_centres=INITIAL[:3])
    distance = np.linalg.norm(model.centres_[:, None] - TRUE_CENTRES[None], axis=2)
    assert distance.min(axis=1).max() < 0.05
    assert np.all(np.linalg.norm(model.all_centres_, axis=1) <= 0.5 * (1 + 1e-9))


@pytest.mark.parametrize("budget", [{"epsilon": 3.0}, {"rho": 3.0}])
def test_every_sites_ledger_charges_the_plan(budget):
    iterations = 5
    model = PrivateLloydKMeans(n_clusters=10, iterations=iterations, seed=3, **budget).fit(
        federation())
    planned = model.mechanisms_
    assert len(planned) == iterations
    if "epsilon" in budget:
        assert all(isinstance(m, LaplaceMechanism) for m in planned)
        assert sum(m.epsilon for m in planned) == pytest.approx(3.0, rel=1e-12)
    else:
        assert all(isinstance(m, GaussianMechanism) for m in planned)
        rho = sum(1 / (2 * m.noise_multiplier**2) for m in planned)
        assert rho == pytest.approx(3.0, rel=1e-12)
    for spent in model.privacy_.values():
        charged = spent.mechanisms
        assert len(charged) == iterations
        # Each site charges its own, finer grid: never more than planned, and
        # no less than the plan minus the coarsest grid's rounding charge.
        for mine, plan in zip(charged, planned, strict=True):
            assert type(mine) is type(plan) and mine.noise_scales == plan.noise_scales
            assert plan.sensitivities[0] * (1 - 1e-2) <= mine.sensitivities[0] \
                <= plan.sensitivities[0]
        if "epsilon" in budget:
            assert spent.job.epsilon <= 3.0


def test_a_pure_dp_run_reports_its_epsilon_at_delta_zero():
    fed = federation()
    PrivateLloydKMeans(n_clusters=5, iterations=3, epsilon=2.0, seed=1).fit(fed)
    for spent in fed.privacy_spent(0.0).values():
        assert 2.0 * (1 - 1e-2) <= spent.job.epsilon <= 2.0


@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_the_count_column_takes_its_share_of_the_sensitivity(noise):
    dim, r = 8, 0.5
    w, v = column_weights(noise, dim, r, 0.3, 0.2)
    parts = ((w, math.sqrt(dim) * r, v * r**2) if noise == "laplace"
             else (w**2, r**2, (v * r**2) ** 2))
    assert np.allclose(np.array(parts) / sum(parts), [0.3, 0.5, 0.2])


def test_a_plan_splits_epsilon_or_rho_evenly():
    assert PrivacyPlan.split(3.0, None, 5) == PrivacyPlan("laplace", 5 / 3.0, 5)
    plan = PrivacyPlan.split(None, 2.0, 4)
    assert plan.noise == "gaussian" and 4 / (2 * plan.noise_multiplier**2) == pytest.approx(2.0)


@pytest.mark.parametrize("params", [{}, {"epsilon": 1.0, "rho": 1.0}])
def test_exactly_one_budget_is_required(params):
    with pytest.raises(InvalidParameterError, match="exactly one of 'epsilon'"):
        PrivateLloydKMeans(**params).fit(federation())


@pytest.mark.parametrize(("name", "value"), [("n_clusters", 0), ("count_share", 1.0),
                                              ("clip_norm", -1.0), ("rho", 0.0)])
def test_bad_hyperparameters_are_refused_by_name(name, value):
    with pytest.raises(InvalidParameterError, match=name):
        PrivateLloydKMeans(**{"epsilon": 1.0, name: value}).fit(federation())


def test_without_noise_the_mixture_is_the_cells_weights_means_and_variances():
    model = PrivateGaussianMixtureSampler(n_components=4, iterations=3, epsilon=math.inf,
                                          n_samples=100, seed=0).fit(
        federation(math.inf), initial_centres=INITIAL)
    centres = lloyd_by_hand(POOLED, INITIAL, 2)
    nearest = np.argmin(((POOLED[:, None, :] - centres[None]) ** 2).sum(axis=2), axis=1)
    cells = [POOLED[nearest == j] for j in range(4) if np.any(nearest == j)]
    np.testing.assert_allclose(model.weights_, [len(c) / len(POOLED) for c in cells])
    np.testing.assert_allclose(model.means_, [c.mean(axis=0) for c in cells], atol=1e-12)
    np.testing.assert_allclose(model.variances_,
                               [np.maximum(c.var(axis=0), 1e-4) for c in cells], atol=1e-12)
    assert model.samples_.shape == (100, 2)
    assert np.all(np.linalg.norm(model.samples_, axis=1) <= 0.5 * (1 + 1e-12))


@pytest.mark.parametrize("budget", [{"epsilon": 3.0}, {"rho": 3.0}])
def test_the_mixture_sampler_spends_its_plan_and_samples_near_the_data(budget):
    model = PrivateGaussianMixtureSampler(n_components=6, iterations=4, seed=2,
                                          **budget).fit(federation())
    assert len(model.mechanisms_) == 4
    for spent in model.privacy_.values():
        assert len(spent.mechanisms) == 4
    assert model.samples_.shape in {(100, 2), (0, 2)}
    assert "samples" in model.model_arrays()


def test_the_count_noise_std_is_the_counts_real_noise_under_collusion():
    # With t of K sites trusted to collude each share carries 1/(K - t) of
    # the noise's variance, so the sum K/(K - t) times it (sqrt(2) times
    # the std at K = 2, t = 1): the threshold of twice the std reads that.
    # Centres on the unit circle, farther from every point (norms below 1/2)
    # than the true centres are, so their counts are 0: what they show is noise.
    angles = np.linspace(0.0, 2 * np.pi, 2000, endpoint=False)
    centres = np.vstack([TRUE_CENTRES, np.stack([np.cos(angles), np.sin(angles)], axis=1)])
    assert np.linalg.norm(POOLED, axis=1).max() < 0.5
    assert np.min(np.linalg.norm(POOLED[:, None] - TRUE_CENTRES, axis=2), axis=1).max() < 0.5
    plan = PrivacyPlan.split(None, 1.0, 1)
    with LocalFederation.from_datasets(SITES[:2], epsilon_cap=20.0, delta_cap=1e-5,
                                       adjacency="add_remove_one", noise_seed=7,
                                       collusion_tolerance=1) as fed:
        cells = noisy_cell_statistics(fed, centres, clip_norm=1.0, weights=(1.0, None),
                                      plan=plan)
    empirical = float(np.std(cells.counts[len(TRUE_CENTRES):]))
    assert cells.count_noise_std == pytest.approx(empirical, rel=0.1)
