"""DP Lloyd with ``noise="discrete"`` on a ``rho`` budget: the distributed
discrete Gaussian on the federation's grid, n = K - t honest
shares; every site charges exactly the plan, the centres are as accurate as
with the float Gaussian, and a grid too fine for the exact sampler is refused
before any query with the advice to use a coarser one."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privadapt.client.local_federation import LocalFederation
from privadapt.common.accounting.accountant import PrivacyAccountant
from privadapt.common.data.dataset import Dataset
from privadapt.common.mechanisms import Adjacency, DistributedDiscreteGaussianMechanism
from privadapt.common.numerics.fixed_point import FixedPointCodec
from privadapt.server.algorithms.source_target_clustering.private_kmeans import PrivateLloydKMeans
from privadapt.server.algorithms.source_target_clustering.private_lloyd import PrivacyPlan

TRUE_CENTRES = np.array([[0.25, 0.2], [-0.2, 0.15], [0.0, -0.3]])
INITIAL = np.array([[0.1, 0.1], [-0.1, 0.0], [0.0, -0.1]])


def site_data(num: int, seed: int) -> Dataset:
    rng = np.random.default_rng(seed)
    points = TRUE_CENTRES[rng.integers(3, size=num)] + 0.03 * rng.normal(size=(num, 2))
    return Dataset(points, np.zeros(num), ("a", "b"))


SITES = [site_data(300, 1), site_data(200, 2), site_data(250, 3)]


def federation(noise_seed: int = 7, fractional_bits: int = 20,
               collusion_tolerance: int = 0) -> LocalFederation:
    fed = LocalFederation.from_datasets(
        SITES, epsilon_cap=50.0, delta_cap=1e-5, adjacency="add_remove_one",
        noise_seed=noise_seed, collusion_tolerance=collusion_tolerance)
    fed.codec = FixedPointCodec(fractional_bits)
    return fed


def centre_error(model: PrivateLloydKMeans) -> float:
    fitted = model.all_centres_
    return float(np.linalg.norm(TRUE_CENTRES[:, None] - fitted[None], axis=2)
                 .min(axis=1).max())


def test_a_discrete_rho_plan_is_the_distributed_discrete_gaussian():
    assert PrivacyPlan.split(None, 2.0, 4, discrete=True) == PrivacyPlan(
        "distributed_discrete_gaussian", 1.0, 4)


@pytest.mark.parametrize("tolerance", [0, 1])
def test_every_site_charges_exactly_the_plan(tolerance):
    fed = federation(collusion_tolerance=tolerance)
    model = PrivateLloydKMeans(n_clusters=4, iterations=3, rho=2.0, seed=3,
                               noise="discrete").fit(fed)
    planned = model.mechanisms_
    assert all(isinstance(m, DistributedDiscreteGaussianMechanism)
               and m.fractional_bits == 20 and m.honest_shares == 3 - tolerance
               for m in planned)
    assert all(m.noise_multiplier >= math.sqrt(3 / 4) for m in planned)
    plan = PrivacyAccountant(Adjacency.ADD_REMOVE_ONE)
    for mechanism in planned:
        plan.compose(mechanism)
    expected = plan.report(1e-5)
    for spent in fed.privacy_spent(1e-5).values():
        assert list(spent.mechanisms) == planned
        assert spent.job.epsilon == pytest.approx(expected.epsilon, rel=1e-9)
    # Its RDP is the Gaussian's rho / T per round (tau vanishes at these sigmas).
    gaussian = PrivateLloydKMeans(n_clusters=4, iterations=3, rho=2.0, seed=3).fit(
        federation(collusion_tolerance=tolerance))
    floats = PrivacyAccountant(Adjacency.ADD_REMOVE_ONE, "rdp")
    for mechanism in gaussian.mechanisms_:
        floats.compose(mechanism)
    assert expected.epsilon <= floats.report(1e-5).epsilon * (1 + 1e-6)


def test_discrete_noise_is_as_accurate_as_the_float_gaussian():
    errors = {"continuous": [], "discrete": []}
    for seed in range(5):
        for noise in errors:
            model = PrivateLloydKMeans(n_clusters=3, iterations=4, rho=8.0,
                                       noise=noise).fit(federation(seed),
                                                        initial_centres=INITIAL)
            errors[noise].append(centre_error(model))
    continuous, discrete = np.mean(errors["continuous"]), np.mean(errors["discrete"])
    assert discrete < 0.05 and continuous < 0.05
    assert discrete == pytest.approx(continuous, abs=0.01)


def test_a_grid_too_fine_for_the_sampler_is_refused_before_any_query():
    fed = federation(fractional_bits=32)
    with pytest.raises(ValueError, match="coarser query grid"):
        PrivateLloydKMeans(n_clusters=3, iterations=4, rho=0.5, seed=1,
                           noise="discrete").fit(fed)
    assert all(not spent.mechanisms for spent in fed.privacy_spent().values())
