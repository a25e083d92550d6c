"""Fixed-point codec: exact sums modulo 2^64 and loud range errors."""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from privadapt.common.numerics.fixed_point import FixedPointCodec

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


# encode_saturating: what a site encodes from private records.
any_double = st.floats(allow_nan=False)  # infinities and subnormals included


@given(st.integers(0, 52), any_double, any_double)
@example(0, 4.0, 3.6028797018963976e16)  # a - b rounds in floats: the reference is exact
@example(52, 1e300, -1e300)
def test_saturating_encoding_never_moves_two_values_further_apart(bits, a, b):
    """Clamping is 1-Lipschitz: neighbours' encoded values differ by at most
    their true difference plus one grid step (the rounding every encoding has),
    so the charged sensitivity still bounds them, whatever their size."""
    codec = FixedPointCodec(bits)
    left, right = (int(codec.encode_saturating(np.array([v])).view(np.int64)[0])
                   for v in (a, b))
    if not (np.isfinite(a) and np.isfinite(b)):
        return  # an infinite true difference bounds nothing
    # Exact: a float subtraction would round the reference itself.
    true_steps = abs(Fraction(a) - Fraction(b)) * 2**bits
    assert abs(left - right) <= true_steps + 1


@given(st.integers(0, 52), any_double)
def test_saturating_encoding_equals_encode_where_encode_succeeds(bits, value):
    codec = FixedPointCodec(bits)
    try:
        plain = codec.encode(np.array([value]))
    except (OverflowError, ValueError):
        saturated = codec.decode(codec.encode_saturating(np.array([value])))[0]
        assert abs(saturated) <= codec.max_abs_share and np.sign(saturated) == np.sign(value)
    else:
        np.testing.assert_array_equal(codec.encode_saturating(np.array([value])), plain)


def test_saturating_encoding_refuses_only_nan():
    codec = FixedPointCodec(32)
    with pytest.raises(ValueError, match="NaN"):
        codec.encode_saturating(np.array([0.0, np.nan]))
    top = codec.decode(codec.encode_saturating(np.array([np.inf, -np.inf, 1e300])))
    assert top[0] == top[2] == -top[1] and 0 < top[0] < codec.max_abs_share


@pytest.mark.parametrize("bits", [0, 32, 47, 52])
def test_a_share_bound_is_checked_against_encodes_own_limit(bits):
    codec = FixedPointCodec(bits)
    top = codec.max_abs_share
    assert top == 2.0 ** (62 - bits)
    codec.check_share_bound(np.nextafter(top, 0))  # the largest bound encode can honour
    encoded = codec.encode(np.array([np.nextafter(top, 0)]))  # and does
    assert codec.decode(encoded)[0] <= top
    with pytest.raises(OverflowError, match="must stay below"):
        codec.check_share_bound(top)
    with pytest.raises(OverflowError):
        codec.encode(np.array([top]))
