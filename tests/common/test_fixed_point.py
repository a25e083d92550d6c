"""Fixed-point codec: exact sums modulo 2^64 and loud range errors."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from privadapt.common.fixed_point import FixedPointCodec

CODEC = FixedPointCodec(32)
finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


@given(arrays(np.float64, 8, elements=finite))
def test_round_trip_error_is_at_most_half_a_grid_step(values):
    decoded = CODEC.decode(CODEC.encode(values))
    assert np.all(np.abs(decoded - values) <= 0.5 / CODEC.scale + 1e-12 * np.abs(values))


@given(st.lists(arrays(np.float64, 5, elements=finite), min_size=1, max_size=10))
def test_sum_of_encodings_decodes_to_exact_integer_sum_of_shares(shares):
    total = CODEC.decode(CODEC.add(CODEC.encode(s) for s in shares))
    # Python integers do not wrap: the reference sum is exact.
    integer_sum = [
        sum(int(v) for v in column)
        for column in zip(*(CODEC.encode(s).view(np.int64) for s in shares), strict=True)
    ]
    expected = np.array([float(k) for k in integer_sum]) / CODEC.scale
    np.testing.assert_array_equal(total, expected)


def test_negative_sums_survive_wraparound():
    shares = [np.array([-3.25]), np.array([1.0]), np.array([-0.5])]
    total = CODEC.decode(CODEC.add(CODEC.encode(s) for s in shares))
    assert total[0] == -2.75


def test_encoding_nan_is_refused():
    with pytest.raises(ValueError, match="NaN"):
        CODEC.encode(np.array([1.0, np.nan]))


def test_share_too_large_for_the_range_is_refused():
    with pytest.raises(OverflowError, match="fractional bits"):
        CODEC.encode(np.array([2.0**40]))


def test_sum_bound_check_names_the_limit():
    CODEC.check_sum_bound(1e6)
    with pytest.raises(OverflowError, match="wraps"):
        CODEC.check_sum_bound(3e9, "the gradient sum")


def test_fractional_bits_out_of_range_is_refused():
    with pytest.raises(ValueError):
        FixedPointCodec(60)
