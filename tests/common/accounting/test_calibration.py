"""Noise calibration: the least noise the project's own accountant accepts."""

import math

import dp_accounting as dpa
import pytest
from dp_accounting import mechanism_calibration
from dp_accounting.pld import pld_privacy_accountant

from privadapt.common.accounting.accountant import AccountingMethod, PrivacyAccountant
from privadapt.common.accounting.calibration import (
    calibrate_laplace_scale,
    calibrate_noise_multiplier,
)
from privadapt.common.mechanisms import (
    Adjacency,
    GaussianMechanism,
    LaplaceMechanism,
    NoNoise,
    PureDpEvent,
    ZCdpEvent,
)
from tests.pld_builds import counted_pld_builds

TOL = 1e-3
TARGETS = [(1.0, 1e-5, 1), (1.0, 1e-5, 1000), (0.5, 1e-6, 20), (4.0, 1e-5, 10)]


def epsilon_of(z, releases, delta, *, method=AccountingMethod.PLD, already_spent=()):
    accountant = PrivacyAccountant(method=method)
    for mechanism in already_spent:
        accountant.compose(mechanism)
    accountant.compose(GaussianMechanism.single(1.0, z), releases)
    return accountant.get_epsilon(delta)


@pytest.mark.parametrize(("epsilon", "delta", "releases"), TARGETS)
def test_calibrated_multiplier_meets_target(epsilon, delta, releases):
    z = calibrate_noise_multiplier(epsilon, delta, releases)
    assert epsilon_of(z, releases, delta) <= epsilon


@pytest.mark.parametrize(("epsilon", "delta", "releases"), TARGETS)
def test_calibrated_multiplier_is_tight(epsilon, delta, releases):
    z = calibrate_noise_multiplier(epsilon, delta, releases, relative_tolerance=TOL)
    assert epsilon_of(z * (1 - 2 * TOL), releases, delta) > epsilon


@pytest.mark.parametrize("method", list(AccountingMethod))
def test_calibration_uses_the_accountant_method_it_is_given(method):
    z = calibrate_noise_multiplier(1.0, 1e-5, 50, method=method)
    assert epsilon_of(z, 50, 1e-5, method=method) <= 1.0
    assert epsilon_of(z * (1 - 2 * TOL), 50, 1e-5, method=method) > 1.0


def test_rdp_calibration_needs_more_noise_than_pld():
    pld = calibrate_noise_multiplier(1.0, 1e-5, 50, method=AccountingMethod.PLD)
    rdp = calibrate_noise_multiplier(1.0, 1e-5, 50, method=AccountingMethod.RDP)
    assert rdp > pld * (1 + TOL)


def test_job_calibrated_to_a_site_cap_is_not_refused_on_its_last_release():
    cap_epsilon, cap_delta, releases, clip_norm = 2.0, 1e-6, 300, 0.7
    z = calibrate_noise_multiplier(cap_epsilon, cap_delta, releases)
    ledger = PrivacyAccountant(Adjacency.REPLACE_ONE, AccountingMethod.PLD)
    ledger.compose(GaussianMechanism.single(2 * clip_norm, z), releases)
    assert ledger.get_epsilon(cap_delta) <= cap_epsilon


@pytest.mark.parametrize(("epsilon", "releases"), [(1.0, 10), (3.0, 100)])
def test_agrees_with_dp_accounting_mechanism_calibration(epsilon, releases):
    delta = 1e-5

    def event(z):
        return dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(z), releases)

    guess = dpa.get_sigma_gaussian(epsilon, delta) * math.sqrt(releases)
    expected = mechanism_calibration.calibrate_dp_mechanism(
        lambda: pld_privacy_accountant.PLDAccountant(dpa.NeighboringRelation.ADD_OR_REMOVE_ONE),
        event,
        epsilon,
        delta,
        mechanism_calibration.ExplicitBracketInterval(guess / 2, guess * 2),
        tol=1e-4 * guess,
    )
    assert calibrate_noise_multiplier(epsilon, delta, releases) == pytest.approx(
        expected, rel=0.01
    )


@pytest.mark.parametrize(("epsilon", "delta"), [(0.1, 1e-5), (1.0, 1e-5), (5.0, 1e-8)])
def test_single_release_matches_analytic_gaussian(epsilon, delta):
    exact = dpa.get_sigma_gaussian(epsilon, delta)
    z = calibrate_noise_multiplier(epsilon, delta, 1)
    assert z == pytest.approx(exact, rel=2 * TOL)


def test_many_gaussian_releases_calibrate_in_closed_form_without_a_pld():
    # 1,000 Gaussians fold into one, whose epsilon is the analytic Gaussian's:
    # the search builds no PLD, which is what keeps it cheap (benchmarks/run.py
    # times it).
    with counted_pld_builds() as built:
        z = calibrate_noise_multiplier(1.0, 1e-5, 1000)
    assert z == pytest.approx(dpa.get_sigma_gaussian(1.0, 1e-5) * math.sqrt(1000), rel=2 * TOL)
    assert built == []


def test_already_spent_releases_leave_less_to_calibrate():
    spent = [GaussianMechanism.single(1.0, 30.0)] * 50
    fresh = calibrate_noise_multiplier(1.0, 1e-5, 100)
    after = calibrate_noise_multiplier(1.0, 1e-5, 100, already_spent=spent)
    assert after > fresh
    assert epsilon_of(after, 100, 1e-5, already_spent=spent) <= 1.0
    assert epsilon_of(after * (1 - 2 * TOL), 100, 1e-5, already_spent=spent) > 1.0


def test_already_spent_exceeding_target_leaves_nothing_to_calibrate():
    with pytest.raises(ValueError, match="nothing left to calibrate"):
        calibrate_noise_multiplier(1.0, 1e-5, 10, already_spent=[PureDpEvent(1.5)])


def test_already_spent_equal_to_target_leaves_nothing_to_calibrate():
    with pytest.raises(ValueError, match="nothing left to calibrate"):
        calibrate_noise_multiplier(
            1.0, 0.0, 10, lambda b: LaplaceMechanism(1.0, b), already_spent=[PureDpEvent(1.0)]
        )


def test_non_private_release_already_spent_leaves_nothing_to_calibrate():
    with pytest.raises(ValueError, match="nothing left to calibrate"):
        calibrate_noise_multiplier(1.0, 1e-5, 10, already_spent=[NoNoise((1.0,))])


def test_custom_mechanism_multiplier_is_sigma_over_its_sensitivity():
    # z multiplies the sensitivity, so the answer does not depend on it.
    default = calibrate_noise_multiplier(1.0, 1e-5, 10)
    scaled = calibrate_noise_multiplier(
        1.0, 1e-5, 10, lambda z: GaussianMechanism.single(3.0, z)
    )
    assert scaled == pytest.approx(default, rel=TOL)


def test_add_remove_calibration_matches_replace_one_for_same_sensitivity():
    replace = calibrate_noise_multiplier(1.0, 1e-5, 10)
    add_remove = calibrate_noise_multiplier(1.0, 1e-5, 10, adjacency=Adjacency.ADD_REMOVE_ONE)
    assert add_remove == pytest.approx(replace, rel=TOL)


def test_laplace_at_delta_zero_calibrates_to_basic_composition():
    scale = calibrate_noise_multiplier(1.0, 0.0, 10, lambda b: LaplaceMechanism(1.0, b))
    assert scale == pytest.approx(calibrate_laplace_scale(1.0, 1.0, 10), rel=TOL)
    assert scale >= 10.0


def test_laplace_with_delta_needs_less_noise_than_pure_calibration():
    scale = calibrate_noise_multiplier(1.0, 1e-5, 10, lambda b: LaplaceMechanism(1.0, b))
    assert scale < calibrate_laplace_scale(1.0, 1.0, 10)


def test_zcdp_mechanism_is_calibrated_by_rdp():
    z = calibrate_noise_multiplier(1.0, 1e-5, 10, lambda z: ZCdpEvent(1 / (2 * z * z)))
    rdp_gaussian = calibrate_noise_multiplier(1.0, 1e-5, 10, method=AccountingMethod.RDP)
    assert z == pytest.approx(rdp_gaussian, rel=2 * TOL)


def test_mechanism_that_ignores_z_has_no_smallest_multiplier():
    with pytest.raises(ValueError, match="no smallest noise multiplier"):
        calibrate_noise_multiplier(1.0, 1e-5, 2, lambda z: PureDpEvent(0.1))


def test_mechanism_that_never_meets_target_is_refused():
    with pytest.raises(ValueError, match="does not fall below the target"):
        calibrate_noise_multiplier(1.0, 1e-5, 2, lambda z: PureDpEvent(0.6))


@pytest.mark.parametrize("epsilon", [0.0, -1.0, math.nan, -math.inf])
def test_refuses_non_positive_epsilon(epsilon):
    with pytest.raises(ValueError, match="epsilon must be"):
        calibrate_noise_multiplier(epsilon, 1e-5, 10)


def test_infinite_epsilon_points_to_no_noise():
    with pytest.raises(ValueError, match="NoNoise"):
        calibrate_noise_multiplier(math.inf, 1e-5, 10)


@pytest.mark.parametrize("delta", [-1e-5, 1.0, 1.5, math.nan])
def test_refuses_delta_outside_unit_interval(delta):
    with pytest.raises(ValueError, match="delta must be"):
        calibrate_noise_multiplier(1.0, delta, 10)


def test_refuses_gaussian_at_delta_zero():
    with pytest.raises(ValueError, match="never private at delta = 0"):
        calibrate_noise_multiplier(1.0, 0.0, 10)


@pytest.mark.parametrize("releases", [0, -3, 2.5, True])
def test_refuses_bad_num_releases(releases):
    with pytest.raises(ValueError, match="num_releases"):
        calibrate_noise_multiplier(1.0, 1e-5, releases)


@pytest.mark.parametrize("tolerance", [0.0, -0.1, 1.0])
def test_refuses_bad_tolerance(tolerance):
    with pytest.raises(ValueError, match="relative_tolerance"):
        calibrate_noise_multiplier(1.0, 1e-5, 10, relative_tolerance=tolerance)


# --- pure DP closed form --------------------------------------------------------------


def test_laplace_scale_is_releases_times_sensitivity_over_epsilon():
    assert calibrate_laplace_scale(0.5, 2.0, 10) == pytest.approx(40.0)


def test_laplace_scale_composes_to_exactly_epsilon_at_delta_zero():
    scale = calibrate_laplace_scale(0.5, 2.0, 10)
    accountant = PrivacyAccountant().compose(LaplaceMechanism(2.0, scale), 10)
    assert accountant.get_epsilon(0.0) == pytest.approx(0.5, rel=1e-12)


@pytest.mark.parametrize(
    ("epsilon", "sensitivity", "releases", "message"),
    [
        (0.0, 1.0, 1, "epsilon"),
        (math.inf, 1.0, 1, "NoNoise"),
        (1.0, 0.0, 1, "sensitivity"),
        (1.0, math.nan, 1, "sensitivity"),
        (1.0, 1.0, 0, "num_releases"),
    ],
)
def test_laplace_scale_refuses_bad_input(epsilon, sensitivity, releases, message):
    with pytest.raises(ValueError, match=message):
        calibrate_laplace_scale(epsilon, sensitivity, releases)


def _sampled_epsilon(z, releases, delta, rate, interval=None):
    kwargs = {} if interval is None else {"value_discretization_interval": interval}
    accountant = PrivacyAccountant(Adjacency.ADD_REMOVE_ONE, AccountingMethod.PLD, **kwargs)
    mechanism = GaussianMechanism.single(1.0, z, Adjacency.ADD_REMOVE_ONE, rate)
    return accountant.compose(mechanism, releases).get_epsilon(delta)


@pytest.mark.parametrize(("epsilon", "releases", "rate"), [(1.0, 20, 0.1), (8.0, 50, 0.02)])
def test_sampled_calibration_is_decided_on_the_accountants_own_grid(epsilon, releases, rate):
    # The coarse search only guesses; the answer meets the target on the
    # ledger's grid and is tight there.
    z = calibrate_noise_multiplier(epsilon, 1e-5, releases, adjacency=Adjacency.ADD_REMOVE_ONE,
                                   sampling_rate=rate, relative_tolerance=TOL)
    assert _sampled_epsilon(z, releases, 1e-5, rate) <= epsilon
    assert _sampled_epsilon(z * (1 - 2 * TOL), releases, 1e-5, rate) > epsilon


@pytest.mark.slow
def test_a_wrong_coarse_guess_cannot_change_the_answer(monkeypatch):
    from privadapt.common.accounting import calibration

    def calibrate():
        return calibrate_noise_multiplier(2.0, 1e-5, 20, adjacency=Adjacency.ADD_REMOVE_ONE,
                                          sampling_rate=0.1, relative_tolerance=TOL)

    right = calibrate()
    # A coarse grid so coarse that its guess is far off: the fine search widens.
    monkeypatch.setattr(calibration, "_COARSE_DISCRETIZATION", 0.5)
    wrong = calibrate()
    assert _sampled_epsilon(wrong, 20, 1e-5, 0.1) <= 2.0
    assert _sampled_epsilon(wrong * (1 - 2 * TOL), 20, 1e-5, 0.1) > 2.0
    assert wrong == pytest.approx(right, rel=2 * TOL)
