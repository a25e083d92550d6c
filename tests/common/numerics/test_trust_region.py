"""The trust-region solver: exact maximum of an indefinite quadratic over a
ball, checked by its optimality certificate, by brute force, by scipy, and in
the hard case."""

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy import optimize

from privadapt.common.numerics.trust_region import (
    maximize_quadratic_on_ball,
    quadratic_range_on_ball,
)

entry = st.floats(min_value=-10, max_value=10, allow_nan=False, allow_infinity=False)


@st.composite
def problems(draw, max_dim=4):
    dim = draw(st.integers(1, max_dim))
    raw = np.array(draw(st.lists(entry, min_size=dim * dim, max_size=dim * dim))).reshape(dim, dim)
    scale = draw(st.sampled_from([0.0, 1e-3, 1.0, 10.0]))
    linear = scale * np.array(draw(st.lists(entry, min_size=dim, max_size=dim)))
    constant = draw(entry)
    radius = draw(st.floats(min_value=0.1, max_value=5.0))
    return raw + raw.T, linear, constant, radius


@st.composite
def hard_cases(draw):
    """A top eigenvector orthogonal to b and b small: the secular equation has
    no root above lambda_1, so the maximiser needs the eigenvector."""
    dim = draw(st.integers(2, 4))
    eigenvalues = np.sort(np.array(draw(st.lists(entry, min_size=dim, max_size=dim,
                                                 unique=True))))[::-1]
    assume(eigenvalues[0] >= 0 and eigenvalues[0] - eigenvalues[1] > 1e-3)  # a distinct top
    seed = draw(st.integers(0, 2**32 - 1))
    basis, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(dim, dim)))
    matrix = basis @ np.diag(eigenvalues) @ basis.T
    coefficients = np.array(draw(st.lists(entry, min_size=dim - 1, max_size=dim - 1)))
    linear = basis[:, 1:] @ coefficients * 1e-3  # no component along basis[:, 0]
    return matrix, linear, draw(entry), draw(st.floats(min_value=0.5, max_value=5.0))


def quadratic(matrix, linear, constant, weights):
    return weights @ matrix @ weights + 2 * linear @ weights + constant


def assert_optimality_certificate(matrix, linear, radius, solution):
    """Moré-Sorensen: (mu I - A) w = b, mu I - A >= 0, mu >= 0, mu (Lambda - ||w||) = 0
    are necessary and sufficient for a global maximum."""
    scale = 1 + np.abs(matrix).max() * radius + np.abs(linear).max()
    mu, weights = solution.multiplier, solution.weights
    shifted = mu * np.eye(len(linear)) - matrix
    assert np.linalg.norm(weights) <= radius * (1 + 1e-12)
    assert np.linalg.norm(shifted @ weights - linear) <= 1e-8 * scale
    assert np.linalg.eigvalsh(shifted).min() >= -1e-9 * scale
    assert mu >= 0
    assert mu * (radius - np.linalg.norm(weights)) <= 1e-8 * scale * radius


@settings(max_examples=150, deadline=None)
@given(problem=problems())
def test_solution_meets_the_global_optimality_conditions(problem):
    matrix, linear, constant, radius = problem
    solution = maximize_quadratic_on_ball(matrix, linear, constant, radius)
    assert_optimality_certificate(matrix, linear, radius, solution)
    assert solution.value == pytest.approx(
        quadratic(matrix, linear, constant, solution.weights), rel=1e-10, abs=1e-10
    )


@settings(max_examples=60, deadline=None)
@given(problem=problems(max_dim=2))
def test_value_matches_brute_force_over_the_disc(problem):
    matrix, linear, constant, radius = problem
    solution = maximize_quadratic_on_ball(matrix, linear, constant, radius)
    dim = len(linear)
    if dim == 1:
        grid = np.linspace(-radius, radius, 200_001)[:, None]
    else:  # the boundary circle finely, the interior coarsely
        angles = np.linspace(0, 2 * np.pi, 200_001)
        circle = radius * np.column_stack([np.cos(angles), np.sin(angles)])
        radii, turns = np.meshgrid(np.linspace(0, radius, 300), np.linspace(0, 2 * np.pi, 300))
        disc = np.column_stack([(radii * np.cos(turns)).ravel(), (radii * np.sin(turns)).ravel()])
        grid = np.vstack([circle, disc])
    values = np.einsum("ij,jk,ik->i", grid, matrix, grid) + 2 * grid @ linear + constant
    scale = 1 + np.abs(matrix).max() * radius**2 + np.abs(linear).max() * radius
    assert values.max() <= solution.value + 1e-9 * scale
    assert values.max() >= solution.value - 1e-3 * scale  # the grid's resolution


@settings(max_examples=25, deadline=None)
@given(problem=problems(), seed=st.integers(0, 2**32 - 1))
def test_no_local_search_from_random_starts_beats_it(problem, seed):
    matrix, linear, constant, radius = problem
    solution = maximize_quadratic_on_ball(matrix, linear, constant, radius)
    rng = np.random.default_rng(seed)
    ball = {"type": "ineq", "fun": lambda w: radius**2 - w @ w, "jac": lambda w: -2 * w}
    scale = 1 + np.abs(matrix).max() * radius**2 + np.abs(linear).max() * radius
    for _ in range(5):
        start = rng.normal(size=len(linear))
        start *= radius * rng.uniform() / np.linalg.norm(start)
        found = optimize.minimize(
            lambda w: -quadratic(matrix, linear, constant, w), start,
            jac=lambda w: -2 * (matrix @ w + linear), method="SLSQP", constraints=[ball],
        ).x
        found *= min(1.0, radius / max(np.linalg.norm(found), 1e-300))  # exactly feasible
        assert quadratic(matrix, linear, constant, found) <= solution.value + 1e-9 * scale


@settings(max_examples=80, deadline=None)
@given(problem=hard_cases())
def test_hard_case_fills_the_ball_along_the_top_eigenvector(problem):
    matrix, linear, constant, radius = problem
    eigenvalues, vectors = np.linalg.eigh(matrix)
    top = eigenvalues[-1]
    beta = vectors.T @ linear
    inside = np.sum((beta[:-1] / (top - eigenvalues[:-1])) ** 2)
    assume(inside < radius**2)  # otherwise b is long enough to reach the sphere alone
    solution = maximize_quadratic_on_ball(matrix, linear, constant, radius)
    assert solution.hard_case
    assert np.linalg.norm(solution.weights) == pytest.approx(radius, rel=1e-9)
    # the dual value at mu = lambda_1 is attained
    dual = top * radius**2 + np.sum(beta[:-1] ** 2 / (top - eigenvalues[:-1])) + constant
    assert solution.value == pytest.approx(dual, rel=1e-9, abs=1e-9)
    assert_optimality_certificate(matrix, linear, radius, solution)


def test_negative_definite_with_short_linear_term_has_the_interior_maximiser():
    matrix = -np.diag([1.0, 2.0, 4.0])
    linear = np.array([0.1, -0.2, 0.3])
    solution = maximize_quadratic_on_ball(matrix, linear, 0.5, radius=10.0)
    expected = np.linalg.solve(-matrix, linear)
    np.testing.assert_allclose(solution.weights, expected, rtol=1e-12)
    assert solution.value == pytest.approx(0.5 + linear @ expected, rel=1e-12)
    assert solution.multiplier == 0


def test_positive_definite_without_linear_term_is_the_top_eigenvalue_times_radius_squared():
    solution = maximize_quadratic_on_ball(np.diag([3.0, 1.0]), np.zeros(2), 0.0, radius=2.0)
    assert solution.value == pytest.approx(12.0)
    assert abs(solution.weights[0]) == pytest.approx(2.0)


def test_range_is_minus_max_of_negation_and_max():
    matrix = np.array([[1.0, 2.0], [2.0, -3.0]])
    linear = np.array([0.5, 1.0])
    low, high = quadratic_range_on_ball(matrix, linear, 1.0, 1.5)
    assert high == maximize_quadratic_on_ball(matrix, linear, 1.0, 1.5).value
    assert low == -maximize_quadratic_on_ball(-matrix, -linear, -1.0, 1.5).value
    assert low < high


@pytest.mark.parametrize(
    ("matrix", "linear", "radius", "message"),
    [
        (np.ones((2, 3)), np.ones(2), 1.0, "square"),
        (np.eye(2), np.ones(3), 1.0, "linear"),
        (np.eye(2) * math.nan, np.ones(2), 1.0, "finite"),
        (np.eye(2), np.ones(2), 0.0, "radius"),
        (np.eye(2), np.ones(2), math.inf, "radius"),
    ],
)
def test_malformed_problems_are_refused(matrix, linear, radius, message):
    with pytest.raises(ValueError, match=message):
        maximize_quadratic_on_ball(matrix, linear, 0.0, radius)


@pytest.mark.parametrize("split", [0.0, 1e-13])
@pytest.mark.parametrize("stray", [0.0, 1e-14, 1e-9])
def test_hard_case_at_adult_dimension_with_a_tripled_top_eigenvalue(split, stray):
    # d = 104 as for Adult's moments; ties split by rounding-sized amounts, and
    # b with no, a negligible, or a tiny component along the top eigenspace.
    rng = np.random.default_rng(0)
    dim = 104
    basis, _ = np.linalg.qr(rng.normal(size=(dim, dim)))
    eigenvalues = rng.normal(size=dim)
    eigenvalues[:3] = eigenvalues.max() + 0.5 + np.array([0.0, split, -split])
    matrix = basis @ np.diag(eigenvalues) @ basis.T
    linear = basis[:, 3:] @ rng.normal(size=dim - 3) * 1e-2 + stray * basis[:, 0]
    solution = maximize_quadratic_on_ball(matrix, linear, 0.0, 1.0)
    assert_optimality_certificate(matrix, linear, 1.0, solution)
