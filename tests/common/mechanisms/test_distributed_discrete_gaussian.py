"""The distributed discrete Gaussian mechanism
(common/mechanisms/distributed_discrete_gaussian.py): one site's share follows
the exact discrete Gaussian pmf, the sum of n = 2, 3 shares follows the exact
convolution, shares are exact grid integers, the grid sensitivity never
rounds the charged one down, and every field survives the dict, the wire and
the query digest; the constructor (so the wire decoder) refuses what the
sampler or the accounting cannot take."""

from __future__ import annotations

import dataclasses
import json
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from privadapt.common.accounting.accountant import PrivacyAccountant
from privadapt.common.accounting.discrete import discrete_gaussian_sum_grid_rdp
from privadapt.common.federation import Query
from privadapt.common.mechanisms import (
    Adjacency,
    DistributedDiscreteGaussianMechanism,
    mechanism_from_dict,
    mechanism_to_dict,
)
from privadapt.common.mechanisms.distributed_discrete_gaussian import (
    grid_l2_squared,
    sampler_variance_at_least,
)
from privadapt.common.noise.floating import SeededRandomBits
from privadapt.common.numerics.fixed_point import FixedPointCodec
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.secure.query_digest import query_digest
from privadapt.common.wire.messages import WireError, mechanism_from_proto, mechanism_to_proto

ALPHA = 1e-3
SAMPLES = 20_000
Mechanism = DistributedDiscreteGaussianMechanism


def discrete_gaussian_pmf(sigma_squared: float, reach: int) -> np.ndarray:
    x = np.arange(-reach, reach + 1)
    weights = np.exp(-x.astype(float) ** 2 / (2 * sigma_squared))
    return weights / weights.sum()


def pmf_of_sum(sigma_squared: float, shares: int) -> tuple[np.ndarray, np.ndarray]:
    """(support, pmf) of the sum of ``shares`` i.i.d. N_Z(0, sigma^2), by
    numerical convolution (each truncated at 30 sigma + 5: below e^-400 left)."""
    reach = math.ceil(30 * math.sqrt(sigma_squared)) + 5
    one = discrete_gaussian_pmf(sigma_squared, reach)
    total = one
    for _ in range(shares - 1):
        total = np.convolve(total, one)
    half = (total.size - 1) // 2
    return np.arange(-half, half + 1), total


def chi_square_pvalue(samples: np.ndarray, support: np.ndarray, pmf: np.ndarray) -> float:
    """Chi-square of integer samples against ``pmf``, its tails pooled until
    each bin expects at least 20."""
    expected = pmf * samples.size
    observed = np.bincount(np.searchsorted(support, samples.ravel()), minlength=support.size)
    assert observed.sum() == samples.size and support[0] <= samples.min()
    bins_e, bins_o, acc_e, acc_o = [], [], 0.0, 0
    for e, o in zip(expected, observed, strict=True):
        acc_e, acc_o = acc_e + e, acc_o + o
        if acc_e >= 20:
            bins_e.append(acc_e)
            bins_o.append(acc_o)
            acc_e, acc_o = 0.0, 0
    bins_e[-1] += acc_e
    bins_o[-1] += acc_o
    return stats.chisquare(bins_o, np.asarray(bins_e) * samples.size / sum(bins_e)).pvalue


@pytest.mark.parametrize("sigma_squared", [0.25, 0.375, 2.5, 1000.5])
def test_one_share_is_the_exact_discrete_gaussian(sigma_squared):
    mechanism = Mechanism(1.0, sigma_squared, 1, 16)
    steps = mechanism.noise_steps((SAMPLES,), 1, 0, SeededRandomBits(7))
    assert steps.dtype == np.int64
    assert chi_square_pvalue(steps, *pmf_of_sum(sigma_squared, 1)) > ALPHA


@pytest.mark.parametrize("shares", [2, 3])
@pytest.mark.parametrize("sigma_squared", [0.375, 1.0, 4.0])
def test_n_shares_sum_to_the_exact_convolution(shares, sigma_squared):
    mechanism = Mechanism(1.0, sigma_squared, shares, 16)
    total = sum(mechanism.noise_steps((SAMPLES,), shares, 0, SeededRandomBits(100 + s))
                for s in range(shares))
    assert chi_square_pvalue(total, *pmf_of_sum(sigma_squared, shares)) > ALPHA


def test_the_chi_square_tells_a_sum_from_one_discrete_gaussian():
    """The test above can fail: at s = 0.6 (s^2 = 0.375) the sum of two
    shares is not N_Z(0, 0.75), and 20,000 samples say so."""
    mechanism = Mechanism(1.0, 0.375, 2, 16)
    total = sum(mechanism.noise_steps((SAMPLES,), 2, 0, SeededRandomBits(100 + s))
                for s in range(2))
    support, _ = pmf_of_sum(0.75, 1)
    assert chi_square_pvalue(total, support, discrete_gaussian_pmf(0.75, support[-1])) < 1e-6


def test_shares_are_exact_integers_on_the_mechanisms_grid():
    codec = FixedPointCodec(20)
    mechanism = Mechanism(1.0, 2.0**50, 3, 20)
    (share,) = mechanism.noise_shares([(5000,)], 3, 0, SeededRandomBits(3))
    steps = mechanism.noise_steps((5000,), 3, 0, SeededRandomBits(3))
    np.testing.assert_array_equal(codec.encode(share).view(np.int64), steps)
    assert np.any(np.abs(steps) > 2**25)  # noise far above one step, still exact


def test_fewer_honest_shares_than_charged_are_refused_more_are_not():
    mechanism = Mechanism(1.0, 4.0, 3, 16)
    for num_sites, tolerance in ((2, 0), (4, 2), (1, 0)):
        with pytest.raises(ValueError, match="charged for 3 honest shares"):
            mechanism.noise_shares([(4,)], num_sites, tolerance, SeededRandomBits(1))
    mechanism.check_sharing(3, 0)
    mechanism.check_sharing(5, 1)  # four honest: more noise than charged, still sound


def test_grid_l2_squared_never_rounds_a_charged_sensitivity_down():
    assert grid_l2_squared(1.0, 16) == 2**32
    assert grid_l2_squared(0.3, 4) == 23  # (4.8)^2 = 23.04
    for value in np.geomspace(1e-6, 1e6, 200):
        assert grid_l2_squared(value, 32) + 1 > (Fraction(float(value)) * 2**32) ** 2


def test_sampler_variance_is_at_least_the_asked_and_sampler_ready():
    for value in (0.01, 0.3, 1.0, 1000.1, 2.0**40 + 1, 2.0**56):
        ready = sampler_variance_at_least(value)
        assert ready >= value and ready >= 0.25
        assert ready == pytest.approx(max(value, 0.25), rel=1e-7)
        Mechanism(1.0, ready, 2, 16)  # accepted
    with pytest.raises(ValueError, match="coarser query grid"):
        sampler_variance_at_least(2.0**56 + 2**4)


def test_for_noise_multiplier_gives_at_least_the_asked_noise():
    for sensitivity in (1e-3, 0.7, 1.0, 123.456):
        for shares in (1, 2, 5):
            mechanism = Mechanism.for_noise_multiplier(sensitivity, 3.0, 16, shares)
            assert mechanism.noise_multiplier >= 3.0
            assert mechanism.noise_multiplier == pytest.approx(3.0, rel=1e-6)


def test_a_sigma_the_sampler_cannot_take_asks_for_a_coarser_grid():
    # z = 1 on sensitivity 1 needs sigma = 2^32 steps on the grid 2^-32: refused...
    with pytest.raises(ValueError, match="coarser query grid"):
        Mechanism.for_noise_multiplier(1.0, 1.0, 32, 1)
    # ... and fits on 2^-24 (sigma 2^24 steps).
    assert Mechanism.for_noise_multiplier(1.0, 1.0, 24, 1).noise_multiplier >= 1.0


@pytest.mark.parametrize("fields", [
    {"share_sigma_squared": 0.2},         # s < 1/2: the accounting needs s >= 1/2
    {"share_sigma_squared": 0.1},         # binary value of 0.1 needs a 2^55 denominator
    {"share_sigma_squared": 2.0**57},     # beyond the sampler's 2^56
    {"share_sigma_squared": math.inf},
    {"share_sigma_squared": math.nan},
    {"honest_shares": 0},
    {"honest_shares": 2**16 + 1},
    {"honest_shares": 2.0},
    {"honest_shares": True},
    {"fractional_bits": 53},
    {"fractional_bits": -1},
    {"fractional_bits": 16.0},
    {"sensitivity": -1.0},
    {"sensitivity": math.nan},
    {"sensitivity": math.inf},
])
def test_bad_parameters_are_refused(fields):
    data = {"kind": "distributed_discrete_gaussian", "adjacency": "replace_one",
            "sensitivity": 1.0, "share_sigma_squared": 4.0, "honest_shares": 2,
            "fractional_bits": 16, **fields}
    with pytest.raises(ValueError):
        mechanism_from_dict(data)


def test_a_boolean_is_no_share_variance():
    with pytest.raises(ValueError):
        Mechanism(1.0, True, 2, 16)


def test_json_and_wire_round_trip():
    mechanism = Mechanism(2.5, 1024.5, 3, 30, Adjacency.ADD_REMOVE_ONE)
    assert mechanism_from_dict(json.loads(json.dumps(mechanism_to_dict(mechanism)))) \
        == mechanism
    assert mechanism_from_proto(pb.Mechanism.FromString(
        mechanism_to_proto(mechanism).SerializeToString())) == mechanism


@pytest.mark.parametrize("missing", ["sensitivity", "share_sigma_squared", "honest_shares",
                                     "fractional_bits"])
def test_wire_refuses_a_missing_field(missing):
    fields = {"sensitivity": 1.0, "share_sigma_squared": 4.0, "honest_shares": 2,
              "fractional_bits": 16}
    del fields[missing]
    msg = pb.Mechanism(adjacency="replace_one", distributed_discrete_gaussian=(
        pb.DistributedDiscreteGaussianMechanism(**fields)))
    with pytest.raises(WireError):
        mechanism_from_proto(msg)


@pytest.mark.parametrize("value", [math.nan, math.inf, 0.2, 2.0**60])
def test_wire_refuses_a_share_variance_out_of_range(value):
    msg = pb.Mechanism(adjacency="replace_one", distributed_discrete_gaussian=(
        pb.DistributedDiscreteGaussianMechanism(sensitivity=1.0, share_sigma_squared=value,
                                                honest_shares=2, fractional_bits=16)))
    with pytest.raises(WireError):
        mechanism_from_proto(msg)


BASE = Mechanism(1.0, 4.0, 2, 30)


@pytest.mark.parametrize("other", [
    dataclasses.replace(BASE, sensitivity=2.0),
    dataclasses.replace(BASE, share_sigma_squared=4.5),
    dataclasses.replace(BASE, honest_shares=3),
    dataclasses.replace(BASE, fractional_bits=31),
    dataclasses.replace(BASE, adjacency=Adjacency.ADD_REMOVE_ONE),
])
def test_the_digest_covers_every_field(other):
    base = Query("job", "q", "record_count", {}, BASE, fractional_bits=30)
    assert query_digest(dataclasses.replace(base, mechanism=other), 1) != query_digest(base, 1)


def test_the_accountant_charges_the_sum_bound_by_rdp():
    mechanism = Mechanism(1.0, 0.375, 2, 16)
    assert mechanism.grid_l2_squared == 2**32
    accountant = PrivacyAccountant().compose(mechanism, 3)
    report = accountant.report(1e-6)
    assert report.method == "rdp"  # no PLD: the ledger answers by RDP, as for zCDP
    orders = np.asarray(accountant._orders)
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    curve = 3 * discrete_gaussian_sum_grid_rdp(Fraction(3, 8), 2, 2**32, orders)
    assert report.epsilon == pytest.approx(float(rdp.compute_epsilon(orders, curve, 1e-6)[0]),
                                           rel=1e-12)


def test_replace_one_doubles_the_charged_sensitivity():
    mechanism = Mechanism(0.5, 64.0, 2, 16, Adjacency.ADD_REMOVE_ONE)
    replace = mechanism.in_adjacency(Adjacency.REPLACE_ONE)
    assert replace.sensitivity == 1.0
    assert replace.grid_l2_squared == 4 * mechanism.grid_l2_squared


def test_an_absurd_sensitivity_costs_infinite_epsilon_not_an_exception():
    mechanism = Mechanism(1e300, 4.0, 2, 48)
    assert mechanism.noise_multiplier == 0.0
    assert PrivacyAccountant().compose(mechanism).get_epsilon(1e-6) == math.inf


def test_a_zero_sensitivity_is_free():
    assert Mechanism(0.0, 4.0, 2, 16).is_free


def test_grid_l2_squared_covers_the_rounding_of_every_coordinate():
    # The worst case the derivation names: every coordinate's rounding moves a
    # full step in the same direction as the data difference.
    f, size = 16, 9
    s2 = 3.0 / 2**f  # the kernel's own L2 sensitivity, in data units
    sens = s2 + math.sqrt(size) * 2.0**-f  # rounding_charged, e = 0
    q = grid_l2_squared(sens, f)
    per_coordinate = s2 * 2**f / math.sqrt(size)  # 1 step each
    delta = [math.floor(per_coordinate) + 1] * size
    assert sum(d * d for d in delta) <= q
