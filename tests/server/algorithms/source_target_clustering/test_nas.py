"""NAS (seed 001, Alg. 1) over in-process sites: per-site releases whose
union is S', each site's ledger holding exactly the planned release(s) of
each variant, and the policy switch that forbids per-site releases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privadapt.client.local_federation import LocalFederation
from privadapt.common.data.dataset import Dataset
from privadapt.common.errors import QueryRefusedError
from privadapt.common.mechanisms import Adjacency, GaussianMechanism, LaplaceMechanism
from privadapt.common.numerics.geometry import clip_rows_to_norm
from privadapt.server.algorithms.source_target_clustering.estimators import NoisyAverageSet
from privadapt.server.algorithms.source_target_clustering.nas import (
    advanced_composition_epsilon,
    nas_sanitize,
)
from privadapt.server.algorithms.source_target_clustering.privacy import zcdp_rho

DIM = 2


def _points(seed: int, n: int, centre: float) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return clip_rows_to_norm(centre + 0.1 * rng.normal(size=(n, DIM)), 0.5)


SOURCE = [_points(1, 60, 0.1), _points(2, 50, -0.1)]
TARGET = _points(4, 120, 0.0)


def federation(**options) -> LocalFederation:
    datasets = [Dataset(p, np.zeros(len(p)), ("a", "b")) for p in SOURCE]
    options.setdefault("epsilon_cap", 10.0)
    return LocalFederation.from_datasets(datasets, delta_cap=1e-5, noise_seed=2,
                                         adjacency="add_remove_one", **options)

# The estimator's defaults, which the solver takes explicitly.
SETTINGS = {"rho": None, "calibration": "accountant", "adjacency": Adjacency.ADD_REMOVE_ONE}


def test_without_noise_s_prime_is_the_union_of_each_sites_averages():
    with federation(epsilon_cap=math.inf, allow_non_private=True) as fed:
        result, plan = nas_sanitize(fed, TARGET[:10], t=5, variant="laplace", epsilon=math.inf,
                                    **SETTINGS)
    expected = []
    for part in SOURCE:
        squared = ((part[None] - TARGET[:10, None]) ** 2).sum(axis=2)
        expected.append(part[np.argsort(squared, axis=1, kind="stable")[:, :5]].mean(axis=1))
    np.testing.assert_allclose(result.points, np.vstack(expected), rtol=0, atol=2.0**-31)
    assert plan.releases == 1


@pytest.mark.parametrize("calibration", ["accountant", "paper"])
def test_pure_laplace_ledgers_hold_one_release_of_the_planned_epsilon(calibration):
    with federation() as fed:
        model = NoisyAverageSet(k=4, t=10, epsilon=3.0, calibration=calibration,
                                coreset=False).fit(fed, TARGET)
    assert isinstance(model.mechanism_, LaplaceMechanism)
    m = len(TARGET)
    if calibration == "paper":  # Theorem 5.9: b = n sqrt(d)/(t epsilon)
        assert model.mechanism_.scale == pytest.approx(m * math.sqrt(DIM) / (10 * 3.0))
    for site in model.privacy_.values():
        (charged,) = site.mechanisms
        assert charged.scale == model.mechanism_.scale
        assert charged.epsilon <= model.epsilon_ <= charged.epsilon * (1 + 1e-2)
    # The paper's b ignores the grid rounding: a hair over epsilon, and said so.
    assert model.epsilon_ == pytest.approx(3.0, rel=1e-2)
    assert len(model.sanitized_source_) == 2 * m  # the union over the two sites


def test_gaussian_ledgers_hold_one_release_of_the_planned_rho():
    with federation(epsilon_cap=50.0) as fed:
        model = NoisyAverageSet(k=4, t=10, variant="gaussian", rho=3.0).fit(fed, TARGET)
    assert isinstance(model.mechanism_, GaussianMechanism)
    assert model.rho_ == pytest.approx(3.0)
    for site in model.privacy_.values():
        (charged,) = site.mechanisms
        assert zcdp_rho(charged) <= model.rho_ <= zcdp_rho(charged) * (1 + 1e-3)


def test_approximate_laplace_is_one_release_per_target_within_epsilon_at_delta():
    targets = TARGET[:20]
    with federation() as fed:
        result, plan = nas_sanitize(fed, targets, t=10, variant="laplace_approximate",
                                    epsilon=3.0, delta=1e-6, **SETTINGS)
        privacy = fed.privacy_spent(delta=1e-6)
    eps0 = advanced_composition_epsilon(3.0, 20, 1e-6)
    assert plan.releases == 20
    assert plan.mechanism.epsilon == pytest.approx(eps0, rel=1e-3)
    assert 1.3 < plan.theta < 1.6  # about sqrt(2) for a small per-release epsilon
    for site in privacy.values():
        assert len(site.mechanisms) == 20
        assert all(m == site.mechanisms[0] for m in site.mechanisms)
        # The ledger's own composition is tighter than advanced composition.
        assert site.job.epsilon <= 3.0
    assert len(result.points) == 2 * 20


def test_advanced_composition_epsilon_inverts_the_papers_formula():
    eps0 = advanced_composition_epsilon(1.0, 50, 1e-5)
    total = eps0 * math.sqrt(100 * math.log(1e5)) + 50 * eps0 * (math.exp(eps0) - 1) / (
        math.exp(eps0) + 1)
    assert total == pytest.approx(1.0)


def test_a_site_that_forbids_per_site_releases_refuses_nas():
    with federation(allow_per_site_releases=False) as fed, \
            pytest.raises(QueryRefusedError, match="per-site"):
        NoisyAverageSet(k=2, t=5).fit(fed, TARGET)
