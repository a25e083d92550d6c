"""The privacy accountant, checked against dp-accounting, prv-accountant and
closed forms, and the mechanisms it reads, as plain data.

Reference conventions: dp-accounting's ``ADD_OR_REMOVE_ONE`` Gaussian and
Laplace events of norm bound 1 are the same "shift by 1" pairs as our
mechanisms of sensitivity 1 (in either adjacency, since our sensitivities are
declared under their own adjacency); its ``REPLACE_ONE`` doubles the shift.
"""

import json
import math

import dp_accounting as dpa
import pytest
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant
from hypothesis import given
from hypothesis import strategies as st
from prv_accountant import GaussianMechanism as PrvGaussian
from prv_accountant import PRVAccountant

from privadapt.common.accounting.accountant import (
    AccountingMethod,
    PrivacyAccountant,
    epsilon_spent,
)
from privadapt.common.accounting.rdp import DEFAULT_RDP_ORDERS
from privadapt.common.mechanisms import (
    Adjacency,
    GaussianBlock,
    GaussianMechanism,
    LaplaceMechanism,
    NoNoise,
    PureDpEvent,
    ZCdpEvent,
    mechanism_from_dict,
    mechanism_to_dict,
)

ADD_REMOVE = Adjacency.ADD_REMOVE_ONE
REPLACE = Adjacency.REPLACE_ONE
PLD = AccountingMethod.PLD
RDP = AccountingMethod.RDP
DELTA = 1e-5
GAUSSIAN_CASES = [(1.0, 1), (2.0, 10), (20.0, 1000)]  # (noise multiplier, releases)


def ours(mechanism, count=1, *, delta=DELTA, method=PLD, adjacency=None):
    adjacency = mechanism.adjacency if adjacency is None else adjacency
    accountant = PrivacyAccountant(adjacency, method).compose(mechanism, count)
    return accountant.get_epsilon(delta)


def dp_accounting_pld(event, count, relation=dpa.NeighboringRelation.ADD_OR_REMOVE_ONE):
    accountant = pld_privacy_accountant.PLDAccountant(relation)
    return accountant.compose(event, count).get_epsilon(DELTA)


def dp_accounting_rdp(event, count):
    accountant = rdp_privacy_accountant.RdpAccountant(list(DEFAULT_RDP_ORDERS))
    return accountant.compose(event, count).get_epsilon(DELTA)


# --- Gaussian against the references --------------------------------------------------


@pytest.mark.parametrize(("z", "releases"), GAUSSIAN_CASES)
def test_pld_gaussian_composition_matches_dp_accounting_pld(z, releases):
    expected = dp_accounting_pld(dpa.GaussianDpEvent(z), releases)
    mechanism = GaussianMechanism.single(1.0, z, ADD_REMOVE)
    assert ours(mechanism, releases) == pytest.approx(expected, rel=1e-3)


@pytest.mark.parametrize(("z", "releases"), GAUSSIAN_CASES)
def test_pld_gaussian_composition_matches_analytic_gaussian(z, releases):
    # Independent of any PLD code: T Gaussians of multiplier z are one of z/sqrt(T).
    exact = dpa.get_epsilon_gaussian(z / math.sqrt(releases), DELTA)
    epsilon = ours(GaussianMechanism.single(1.0, z), releases)
    assert epsilon >= exact * (1 - 1e-9)  # pessimistic
    assert epsilon == pytest.approx(exact, rel=1e-4)


def test_pld_gaussian_self_composition_matches_explicit_convolution():
    single = dpa.pld.privacy_loss_distribution.from_gaussian_mechanism(2.0)
    convolved = single.self_compose(3).get_epsilon_for_delta(DELTA)
    assert ours(GaussianMechanism.single(1.0, 2.0), 3) == pytest.approx(convolved, rel=1e-3)


def test_replace_one_gaussian_matches_dp_accounting_replace_one_relation():
    # dp-accounting's REPLACE_ONE shifts by twice the norm bound, as in_adjacency does.
    expected = dp_accounting_pld(
        dpa.GaussianDpEvent(4.0), 10, dpa.NeighboringRelation.REPLACE_ONE
    )
    mechanism = GaussianMechanism.single(1.0, 4.0, ADD_REMOVE)
    assert ours(mechanism, 10, adjacency=REPLACE) == pytest.approx(expected, rel=1e-3)


@pytest.mark.parametrize(("z", "releases"), GAUSSIAN_CASES)
def test_rdp_gaussian_composition_matches_dp_accounting_rdp(z, releases):
    # Same orders, same closed form alpha / (2 z^2): equal to rounding.
    expected = dp_accounting_rdp(dpa.GaussianDpEvent(z), releases)
    mechanism = GaussianMechanism.single(1.0, z, ADD_REMOVE)
    assert ours(mechanism, releases, method=RDP) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize(("z", "releases"), [(1.0, 1), (5.0, 100), (20.0, 1000)])
def test_pld_gaussian_composition_within_prv_accountant_error_bounds(z, releases):
    accountant = PRVAccountant(
        [PrvGaussian(z)], eps_error=0.01, delta_error=1e-9, max_self_compositions=[releases]
    )
    lower, _, upper = accountant.compute_epsilon(DELTA, [releases])
    assert lower <= ours(GaussianMechanism.single(1.0, z), releases) <= upper


def test_rdp_is_looser_than_pld_for_gaussians():
    mechanism = GaussianMechanism.single(1.0, 5.0)
    assert ours(mechanism, 100, method=RDP) > ours(mechanism, 100, method=PLD)


# --- Laplace against the references ---------------------------------------------------


@pytest.mark.parametrize(("scale", "releases"), [(1.0, 1), (2.0, 5), (10.0, 20)])
def test_pld_laplace_composition_matches_dp_accounting_pld(scale, releases):
    expected = dp_accounting_pld(dpa.LaplaceDpEvent(scale), releases)
    mechanism = LaplaceMechanism(1.0, scale, ADD_REMOVE)
    assert ours(mechanism, releases) == pytest.approx(expected, rel=1e-3)


@pytest.mark.parametrize(("scale", "releases"), [(1.0, 1), (2.0, 5), (10.0, 20)])
def test_rdp_laplace_composition_matches_dp_accounting_rdp(scale, releases):
    expected = dp_accounting_rdp(dpa.LaplaceDpEvent(scale), releases)
    mechanism = LaplaceMechanism(1.0, scale, ADD_REMOVE)
    assert ours(mechanism, releases, method=RDP) == pytest.approx(expected, rel=1e-6)


def test_laplace_epsilon_depends_only_on_scale_over_sensitivity():
    assert ours(LaplaceMechanism(3.0, 6.0), 4) == ours(LaplaceMechanism(1.0, 2.0), 4)


# --- multi-block Gaussians ------------------------------------------------------------


def test_multi_block_gaussian_equals_single_gaussian_of_effective_multiplier():
    # (1/3)^2 + (1/4)^2 = (5/12)^2: effective multiplier 12/5.
    mechanism = GaussianMechanism((GaussianBlock(1.0, 3.0), GaussianBlock(1.0, 4.0)))
    assert mechanism.noise_multiplier == pytest.approx(2.4)
    assert ours(mechanism, 5) == pytest.approx(ours(GaussianMechanism.single(1.0, 2.4), 5))


def test_zero_sensitivity_block_costs_nothing():
    alone = GaussianMechanism((GaussianBlock(1.0, 3.0),))
    with_free_block = GaussianMechanism((GaussianBlock(1.0, 3.0), GaussianBlock(0.0, 0.1)))
    assert ours(with_free_block, 5) == ours(alone, 5)


def test_gaussian_with_only_zero_sensitivity_blocks_is_free():
    mechanism = GaussianMechanism((GaussianBlock(0.0, 1.0), GaussianBlock(0.0, 2.0)))
    assert ours(mechanism, 100) == 0.0


# --- pure DP --------------------------------------------------------------------------


def test_pld_gives_exactly_epsilon_for_one_pure_event():
    assert ours(PureDpEvent(0.7), delta=0.0) == pytest.approx(0.7, rel=1e-12)
    assert ours(PureDpEvent(0.7), delta=1e-12) == pytest.approx(0.7, rel=1e-9)


def test_pure_events_compose_to_sum_of_epsilons_at_delta_zero():
    accountant = PrivacyAccountant()
    accountant.compose(PureDpEvent(0.5)).compose(PureDpEvent(0.3)).compose(PureDpEvent(0.2), 10)
    assert accountant.get_epsilon(0.0) == pytest.approx(2.8, rel=1e-12)


@given(st.lists(st.floats(min_value=0.01, max_value=2.0), min_size=1, max_size=6))
def test_pure_events_compose_to_at_most_sum_of_epsilons_at_small_delta(epsilons):
    accountant = PrivacyAccountant()
    for epsilon in epsilons:
        accountant.compose(PureDpEvent(epsilon))
    # Each epsilon is first lifted to the nearest float exactly on the loss
    # grid (pure_epsilon_on_grid: at most 5 steps above it, so the figure is
    # monotone in epsilon and exact there), plus one step of the PLD's own.
    slack = 6 * len(epsilons) * accountant.value_discretization_interval
    assert accountant.get_epsilon(1e-9) <= sum(epsilons) + slack


def test_laplace_releases_at_delta_zero_cost_their_pure_epsilons():
    # Without the delta = 0 rule the PLD reports inf: rounding leaves ~1e-16 mass at
    # infinite loss.
    assert ours(LaplaceMechanism(1.0, 2.0), delta=0.0) == pytest.approx(0.5)
    assert ours(LaplaceMechanism(1.0, 2.0), 10, delta=0.0) == pytest.approx(5.0)


def test_rdp_accountant_reports_pure_epsilons_at_delta_zero():
    assert ours(PureDpEvent(0.25), 4, delta=0.0, method=RDP) == pytest.approx(1.0)


def test_gaussian_at_delta_zero_is_not_private():
    accountant = PrivacyAccountant().compose(PureDpEvent(0.1))
    accountant.compose(GaussianMechanism.single(1.0, 50.0))
    assert accountant.get_epsilon(0.0) == math.inf


# --- zCDP -----------------------------------------------------------------------------


def test_pld_accountant_answers_zcdp_by_rdp_and_says_so():
    accountant = PrivacyAccountant(method=PLD).compose(GaussianMechanism.single(1.0, 5.0))
    accountant.compose(ZCdpEvent(0.01))
    assert accountant.needs_rdp()
    assert accountant.report(DELTA).method == RDP


@pytest.mark.parametrize("rho", [0.001, 0.1, 1.0])
def test_zcdp_epsilon_is_at_most_the_standard_conversion(rho):
    bound = rho + 2 * math.sqrt(rho * math.log(1 / DELTA))
    assert ours(ZCdpEvent(rho)) <= bound


def test_zcdp_event_equals_gaussian_of_same_rho_under_rdp():
    z = 3.0
    rho = 1 / (2 * z**2)
    assert ours(ZCdpEvent(rho), 7, method=RDP) == pytest.approx(
        ours(GaussianMechanism.single(1.0, z), 7, method=RDP), rel=1e-12
    )


# --- adjacency ------------------------------------------------------------------------


# How each mechanism reads under another adjacency: tests/common/mechanisms/test_mechanisms.py.


def test_replace_one_accountant_charges_add_remove_mechanism_by_group_privacy():
    accountant = PrivacyAccountant(REPLACE).compose(PureDpEvent(0.5, ADD_REMOVE))
    assert accountant.get_epsilon(0.0) == pytest.approx(1.0)


def test_add_remove_accountant_refuses_replace_one_mechanism():
    with pytest.raises(ValueError, match="cannot be accounted under"):
        PrivacyAccountant(ADD_REMOVE).compose(PureDpEvent(0.5, REPLACE))


# --- non-private and empty ledgers ----------------------------------------------------


@pytest.mark.parametrize("method", [PLD, RDP])
def test_no_noise_with_nonzero_sensitivity_is_not_private(method):
    accountant = PrivacyAccountant(method=method).compose(PureDpEvent(0.1))
    accountant.compose(NoNoise((0.0, 1.0)))
    assert accountant.get_epsilon(DELTA) == math.inf


@pytest.mark.parametrize("method", [PLD, RDP])
def test_no_noise_with_zero_sensitivity_is_free(method):
    assert ours(NoNoise((0.0, 0.0)), 1000, method=method) == 0.0


def test_empty_ledger_spends_nothing():
    assert epsilon_spent([], DELTA).epsilon == 0.0


def test_composing_zero_times_spends_nothing():
    assert ours(GaussianMechanism.single(1.0, 0.5), 0) == 0.0


@pytest.mark.parametrize("count", [-1, 1.5])
def test_compose_refuses_bad_count(count):
    with pytest.raises(ValueError, match="count"):
        PrivacyAccountant().compose(PureDpEvent(1.0), count)


@pytest.mark.parametrize("delta", [-0.1, 1.0, 2.0])
def test_report_refuses_delta_outside_unit_interval(delta):
    with pytest.raises(ValueError, match="delta"):
        PrivacyAccountant().report(delta)


def test_epsilon_spent_matches_accountant_and_names_method():
    mechanisms = [GaussianMechanism.single(1.0, 10.0)] * 3 + [LaplaceMechanism(1.0, 20.0)]
    report = epsilon_spent(mechanisms, DELTA, method=RDP)
    accountant = PrivacyAccountant(method=RDP)
    for mechanism in mechanisms:
        accountant.compose(mechanism)
    assert report.epsilon == accountant.get_epsilon(DELTA)
    assert report.method == RDP
    assert "RDP" in str(report)


# --- mechanisms as data ---------------------------------------------------------------

adjacencies = st.sampled_from(list(Adjacency))
positive = st.floats(min_value=1e-6, max_value=1e6)
non_negative = st.floats(min_value=0.0, max_value=1e6)
mechanisms = st.one_of(
    st.builds(
        GaussianMechanism,
        st.lists(st.builds(GaussianBlock, non_negative, positive), min_size=1, max_size=4).map(
            tuple
        ),
        adjacencies,
        local_blocks=st.lists(st.builds(GaussianBlock, non_negative, positive), max_size=2).map(
            tuple
        ),
    ),
    st.builds(LaplaceMechanism, non_negative, positive, adjacencies),
    st.builds(PureDpEvent, non_negative, adjacencies),
    st.builds(ZCdpEvent, non_negative, adjacencies),
    st.builds(NoNoise, st.lists(non_negative, min_size=1, max_size=4).map(tuple), adjacencies),
)


@given(mechanisms)
def test_mechanism_survives_json_round_trip(mechanism):
    data = json.loads(json.dumps(mechanism_to_dict(mechanism)))
    assert mechanism_from_dict(data) == mechanism


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"kind": "gaussian"},
        {"kind": "teleport", "adjacency": "replace_one"},
        {"kind": "laplace", "adjacency": "sideways", "sensitivity": 1, "scale": 1},
        {"kind": "laplace", "adjacency": "replace_one", "sensitivity": 1},
        {"kind": "laplace", "adjacency": "replace_one", "sensitivity": None, "scale": 1},
        {"kind": "laplace", "adjacency": "replace_one", "sensitivity": 1, "scale": -1},
        {"kind": "gaussian", "adjacency": "replace_one", "blocks": []},
        {"kind": "gaussian", "adjacency": "replace_one", "blocks": [[1.0]]},
        {"kind": "gaussian", "adjacency": "replace_one", "blocks": 5},
        {"kind": "gaussian", "adjacency": "replace_one", "blocks": [[1.0, "nan"]]},
        {"kind": "pure_dp", "adjacency": "replace_one", "epsilon": "lots"},
        {"kind": "zcdp", "adjacency": "replace_one", "rho": -0.5},
        {"kind": "no_noise", "adjacency": "replace_one", "sensitivities": [math.inf]},
        [],
        None,
    ],
)
def test_malformed_mechanism_description_raises_value_error(data):
    with pytest.raises(ValueError):
        mechanism_from_dict(data)


def test_to_dict_refuses_foreign_objects():
    with pytest.raises(TypeError, match="not a privadapt mechanism"):
        mechanism_to_dict(dpa.GaussianDpEvent(1.0))


@pytest.mark.parametrize("sigma", [0.0, -1.0, math.nan, math.inf])
def test_gaussian_block_refuses_bad_sigma(sigma):
    with pytest.raises(ValueError, match="sigma"):
        GaussianBlock(1.0, sigma)


@pytest.mark.parametrize("sensitivity", [-1.0, math.nan, math.inf])
def test_gaussian_block_refuses_bad_sensitivity(sensitivity):
    with pytest.raises(ValueError, match="sensitivity"):
        GaussianBlock(sensitivity, 1.0)


@pytest.mark.parametrize("multiplier", [0.0, -2.0, math.nan])
def test_single_gaussian_refuses_bad_noise_multiplier(multiplier):
    with pytest.raises(ValueError, match="noise_multiplier"):
        GaussianMechanism.single(1.0, multiplier)


def test_gaussian_mechanism_needs_a_block():
    with pytest.raises(ValueError, match="at least one block"):
        GaussianMechanism(())


def test_with_sensitivities_refuses_wrong_block_count():
    with pytest.raises(ValueError, match="2 Gaussian blocks"):
        GaussianMechanism((GaussianBlock(1.0, 1.0),) * 2).with_sensitivities((1.0,), REPLACE)


@pytest.mark.parametrize("epsilon", [0.05, 0.5, 1.0, 3.0, 10.0])
@pytest.mark.parametrize("delta", [1e-10, 1e-6, 1e-3])
def test_gaussian_sigma_matches_dp_accounting_analytic_gaussian(epsilon, delta):
    from dp_accounting import gaussian_mechanism

    from privadapt.common.accounting.analytic_gaussian import gaussian_sigma

    expected = gaussian_mechanism.get_sigma_gaussian(epsilon, delta)
    assert gaussian_sigma(epsilon, delta) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("noise_multiplier", [0.3, 1.0, 4.0, 40.0])
@pytest.mark.parametrize("epsilon", [0.0, 0.1, 1.0, 8.0])
def test_gaussian_delta_matches_dp_accounting_privacy_loss(noise_multiplier, epsilon):
    from dp_accounting.pld import privacy_loss_mechanism

    from privadapt.common.accounting.analytic_gaussian import gaussian_delta

    loss = privacy_loss_mechanism.GaussianPrivacyLoss(noise_multiplier, sensitivity=1.0)
    expected = loss.get_delta_for_epsilon(epsilon)
    actual = gaussian_delta(noise_multiplier, epsilon)
    assert actual == pytest.approx(expected, rel=1e-9, abs=1e-300)


@given(st.floats(min_value=1e-6, max_value=8.0))
def test_pure_epsilon_is_lifted_to_a_float_exactly_on_the_loss_grid(epsilon):
    from privadapt.common.accounting.pld import pure_epsilon_on_grid

    lifted = pure_epsilon_on_grid(epsilon, 1e-4)
    assert epsilon <= lifted <= epsilon + 5 * 1e-4
    assert lifted / 1e-4 == round(lifted / 1e-4)  # dp-accounting rounds neither loss
    assert pure_epsilon_on_grid(lifted, 1e-4) == lifted
