"""The ledger's incremental state (client/ledger/totals.py): it equals a
recomputation from the rows, its upper bound never admits what the exact
figure would refuse, and pure-epsilon and zCDP events are first-class charges."""

import contextlib
import math
import sqlite3
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from privadapt.client.ledger.accounting import exact_report, mechanism_json
from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.ledger.totals import LAMBDAS, LedgerTotals
from privadapt.client.policy import SitePolicy
from privadapt.common.accounting.accountant import AccountingMethod, epsilon_spent
from privadapt.common.accounting.log_mgf import (
    GAUSSIAN_PLD_INFINITY_MASS,
    gaussian_pld_log_mgf_bound,
    pld_log_mgfs,
)
from privadapt.common.errors import BudgetExceededError, ConfigError
from privadapt.common.mechanisms import (
    Adjacency,
    GaussianMechanism,
    LaplaceMechanism,
    PureDpEvent,
    ZCdpEvent,
)

AR = Adjacency.ADD_REMOVE_ONE
DELTA = 1e-5
# A small pool, so that each distinct PLD is built once per test process.
POOL = (
    GaussianMechanism.single(1.0, 1.5, AR),
    GaussianMechanism.single(1.0, 6.0, AR),
    GaussianMechanism.single(1.0, 1.0, AR, sampling_rate=0.05),
    LaplaceMechanism(1.0, 3.0, AR),
    LaplaceMechanism(1.0, 0.7, AR),
    PureDpEvent(0.3, AR),
    PureDpEvent(0.00011, AR),  # the PLD rounds its loss up to 2e-4: above plain RDP
    ZCdpEvent(0.01, AR),
)


def policy(cap, delta=DELTA, method="pld"):
    return SitePolicy("st-mary", cap, delta, adjacency=AR, accounting=method)


@pytest.mark.parametrize("z", [0.5, 1.0, 3.0, 50.0])
def test_gaussian_fold_bound_holds_for_dp_accountings_discretised_pld(z):
    pld = pld_lib.from_gaussian_mechanism(z, value_discretization_interval=1e-4)
    remove, add, mass_remove, mass_add = pld_log_mgfs(pld, LAMBDAS)
    bound = gaussian_pld_log_mgf_bound(1 / z**2, LAMBDAS)
    assert np.all(remove <= bound) and np.all(add <= bound)
    assert max(mass_remove, mass_add) <= GAUSSIAN_PLD_INFINITY_MASS


_histories = st.lists(st.sampled_from(POOL), min_size=1, max_size=12)


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_histories, st.sampled_from([0.0, 1e-6, 1e-5, 1e-3]), st.sampled_from(["pld", "rdp"]))
def test_upper_bound_is_never_below_the_exact_figure(history, delta, method):
    pure_only = [m for m in history if math.isfinite(m.in_adjacency(AR).pure_epsilon)]
    history = pure_only or history[:1] if delta == 0 else history
    cap_policy = policy(10.0, delta, method)
    totals = LedgerTotals(AR, track_pld=method == "pld")
    for mechanism in history:
        totals.add(mechanism_json(mechanism))
        exact = exact_report(dict(totals.groups), cap_policy).epsilon
        bound = totals.sums().upper_bound(delta, AccountingMethod(method))
        assert bound >= exact


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_histories, st.floats(0.2, 6.0), st.sampled_from(["pld", "rdp"]))
def test_ledger_decides_every_charge_as_the_exact_figure_would(history, cap, method):
    cap_policy = policy(cap, DELTA, method)
    expected, groups = [], Counter()
    for i, mechanism in enumerate(history):
        after = groups + Counter({mechanism_json(mechanism): 1})
        if exact_report(dict(after), cap_policy).epsilon <= cap * (1 + 1e-12):
            groups, expected = after, [*expected, f"q{i}"]
    with tempfile.TemporaryDirectory() as tmp, PrivacyLedger(
            Path(tmp) / "ledger.db", cap_policy, create=True) as ledger:
        for i, mechanism in enumerate(history):
            with contextlib.suppress(BudgetExceededError):
                ledger.charge("job", f"q{i}", mechanism)
        charges = ledger.charges()
        assert [c.query_id for c in charges] == expected
        assert ledger.spent().epsilon <= cap * (1 + 1e-12)
        for k, charge in enumerate(charges):  # never looser than the cap, never understated
            prefix = [c.mechanism for c in charges[: k + 1]]
            assert charge.epsilon_after >= epsilon_spent(prefix, DELTA, AR, method).epsilon
            assert charge.epsilon_after <= cap * (1 + 1e-12)


def test_incremental_state_equals_a_recomputation_from_the_rows(tmp_path):
    db = tmp_path / "ledger.db"
    history = [POOL[k % len(POOL)] for k in range(60)]
    with PrivacyLedger(db, policy(1e4), create=True) as ledger:
        for i, mechanism in enumerate(history):
            ledger.charge("job", f"q{i}", mechanism)
        spent = ledger.spent()
    stored = dict(sqlite3.connect(db).execute("SELECT mechanism_json, count FROM groups"))
    assert stored == dict(Counter(mechanism_json(m) for m in history))
    recomputed = epsilon_spent(history, DELTA, AR)
    assert spent.epsilon == pytest.approx(recomputed.epsilon, rel=1e-9)
    with PrivacyLedger(db, policy(1e4)) as reopened:  # its open check recomputes the sums
        assert reopened.spent() == spent


def test_a_second_process_charges_are_caught_up_without_reading_the_history(tmp_path):
    db = tmp_path / "ledger.db"
    with PrivacyLedger(db, policy(50.0), create=True) as first, \
            PrivacyLedger(db, policy(50.0)) as second:
        first.charge("job", "q1", POOL[3])
        second.charge("job", "q2", POOL[5])
        first.charge("job", "q3", POOL[7])
        assert first.spent() == second.spent()
        assert second.spent() == epsilon_spent([POOL[3], POOL[5], POOL[7]], DELTA, AR)


def test_a_jobs_spend_is_kept_up_to_date_without_reading_the_jobs_history(tmp_path):
    # Asked after every charge (each share reports it): the job's rows are
    # counted once, then each new row is added, whoever charged it.
    db = tmp_path / "ledger.db"
    with PrivacyLedger(db, policy(1e3), create=True) as first, \
            PrivacyLedger(db, policy(1e3)) as second:
        first.charge("job", "q0", POOL[1])
        first.charge("other", "q0", POOL[2])
        assert first.spent_by_job("job") == epsilon_spent([POOL[1]], DELTA, AR)
        statements: list[str] = []
        first._connection().set_trace_callback(statements.append)
        mechanisms = [POOL[1]]
        for i in range(1, 6):
            ledger = first if i % 2 else second  # another process's charges are caught up
            ledger.charge("job", f"q{i}", POOL[i])
            mechanisms.append(POOL[i])
            assert first.spent_by_job("job") == epsilon_spent(mechanisms, DELTA, AR)
        assert not [s for s in statements if "GROUP BY" in s]
        assert second.spent_by_job("job") == first.spent_by_job("job")
        assert first.spent_by_job("other") == epsilon_spent([POOL[2]], DELTA, AR)
        assert first.spent_by_job("none").epsilon == 0


@pytest.mark.parametrize("event", [PureDpEvent(0.25, AR), ZCdpEvent(0.005, AR)],
                         ids=["pure", "zcdp"])
def test_pure_and_zcdp_events_are_stored_and_accounted(tmp_path, event):
    db = tmp_path / "ledger.db"
    with PrivacyLedger(db, policy(5.0), create=True) as ledger:
        for i in range(4):
            ledger.charge("job", f"q{i}", event)
    with PrivacyLedger(db, policy(5.0)) as reopened:
        assert [c.mechanism for c in reopened.charges()] == [event] * 4
        expected = epsilon_spent([event] * 4, DELTA, AR)
        assert reopened.spent() == expected
        assert reopened.spent().method == (AccountingMethod.RDP if event.kind == "zcdp"
                                           else AccountingMethod.PLD)


def test_pure_events_at_delta_zero_add_up_exactly_to_the_cap(tmp_path):
    with PrivacyLedger(tmp_path / "ledger.db", policy(1.0, delta=0.0), create=True) as ledger:
        for i in range(4):
            ledger.charge("job", f"q{i}", PureDpEvent(0.25, AR))
        with pytest.raises(BudgetExceededError):
            ledger.charge("job", "q4", PureDpEvent(0.25, AR))
        assert ledger.spent().epsilon == pytest.approx(1.0)


def test_ledger_of_a_changed_adjacency_rebuilds_its_sums(tmp_path):
    db = tmp_path / "ledger.db"
    with PrivacyLedger(db, policy(10.0), create=True) as ledger:
        ledger.charge("job", "q1", LaplaceMechanism(1.0, 4.0, AR))
    replace_one = SitePolicy("st-mary", 10.0, 0.0)
    with PrivacyLedger(db, replace_one) as reopened:
        assert reopened.spent().epsilon == pytest.approx(0.5)
        reopened.charge("job", "q2", LaplaceMechanism(1.0, 4.0))
    with PrivacyLedger(db, replace_one) as again:
        assert again.spent().epsilon == pytest.approx(0.75)
    with pytest.raises(ConfigError, match="adjacency"):  # q2 has no add/remove reading
        PrivacyLedger(db, policy(10.0))
