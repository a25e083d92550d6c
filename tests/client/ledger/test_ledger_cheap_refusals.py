"""A ledger refuses what its cap cannot afford by closed-form bounds, before it
builds any privacy loss distribution: a coordinator
holding a certificate once stalled or killed a site's accounting with a single
costly query (a Laplace of epsilon 1e4: MemoryError; sigma 1e-300:
ZeroDivisionError; a Laplace scale of 1e-9: 146 TiB asked for).

"Cheap" is checked by the work done, not by a clock: a refusal builds no PLD
(each took 13 s to minutes when it built one)."""

import math
import resource

import pytest

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.common.accounting.accountant import MAX_PLD_POINTS, PrivacyAccountant, epsilon_spent
from privadapt.common.accounting.cases import release_epsilon_lower_bound
from privadapt.common.errors import BudgetExceededError, QueryRefusedError
from privadapt.common.mechanisms import Adjacency, GaussianMechanism, LaplaceMechanism, PureDpEvent
from tests.pld_builds import counted_pld_builds

DELTA = 1e-5


def _ledger(tmp_path, cap=10.0, **fields):
    policy = SitePolicy(site_name="st-mary", epsilon_cap=cap, delta_cap=DELTA, **fields)
    return PrivacyLedger(tmp_path / "ledger.db", policy, create=True)


def _peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.parametrize(
    "attack",
    [
        LaplaceMechanism(1.0, 1e-2),  # epsilon 100: 13 s, 420 MiB
        LaplaceMechanism(1.0, 1e-3),  # epsilon 1,000: 130 s, 3 GiB
        LaplaceMechanism(1.0, 1e-4),  # epsilon 1e4: MemoryError
        LaplaceMechanism(1.0, 1e-9),  # 146 TiB asked for
        GaussianMechanism.single(1.0, 1e-300),  # ZeroDivisionError
        GaussianMechanism.single(1.0, 1e-9),
    ],
    ids=["laplace-eps-100", "laplace-eps-1e3", "laplace-eps-1e4", "laplace-scale-1e-9",
         "sigma-1e-300", "sigma-1e-9"],
)
@pytest.mark.parametrize("history", ["empty", "one-laplace"])
def test_unaffordable_release_is_refused_cheaply_and_charges_nothing(tmp_path, attack, history):
    ledger = _ledger(tmp_path)
    if history == "one-laplace":
        ledger.charge("job", "q0", LaplaceMechanism(1.0, 1.0))
    before, peak = ledger.charges(), _peak_mib()
    with counted_pld_builds() as built, pytest.raises(BudgetExceededError,
                                                      match="closed-form bound"):
        ledger.charge("job", "q1", attack)
    assert built == []
    assert _peak_mib() - peak < 100
    assert ledger.charges() == before


def test_small_gaussian_after_a_laplace_is_refused_without_a_pld(tmp_path):
    # Multiplier 0.02 on a ledger holding one Laplace: 37 s and 5.5 GB before.
    ledger = _ledger(tmp_path)
    ledger.charge("job", "q0", LaplaceMechanism(1.0, 1.0))
    with counted_pld_builds() as built, pytest.raises(BudgetExceededError):
        ledger.charge("job", "q1", GaussianMechanism.single(1.0, 0.02))
    assert built == []


def test_release_too_costly_to_account_is_refused_even_under_a_huge_cap(tmp_path):
    # A cap that the lower bound does not exceed: the size bound still refuses
    # to build a PLD of 2e8 points (1.5 GiB and more).
    ledger = _ledger(tmp_path, cap=1e6)
    ledger.charge("job", "q0", LaplaceMechanism(1.0, 1.0))
    with counted_pld_builds() as built, pytest.raises(QueryRefusedError,
                                                      match="privacy loss distribution"):
        ledger.charge("job", "q1", LaplaceMechanism(1.0, 1e-4))
    assert built == []
    assert len(ledger.charges()) == 1


def test_vanishing_sigma_is_a_refusal_not_an_exception_under_an_infinite_cap(tmp_path):
    ledger = _ledger(tmp_path, cap=math.inf, allow_non_private=True)
    ledger.charge("job", "q0", LaplaceMechanism(1.0, 1.0))
    with pytest.raises(QueryRefusedError):
        ledger.charge("job", "q1", GaussianMechanism.single(1.0, 1e-300))


@pytest.mark.parametrize(
    "mechanism",
    [
        LaplaceMechanism(1.0, 0.3),
        LaplaceMechanism(2.0, 0.5),
        PureDpEvent(0.7),
        PureDpEvent(4.0),
        GaussianMechanism.single(1.0, 0.8),
        GaussianMechanism.single(1.0, 3.0),
    ],
)
@pytest.mark.parametrize("delta", [1e-8, DELTA, 1e-2])
def test_closed_form_bound_never_exceeds_the_exact_figure(mechanism, delta):
    exact = epsilon_spent([mechanism], delta).epsilon
    bound = release_epsilon_lower_bound(mechanism.in_adjacency(Adjacency.REPLACE_ONE), delta)
    assert bound <= exact + 1e-9
    assert bound >= exact - 1e-3  # tight: the refusal loses nothing a cap can afford


def test_an_affordable_laplace_is_accounted_by_its_pld(tmp_path):
    # The count the refusals above read sees the PLD an affordable release builds.
    ledger = _ledger(tmp_path)
    with counted_pld_builds() as built:
        ledger.charge("job", "q0", LaplaceMechanism(1.0, 1.0))
    assert built


def test_release_calibrated_exactly_to_the_cap_is_still_charged(tmp_path):
    laplace = LaplaceMechanism(1.0, 0.25)
    cap = epsilon_spent([laplace], DELTA).epsilon
    ledger = _ledger(tmp_path, cap=cap)
    charge = ledger.charge("job", "q0", laplace)
    assert charge.epsilon_after == pytest.approx(cap, rel=1e-12)


def test_accountant_refuses_to_build_an_oversized_pld():
    accountant = PrivacyAccountant().compose(LaplaceMechanism(1.0, 1.0))
    accountant.compose(LaplaceMechanism(1.0, 1e-4))
    assert accountant.pld_points() > MAX_PLD_POINTS
    with pytest.raises(ValueError, match="points"):
        accountant.report(DELTA)
