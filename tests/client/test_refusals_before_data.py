"""Refusals the query and the site's own books decide come before any private
data is read (a refusal is unpriced, so one decided after the kernel ran,
or after every record was hashed for a part, would leak the data-dependent
running time for free: an over-budget refusal once took 125 ms for
n = 10k and 476 ms for n = 40k, nothing spent).

Each test makes reading the data fail loudly -- the kernel's ``compute`` and
``compute_local``, the split into record parts and the per-record hashing --
and checks that the refusal still arrives, with nothing charged."""

from __future__ import annotations

import numpy as np
import pytest

from privadapt.client.ledger import privacy_ledger as ledger_module
from privadapt.common.data import record_parts
from privadapt.common.data.record_parts import RecordPart, RecordSplitter
from privadapt.common.errors import BudgetExceededError, QueryRefusedError, ReplayError
from privadapt.common.federation import Query
from privadapt.common.kernels import get_kernel
from privadapt.common.mechanisms import Adjacency, ReportNoisyMin

DIM = 5
LINEAR = {"weights": np.zeros(DIM), "loss": "squared", "clip_norm": 1.0}
PART = RecordPart("train", 0.5, "a-fresh-salt")


def _touching_data_fails(monkeypatch: pytest.MonkeyPatch, *kernel_names: str) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("private data was read before the refusal")

    monkeypatch.setattr(RecordSplitter, "records", fail)
    monkeypatch.setattr(record_parts, "record_hashes", fail)
    for name in kernel_names:
        kernel_class = type(get_kernel(name))
        monkeypatch.setattr(kernel_class, "compute", fail)
        monkeypatch.setattr(kernel_class, "compute_local", fail)


def _linear_query(query_id: str, multiplier: float, records: RecordPart = PART) -> Query:
    kernel = get_kernel("linear_gradient")
    mechanism = kernel.mechanism(kernel.Params.from_wire(LINEAR, DIM), multiplier,
                                 Adjacency.ADD_REMOVE_ONE, dim=DIM, records=records)
    return Query("job", query_id, "linear_gradient", LINEAR, mechanism, records=records)


def test_a_query_over_the_remaining_budget_is_refused_before_the_kernel_runs(
        make_site, monkeypatch):
    site = make_site(dim=DIM, epsilon_cap=1.0, adjacency="add_remove_one")
    site.answer(_linear_query("q1", 5.0), 1)  # answered: spends most of the cap
    spent = site.ledger.spent().epsilon
    assert 0.5 < spent <= 1.0
    _touching_data_fails(monkeypatch, "linear_gradient")
    with pytest.raises(BudgetExceededError):
        site.answer(_linear_query("q2", 5.0), 1)
    assert site.ledger.spent().epsilon == spent
    assert [c.query_id for c in site.ledger.charges()] == ["q1"]


def test_a_query_the_cap_cannot_afford_at_all_is_refused_before_the_kernel_runs(
        make_site, monkeypatch):
    site = make_site(dim=DIM, epsilon_cap=0.1, adjacency="add_remove_one")
    _touching_data_fails(monkeypatch, "linear_gradient")
    with pytest.raises(BudgetExceededError):
        site.answer(_linear_query("q1", 1.0, RecordPart.ALL), 1)
    assert site.ledger.charges() == []


def test_an_unaffordable_selection_is_refused_before_its_scores_are_computed(
        make_site, monkeypatch):
    site = make_site(dim=DIM, epsilon_cap=0.1, adjacency="add_remove_one")
    _touching_data_fails(monkeypatch, "validation_loss")
    params = {"candidates": np.zeros((3, DIM)), "loss": "logistic", "loss_bound": 4.0}
    query = Query("job", "q1", "validation_loss", params, ReportNoisyMin(4.0, 5.0),
                  form="per_site")
    with pytest.raises(BudgetExceededError):
        site.answer(query, 1)
    assert site.ledger.charges() == []


def test_a_replayed_query_is_refused_before_the_kernel_runs(make_site, monkeypatch):
    site = make_site(dim=DIM, adjacency="add_remove_one")
    site.answer(_linear_query("q1", 3.0), 1)
    _touching_data_fails(monkeypatch, "linear_gradient")
    with pytest.raises(ReplayError):
        site.answer(_linear_query("q1", 3.0), 1)


REWEIGHTED = {"weights": np.zeros(DIM), "objective": "convex", "loss": "squared",
              "alpha": 0.5, "total_private_records": 1000, "feature_norm": 1.0,
              "label_bound": 1.0, "radius": 1.0, "k1": 0.1, "k2": 0.1, "kinf": 0.1, "mu": 1.0,
              "inverse_square_sum": 1.0, "log_partition": 1.0, "step_size": 0.01}


def _reweighted_query(query_id: str, step: int) -> Query:
    kernel = get_kernel("reweighted_gradient")
    params = dict(REWEIGHTED, step=step)
    mechanism = kernel.mechanism(kernel.Params.from_wire(params, DIM), 5.0,
                                 Adjacency.ADD_REMOVE_ONE, dim=DIM, records=PART)
    return Query("job", query_id, "reweighted_gradient", params, mechanism, records=PART)


def test_a_step_out_of_order_on_a_new_job_is_refused_before_any_record_is_hashed(
        make_site, monkeypatch):
    """A free timing channel: step 5 of a job the site has no
    weights for, on a part with a fresh salt, was refused only after every
    record was hashed (about 0.8 us a record)."""
    site = make_site(dim=DIM, adjacency="add_remove_one")
    _touching_data_fails(monkeypatch, "reweighted_gradient")
    with pytest.raises(QueryRefusedError, match="expected step 0, got 5"):
        site.answer(_reweighted_query("q1", 5), 1)
    assert site.ledger.charges() == []


def test_a_step_out_of_order_in_a_running_job_is_refused_before_any_record_is_read(
        make_site, monkeypatch):
    site = make_site(dim=DIM, adjacency="add_remove_one")
    site.answer(_reweighted_query("q0", 0), 1)
    site.answer(_reweighted_query("q1", 1), 1)
    site.answer(_reweighted_query("q1-retry", 1), 1)  # a retried step still runs
    _touching_data_fails(monkeypatch, "reweighted_gradient")
    with pytest.raises(QueryRefusedError, match="step 3 out of order"):
        site.answer(_reweighted_query("q3", 3), 1)
    with pytest.raises(QueryRefusedError, match="step 0 out of order"):
        site.answer(_reweighted_query("q0-again", 0), 1)
    assert len(site.ledger.charges()) == 3


def test_the_committing_charge_reuses_the_check_and_decides_afresh_after_another_charge(
        make_site, monkeypatch):
    """check_charge's figure is reused only while nothing was charged since;
    a second check that the first one's reservation leaves no room for is
    refused at once (it used to be admitted, then refused at its charge)."""
    from privadapt.common.mechanisms import LaplaceMechanism

    site = make_site(dim=DIM, epsilon_cap=1.0, adjacency="add_remove_one")
    ledger = site.ledger
    mechanism = _linear_query("q", 5.0).mechanism
    first = ledger.check_charge("job", "q1", mechanism)
    with pytest.raises(BudgetExceededError, match="reserved for queries being answered now"):
        ledger.check_charge("job", "q2", mechanism)
    assert ledger.charges() == []  # checking charges nothing
    calls = []
    real_admit = ledger_module.admit
    monkeypatch.setattr(ledger_module, "admit",
                        lambda *args: calls.append(args) or real_admit(*args))
    charge = ledger.charge("job", "q1", mechanism, checked=first)
    assert calls == [] and charge.epsilon_after == first.epsilon
    # A check made before another charge: the charge decides afresh (and,
    # the reservation having kept room for it, admits).
    second = ledger.check_charge("job", "q2", LaplaceMechanism(1.0, 1e3, Adjacency.ADD_REMOVE_ONE))
    ledger.charge("job", "other", LaplaceMechanism(1.0, 1e3, Adjacency.ADD_REMOVE_ONE))
    calls.clear()
    ledger.charge("job", "q2", LaplaceMechanism(1.0, 1e3, Adjacency.ADD_REMOVE_ONE),
                  checked=second)
    assert len(calls) == 1
    # A check is bound to its own release, and used once: another query id
    # decides afresh.
    with pytest.raises(BudgetExceededError):
        ledger.charge("job", "q3", mechanism, checked=first)
    assert [c.query_id for c in ledger.charges()] == ["q1", "other", "q2"]
    assert ledger.outstanding_reservations() == 0


def test_a_forged_or_copied_check_is_never_reused(tmp_path):
    """A CheckedCharge is a plain value; a copy with a
    smaller epsilon must not switch the cap check off. Only the very object
    the ledger issued (once) is reused; anything else is decided afresh."""
    import dataclasses

    from privadapt.client.ledger.accounting import mechanism_json
    from privadapt.client.policy import SitePolicy
    from privadapt.common.mechanisms import LaplaceMechanism

    policy = SitePolicy("site", 1.0, 1e-6)
    ledger = ledger_module.PrivacyLedger(tmp_path / "l.db", policy, create=True)
    costly = LaplaceMechanism(1.0, 1.25, Adjacency.REPLACE_ONE)  # epsilon 0.8
    ledger.charge("job", "q1", costly)
    cheap = LaplaceMechanism(1.0, 1e6, Adjacency.REPLACE_ONE)
    genuine = ledger.check_charge("job", "q2", cheap)
    forged = dataclasses.replace(genuine, text=mechanism_json(costly), epsilon=0.0)
    with pytest.raises(BudgetExceededError):
        ledger.charge("job", "q2", costly, checked=forged)
    assert ledger.spent().epsilon < 1.0
    ledger.close()
