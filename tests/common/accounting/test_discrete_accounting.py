"""Accounting of the integer-noise mechanisms, checked against dp-accounting."""

import math
from fractions import Fraction

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant, privacy_loss_distribution
from dp_accounting.rdp import rdp_privacy_accountant

from privadapt.common.accounting.discrete import (
    SKELLAM_ORDERS,
    discrete_gaussian_epsilon,
    discrete_laplace_epsilon,
    discrete_laplace_pld,
    discrete_laplace_pure_epsilon,
    skellam_epsilon,
    skellam_rdp,
)


def test_discrete_laplace_is_exactly_pure_delta_over_t():
    assert discrete_laplace_pure_epsilon(Fraction(7, 2), 3, count=5) == Fraction(30, 7)
    assert discrete_laplace_pure_epsilon(4, 1) == Fraction(1, 4)


@pytest.mark.parametrize("scale,sensitivity,count,delta", [
    (10, 1, 1, 1e-6), (Fraction(25, 2), 3, 20, 1e-5), (200, 7, 100, 1e-7)])
def test_discrete_laplace_epsilon_matches_dp_accounting_pld_accountant(
        scale, sensitivity, count, delta):
    accountant = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    accountant.compose(dp_event.DiscreteLaplaceDpEvent(1 / float(scale), sensitivity), count)
    expected = accountant.get_epsilon(delta)
    assert expected < float(discrete_laplace_pure_epsilon(scale, sensitivity, count))
    # These losses (multiples of 0.01) sit exactly on dp-accounting's buckets,
    # where its float ceil may round a loss down by one bucket of 1e-4; ours
    # rounds the exact loss up, so it is never below, and at most one bucket
    # per release above.
    ours = discrete_laplace_epsilon(scale, sensitivity, delta, count)
    assert expected - 1e-9 <= ours <= expected + count * 1e-4


@pytest.mark.parametrize("scale,sensitivity", [
    (Fraction(3331, 7), 2000), (Fraction(10301, 1000), 1), (Fraction(77777, 3), 5000)])
def test_discrete_laplace_pld_is_dp_accountings_off_the_bucket_edges(scale, sensitivity):
    """Where no loss falls on a bucket edge, the closed form is dp-accounting's
    own privacy-buckets PLD, point for point."""
    ours = discrete_laplace_pld(scale, sensitivity)._pmf_remove.to_dense_pmf()
    theirs = privacy_loss_distribution.from_discrete_laplace_mechanism(
        1 / float(scale), sensitivity=sensitivity,
        value_discretization_interval=1e-4)._pmf_remove.to_dense_pmf()
    assert ours._lower_loss == theirs._lower_loss
    np.testing.assert_allclose(ours._probs, theirs._probs, rtol=1e-9, atol=1e-15)


def test_discrete_laplace_pld_costs_epsilon_not_the_sensitivity():
    """On the grid 2^-32 a sensitivity of 1 is 2^32 steps: the closed form
    builds it from its 2 epsilon / h buckets."""
    pld = discrete_laplace_pld(Fraction(2**32), 2**32 + 10)
    assert pld.get_epsilon_for_delta(1e-6) == pytest.approx(1.0, abs=2e-4)


def test_discrete_laplace_epsilon_never_exceeds_the_pure_bound():
    assert discrete_laplace_epsilon(2, 1, 0.0, 3) <= 1.5


@pytest.mark.parametrize("sigma,sensitivity,count,delta", [
    (3.0, 1, 1, 1e-5), (40.0, 5, 10, 1e-6), (0.8, 1, 2, 1e-3)])
def test_discrete_gaussian_epsilon_matches_dp_accounting(sigma, sensitivity, count, delta):
    expected = (privacy_loss_distribution.from_discrete_gaussian_mechanism(
        sigma, sensitivity=sensitivity).self_compose(count).get_epsilon_for_delta(delta))
    assert discrete_gaussian_epsilon(sigma, sensitivity, delta, count) == pytest.approx(
        expected, abs=1e-9)


def test_discrete_gaussian_approaches_the_gaussian_for_large_sigma():
    continuous = (privacy_loss_distribution.from_gaussian_mechanism(100.0, sensitivity=10)
                  .get_epsilon_for_delta(1e-5))
    assert discrete_gaussian_epsilon(100.0, 10, 1e-5) == pytest.approx(continuous, rel=0.01)


def test_skellam_rdp_is_the_published_bound():
    alpha, variance, l1, l2 = 5, 40.0, 3.0, 2.0
    expected = alpha * 4 / 80 + min((9 * 4 + 18) / (4 * 1600), 9 / 80)
    assert skellam_rdp(variance, l1, l2, (alpha,)) == [pytest.approx(expected, rel=1e-12)]


def test_skellam_epsilon_converts_its_rdp_with_dp_accounting():
    rdp = [10 * value for value in skellam_rdp(500.0, 4.0, 2.0)]
    expected, _ = rdp_privacy_accountant.compute_epsilon(SKELLAM_ORDERS, rdp, 1e-5)
    assert skellam_epsilon(500.0, 4.0, 2.0, 1e-5, count=10) == pytest.approx(expected, abs=1e-9)


def test_skellam_costs_slightly_more_than_the_gaussian_of_its_variance():
    variance, sensitivity = 1e6, 10.0
    gaussian = rdp_privacy_accountant.RdpAccountant(orders=list(SKELLAM_ORDERS))
    gaussian.compose(dp_event.GaussianDpEvent(math.sqrt(variance) / sensitivity), 50)
    skellam = skellam_epsilon(variance, sensitivity, sensitivity, 1e-5, count=50)
    assert gaussian.get_epsilon(1e-5) <= skellam <= 1.01 * gaussian.get_epsilon(1e-5)


@pytest.mark.parametrize("call", [
    lambda: discrete_laplace_pure_epsilon(0, 1),
    lambda: discrete_laplace_pure_epsilon(2, 0),
    lambda: discrete_laplace_pure_epsilon(2, 1.5),
    lambda: discrete_laplace_epsilon(2, 1, 1e-5, count=0),
    lambda: discrete_gaussian_epsilon(0.0, 1, 1e-5),
    lambda: discrete_gaussian_epsilon(float("nan"), 1, 1e-5),
    lambda: skellam_rdp(0.0, 1.0, 1.0),
    lambda: skellam_rdp(1.0, 1.0, 1.0, (1.5,)),
])
def test_accounting_refuses_bad_parameters(call):
    with pytest.raises(ValueError):
        call()
