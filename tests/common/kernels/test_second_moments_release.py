"""The second-moment release: its triangle layout, its sensitivity on
adversarial neighbours, and the proved float error of its BLAS sum."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from privadapt.common.data.dataset import Dataset
from privadapt.common.kernels.blocked_gram import (
    BLOCK_RECORDS,
    gram,
    gram_error,
    weighted_rows,
)
from privadapt.common.kernels.second_moments import (
    SecondMoments,
    SecondMomentsParams,
    symmetric_from_triangle,
    triangle_of,
    triangle_size,
)
from privadapt.common.mechanisms import Adjacency

KERNEL = SecondMoments()
DIM = 3
SETTINGS = settings(max_examples=60, deadline=None)
scale = st.sampled_from([2.0**-150, 1e-3, 0.7, 1.0, 3.0, 1e5, 2.0**150])


def dataset(features: np.ndarray, labels: np.ndarray) -> Dataset:
    return Dataset(features, labels, tuple(f"x{i}" for i in range(features.shape[1])))


@given(st.integers(1, 7), st.integers(0, 2**32 - 1))
def test_triangle_round_trips_and_is_an_isometry(size, seed):
    rng = np.random.default_rng(seed)
    half = rng.normal(size=(size, size))
    matrix = half + half.T
    triangle = triangle_of(matrix)
    assert triangle.shape == (triangle_size(size),)
    np.testing.assert_allclose(symmetric_from_triangle(triangle), matrix, rtol=1e-15)
    assert math.isclose(np.linalg.norm(triangle), np.linalg.norm(matrix), rel_tol=1e-14)


def test_triangle_order_is_row_by_row_with_scaled_off_diagonal():
    matrix = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 5.0], [3.0, 5.0, 6.0]])
    root = math.sqrt(2.0)
    np.testing.assert_allclose(triangle_of(matrix), [1, 2 * root, 3 * root, 4, 5 * root, 6])


def test_a_vector_of_no_triangular_length_is_refused():
    for bad in (np.zeros(4), np.zeros(0), np.zeros((3, 2))):
        try:
            symmetric_from_triangle(bad)
        except ValueError:
            continue
        raise AssertionError(f"accepted shape {bad.shape}")


def boundary_record(kind: str, r: float, y: float, angle: float) -> tuple[np.ndarray, float]:
    """Records on the clip boundary (or far past it), aimed at the worst cases."""
    x = np.zeros(DIM)
    if kind == "axis":
        x[0] = r
    elif kind == "rotated":
        x[0], x[1] = r * math.cos(angle), r * math.sin(angle)
    elif kind == "huge":
        x[:] = 1e300
    else:  # spread
        x[:] = r / math.sqrt(DIM)
    return x, y


@SETTINGS
@given(r=scale, y=scale, angle=st.floats(0, 2 * math.pi), adj=st.sampled_from(list(Adjacency)),
       kinds=st.tuples(*[st.sampled_from(["axis", "rotated", "huge", "spread"])] * 2),
       signs=st.tuples(st.sampled_from([-1.0, 0.0, 1.0]), st.sampled_from([-1.0, 0.0, 1.0])),
       background=st.sampled_from([0.0, 1.0, 1e200]))
def test_neighbours_differ_by_at_most_the_declared_sensitivity(r, y, angle, adj, kinds, signs,
                                                               background):
    params = SecondMomentsParams(r, y)
    rng = np.random.default_rng(0)
    base_x = rng.normal(size=(20, DIM)) * background
    base_y = rng.normal(size=20) * background
    a = boundary_record(kinds[0], r, signs[0] * y * 2, angle)
    b = boundary_record(kinds[1], r, signs[1] * y * 2, angle + math.pi / 2)
    first = dataset(np.vstack([base_x, a[0]]), np.append(base_y, a[1]))
    second = (dataset(np.vstack([base_x, b[0]]), np.append(base_y, b[1]))
              if adj == Adjacency.REPLACE_ONE else dataset(base_x, base_y))
    (one,) = KERNEL.compute(first, params, {})
    (two,) = KERNEL.compute(second, params, {})
    (declared,) = KERNEL.l2_sensitivities(params, adj)
    (error,) = KERNEL.computation_errors(params, DIM, 21)
    size = triangle_size(DIM + 1)
    # What the site charges beyond the grid step: 2e per entry (grid_rounding).
    assert np.linalg.norm(one - two) <= declared + 2 * error * math.sqrt(size)


def exact_gram(rows: np.ndarray) -> list[list[Fraction]]:
    values = [[Fraction(float(v)) for v in row] for row in rows]
    size = rows.shape[1]
    return [[sum((row[j] * row[k] for row in values), Fraction(0)) for k in range(size)]
            for j in range(size)]


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 60),
       st.sampled_from([1.0, 2.0**-500, 2.0**300]))
def test_the_blas_sum_is_within_its_proved_bound(seed, num, unit):
    # Entries spanning many binades with cancelling signs: the worst for a float sum.
    rng = np.random.default_rng(seed)
    rows = rng.normal(size=(num, 4)) * 2.0 ** rng.integers(-40, 40, size=(num, 4)) * unit
    rows[rng.random(size=rows.shape) < 0.2] = 0.0
    norms = max(sum(Fraction(float(v)) ** 2 for v in row) for row in rows)
    computed = gram([rows[i:i + 7] for i in range(0, num, 7)], 4)
    exact = exact_gram(rows)
    bound = Fraction(gram_error(num, math.nextafter(float(norms), math.inf)))
    for j in range(4):
        for k in range(4):
            assert abs(Fraction(float(computed[j, k])) - exact[j][k]) <= bound


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 60),
       st.sampled_from([1.0, 2.0**-500, 2.0**300]))
def test_the_blas_weighted_row_sum_is_within_its_proved_bound(seed, num, unit):
    # linear_gradient's X^T c: products x_ij c_i over many binades, cancelling.
    rng = np.random.default_rng(seed)
    rows = rng.normal(size=(num, 5)) * 2.0 ** rng.integers(-40, 40, size=(num, 5)) * unit
    coefficients = rng.normal(size=num) * 2.0 ** rng.integers(-30, 30, size=num)
    rows[rng.random(size=rows.shape) < 0.2] = 0.0
    largest = max(abs(Fraction(float(c)) * Fraction(float(v)))
                  for row, c in zip(rows, coefficients, strict=True) for v in row)
    computed = weighted_rows(((rows[i:i + 7], coefficients[i:i + 7])
                              for i in range(0, num, 7)), 5)
    bound = Fraction(gram_error(num, math.nextafter(float(largest), math.inf)))
    for j in range(5):
        exact = sum((Fraction(float(c)) * Fraction(float(row[j]))
                     for row, c in zip(rows, coefficients, strict=True)), Fraction(0))
        assert abs(Fraction(float(computed[j])) - exact) <= bound


def test_gram_refuses_blocks_larger_than_its_bound_assumes():
    try:
        gram([np.zeros((BLOCK_RECORDS + 1, 2))], 2)
    except ValueError:
        return
    raise AssertionError("accepted an oversize block")


def test_the_error_charge_is_tiny_at_the_sizing_bound():
    params = SecondMomentsParams(1.0, 1.0)
    (error,) = KERNEL.computation_errors(params, 100, 2**20)
    # e / (n s) about (4096 + 256) u: the charge 2 e sqrt(size) is < 1e-3 of the sensitivity.
    assert error / (2**20 * params.record_bound) < 2.0**-20
    charge = 2 * error * math.sqrt(triangle_size(101))
    assert charge < 1e-3 * KERNEL.l2_sensitivities(params, Adjacency.ADD_REMOVE_ONE)[0]


def unscaled_triangle(z: np.ndarray) -> np.ndarray:
    rows, cols = np.triu_indices(len(z))
    return z[rows] * z[cols]


@given(r=st.floats(0.1, 10), y=st.floats(0.1, 10))
def test_the_documented_unscaled_triangle_maximum_is_attained(r, y):
    # The module docstring's witnesses reach its replace-one maximum of the
    # unscaled triangle (the reason the release scales the off-diagonal instead).
    if y * y <= 2 * r * r:
        t = 0.5 * math.asin(y * y / (2 * r * r))
        a = np.array([r * math.cos(t), r * math.sin(t), y])
        b = np.array([r * math.sin(t), r * math.cos(t), -y])
    else:
        a, b = np.array([r, 0.0, y]), np.array([0.0, r, 0.0])
    stated = 2 * r**4 + r * r * y * y + max(r * r * y * y + y**4 / 2, y**4)
    reached = float(np.sum((unscaled_triangle(a) - unscaled_triangle(b)) ** 2))
    assert math.isclose(reached, stated, rel_tol=1e-9)
    # Under add/remove its off-diagonal noise is never below the scaled
    # triangle's s / sqrt(2) (the maximum at z = (r e1, y)).
    z = np.array([r, 0.0, y])
    add_remove = float(np.sum(unscaled_triangle(z) ** 2))
    assert math.isclose(add_remove, r**4 + r * r * y * y + y**4, rel_tol=1e-12)
    assert add_remove >= (r * r + y * y) ** 2 / 2
