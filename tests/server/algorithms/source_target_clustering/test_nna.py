"""NNA (seed 001, Alg. 2) end to end over in-process sites: the noise-free
release is the per-cell means, the ledgers hold exactly the planned release,
the secure sum's noise is Laplace(b), and Observation 5.1."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from privadapt.client.local_federation import LocalFederation
from privadapt.common.data.dataset import Dataset
from privadapt.common.mechanisms import Adjacency, GaussianMechanism, LaplaceMechanism
from privadapt.common.numerics.geometry import clip_rows_to_norm
from privadapt.server.algorithms.base import InvalidParameterError
from privadapt.server.algorithms.source_target_clustering import stc_cost
from privadapt.server.algorithms.source_target_clustering.distances import pairwise_distances
from privadapt.server.algorithms.source_target_clustering.estimators import NeighborNoisyAverages
from privadapt.server.algorithms.source_target_clustering.nna import nna_sanitize
from privadapt.server.algorithms.source_target_clustering.privacy import zcdp_rho

DIM = 2


def _points(seed: int, n: int, centre: float) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return clip_rows_to_norm(centre + 0.1 * rng.normal(size=(n, DIM)), 0.5)


def federation(parts: list[np.ndarray], **options) -> LocalFederation:
    datasets = [Dataset(p, np.zeros(len(p)), ("a", "b")) for p in parts]
    options.setdefault("epsilon_cap", 10.0)
    return LocalFederation.from_datasets(datasets, delta_cap=1e-5, noise_seed=1,
                                         adjacency="add_remove_one", **options)


SOURCE = [_points(1, 60, 0.1), _points(2, 50, -0.1), _points(3, 40, 0.2)]
TARGET = _points(4, 150, 0.0)

# The estimator's defaults, which the solver takes explicitly.
LAPLACE = {"noise": "laplace", "rho": None, "gamma": 0.05, "calibration": "accountant",
           "adjacency": Adjacency.ADD_REMOVE_ONE}


def test_without_noise_nna_returns_exactly_the_per_cell_means():
    with federation(SOURCE, epsilon_cap=math.inf, allow_non_private=True) as fed:
        result = nna_sanitize(fed, TARGET[:30], epsilon=math.inf, **LAPLACE)
    source = np.vstack(SOURCE)
    cells = np.argmin(pairwise_distances(source, TARGET[:30]), axis=1)
    expected = [source[cells == x].mean(axis=0) for x in range(30) if np.any(cells == x)]
    # Exact up to the sums' rounding onto the aggregation grid (2^-32 here).
    np.testing.assert_allclose(result.points, np.array(expected), rtol=0, atol=2.0**-32)
    assert result.threshold == 1.0
    assert result.noisy_counts.sum() == len(source)


@pytest.mark.parametrize("calibration", ["accountant", "paper"])
def test_laplace_ledgers_hold_one_release_of_the_planned_epsilon(calibration):
    with federation(SOURCE) as fed:
        model = NeighborNoisyAverages(k=5, epsilon=3.0, calibration=calibration,
                                      coreset=False).fit(fed, TARGET)
    assert isinstance(model.mechanism_, LaplaceMechanism)
    for site in model.privacy_.values():
        (charged,) = site.mechanisms
        assert isinstance(charged, LaplaceMechanism)
        assert charged.scale == model.mechanism_.scale
        # Sized at the coarsest grid; the site's finer grid charges a hair less.
        assert charged.epsilon <= model.epsilon_ <= charged.epsilon * (1 + 1e-3)
        assert site.job.epsilon == pytest.approx(charged.epsilon, rel=1e-3)
    if calibration == "accountant":
        assert model.epsilon_ == pytest.approx(3.0)
    else:  # the paper's b = (sqrt(d) + 1)/epsilon spends less than epsilon here
        assert model.mechanism_.scale == pytest.approx((math.sqrt(DIM) + 1) / 3.0)
        assert model.epsilon_ < 3.0
    assert len(model.indices_) == 5 and len(set(model.indices_.tolist())) == 5


@pytest.mark.parametrize("calibration", ["accountant", "paper"])
def test_gaussian_ledgers_hold_one_release_of_the_planned_rho(calibration):
    with federation(SOURCE, epsilon_cap=30.0) as fed:
        model = NeighborNoisyAverages(k=5, noise="gaussian", rho=3.0, coreset=False,
                                      calibration=calibration).fit(fed, TARGET)
    assert isinstance(model.mechanism_, GaussianMechanism)
    for site in model.privacy_.values():
        (charged,) = site.mechanisms
        assert zcdp_rho(charged) <= model.rho_ <= zcdp_rho(charged) * (1 + 1e-3)
    if calibration == "accountant":
        assert model.rho_ == pytest.approx(3.0)
    else:  # sigma = sqrt(2/rho) for sensitivity 2 > sqrt(5)/2
        assert model.mechanism_.blocks[0].sigma == pytest.approx(math.sqrt(2 / 3.0))
        assert model.rho_ < 3.0


def test_gaussian_without_rho_takes_the_rho_of_epsilon_and_delta():
    with federation(SOURCE) as fed:
        model = NeighborNoisyAverages(k=3, noise="gaussian", epsilon=3.0,
                                      delta=1e-6).fit(fed, TARGET)
    rho = model.rho_
    assert rho + 2 * math.sqrt(rho * math.log(1e6)) == pytest.approx(3.0)


def test_the_secure_sum_noise_is_laplace_of_the_planned_scale():
    # Three sites' Gamma-difference shares, through the real site path: the
    # released entries minus the true ones are Laplace(b).
    targets = TARGET[:100]
    with federation(SOURCE, epsilon_cap=100.0) as fed, \
            federation(SOURCE, epsilon_cap=math.inf, allow_non_private=True) as exact:
        truth = nna_sanitize(exact, targets, epsilon=math.inf, **LAPLACE)
        noisy = [nna_sanitize(fed, targets, epsilon=3.0, **LAPLACE) for _ in range(4)]
    scale = noisy[0].mechanism.scale
    errors = np.concatenate([r.noisy_counts - truth.noisy_counts for r in noisy])
    assert stats.kstest(errors, stats.laplace(scale=scale).cdf).pvalue > 0.01


def test_observation_5_1_cost_with_s_equals_cost_with_its_nearest_points():
    rng = np.random.default_rng(0)
    for _ in range(20):
        target, source = rng.normal(size=(40, 3)), rng.normal(size=(25, 3)) + 0.5
        nearest = source[np.argmin(pairwise_distances(target, source), axis=1)]  # S*
        for k in (1, 3, 6):
            chosen = target[rng.choice(40, size=k, replace=False)]
            assert stc_cost(target, nearest, chosen) == pytest.approx(
                stc_cost(target, source, chosen), abs=1e-12)


def test_nna_with_a_coreset_sends_fewer_targets_and_still_chooses_k():
    with federation(SOURCE) as fed:
        model = NeighborNoisyAverages(k=4, coreset=True, coreset_diameter=0.05).fit(fed, TARGET)
    assert len(model.sent_targets_) < len(TARGET)
    assert set(model.coreset_indices_.tolist()) <= set(range(len(TARGET)))
    assert model.model_arrays()["indices"].shape == (4,)


def test_nna_refuses_bad_hyperparameters_before_querying():
    with federation(SOURCE) as fed:
        with pytest.raises(InvalidParameterError, match="k = 500"):
            NeighborNoisyAverages(k=500).fit(fed, TARGET)
        with pytest.raises(InvalidParameterError, match="gamma"):
            NeighborNoisyAverages(k=2, gamma=1.5).fit(fed, TARGET)
        with pytest.raises(ValueError, match="once"):
            NeighborNoisyAverages(k=2).fit(fed)
        assert all(not s.mechanisms for s in fed.privacy_spent().values())


def test_nna_on_separated_data_beats_clustering_the_target_alone():
    # Half the target sits on the source: NNA's S' covers it and the k
    # centres go to the other half, as non-private STC does.
    rng = np.random.default_rng(5)
    covered = clip_rows_to_norm(np.array([0.3, 0.3]) + 0.03 * rng.normal(size=(300, 2)), 0.5)
    alone = clip_rows_to_norm(np.array([-0.3, -0.3]) + 0.1 * rng.normal(size=(300, 2)), 0.5)
    target = np.vstack([covered[:150], alone[:150]])
    with federation([covered[150:]]) as fed:
        model = NeighborNoisyAverages(k=6, epsilon=3.0, coreset=False).fit(fed, target)
    from privadapt.server.algorithms.source_target_clustering import accelerated_k_medoids
    source = covered[150:]
    nna_cost = stc_cost(target, source, target[model.indices_])
    cluster_t = stc_cost(target, source, target[accelerated_k_medoids(target, 6, seed=0)])
    assert nna_cost < cluster_t


@pytest.mark.parametrize("noise", ["gaussian", "laplace"])
def test_an_empty_cell_passes_the_threshold_with_probability_gamma_under_collusion(noise):
    # With t of K sites colluding every share carries 1/(K - t) of the noise,
    # so the sum carries K/(K - t) times its variance: a threshold read off
    # the calibrated scale lets about 12% of empty cells through at gamma =
    # 0.05 (Gaussian, K = 2, t = 1). One target at the origin, among the
    # points (norms below 1/2), the rest on the unit circle: their cells are empty.
    angles = np.linspace(0.0, 2 * np.pi, 1999, endpoint=False)
    far = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    targets = np.vstack([np.zeros((1, DIM)), far])
    options = {**LAPLACE, "noise": noise, "rho": 0.005 if noise == "gaussian" else None}
    with federation(SOURCE[:2], collusion_tolerance=1) as fed:
        result = nna_sanitize(fed, targets, epsilon=0.05, **options)
    assert np.linalg.norm(np.vstack(SOURCE[:2]), axis=1).max() < 0.5
    passed = int(np.sum(result.noisy_counts[1:] >= result.threshold))
    gamma, empty = options["gamma"], len(far)
    assert passed <= gamma * empty + 4 * math.sqrt(gamma * empty), passed
