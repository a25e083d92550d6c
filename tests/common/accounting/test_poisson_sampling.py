"""Poisson-sampled Gaussian releases as data, in the accountant and in calibration,
checked against dp-accounting's ``PoissonSampledDpEvent`` under ADD_OR_REMOVE_ONE
(the relation both of its accountants support for Poisson sampling).

Reference convention: our sampled mechanism of sensitivity 1 (one record's
clipped contribution, add/remove) and multiplier z is dp-accounting's
``PoissonSampledDpEvent(q, GaussianDpEvent(z))``.
"""

import json
import math

import dp_accounting as dpa
import pytest
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from privadapt.common.accounting import accountant as accounting
from privadapt.common.accounting.accountant import AccountingMethod, PrivacyAccountant
from privadapt.common.accounting.calibration import calibrate_noise_multiplier
from privadapt.common.accounting.rdp import DEFAULT_RDP_ORDERS
from privadapt.common.errors import WireError
from privadapt.common.mechanisms import (
    Adjacency,
    GaussianBlock,
    GaussianMechanism,
    mechanism_from_dict,
    mechanism_to_dict,
)
from privadapt.common.wire.messages import mechanism_from_proto, mechanism_to_proto

ADD_REMOVE = Adjacency.ADD_REMOVE_ONE
REPLACE = Adjacency.REPLACE_ONE
DELTA = 1e-5
# (sampling rate, noise multiplier, releases): DP-SGD-like and extreme corners.
SAMPLED_CASES = [(0.01, 1.0, 1000), (0.05, 1.1, 200), (0.5, 2.0, 20), (0.9, 5.0, 3)]


def sampled(q, z, sensitivity=1.0):
    return GaussianMechanism.single(sensitivity, z, ADD_REMOVE, sampling_rate=q)


def dp_accounting_event(q, z):
    return dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z))


def dp_accounting_pld_epsilon(event, count=1):
    accountant = pld_privacy_accountant.PLDAccountant(dpa.NeighboringRelation.ADD_OR_REMOVE_ONE)
    return accountant.compose(event, count).get_epsilon(DELTA)


def ours(mechanism, count=1, method=AccountingMethod.PLD):
    return PrivacyAccountant(ADD_REMOVE, method).compose(mechanism, count).get_epsilon(DELTA)


# -- the mechanism as data ----------------------------------------------------


def test_unsampled_gaussian_has_rate_one():
    mechanism = GaussianMechanism.single(1.0, 2.0, ADD_REMOVE)
    assert mechanism.sampling_rate == 1.0 and not mechanism.is_sampled


@pytest.mark.parametrize("rate", [0.0, -0.1, 1.5, math.nan, math.inf, True, "0.1"])
def test_sampling_rate_outside_unit_interval_is_refused(rate):
    with pytest.raises(ValueError, match="sampling_rate"):
        GaussianMechanism.single(1.0, 2.0, ADD_REMOVE, sampling_rate=rate)


def test_sampled_gaussian_under_replace_one_is_refused():
    with pytest.raises(ValueError, match="add/remove"):
        GaussianMechanism.single(1.0, 2.0, REPLACE, sampling_rate=0.1)


def test_with_sensitivities_keeps_the_sampling_rate():
    charged = sampled(0.1, 2.0).with_sensitivities((3.0,), ADD_REMOVE)
    assert charged.sampling_rate == 0.1 and charged.blocks == (GaussianBlock(3.0, 2.0),)


def test_sampled_gaussian_survives_json_round_trip():
    mechanism = sampled(0.037, 1.3, sensitivity=2.5)
    text = json.dumps(mechanism_to_dict(mechanism))
    assert mechanism_from_dict(json.loads(text)) == mechanism


def test_sampled_gaussian_is_stored_under_its_own_kind():
    data = mechanism_to_dict(sampled(0.1, 2.0))
    assert data["kind"] == "poisson_sampled_gaussian" and data["sampling_rate"] == 0.1


def test_unsampled_gaussian_dict_is_unchanged_by_the_sampling_field():
    data = mechanism_to_dict(GaussianMechanism.single(1.0, 2.0, ADD_REMOVE))
    assert data == {"kind": "gaussian", "adjacency": "add_remove_one", "blocks": [[1.0, 2.0]]}


def test_gaussian_dict_without_sampling_rate_loads_as_unsampled():
    # The form every ledger entry had before sampling existed.
    old = {"kind": "gaussian", "adjacency": "replace_one", "blocks": [[2.0, 6.0]]}
    mechanism = mechanism_from_dict(old)
    assert mechanism == GaussianMechanism((GaussianBlock(2.0, 6.0),), REPLACE)
    assert mechanism.sampling_rate == 1.0


@pytest.mark.parametrize("data", [
    {"kind": "poisson_sampled_gaussian", "adjacency": "add_remove_one", "blocks": [[1, 2]]},
    {"kind": "poisson_sampled_gaussian", "adjacency": "add_remove_one", "blocks": [[1, 2]],
     "sampling_rate": 1.0},
    {"kind": "poisson_sampled_gaussian", "adjacency": "replace_one", "blocks": [[1, 2]],
     "sampling_rate": 0.5},
])
def test_malformed_sampled_description_raises_value_error(data):
    with pytest.raises(ValueError):
        mechanism_from_dict(data)


def test_wire_never_turns_a_sampled_release_into_an_unsampled_one():
    # Either the wire carries the rate, or it refuses the mechanism; a silent
    # drop would make the site answer a full-batch sum to a sampled query.
    mechanism = sampled(0.1, 2.0)
    try:
        decoded = mechanism_from_proto(mechanism_to_proto(mechanism))
    except WireError:
        return
    assert decoded == mechanism


# -- accounting -----------------------------------------------------------------


@pytest.mark.parametrize(("q", "z", "releases"), SAMPLED_CASES)
def test_pld_sampled_composition_matches_dp_accounting(q, z, releases):
    expected = dp_accounting_pld_epsilon(dp_accounting_event(q, z), releases)
    assert ours(sampled(q, z), releases) == pytest.approx(expected, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize(("q", "z", "releases"), SAMPLED_CASES)
def test_rdp_sampled_composition_matches_dp_accounting(q, z, releases):
    reference = rdp_privacy_accountant.RdpAccountant(
        list(DEFAULT_RDP_ORDERS), dpa.NeighboringRelation.ADD_OR_REMOVE_ONE)
    expected = reference.compose(dp_accounting_event(q, z), releases).get_epsilon(DELTA)
    assert ours(sampled(q, z), releases, AccountingMethod.RDP) == pytest.approx(expected, rel=1e-9)


def test_sampled_and_unsampled_releases_compose_as_in_dp_accounting():
    # A noisy count (unsampled) then sampled gradient steps: noisy SGD's ledger.
    count = GaussianMechanism.single(1.0, 20.0, ADD_REMOVE)
    step = sampled(0.05, 1.1)
    accountant = PrivacyAccountant(ADD_REMOVE).compose(count).compose(step, 100)
    expected = dp_accounting_pld_epsilon(dpa.ComposedDpEvent([
        dpa.GaussianDpEvent(20.0), dpa.SelfComposedDpEvent(dp_accounting_event(0.05, 1.1), 100),
    ]))
    assert accountant.get_epsilon(DELTA) == pytest.approx(expected, rel=1e-6)


def test_sampled_release_does_not_take_the_closed_form_gaussian_path(monkeypatch):
    def forbidden(*args):
        raise AssertionError("a sampled release is a mixture, not a Gaussian")

    monkeypatch.setattr(accounting, "gaussian_epsilon", forbidden)
    assert ours(sampled(0.1, 2.0), 10) > 0


def test_sampling_amplifies_privacy():
    z, releases = 2.0, 50
    unsampled = GaussianMechanism.single(1.0, z, ADD_REMOVE)
    assert ours(sampled(0.1, z), releases) < 0.5 * ours(unsampled, releases)


def test_sensitivity_scales_out_of_a_sampled_release():
    assert ours(sampled(0.1, 2.0, sensitivity=7.0), 5) == pytest.approx(ours(sampled(0.1, 2.0), 5))


def test_replace_one_accountant_refuses_a_sampled_release():
    with pytest.raises(ValueError, match="add/remove adjacency only"):
        PrivacyAccountant(REPLACE).compose(sampled(0.1, 2.0))


# -- calibration ----------------------------------------------------------------


@pytest.mark.parametrize(("epsilon", "q", "releases"), [(3.0, 0.05, 100), (1.0, 0.01, 300)])
def test_calibrated_sampled_multiplier_meets_target_tightly(epsilon, q, releases):
    tolerance = 1e-3
    z = calibrate_noise_multiplier(epsilon, DELTA, releases, adjacency=ADD_REMOVE,
                                   sampling_rate=q, relative_tolerance=tolerance)
    event = dp_accounting_event(q, z)
    assert dp_accounting_pld_epsilon(event, releases) <= epsilon * (1 + 1e-9)
    looser = dp_accounting_event(q, z * (1 - tolerance))
    assert dp_accounting_pld_epsilon(looser, releases) > epsilon


def test_calibration_counts_releases_already_spent_with_sampled_ones():
    count = GaussianMechanism.single(1.0, 10.0, ADD_REMOVE)
    alone = calibrate_noise_multiplier(3.0, DELTA, 50, adjacency=ADD_REMOVE, sampling_rate=0.1)
    after = calibrate_noise_multiplier(3.0, DELTA, 50, adjacency=ADD_REMOVE, sampling_rate=0.1,
                                       already_spent=(count,))
    assert after > alone
    total = PrivacyAccountant(ADD_REMOVE).compose(count).compose(sampled(0.1, after), 50)
    assert total.get_epsilon(DELTA) <= 3.0


def test_sampled_calibration_under_replace_one_is_refused():
    with pytest.raises(ValueError, match="add/remove"):
        calibrate_noise_multiplier(3.0, DELTA, 10, sampling_rate=0.1)


def test_sampling_rate_with_custom_mechanism_factory_is_refused():
    with pytest.raises(ValueError, match="make_mechanism"):
        calibrate_noise_multiplier(3.0, DELTA, 10, lambda z: sampled(0.1, z),
                                   adjacency=ADD_REMOVE, sampling_rate=0.1)
