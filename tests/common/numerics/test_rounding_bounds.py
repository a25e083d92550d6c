"""Proved rounding bounds: the error-free split is exact and the accurate
product's entrywise bound holds against exact rational products (and is far
below the classical gamma_m |A| |B|)."""

from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from privadapt.common.numerics.rounding_bounds import (
    accurate_product,
    down,
    gamma,
    grow,
    split_bits,
    split_rows,
    up,
)

magnitude = st.sampled_from([2.0**-300, 1e-8, 1.0, 3.0, 1e8, 2.0**300])


@st.composite
def matrices(draw):
    rows, inner, cols = (draw(st.integers(1, 6)) for _ in range(3))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    left = rng.normal(size=(rows, inner)) * draw(magnitude)
    right = rng.normal(size=(inner, cols)) * draw(magnitude)
    # adversarial spreads: one huge entry per row, cancellation
    left[0, 0] *= draw(st.sampled_from([1.0, 2.0**40, 2.0**-40]))
    right[:, 0] = -right[:, 0] if draw(st.booleans()) else right[:, 0]
    return left, right


@settings(max_examples=80, deadline=None)
@given(problem=matrices())
def test_accurate_product_bound_holds_exactly(problem):
    left, right = problem
    value, bound = accurate_product(left, right)
    for i in range(left.shape[0]):
        for j in range(right.shape[1]):
            exact = sum(Fraction(left[i, k]) * Fraction(right[k, j])
                        for k in range(left.shape[1]))
            assert abs(Fraction(value[i, j]) - exact) <= Fraction(bound[i, j])


def test_split_is_exact_and_its_high_parts_multiply_without_rounding():
    rng = np.random.default_rng(0)
    size = 300
    matrix = rng.normal(size=(size, size)) * np.exp(rng.normal(size=(size, 1)) * 20)
    bits = split_bits(size)
    hi, lo, scale = split_rows(matrix, bits)
    assert np.array_equal(hi + lo, matrix)
    assert np.all(np.abs(lo) <= scale[:, None] * 2.0**(-bits - 1))
    product = hi[:3] @ hi[:4].T
    for i in range(3):
        for j in range(4):
            exact = sum(Fraction(a) * Fraction(b) for a, b in zip(hi[i], hi[j], strict=True))
            assert Fraction(product[i, j]) == exact


def test_accurate_product_bound_is_far_below_the_classical_one():
    rng = np.random.default_rng(1)
    left, right = rng.normal(size=(200, 200)), rng.normal(size=200)
    _, bound = accurate_product(left, right)
    classical = gamma(200) * (np.abs(left) @ np.abs(right))
    assert np.all(bound < classical / 100)


def test_directed_scalars():
    assert up(0.1 + 0.2) > 0.1 + 0.2 > down(0.1 + 0.2)
    assert gamma(10) > 10 * 2.0**-53
    assert grow(1.0, 3) > 1.0 and np.all(grow(np.ones(2), 3) > 1.0)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), inner=st.integers(8, 80))
def test_accurate_product_bound_holds_under_cancellation(seed, inner):
    # A product whose exact value nearly cancels: only the split's own error
    # term (not u |value|) can cover the rounding of the low parts.
    rng = np.random.default_rng(seed)
    left = rng.normal(size=(2, inner)) * np.exp(rng.normal(size=inner) * 5)
    right = rng.normal(size=inner)
    right -= left[0] * (left[0] @ right) / (left[0] @ left[0])
    value, bound = accurate_product(left, right)
    for i in range(2):
        exact = sum(Fraction(a) * Fraction(b) for a, b in zip(left[i], right, strict=True))
        assert abs(Fraction(value[i]) - exact) <= Fraction(bound[i])
