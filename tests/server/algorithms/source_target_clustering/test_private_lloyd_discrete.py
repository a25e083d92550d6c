"""DP Lloyd with ``noise="discrete"``: the same epsilon budget spent with the
exact discrete Laplace on the federation's grid; every site charges exactly
the plan, and the centres are as accurate as with the float Laplace."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privadapt.client.local_federation import LocalFederation
from privadapt.common.data.dataset import Dataset
from privadapt.common.mechanisms import DiscreteLaplaceMechanism
from privadapt.common.numerics.fixed_point import FixedPointCodec
from privadapt.server.algorithms.base import InvalidParameterError
from privadapt.server.algorithms.source_target_clustering.private_kmeans import PrivateLloydKMeans
from privadapt.server.algorithms.source_target_clustering.private_lloyd import PrivacyPlan

TRUE_CENTRES = np.array([[0.25, 0.2], [-0.2, 0.15], [0.0, -0.3]])
INITIAL = np.array([[0.1, 0.1], [-0.1, 0.0], [0.0, -0.1]])


def site_data(num: int, seed: int) -> Dataset:
    rng = np.random.default_rng(seed)
    points = TRUE_CENTRES[rng.integers(3, size=num)] + 0.03 * rng.normal(size=(num, 2))
    return Dataset(points, np.zeros(num), ("a", "b"))


SITES = [site_data(300, 1), site_data(200, 2), site_data(250, 3)]


def federation(noise_seed: int = 7, fractional_bits: int = 32) -> LocalFederation:
    fed = LocalFederation.from_datasets(
        SITES, epsilon_cap=20.0, delta_cap=1e-5, adjacency="add_remove_one",
        noise_seed=noise_seed)
    fed.codec = FixedPointCodec(fractional_bits)
    return fed


def centre_error(model: PrivateLloydKMeans) -> float:
    """The worst distance from a true centre to its nearest fitted one."""
    fitted = model.all_centres_
    return float(np.linalg.norm(TRUE_CENTRES[:, None] - fitted[None], axis=2)
                 .min(axis=1).max())


@pytest.mark.parametrize("bits", [20, 32])
def test_every_site_charges_exactly_the_discrete_plan(bits):
    iterations = 4
    model = PrivateLloydKMeans(n_clusters=5, iterations=iterations, epsilon=2.0, seed=3,
                               noise="discrete").fit(federation(fractional_bits=bits))
    planned = model.mechanisms_
    assert all(isinstance(m, DiscreteLaplaceMechanism) and m.fractional_bits == bits
               for m in planned)
    assert sum(m.exact_epsilon for m in planned) <= 2
    assert float(sum(m.exact_epsilon for m in planned)) == pytest.approx(2.0, rel=1e-9)
    for spent in model.privacy_.values():
        assert list(spent.mechanisms) == planned
        assert spent.job.epsilon <= 2.0


def test_discrete_noise_is_as_accurate_as_the_float_laplace():
    errors = {"continuous": [], "discrete": []}
    for seed in range(6):
        for noise in errors:
            model = PrivateLloydKMeans(n_clusters=3, iterations=4, epsilon=4.0,
                                       noise=noise).fit(federation(seed),
                                                        initial_centres=INITIAL)
            errors[noise].append(centre_error(model))
    continuous, discrete = np.mean(errors["continuous"]), np.mean(errors["discrete"])
    assert discrete < 0.05 and continuous < 0.05
    assert discrete == pytest.approx(continuous, abs=0.01)


def test_a_discrete_epsilon_plan_is_the_discrete_laplace():
    # A discrete rho plan is the distributed discrete Gaussian:
    # test_private_lloyd_distributed_discrete_gaussian.py beside this file.
    assert PrivacyPlan.split(3.0, None, 5, discrete=True) == PrivacyPlan(
        "discrete_laplace", 5 / 3.0, 5)
    with pytest.raises(InvalidParameterError, match="noise"):
        PrivateLloydKMeans(epsilon=1.0, noise="exact").fit(federation())


def test_pure_dp_is_reported_exactly_at_delta_zero():
    fed = federation()
    PrivateLloydKMeans(n_clusters=4, iterations=3, epsilon=1.5, seed=2,
                       noise="discrete").fit(fed)
    for spent in fed.privacy_spent(0.0).values():
        assert spent.job.epsilon <= 1.5 and math.isclose(spent.job.epsilon, 1.5, rel_tol=1e-9)
