"""d_DP (seed 000, Section 4): exact with noise off, noise of the planned size,
the planned epsilon in every ledger, and arguments refused before any query."""

import functools
import itertools
import math

import numpy as np
import pytest

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.local_federation import LocalFederation
from privadapt.client.policy import SitePolicy
from privadapt.client.site import Site
from privadapt.common.data.dataset import Dataset
from privadapt.common.noise.floating import SeededRandomBits
from privadapt.server.algorithms.discrepancy.estimators import PrivateDiscrepancy
from privadapt.server.algorithms.discrepancy.private_discrepancy import (
    federated_discrepancy,
    single_holder_discrepancy,
)

RADIUS, FEATURE_NORM, LABEL_BOUND = 2.0, 1.5, 1.0
BOUND = (RADIUS * FEATURE_NORM + LABEL_BOUND) ** 2
SETTINGS = {"radius": RADIUS, "feature_norm": FEATURE_NORM, "label_bound": LABEL_BOUND}


def shifted_sample(num_records, shift, seed):
    """Two features inside the clipping bounds, a label depending on them."""
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(num_records, 2)) * 0.4 + shift
    features /= np.maximum(1.0, np.linalg.norm(features, axis=1) / FEATURE_NORM)[:, None]
    labels = np.clip(features @ np.array([0.8, -0.5]) + 0.1 * rng.normal(size=num_records),
                     -LABEL_BOUND, LABEL_BOUND)
    return features, labels


PUBLIC = shifted_sample(300, np.array([0.3, 0.0]), seed=1)
PRIVATE = shifted_sample(240, np.array([-0.2, 0.5]), seed=2)


@pytest.fixture
def federation(tmp_path):
    """Sites over consecutive slices of PRIVATE, each with its own ledger."""
    builds = itertools.count()

    def build(num_sites=3, epsilon_cap=10.0, delta_cap=1e-5):
        sites, build_number = [], next(builds)
        for k, rows in enumerate(np.array_split(np.arange(len(PRIVATE[1])), num_sites)):
            policy = SitePolicy(f"site-{k}", epsilon_cap=epsilon_cap, delta_cap=delta_cap,
                                allow_non_private=math.isinf(epsilon_cap))
            data = Dataset(PRIVATE[0][rows], PRIVATE[1][rows], ("x0", "x1"))
            ledger = PrivacyLedger(tmp_path / f"build{build_number}-site-{k}.db", policy,
                                   create=True)
            sites.append(Site(data, policy, ledger, SeededRandomBits(1000 * build_number + k)))
        return LocalFederation(sites)

    return build


@functools.cache
def brute_force_discrepancy():
    """sup over a fine grid of the disc ||w|| <= Lambda of the mean-loss gap."""
    angles = np.linspace(0, 2 * np.pi, 20_001)
    radii, turns = np.meshgrid(np.linspace(0, RADIUS, 300), np.linspace(0, 2 * np.pi, 300))
    grid = np.vstack([RADIUS * np.column_stack([np.cos(angles), np.sin(angles)]),
                      np.column_stack([(radii * np.cos(turns)).ravel(),
                                       (radii * np.sin(turns)).ravel()])])

    def mean_loss(features, labels):
        return ((grid @ features.T - labels) ** 2).mean(axis=1)

    return float(np.abs(mean_loss(*PUBLIC) - mean_loss(*PRIVATE)).max())


def test_federated_estimate_without_noise_is_the_exact_discrepancy(federation):
    estimate = federated_discrepancy(federation(epsilon_cap=math.inf), *PUBLIC,
                                     epsilon=math.inf, delta=None, **SETTINGS)
    expected = brute_force_discrepancy()
    assert estimate.value >= expected - 1e-8  # fixed-point rounding of the moments
    assert estimate.value == pytest.approx(expected, rel=1e-6)
    assert estimate.noise_scale == 0


def test_single_holder_estimate_without_noise_is_the_exact_discrepancy(federation):
    estimate = single_holder_discrepancy(federation(num_sites=1, epsilon_cap=math.inf),
                                         *PUBLIC, epsilon=math.inf, delta=None, **SETTINGS)
    assert estimate.value == pytest.approx(brute_force_discrepancy(), rel=1e-6)
    assert estimate.private_moments is None


def test_federated_release_charges_the_planned_epsilon_at_every_site(federation):
    estimate = federated_discrepancy(federation(epsilon_cap=1.0), *PUBLIC,
                                     epsilon=1.0, delta=1e-5, **SETTINGS)
    assert set(estimate.privacy) == {"site-0", "site-1", "site-2"}
    for spent in estimate.privacy.values():
        assert spent.job.epsilon <= 1.0
        assert spent.job.epsilon == pytest.approx(1.0, rel=2e-3)


def test_single_holder_release_charges_the_planned_pure_epsilon(federation):
    estimate = single_holder_discrepancy(federation(num_sites=1, epsilon_cap=0.5), *PUBLIC,
                                         epsilon=0.5, delta=1e-5, **SETTINGS)
    (spent,) = estimate.privacy.values()
    assert spent.job.epsilon <= 0.5
    assert spent.job.epsilon == pytest.approx(0.5, rel=1e-4)
    assert estimate.noise_scale == pytest.approx(BOUND / (240 * 0.5), rel=1e-4)


def test_federated_noise_has_the_calibrated_variance(federation):
    # Off the diagonal the symmetrised noise has half the variance of each
    # released entry; standardised, every entry should have variance 1.
    sites = federation(epsilon_cap=100.0)
    z = np.column_stack(PRIVATE)
    exact = z.T @ z / len(z)
    half = np.where(np.eye(3, dtype=bool), 1.0, 0.5)
    standardised = []
    for _ in range(40):
        estimate = federated_discrepancy(sites, *PUBLIC, epsilon=1.0, delta=1e-5, **SETTINGS)
        error = estimate.private_moments - exact
        standardised.append(error / (estimate.noise_scale * np.sqrt(half)))
    sample = np.array(standardised)[:, *np.triu_indices(3)]  # 240 independent entries
    assert abs(sample.mean()) < 4 / np.sqrt(sample.size)
    assert sample.var() == pytest.approx(1.0, abs=4 * np.sqrt(2 / sample.size))


def test_single_holder_noise_has_the_laplace_scale(federation):
    exact = single_holder_discrepancy(federation(num_sites=1, epsilon_cap=math.inf), *PUBLIC,
                                      epsilon=math.inf, delta=None, **SETTINGS).unclipped
    # A fresh site (own ledger, own noise seed) per draw: one charge each.
    errors = np.array([
        single_holder_discrepancy(federation(num_sites=1, epsilon_cap=2.0), *PUBLIC,
                                  epsilon=2.0, delta=None, **SETTINGS).unclipped - exact
        for _ in range(150)
    ])
    scale = BOUND / (240 * 2.0)
    # |Laplace(b)| is exponential: mean b, standard deviation b.
    assert np.abs(errors).mean() == pytest.approx(scale, rel=4 / np.sqrt(errors.size))
    assert abs(errors.mean()) < 4 * np.sqrt(2) * scale / np.sqrt(errors.size)


def test_estimate_is_projected_onto_zero_to_the_loss_bound(federation):
    estimate = federated_discrepancy(federation(epsilon_cap=100.0), *PUBLIC,
                                     epsilon=0.05, delta=1e-5, **SETTINGS)
    assert 0 <= estimate.value <= BOUND
    assert estimate.value == min(max(estimate.unclipped, 0.0), BOUND)


def test_single_holder_refuses_a_federation_of_several_sites(federation):
    sites = federation(num_sites=2)
    with pytest.raises(ValueError, match=r"2 sites.*federated"):
        single_holder_discrepancy(sites, *PUBLIC, epsilon=1.0, delta=None, **SETTINGS)
    assert all(p.job.epsilon == 0 for p in sites.privacy_spent().values())


def test_estimator_exposes_the_fitted_discrepancy(federation):
    model = PrivateDiscrepancy(epsilon=math.inf, method="single_holder", **SETTINGS)
    assert model.fit(federation(num_sites=1, epsilon_cap=math.inf), PUBLIC) is model
    assert model.discrepancy_ == pytest.approx(brute_force_discrepancy(), rel=1e-6)
    assert model.loss_bound_ == BOUND
    assert model.estimate_.method == "single_holder"


@pytest.mark.parametrize(
    ("changes", "argument"),
    [
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": -1.0}, "epsilon"),
        ({"delta": None}, "delta"),
        ({"delta": 1.5}, "delta"),
        ({"radius": 0.0}, "radius"),
        ({"feature_norm": math.inf}, "feature_norm"),
        ({"label_bound": -1.0}, "label_bound"),
        ({"method": "dca"}, "method"),
    ],
)
def test_bad_arguments_are_refused_naming_them_before_any_query(federation, changes, argument):
    sites = federation()
    model = PrivateDiscrepancy(**{"epsilon": 1.0, "delta": 1e-5, **SETTINGS, **changes})
    with pytest.raises(ValueError, match=argument):
        model.fit(sites, PUBLIC)
    assert all(p.job.epsilon == 0 for p in sites.privacy_spent().values())


@pytest.mark.parametrize(
    ("features", "labels", "argument"),
    [
        (PUBLIC[0][:, 0], PUBLIC[1], "public_features"),
        (PUBLIC[0], PUBLIC[1][:-1], "public_labels"),
        (np.full_like(PUBLIC[0], np.nan), PUBLIC[1], "finite"),
        (PUBLIC[0][:, :1], PUBLIC[1], "number of features"),
    ],
)
def test_malformed_public_data_is_refused(federation, features, labels, argument):
    with pytest.raises(ValueError, match=argument):
        federated_discrepancy(federation(epsilon_cap=math.inf), features, labels,
                              epsilon=math.inf, delta=None, **SETTINGS)
