"""The grid search's secure-sum choice reads the noise its release really
carries: with t of K sites allowed to collude the sum's std is
sqrt(K / (K - t)) times the calibrated one, and the confidence penalty that
keeps a noisy candidate from winning by luck must use that."""

import math

import numpy as np

from privadapt import Dataset, LocalFederation
from privadapt.server.algorithms.model_selection.grid_selection import select_on_noisy_sums

DIM = 3


def sites(tolerance: int) -> LocalFederation:
    rng = np.random.default_rng(0)
    features = rng.normal(size=(300, DIM)) / 2
    labels = features @ np.ones(DIM)
    names = tuple(f"x{i}" for i in range(DIM))
    parts = [Dataset(features[rows], labels[rows], names)
             for rows in np.array_split(np.arange(300), 3)]
    return LocalFederation.from_datasets(parts, epsilon_cap=10.0, delta_cap=1e-4, noise_seed=1,
                                         collusion_tolerance=tolerance)


def test_the_noise_stds_are_those_of_the_colluder_proof_sum():
    candidates = np.stack([np.zeros(DIM), np.ones(DIM), 0.5 * np.ones(DIM)])
    bounds = np.array([0.0, 4.0, 4.0])  # the first is free: no release
    stds = {}
    for tolerance in (0, 1):
        with sites(tolerance) as federation:
            choice = select_on_noisy_sums(federation, candidates, bounds, np.zeros(3),
                                          "squared", 1.0, 1e-6, 0.1)
        stds[tolerance] = choice.noise_stds
    assert stds[0][0] == stds[1][0] == 0.0
    np.testing.assert_allclose(stds[1][1:], stds[0][1:] * math.sqrt(3 / 2))
