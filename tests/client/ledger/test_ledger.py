"""PrivacyLedger: the site's cap holds whatever is asked, across restarts,
replays, threads and processes, and every figure can be recomputed from the
stored mechanisms."""

import contextlib
import math
import multiprocessing
import sqlite3
import tempfile
import threading
from pathlib import Path

import pytest
from dp_accounting import dp_event, pld
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.common.accounting.accountant import epsilon_spent
from privadapt.common.errors import BudgetExceededError, ConfigError, ReplayError
from privadapt.common.mechanisms import (
    Adjacency,
    GaussianBlock,
    GaussianMechanism,
    LaplaceMechanism,
    NoNoise,
)

DELTA = 1e-5
GAUSS = GaussianMechanism.single(1.0, 20.0)
# Pure-DP cap (delta 0): Laplace releases add up exactly, so a cap of N * 0.1
# admits exactly N of them; cheap enough to hammer from many threads.
LAPLACE = LaplaceMechanism(1.0, 10.0)


def policy(cap=5.0, delta=DELTA, name="st-mary", **fields):
    if math.isinf(cap):
        fields.setdefault("allow_non_private", True)
    return SitePolicy(site_name=name, epsilon_cap=cap, delta_cap=delta, **fields)


@pytest.fixture
def db(tmp_path):
    return tmp_path / "ledger.db"


def test_ledger_refuses_release_over_cap_naming_site_cap_spent_and_asked(db):
    with PrivacyLedger(db, policy(cap=1.0, delta=0.0), create=True) as ledger:
        ledger.charge("job-1", "q1", LaplaceMechanism(1.0, 1.25))  # epsilon 0.8
        with pytest.raises(BudgetExceededError) as err:
            ledger.charge("job-1", "q2", LaplaceMechanism(1.0, 2.0))  # epsilon 0.5
    message = str(err.value)
    assert "site 'st-mary'" in message and "query 'q2' of job 'job-1'" in message
    assert "cap is epsilon=1 at delta=0" in message
    assert "spent epsilon=0.8" in message
    assert "alone costs epsilon=0.5" in message and "total to epsilon=1.3" in message


def test_refused_charge_leaves_no_row(db):
    with PrivacyLedger(db, policy(cap=1.0), create=True) as ledger:
        ledger.charge("job-1", "q1", LaplaceMechanism(1.0, 1.25))
        with pytest.raises(BudgetExceededError):
            ledger.charge("job-1", "q2", LaplaceMechanism(1.0, 2.0))
    rows = sqlite3.connect(db).execute("SELECT query_id FROM charges").fetchall()
    assert rows == [("q1",)]


def test_charge_survives_closing_and_reopening_the_database(db):
    with PrivacyLedger(db, policy(), create=True) as ledger:
        first = ledger.charge("job-1", "q1", GAUSS)
    with PrivacyLedger(db, policy(), create=True) as reopened:
        assert reopened.charges() == [first]
        assert reopened.spent() == epsilon_spent([GAUSS], DELTA)


def test_replayed_query_is_refused_and_not_charged_twice(db):
    with PrivacyLedger(db, policy(), create=True) as ledger:
        ledger.charge("job-1", "q1", GAUSS)
        with pytest.raises(ReplayError, match="'q1' of job 'job-1' was already charged"):
            ledger.charge("job-1", "q1", GAUSS)
        assert len(ledger.charges()) == 1


def test_same_query_id_in_another_job_is_a_separate_charge(db):
    with PrivacyLedger(db, policy(), create=True) as ledger:
        ledger.charge("job-1", "q1", GAUSS)
        ledger.charge("job-2", "q1", GAUSS)
        assert ledger.jobs() == ["job-1", "job-2"]
        assert ledger.spent_by_job("job-2") == epsilon_spent([GAUSS], DELTA)


def _charge_many(ledger, worker, attempts, accepted, refused):
    for i in range(attempts):
        try:
            ledger.charge("job", f"w{worker}-q{i}", LAPLACE)
            accepted.append(i)
        except BudgetExceededError:
            refused.append(i)


def test_concurrent_threads_on_two_ledger_objects_never_overspend(db):
    n = 20
    cap_policy = policy(cap=n * LAPLACE.epsilon, delta=0.0)
    ledgers = [PrivacyLedger(db, cap_policy, create=True),
               PrivacyLedger(db, cap_policy, create=True)]
    accepted, refused = [], []
    threads = [
        threading.Thread(
            target=_charge_many, args=(ledgers[w % 2], w, 2 * n // 16 + 1, accepted, refused)
        )
        for w in range(16)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(accepted) == n and len(refused) == 16 * (2 * n // 16 + 1) - n
    assert ledgers[0].spent().epsilon <= cap_policy.epsilon_cap * (1 + 1e-12)
    assert len(ledgers[1].charges()) == n
    for ledger in ledgers:
        ledger.close()


def _charge_in_process(path: str, worker: int, attempts: int, cap: float, results) -> None:
    accepted, refused = [], []
    with PrivacyLedger(path, policy(cap=cap, delta=0.0), create=True) as ledger:
        _charge_many(ledger, worker, attempts, accepted, refused)
    results.put(len(accepted))


def test_concurrent_processes_never_overspend(db):
    n = 12
    cap = n * LAPLACE.epsilon
    PrivacyLedger(db, policy(cap=cap, delta=0.0), create=True).close()
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    workers = [
        context.Process(target=_charge_in_process, args=(str(db), w, n, cap, results))
        for w in range(2)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert [worker.exitcode for worker in workers] == [0, 0]
    assert results.get() + results.get() == n
    with PrivacyLedger(db, policy(cap=cap, delta=0.0), create=True) as ledger:
        assert len(ledger.charges()) == n and ledger.spent().epsilon <= cap * (1 + 1e-12)


_mechanisms = st.one_of(
    st.builds(
        lambda z, blocks: GaussianMechanism(tuple(GaussianBlock(1.0, z) for _ in range(blocks))),
        st.floats(0.5, 40.0),
        st.integers(1, 2),
    ),
    st.builds(lambda b: LaplaceMechanism(1.0, b), st.floats(0.5, 40.0)),
)


def _charge_all(ledger, mechanisms):
    for i, mechanism in enumerate(mechanisms):
        with contextlib.suppress(BudgetExceededError):
            ledger.charge("job", f"q{i}", mechanism)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_mechanisms, min_size=1, max_size=6), st.floats(0.3, 3.0))
def test_spent_epsilon_never_exceeds_the_cap(mechanisms, cap):
    with tempfile.TemporaryDirectory() as tmp, PrivacyLedger(
        Path(tmp) / "ledger.db", policy(cap=cap), create=True
    ) as ledger:
        _charge_all(ledger, mechanisms)
        assert ledger.spent().epsilon <= cap * (1 + 1e-12)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_mechanisms, min_size=1, max_size=6), st.floats(0.3, 3.0))
def test_running_epsilon_never_decreases_nor_understates_the_spend(mechanisms, cap):
    with tempfile.TemporaryDirectory() as tmp, PrivacyLedger(
        Path(tmp) / "ledger.db", policy(cap=cap), create=True
    ) as ledger:
        _charge_all(ledger, mechanisms)
        charges = ledger.charges()
    running = [charge.epsilon_after for charge in charges]
    assert running == sorted(running)
    for k, charge in enumerate(charges):
        prefix = [c.mechanism for c in charges[: k + 1]]
        assert charge.epsilon_after >= epsilon_spent(prefix, DELTA).epsilon


def test_spent_matches_epsilon_spent_over_the_stored_mechanisms(db):
    mechanisms = [GAUSS, LaplaceMechanism(1.0, 5.0), GAUSS, GaussianMechanism.single(2.0, 7.0)]
    with PrivacyLedger(db, policy(), create=True) as ledger:
        for i, mechanism in enumerate(mechanisms):
            ledger.charge("job", f"q{i}", mechanism)
        stored = [charge.mechanism for charge in ledger.charges()]
        assert stored == mechanisms
        assert ledger.spent() == epsilon_spent(stored, DELTA)


def test_job_calibrated_exactly_to_the_cap_runs_to_completion_and_no_further(db):
    # Far from the cap the Gaussian shortcut decides; at the cap, the PLD.
    cap = epsilon_spent([GAUSS] * 30, DELTA).epsilon
    with PrivacyLedger(db, policy(cap=cap), create=True) as ledger:
        for i in range(30):
            ledger.charge("job", f"q{i}", GAUSS)
        with pytest.raises(BudgetExceededError):
            ledger.charge("job", "q30", GAUSS)
        assert ledger.spent().epsilon == cap


def test_non_private_release_is_refused_under_a_finite_cap(db):
    with PrivacyLedger(db, policy(cap=1e6), create=True) as ledger, pytest.raises(
        BudgetExceededError, match="alone costs epsilon=inf"
    ):
        ledger.charge("job", "q1", NoNoise((2.0,)))


def test_non_private_release_is_accepted_when_the_cap_is_infinite(db):
    with PrivacyLedger(db, policy(cap=math.inf), create=True) as ledger:
        charge = ledger.charge("job", "q1", NoNoise((2.0,)))
        assert math.isinf(charge.epsilon_after) and math.isinf(ledger.spent().epsilon)


def test_release_of_zero_sensitivity_costs_nothing(db):
    with PrivacyLedger(db, policy(cap=0.0), create=True) as ledger:
        assert ledger.charge("job", "count", NoNoise((0.0,))).epsilon_after == 0.0


def test_add_remove_mechanism_is_charged_doubled_on_a_replace_one_policy(db):
    add_remove = LaplaceMechanism(1.0, 4.0, Adjacency.ADD_REMOVE_ONE)
    with PrivacyLedger(db, policy(delta=0.0), create=True) as ledger:
        charge = ledger.charge("job", "q1", add_remove)
    assert charge.epsilon_after == pytest.approx(2 * add_remove.epsilon)


def test_add_remove_gaussian_is_charged_as_twice_the_sensitivity(db):
    add_remove = GaussianMechanism.single(1.0, 10.0, Adjacency.ADD_REMOVE_ONE)
    with PrivacyLedger(db, policy(), create=True) as ledger:
        ledger.charge("job", "q1", add_remove)
        spent = ledger.spent().epsilon
    assert spent == epsilon_spent([GaussianMechanism.single(2.0, 5.0)], DELTA).epsilon


def test_ledger_of_another_site_is_refused(db):
    PrivacyLedger(db, policy(name="st-mary"), create=True).close()
    with pytest.raises(ConfigError, match="belongs to site 'st-mary'"):
        PrivacyLedger(db, policy(name="st-joseph"), create=True)


def test_file_that_is_not_a_database_is_refused(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database" * 100)
    with pytest.raises(ConfigError, match="not a usable ledger database"):
        PrivacyLedger(junk, policy(), create=True)


def test_read_only_open_recovers_the_cap_without_the_policy_file(db):
    with PrivacyLedger(db, policy(cap=2.5, delta=1e-6), create=True) as ledger:
        ledger.charge("job", "q1", GAUSS)
    with PrivacyLedger.open_readonly(db) as reader:
        assert (reader.policy.site_name, reader.policy.epsilon_cap) == ("st-mary", 2.5)
        assert reader.policy.delta_cap == 1e-6 and len(reader.charges()) == 1


def test_read_only_ledger_cannot_charge(db):
    PrivacyLedger(db, policy(), create=True).close()
    with PrivacyLedger.open_readonly(db) as reader, pytest.raises(RuntimeError, match="read-only"):
        reader.charge("job", "q1", GAUSS)


@pytest.mark.parametrize(
    ("multipliers", "count", "delta"),
    [((0.8,), 1, 1e-5), ((20.0,), 300, 1e-5), ((50.0, 7.0), 40, 1e-9), ((3.0, 4.0, 5.0), 5, 1e-3)],
)
def test_gaussian_ledger_is_charged_the_exact_gaussian_epsilon(db, multipliers, count, delta):
    # The closed form must agree with dp-accounting's own (discretised) PLD.
    mechanisms = [GaussianMechanism.single(1.0, z) for z in multipliers]
    with PrivacyLedger(db, policy(cap=100.0, delta=delta), create=True) as ledger:
        for i, mechanism in enumerate(m for m in mechanisms for _ in range(count)):
            ledger.charge("job", f"q{i}", mechanism)
        charged = ledger.spent().epsilon
    reference = pld.PLDAccountant()
    for z in multipliers:
        reference.compose(dp_event.GaussianDpEvent(z), count)
    assert charged == pytest.approx(reference.get_epsilon(delta), rel=1e-4, abs=1e-6)
