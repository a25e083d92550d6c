"""The discrete Laplace mechanism (common/mechanisms/discrete_laplace.py): its
noise on the wired path follows the exact pmf, its distributed shares sum to
it, its shares are exact grid integers, and its fields survive the dict, the
wire and the query digest."""

from __future__ import annotations

import dataclasses
import json
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from privadapt.common.accounting.accountant import PrivacyAccountant
from privadapt.common.accounting.cases import release_epsilon_lower_bound
from privadapt.common.accounting.discrete import discrete_laplace_epsilon
from privadapt.common.federation import Query
from privadapt.common.mechanisms import (
    Adjacency,
    DiscreteLaplaceMechanism,
    mechanism_from_dict,
    mechanism_to_dict,
)
from privadapt.common.mechanisms.discrete_laplace import (
    dyadic_scale_at_least,
    expected_words_per_sample,
    grid_steps,
)
from privadapt.common.noise.floating import SeededRandomBits
from privadapt.common.numerics.fixed_point import FixedPointCodec
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.secure.query_digest import query_digest
from privadapt.common.wire.messages import WireError, mechanism_from_proto, mechanism_to_proto

ALPHA = 1e-3
SAMPLES = 20_000


def discrete_laplace_cdf(x: np.ndarray, scale: float) -> np.ndarray:
    """P(X <= x) for P(x) = (1 - q)/(1 + q) q^|x|, q = exp(-1/t)."""
    q = math.exp(-1.0 / scale)
    x = np.asarray(x, dtype=float)
    upper = 1.0 - np.exp((np.abs(x) + 1.0) * -1.0 / scale) / (1.0 + q)
    lower = np.exp(np.abs(x) * -1.0 / scale) / (1.0 + q)
    return np.where(x >= 0, upper, lower)


def chi_square_pvalue(samples: np.ndarray, scale: float, bins: int = 30) -> float:
    """Chi-square of integer samples against the exact pmf, over bins of
    equal exact mass (tails pooled into the end bins)."""
    reach = math.ceil(8 * scale) + 2
    support = np.arange(-reach, reach + 1)
    cdf = discrete_laplace_cdf(support, scale)
    # Integer cut points at about equal mass; each bin (lo, hi].
    cuts = np.unique(support[np.searchsorted(cdf, np.linspace(0, 1, bins + 1)[1:-1])])
    edges_cdf = np.concatenate([[0.0], discrete_laplace_cdf(cuts, scale), [1.0]])
    expected = np.diff(edges_cdf) * samples.size
    observed = np.bincount(np.searchsorted(cuts, samples.ravel(), side="left"),
                           minlength=cuts.size + 1)
    assert expected.min() > 5
    return stats.chisquare(observed, expected).pvalue


@pytest.mark.parametrize("scale_steps", [0.75, 2.5, 1000.5])
def test_one_honest_share_is_the_exact_discrete_laplace(scale_steps):
    mechanism = DiscreteLaplaceMechanism(1.0, scale_steps, 16)
    steps = mechanism.noise_steps((SAMPLES,), 1, 0, SeededRandomBits(7))
    assert steps.dtype == np.int64
    assert chi_square_pvalue(steps, scale_steps) > ALPHA


@pytest.mark.parametrize("num_sites,tolerance", [(1, 0), (3, 0), (3, 1)])
def test_any_k_minus_t_shares_sum_to_the_discrete_laplace(num_sites, tolerance):
    scale = 4.5
    mechanism = DiscreteLaplaceMechanism(1.0, scale, 16)
    honest = num_sites - tolerance
    total = sum(mechanism.noise_steps((SAMPLES,), num_sites, tolerance, SeededRandomBits(s))
                for s in range(honest))
    assert chi_square_pvalue(total, scale) > ALPHA


def test_shares_are_exact_integers_on_the_mechanisms_grid():
    codec = FixedPointCodec(20)
    mechanism = DiscreteLaplaceMechanism(1.0, 2.0**30, 20)
    (share,) = mechanism.noise_shares([(5000,)], 3, 1, SeededRandomBits(3))
    steps = mechanism.noise_steps((5000,), 3, 1, SeededRandomBits(3))
    np.testing.assert_array_equal(codec.encode(share).view(np.int64), steps)
    assert np.any(np.abs(steps) > 2**30)  # noise far above one step, still exact


def test_epsilon_is_exactly_grid_sensitivity_over_scale():
    # 2^16 steps, plus one: the charged float may sit ulps below the real bound.
    mechanism = DiscreteLaplaceMechanism(1.0, 131074.0, 16)
    assert mechanism.grid_sensitivity == 65537
    assert mechanism.exact_epsilon == Fraction(65537, 131074)
    assert mechanism.pure_epsilon == 0.5
    assert mechanism.noise_multiplier == 2.0


def test_grid_steps_never_rounds_a_charged_sensitivity_down():
    assert grid_steps(1.0, 16) == 65537  # an exact integer gets the float allowance
    assert grid_steps(0.3, 4) == 5
    for value in np.geomspace(1e-6, 1e6, 200):
        assert grid_steps(value, 32) >= Fraction(float(value)) * 2**32


def test_for_noise_multiplier_gives_at_most_the_asked_epsilon():
    for sensitivity in (1e-3, 0.7, 1.0, 123.456):
        mechanism = DiscreteLaplaceMechanism.for_noise_multiplier(sensitivity, 3.0, 24)
        assert mechanism.exact_epsilon <= Fraction(1, 3)
        assert float(mechanism.exact_epsilon) == pytest.approx(1 / 3, rel=1e-9)


def test_dyadic_scale_is_at_least_the_asked_and_sampler_ready():
    for value in (1e-9, 0.1, 1.0, 1000.1, 2.0**40 + 1, 2.0**45):
        dyadic = dyadic_scale_at_least(value)
        assert dyadic >= value and dyadic == pytest.approx(value, rel=1e-11)
        DiscreteLaplaceMechanism(1.0, dyadic, 16)  # accepted


def test_expected_sampling_work_is_a_constant():
    assert expected_words_per_sample() < 20


@pytest.mark.parametrize("fields", [
    {"scale_steps": 0.1},           # binary value of 0.1 needs a 2^55 denominator
    {"scale_steps": 2.0**46},       # samples would leave the exact floats
    {"scale_steps": 0.0},
    {"scale_steps": math.inf},
    {"fractional_bits": 53},
    {"fractional_bits": -1},
    {"fractional_bits": 16.0},
    {"fractional_bits": True},
    {"sensitivity": -1.0},
    {"sensitivity": math.nan},
])
def test_bad_parameters_are_refused(fields):
    data = {"kind": "discrete_laplace", "adjacency": "replace_one", "sensitivity": 1.0,
            "scale_steps": 4.0, "fractional_bits": 16, **fields}
    with pytest.raises(ValueError):
        mechanism_from_dict(data)


def test_json_and_wire_round_trip():
    mechanism = DiscreteLaplaceMechanism(2.5, 1024.5, 30, Adjacency.ADD_REMOVE_ONE)
    assert mechanism_from_dict(json.loads(json.dumps(mechanism_to_dict(mechanism)))) \
        == mechanism
    assert mechanism_from_proto(mechanism_to_proto(mechanism)) == mechanism


def test_wire_refuses_a_missing_grid():
    msg = pb.Mechanism(adjacency="replace_one", discrete_laplace=pb.DiscreteLaplaceMechanism(
        sensitivity=1.0, scale_steps=4.0))
    with pytest.raises(WireError, match="fractional_bits"):
        mechanism_from_proto(msg)


@pytest.mark.parametrize("other", [
    DiscreteLaplaceMechanism(2.0, 4.0, 30),
    DiscreteLaplaceMechanism(1.0, 4.5, 30),
    DiscreteLaplaceMechanism(1.0, 4.0, 31),
    DiscreteLaplaceMechanism(1.0, 4.0, 30, Adjacency.ADD_REMOVE_ONE),
])
def test_the_digest_covers_every_field(other):
    base = Query("job", "q", "record_count", {}, DiscreteLaplaceMechanism(1.0, 4.0, 30),
                 fractional_bits=30)
    assert query_digest(dataclasses.replace(base, mechanism=other), 1) != query_digest(base, 1)


def test_the_accountant_charges_the_discrete_pld():
    mechanism = DiscreteLaplaceMechanism(1.0, 65537 * 4.0, 16)
    accountant = PrivacyAccountant().compose(mechanism, 30)
    expected = discrete_laplace_epsilon(Fraction(65537 * 4), 65537, 1e-6, 30)
    assert accountant.get_epsilon(1e-6) == pytest.approx(expected, abs=1e-12)
    assert accountant.get_epsilon(0.0) == 30 * 0.25
    lower = release_epsilon_lower_bound(mechanism, 1e-6)
    assert lower <= PrivacyAccountant().compose(mechanism).get_epsilon(1e-6)
    assert lower == pytest.approx(0.25, abs=1e-5)


def test_replace_one_doubles_the_charged_sensitivity():
    mechanism = DiscreteLaplaceMechanism(0.5, 64.0, 16, Adjacency.ADD_REMOVE_ONE)
    replace = mechanism.in_adjacency(Adjacency.REPLACE_ONE)
    assert replace.grid_sensitivity >= 2 * mechanism.grid_sensitivity - 1
    assert replace.grid_sensitivity <= 2 * mechanism.grid_sensitivity


def test_an_absurd_sensitivity_costs_infinite_epsilon_not_an_exception():
    mechanism = DiscreteLaplaceMechanism(1e300, 1.0, 48)
    assert mechanism.pure_epsilon == math.inf and mechanism.noise_multiplier == 0.0
    assert release_epsilon_lower_bound(mechanism, 1e-6) == math.inf
