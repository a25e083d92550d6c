"""The grid-rounding charge (common/kernels/grid_rounding.py)."""

import math

import pytest

from privadapt.common.kernels.grid_rounding import rounding_charged


def test_exact_sensitivity_zero_block_is_free():
    assert rounding_charged((0.0,), ((5,),), "l2", 16) == (0.0,)
    assert rounding_charged((0.0,), ((5,),), "l1", 16, (0.0,)) == (0.0,)


@pytest.mark.parametrize("norm, size_factor", [("l2", math.sqrt(5)), ("l1", 5)])
def test_sensitivity_zero_block_with_computation_error_is_charged(norm, size_factor):
    # The ideal value is the same on neighbours, but two computed
    # values up to 2e apart can round to different grid points.
    error = 1e-9
    (charged,) = rounding_charged((0.0,), ((5,),), norm, 16, (error,))
    assert charged == pytest.approx(size_factor * (2.0**-16 + 2 * error))


def test_positive_block_adds_step_and_twice_the_error():
    (charged,) = rounding_charged((1.0,), ((4,),), "l2", 20, (1e-12,))
    assert charged == pytest.approx(1.0 + 2 * (2.0**-20 + 2e-12))
