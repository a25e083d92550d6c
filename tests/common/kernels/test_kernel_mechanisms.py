"""Kernel.mechanism: the mechanism an algorithm asks for declares exactly what a
site charges, so the site's ledger charges the noise multiplier the algorithm
calibrated (on the coarsest grid: the same epsilon; on a finer one: never more)."""

import math

import numpy as np
import pytest

from privadapt.common.accounting.accountant import PrivacyAccountant
from privadapt.common.accounting.calibration import calibrate_noise_multiplier
from privadapt.common.errors import QueryRefusedError
from privadapt.common.federation import Query
from privadapt.common.kernels.base import SIZING_RECORDS, NoParams
from privadapt.common.kernels.grid_rounding import COARSEST_FRACTIONAL_BITS
from privadapt.common.kernels.linear_gradient import LinearGradient, LinearGradientParams
from privadapt.common.kernels.record_count import RecordCount
from privadapt.common.kernels.reweighted_gradient import (
    ReweightedGradient,
    ReweightedGradientParams,
)
from privadapt.common.kernels.second_moments import SecondMoments, SecondMomentsParams
from privadapt.common.mechanisms import (
    Adjacency,
    GaussianMechanism,
    LaplaceMechanism,
    NoNoise,
)

DIM, RECORDS, DELTA = 5, 200, 1e-5
REPLACE = Adjacency.REPLACE_ONE
GRADIENT = LinearGradientParams(np.full(DIM, 0.1), "logistic", 1.0)
REWEIGHTED = ReweightedGradientParams(
    weights=np.full(DIM, 0.2), step=0, objective="convex", loss="squared", alpha=0.5,
    total_private_records=RECORDS, feature_norm=1.0, label_bound=1.0, radius=1.0, k1=0.1,
    k2=0.1, kinf=0.1, mu=100.0, inverse_square_sum=0.005, log_partition=5.0, step_size=1.0)
CASES = {
    "linear_gradient": (LinearGradient(), GRADIENT, None),
    "reweighted_gradient": (ReweightedGradient(), REWEIGHTED, (1.0, 3.0, 3.0, 1.0)),
}


def epsilon_of(mechanism) -> float:
    return PrivacyAccountant().compose(mechanism).get_epsilon(DELTA)


@pytest.mark.parametrize("bits", [COARSEST_FRACTIONAL_BITS, 32])
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_site_charges_the_noise_multiplier_the_algorithm_calibrated(make_site, name, bits):
    kernel, params, ratios = CASES[name]

    def make(z):
        return kernel.mechanism(params, z, REPLACE, dim=DIM, block_ratios=ratios)

    z = calibrate_noise_multiplier(1.0, DELTA, 1, make)
    mechanism = make(z)
    site = make_site(num_records=RECORDS, dim=DIM)
    site.answer(Query("job", "q", kernel.name, params.to_wire(), mechanism,
                      fractional_bits=bits), 1)
    (charge,) = site.ledger.charges("job")
    charged = charge.mechanism
    # Each block's noise is z (times its ratio) over its declared sensitivity.
    for block, ratio in zip(mechanism.all_blocks, ratios or (1.0,), strict=True):
        assert block.sigma / block.sensitivity == pytest.approx(z * ratio, rel=1e-12)
    planned = mechanism.noise_multiplier
    if bits == COARSEST_FRACTIONAL_BITS:
        # The grid the algorithm sized for, at a site below the record bound it
        # sized the computation error for: the charge is what it declared, up
        # to that (tiny) error, and never more. Kernels summed by blocked BLAS
        # (linear_gradient, second_moments) size a gamma_{b+m} bound at 2^20
        # records, about 5e-7 of the clip bound per entry: a relative gap of a
        # few 1e-6 at this dimension (1e-10 for exact sums).
        assert planned <= charged.noise_multiplier <= planned * (1 + 1e-5)
        assert epsilon_of(charged) <= epsilon_of(mechanism)
        assert epsilon_of(charged) == pytest.approx(epsilon_of(mechanism), rel=1e-5)
    else:
        # A finer grid charges less rounding: a little more noise per sensitivity.
        assert planned <= charged.noise_multiplier <= planned * (1 + 1e-4)
    assert epsilon_of(mechanism) <= 1.0 and epsilon_of(charged) <= 1.0


def test_gaussian_blocks_get_the_multiplier_times_the_charged_sensitivity():
    mechanism = LinearGradient().mechanism(GRADIENT, 4.0, REPLACE, dim=DIM)
    (block,) = mechanism.blocks
    # 2C plus one grid step per coordinate, plus twice the kernel's float error
    # per coordinate at the record bound algorithms size for.
    (error,) = LinearGradient().computation_errors(GRADIENT, DIM, SIZING_RECORDS)
    charged = 2.0 * 1.0 + math.sqrt(DIM) * (2.0**-16 + 2 * error)
    assert block.sensitivity == pytest.approx(charged, rel=1e-15)
    assert block.sigma == pytest.approx(4.0 * charged, rel=1e-15)
    assert mechanism.noise_multiplier == pytest.approx(4.0, rel=1e-12)


def test_local_blocks_are_charged_without_rounding_and_get_their_ratio():
    kernel = ReweightedGradient()
    mechanism = kernel.mechanism(REWEIGHTED, 2.0, REPLACE, dim=DIM,
                                 block_ratios=(1.0, 3.0, 3.0, 1.0))
    (_, squares, _), (local,) = mechanism.blocks, mechanism.local_blocks
    (loss_bound,) = kernel.local_l2_sensitivities(REWEIGHTED, REPLACE)
    assert local.sensitivity == loss_bound and local.sigma == 2.0 * loss_bound
    (_, square_error, _) = kernel.computation_errors(REWEIGHTED, DIM, SIZING_RECORDS)
    assert squares.sigma == pytest.approx(2.0 * 3.0 * (1.0 + 2.0**-16 + 2 * square_error),
                                          rel=1e-15)


def test_sampled_gaussian_keeps_its_rate_and_adjacency():
    mechanism = LinearGradient().mechanism(GRADIENT, 2.0, Adjacency.ADD_REMOVE_ONE, dim=DIM,
                                           sampling_rate=0.1)
    assert isinstance(mechanism, GaussianMechanism) and mechanism.sampling_rate == 0.1
    (error,) = LinearGradient().computation_errors(GRADIENT, DIM, SIZING_RECORDS)
    assert mechanism.blocks[0].sensitivity == pytest.approx(
        1.0 + math.sqrt(DIM) * (2.0**-16 + 2 * error), rel=1e-15)


def test_infinite_multiplier_asks_for_no_noise_with_the_kernels_sensitivities():
    mechanism = ReweightedGradient().mechanism(REWEIGHTED, math.inf, REPLACE, dim=DIM)
    expected = (ReweightedGradient().l2_sensitivities(REWEIGHTED, REPLACE)
                + ReweightedGradient().local_l2_sensitivities(REWEIGHTED, REPLACE))
    assert mechanism == NoNoise(expected, REPLACE)


def test_laplace_scale_is_the_multiplier_times_the_charged_l1_sensitivity():
    params = SecondMomentsParams(1.0, 1.0)
    count = RecordCount().mechanism(NoParams(), 0.5, Adjacency.ADD_REMOVE_ONE, dim=DIM,
                                    noise="laplace")
    assert count == LaplaceMechanism(1.0 + 2.0**-16, 0.5 * (1.0 + 2.0**-16),
                                     Adjacency.ADD_REMOVE_ONE)
    with pytest.raises(ValueError, match="one released block"):
        ReweightedGradient().mechanism(REWEIGHTED, 0.5, REPLACE, dim=DIM, noise="laplace")
    assert isinstance(SecondMoments().mechanism(params, 0.5, REPLACE, dim=DIM, noise="laplace"),
                      LaplaceMechanism)


def test_malformed_requests_are_refused():
    with pytest.raises(ValueError, match="block_ratios"):
        LinearGradient().mechanism(GRADIENT, 1.0, REPLACE, dim=DIM, block_ratios=(1.0, 1.0))
    with pytest.raises(ValueError, match="sensitivity 0"):
        RecordCount().mechanism(NoParams(), 1.0, REPLACE, dim=DIM)
    with pytest.raises(ValueError, match="noise_multiplier"):
        LinearGradient().mechanism(GRADIENT, 0.0, REPLACE, dim=DIM)


def test_a_released_block_declared_in_the_local_group_is_refused(make_site):
    """Released blocks must be in the released group: one moved to the local
    group would be noised as a full local draw, not as this site's share."""
    kernel, params, ratios = CASES["reweighted_gradient"]
    good = kernel.mechanism(params, 2.0, REPLACE, dim=DIM, block_ratios=ratios)
    every = good.all_blocks
    misgrouped = GaussianMechanism(every[:1], REPLACE, local_blocks=every[1:])
    site = make_site(num_records=RECORDS, dim=DIM)
    with pytest.raises(QueryRefusedError, match="noises 1 released blocks, the kernel releases 3"):
        site.answer(Query("job", "q", kernel.name, params.to_wire(), misgrouped), 1)
    assert site.ledger.charges("job") == []
