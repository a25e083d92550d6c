"""ExactSum's fast path (two int64 limbs combined in one float addition) gives
bit for bit the value of its general path (Python integers), which is the
float64 nearest the exact sum of the rounded terms."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from privadapt.common.kernels.exact_sum import ExactSum


def _both(terms: np.ndarray, bound: float) -> tuple[np.ndarray, np.ndarray]:
    fast = ExactSum(terms.shape[1:])
    fast.add_terms(terms, bound)
    general = ExactSum(terms.shape[1:])
    general.add_terms(terms, bound)
    general._value_from_two_limbs = lambda: None  # force the Python-integer path
    return fast.value(), general.value()


@pytest.mark.parametrize("seed", range(40))
def test_the_fast_path_equals_the_general_path(seed):
    rng = np.random.default_rng(seed)
    n, d = int(rng.integers(1, 3000)), int(rng.integers(1, 6))
    scale = 2.0 ** int(rng.integers(-60, 60))
    terms = rng.normal(size=(n, d)) * scale * (10.0 ** rng.integers(-8, 1, size=(n, 1)))
    bound = float(np.abs(terms).max()) * 1.5
    fast, general = _both(terms, bound)
    np.testing.assert_array_equal(fast, general)


def test_the_value_is_the_nearest_float_to_the_exact_sum_of_rounded_terms():
    # Terms already on the grid (small integers times a power of two): the
    # exact sum is known, and cancellation leaves a value no float sum keeps.
    terms = np.array([[2.0**40], [1.0], [-(2.0**40)], [2.0**-30]])
    fast, general = _both(terms, 2.0**41)
    exact = Fraction(1) + Fraction(2) ** -30
    assert fast[0] == general[0] == float(exact)


@pytest.mark.parametrize("seed", range(10))
def test_the_limbs_are_each_terms_value_rounded_toward_zero(seed):
    # By definition: high = trunc(v / U), low = trunc((v - high U) / (U 2^-42)),
    # with non-finite terms counted as 0 and terms clipped to the bound's power
    # of two; the sum of each limb over records is what the ExactSum holds.
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    scale = 2.0 ** int(rng.integers(-150, 150))
    terms = rng.normal(size=(n, 3)) * scale * 10.0 ** rng.integers(-20, 2, size=(n, 3))
    terms[0] = [np.inf, -np.inf, np.nan]
    bound = float(np.abs(terms[1:]).max() if n > 1 else 1.0) * 0.75 or 1.0
    total = ExactSum((3,))
    total.add_terms(terms, bound)
    top = 2.0 ** np.ceil(np.log2(bound))
    unit = top * 2.0**-42
    values = np.where(np.isfinite(terms), np.clip(terms, -top, top), 0.0)
    high = np.trunc(values / unit)
    low = np.trunc((values - high * unit) / (unit * 2.0**-42))
    exact = [sum(Fraction(h) * Fraction(unit) + Fraction(lo) * Fraction(unit) * Fraction(2) ** -42
                 for h, lo in zip(high[:, j], low[:, j], strict=True)) for j in range(3)]
    np.testing.assert_array_equal(total.value(), [float(e) for e in exact])


@pytest.mark.parametrize("seed", range(3))
def test_grouped_terms_sum_each_group_exactly_and_alone(seed):
    # A scatter-add (NNA's per-cell sums): each group's total equals the exact
    # sum of its own rows, and equals what the group's rows alone give.
    rng = np.random.default_rng(seed)
    rows = rng.uniform(-0.5, 0.5, size=(9000, 2)) * 10.0 ** rng.integers(-8, 1, (9000, 1))
    groups = rng.integers(0, 5, size=9000)
    grouped = ExactSum((5, 2))
    grouped.add_grouped_terms(rows, groups, 0.5)
    for g in range(5):
        alone = ExactSum((2,))
        alone.add_terms(rows[groups == g], 0.5)
        np.testing.assert_array_equal(grouped.value()[g], alone.value())
        exact = [sum(Fraction(float(v)) for v in rows[groups == g, j]) for j in range(2)]
        assert all(abs(float(e) - got) <= 2.0**-50 * 9000 * 0.5
                   for e, got in zip(exact, grouped.value()[g], strict=True))
