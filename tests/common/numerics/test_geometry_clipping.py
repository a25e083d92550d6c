"""Clipping keeps its bound at the edges of floating point (common/numerics/geometry.py)."""

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from privadapt.common.kernels.exact_sum import clip_slack
from privadapt.common.numerics.geometry import clip_coefficients, clip_residuals, row_norms

HUGE = 1.1e308


def test_a_coefficient_clipped_into_the_subnormals_is_zero_not_over_the_bound():
    # c' = C / ||x|| lands at 2 x the least
    # subnormal, which made ||c' x|| = 2.67 C before the fix.
    bound = 0.5000001 * math.ldexp(1.5 * HUGE, -1074)
    (clipped,) = clip_coefficients(np.array([1.5]), np.array([[HUGE]]), bound)
    assert abs(clipped) * HUGE <= bound + clip_slack(bound, 1)


def test_a_residual_entry_clipped_into_the_subnormals_is_zero_not_over_the_bound():
    bound = 0.5000001 * math.ldexp(1.5 * HUGE, -1074)
    clipped = clip_residuals(np.array([[1.5, 0.0]]), np.array([[HUGE]]), bound)
    assert np.linalg.norm(clipped) * HUGE <= bound + clip_slack(bound, 2)


def test_a_clip_factor_in_the_subnormals_does_not_lift_a_normal_coefficient_over_the_bound():
    # Found by hypothesis: C / (|c| ||x||) = 5.9e-323 kept 3 significant bits,
    # and c' = c times it gave ||c' x|| = 1.0096 C.
    coefficient, norm, bound = 8.770302365470317e213, 2.1334798954024787e84, 1.098752668766451e-24
    (clipped,) = clip_coefficients(np.array([coefficient]), np.array([[norm]]), bound)
    assert 0 < abs(clipped) * norm <= bound + clip_slack(bound, 1)
    rows = clip_residuals(np.array([[coefficient, coefficient]]), np.array([[norm]]), bound)
    assert 0 < np.linalg.norm(rows) * norm <= bound + clip_slack(bound, 2)


@settings(max_examples=200, deadline=None)
@given(st.floats(-1e300, 1e300), st.floats(1e-300, 1e308), st.floats(2.0**-200, 2.0**200))
def test_every_clipped_term_is_within_its_slack_of_the_bound(coefficient, norm, bound):
    (clipped,) = clip_coefficients(np.array([coefficient]), np.array([[norm]]), bound)
    assert abs(clipped) * norm <= bound + clip_slack(bound, 1)


@settings(max_examples=200, deadline=None)
@given(st.floats(-1e300, 1e300), st.floats(-1e300, 1e300), st.floats(1e-300, 1e308),
       st.floats(2.0**-200, 2.0**200))
def test_every_clipped_residual_row_is_within_its_slack_of_the_bound(first, second, norm, bound):
    rows = clip_residuals(np.array([[first, second]]), np.array([[norm]]), bound)
    # row_norms, not np.linalg.norm: squares of entries near 1e154 overflow.
    assert row_norms(rows)[0] * norm <= bound + clip_slack(bound, 2)
