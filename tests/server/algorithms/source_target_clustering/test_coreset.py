"""The k-d tree coreset of the public target (seed 001, Section 6, Appendix B)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from privadapt.server.algorithms.source_target_clustering.coreset import target_coreset


def _check(points: np.ndarray, diameter: float) -> None:
    coreset = target_coreset(points, diameter)
    kept = points[coreset.indices]
    # Every point within the diameter of its cell's representative, which is a member.
    gaps = np.linalg.norm(points - kept[coreset.cells], axis=1)
    assert np.all(gaps <= diameter * (1 + 1e-12) + 1e-15)
    assert np.all(coreset.cells[coreset.indices] == np.arange(len(coreset.indices)))
    assert coreset.weights.sum() == len(points)
    assert np.all(np.diff(coreset.indices) > 0)


def test_coreset_of_clustered_points_is_small_and_covers_every_point():
    rng = np.random.default_rng(0)
    centres = rng.uniform(0, 1, size=(12, 2))
    points = centres[rng.integers(0, 12, 2000)] + 0.01 * rng.normal(size=(2000, 2))
    coreset = target_coreset(points)
    _check(points, 0.05)
    assert len(coreset.indices) < 200


def test_zero_diameter_keeps_one_point_per_distinct_location():
    points = np.array([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0], [1.0, 0.0], [2.0, 2.0]])
    coreset = target_coreset(points, 0.0)
    assert len(coreset.indices) == 3
    _check(points, 0.0)


def test_bad_diameter_is_refused():
    with pytest.raises(ValueError, match="diameter"):
        target_coreset(np.zeros((3, 2)), -1.0)


@settings(max_examples=60, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(1, 60), st.integers(1, 4)),
              elements=st.floats(-1, 1, allow_nan=False)),
       st.sampled_from([0.0, 0.01, 0.05, 0.3, 2.0]))
def test_every_point_is_within_the_diameter_of_a_kept_point(points, diameter):
    _check(points, diameter)
