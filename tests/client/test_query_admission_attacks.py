"""Queries a hostile coordinator could send, and what a site must do with them:
refuse with ``QueryRefusedError`` before anything is released or charged,
never let a raw arithmetic error out of ``Site.answer`` (the worker would
report an internal error instead of a refusal)."""

import numpy as np
import pytest

from privadapt.common.errors import QueryRefusedError
from privadapt.common.federation import Query
from privadapt.common.mechanisms import (
    Adjacency,
    GaussianBlock,
    GaussianMechanism,
    LaplaceMechanism,
)

DIM = 5
HUGE = 1e300  # finite, so it passes every parameter check and the wire; its square is not


def _reweighted_params(**changes):
    params = {
        "weights": np.zeros(DIM), "step": 0, "objective": "convex", "loss": "squared",
        "alpha": 0.2, "total_private_records": 200, "feature_norm": 1.0, "label_bound": 1.0,
        "radius": 1.0, "k1": 0.1, "k2": 0.1, "kinf": 0.0, "mu": 1.0,
        "inverse_square_sum": 1.0, "log_partition": 0.5, "step_size": 0.01,
        "weight_noise": False,
    }
    return params | changes


_GAUSSIAN = GaussianMechanism((GaussianBlock(1.0, 1.0),))
_OVERFLOWING_QUERIES = {
    "second_moments r^2": ("second_moments", {"feature_norm": HUGE, "label_bound": 1.0},
                           _GAUSSIAN),
    "exact_discrepancy (Lambda r + Y)^2": (
        "exact_discrepancy",
        {"feature_norm": 1.0, "label_bound": 1.0, "radius": HUGE,
         "public_moments": 0.1 * np.eye(DIM + 1)},
        LaplaceMechanism(1.0, 1.0),
    ),
    "exact_discrepancy moments overflow when symmetrised": (
        "exact_discrepancy",
        {"feature_norm": 1.0, "label_bound": 1.0, "radius": 1.0,
         "public_moments": 1.7e308 * np.ones((DIM + 1, DIM + 1))},
        LaplaceMechanism(1.0, 1.0, Adjacency.ADD_REMOVE_ONE),
    ),
    "reweighted_gradient (Lambda r + Y)^2": (
        "reweighted_gradient", _reweighted_params(radius=HUGE),
        GaussianMechanism((GaussianBlock(1.0, 1.0),) * 3),
    ),
}


@pytest.mark.parametrize("case", sorted(_OVERFLOWING_QUERIES))
@pytest.mark.parametrize("adjacency", list(Adjacency))
def test_public_parameters_whose_bounds_overflow_are_refused(make_site, case, adjacency):
    kernel, params, mechanism = _OVERFLOWING_QUERIES[case]
    site = make_site(adjacency=adjacency)
    query = Query("job-1", "q1", kernel, params, mechanism)
    with pytest.raises(QueryRefusedError, match=kernel):
        site.answer(query, 1)
    assert site.ledger.spent().epsilon == 0.0
