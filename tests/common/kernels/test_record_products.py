"""Each record's margin depends on that record alone. BLAS rounded
the last rows of a matrix product differently from the others, so adding or
removing one record changed other records' float margins; with large
cancelling features the validation_loss scores moved by 2.3 L against a
charged L."""

from __future__ import annotations

import numpy as np
import pytest

from privadapt.common.data.dataset import Dataset
from privadapt.common.kernels.validation_loss import ValidationLoss, ValidationLossParams
from privadapt.common.mechanisms import Adjacency
from privadapt.common.numerics.geometry import record_products


def ill_conditioned(rng, n, d, weights):
    """Rows of size 2^52 whose product with ``weights`` cancels to about 0."""
    features = rng.standard_normal((n, d)) * 2.0**52
    features[:, -1] = -(features[:, :-1] @ weights[:-1]) / weights[-1]
    return features


@pytest.mark.parametrize("seed", range(20))
def test_a_records_product_does_not_depend_on_the_other_records(seed):
    rng = np.random.default_rng(seed)
    d, n = int(rng.choice([8, 17, 33])), int(rng.integers(20, 200))
    weights = rng.standard_normal((d, 3))
    features = ill_conditioned(rng, n, d, weights[:, 0])
    alone = np.vstack([record_products(row[None, :], weights) for row in features])
    together = record_products(features, weights)
    np.testing.assert_array_equal(together, alone)
    # Removing the first record, appending one: every other row is bitwise unchanged.
    np.testing.assert_array_equal(record_products(features[1:], weights), together[1:])
    more = np.vstack([features, features[:1]])
    np.testing.assert_array_equal(record_products(more, weights[:, 0])[:-1], together[:, 0])


def test_validation_loss_scores_move_by_at_most_the_charge_on_ill_conditioned_records():
    rng = np.random.default_rng(1)
    kernel = ValidationLoss()
    worst = 0.0
    for _ in range(200):
        d, k, n = int(rng.choice([8, 17, 33])), int(rng.choice([1, 2, 5])), int(
            rng.integers(20, 200))
        candidates = rng.standard_normal((k, d))
        features = ill_conditioned(rng, n, d, candidates[0])
        names = [f"x{i}" for i in range(d)]
        params = ValidationLossParams(candidates, "squared", 1.0)
        (full,) = kernel.compute(Dataset(features, np.zeros(n), names), params, {})
        for keep in (slice(1, None), slice(None, -1)):
            (less,) = kernel.compute(Dataset(features[keep], np.zeros(n - 1), names), params, {})
            worst = max(worst, float(np.abs(full - less).max()))
        charged = max(kernel.score_sensitivities(params, Adjacency.ADD_REMOVE_ONE, d)) \
            + 2 * kernel.computation_errors(params, d, n)[0]
        assert worst <= charged
