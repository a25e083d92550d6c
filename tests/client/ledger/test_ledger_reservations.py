"""A budget check reserves what it admitted until its charge commits, so a
concurrent query is refused at its own check, before it reads any data
(the second of two concurrent queries was once admitted at its
check and refused only at its charge, after its kernel ran: a timing signal).

Every exit without a commit releases the reservation; a crashed process's
reservations are released by the next check; none outlives its answer."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.ledger.reservations import owner_alive, owners_directory
from privadapt.client.policy import SitePolicy
from privadapt.common.data import record_parts
from privadapt.common.data.record_parts import RecordPart, RecordSplitter
from privadapt.common.errors import (
    BudgetExceededError,
    ConfigError,
    QueryRefusedError,
    ReplayError,
)
from privadapt.common.federation import Query
from privadapt.common.kernels import get_kernel
from privadapt.common.mechanisms import Adjacency, LaplaceMechanism

DIM = 5
LINEAR = {"weights": np.zeros(DIM), "loss": "squared", "clip_norm": 1.0}
AR = Adjacency.ADD_REMOVE_ONE


def _linear_query(query_id: str, multiplier: float = 5.0) -> Query:
    kernel = get_kernel("linear_gradient")
    mechanism = kernel.mechanism(kernel.Params.from_wire(LINEAR, DIM), multiplier, AR, dim=DIM,
                                 records=RecordPart.ALL)
    return Query("job", query_id, "linear_gradient", LINEAR, mechanism)


def _reserved_rows(ledger: PrivacyLedger) -> int:
    return ledger._connection().execute("SELECT COUNT(*) FROM reservations").fetchone()[0]


def test_the_second_of_two_concurrent_queries_is_refused_at_its_check(make_site, monkeypatch):
    """Two queries each within the cap, together over it: while the first
    one's kernel runs, the second is refused without reading any data; the
    first then commits."""
    site = make_site(dim=DIM, epsilon_cap=1.0, adjacency="add_remove_one")
    kernel_class = type(get_kernel("linear_gradient"))
    real_compute, real_records = kernel_class.compute, RecordSplitter.records
    in_kernel, proceed = threading.Event(), threading.Event()
    first_thread: list[threading.Thread] = []

    def only_the_first(real):
        def wrapper(*args, **kwargs):
            if threading.current_thread() is not first_thread[0]:
                raise AssertionError("the second query read private data")
            return real(*args, **kwargs)
        return wrapper

    def paused_compute(*args, **kwargs):
        only_the_first(lambda: None)()
        in_kernel.set()
        assert proceed.wait(30)
        return real_compute(*args, **kwargs)

    monkeypatch.setattr(kernel_class, "compute", paused_compute)
    monkeypatch.setattr(kernel_class, "compute_local",
                        only_the_first(kernel_class.compute_local))
    monkeypatch.setattr(RecordSplitter, "records", only_the_first(real_records))
    monkeypatch.setattr(record_parts, "record_hashes",
                        only_the_first(record_parts.record_hashes))
    answers: list[object] = []
    first = threading.Thread(target=lambda: answers.append(site.answer(_linear_query("q1"), 1)))
    first_thread.append(first)
    first.start()
    assert in_kernel.wait(30)
    with pytest.raises(BudgetExceededError, match="reserved for queries being answered now"):
        site.answer(_linear_query("q2"), 1)
    # Answering the same query twice at once is a replay, refused at the check too.
    with pytest.raises(ReplayError, match="being answered now"):
        site.answer(_linear_query("q1"), 1)
    proceed.set()
    first.join(30)
    assert len(answers) == 1 and answers[0].query_id == "q1"
    assert [c.query_id for c in site.ledger.charges()] == ["q1"]
    assert site.ledger.outstanding_reservations() == 0 and _reserved_rows(site.ledger) == 0


def test_a_kernel_error_releases_the_reservation(make_site, monkeypatch):
    site = make_site(dim=DIM, epsilon_cap=1.0, adjacency="add_remove_one")
    kernel_class = type(get_kernel("linear_gradient"))
    real_compute = kernel_class.compute

    def broken(*args, **kwargs):
        raise RuntimeError("kernel failed")

    monkeypatch.setattr(kernel_class, "compute", broken)
    with pytest.raises(RuntimeError):
        site.answer(_linear_query("q1"), 1)
    assert site.ledger.outstanding_reservations() == 0 and _reserved_rows(site.ledger) == 0
    monkeypatch.setattr(kernel_class, "compute", real_compute)
    site.answer(_linear_query("q2"), 1)  # the whole budget is there again
    assert [c.query_id for c in site.ledger.charges()] == ["q2"]


REWEIGHTED = {"weights": np.zeros(DIM), "objective": "convex", "loss": "squared",
              "alpha": 0.5, "total_private_records": 1000, "feature_norm": 1.0,
              "label_bound": 1.0, "radius": 1.0, "k1": 0.1, "k2": 0.1, "kinf": 0.1, "mu": 1.0,
              "inverse_square_sum": 1.0, "log_partition": 1.0, "step_size": 0.01}


def _out_of_order_query(query_id: str) -> Query:
    kernel = get_kernel("reweighted_gradient")
    params = dict(REWEIGHTED, step=5)
    mechanism = kernel.mechanism(kernel.Params.from_wire(params, DIM), 50.0, AR, dim=DIM,
                                 records=RecordPart.ALL)
    return Query("job", query_id, "reweighted_gradient", params, mechanism)


def test_no_reservation_leaks_after_a_thousand_refused_or_failed_answers(make_site, monkeypatch):
    site = make_site(dim=DIM, epsilon_cap=1.0, adjacency="add_remove_one")
    kernel_class = type(get_kernel("linear_gradient"))
    real_compute = kernel_class.compute

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt  # not an Exception: a cancelled answer

    monkeypatch.setattr(kernel_class, "compute", interrupted)
    for i in range(1000):
        if i % 3 == 1:  # refused after its check, by the job's state
            with pytest.raises(QueryRefusedError, match="expected step 0"):
                site.answer(_out_of_order_query(f"s{i}"), 1)
        elif i % 3 == 2:  # refused at its check: over the cap
            with pytest.raises(BudgetExceededError):
                site.answer(_linear_query(f"b{i}", 1.0), 1)
        else:  # reserved, then the kernel is interrupted
            with pytest.raises(KeyboardInterrupt):
                site.answer(_linear_query(f"q{i}"), 1)
    assert site.ledger.outstanding_reservations() == 0 and _reserved_rows(site.ledger) == 0
    monkeypatch.setattr(kernel_class, "compute", real_compute)
    site.answer(_linear_query("last"), 1)
    assert [c.query_id for c in site.ledger.charges()] == ["last"]


def _policy() -> SitePolicy:
    return SitePolicy("st-mary", 1.0, 0.0, adjacency="add_remove_one")


COSTLY = LaplaceMechanism(1.0, 1.25, AR)  # epsilon 0.8 of a cap of 1


def test_a_reservation_holds_across_ledger_objects_and_blocks_direct_charges(tmp_path):
    db = tmp_path / "ledger.db"
    with PrivacyLedger(db, _policy(), create=True) as first, PrivacyLedger(db, _policy()) as other:
        with first.reservation("job", "q1", COSTLY) as checked:
            with pytest.raises(BudgetExceededError, match="reserved"):
                other.check_charge("job", "q2", COSTLY)
            with pytest.raises(BudgetExceededError, match="reserved"):
                other.charge("job", "q3", COSTLY)
            first.charge("job", "q1", COSTLY, checked=checked)
        assert [c.query_id for c in other.charges()] == ["q1"]
        assert _reserved_rows(other) == 0


def test_closing_a_ledger_releases_what_it_reserved(tmp_path):
    db = tmp_path / "ledger.db"
    with PrivacyLedger(db, _policy(), create=True) as other:
        first = PrivacyLedger(db, _policy())
        first.check_charge("job", "q1", COSTLY)  # never charged nor released
        with pytest.raises(BudgetExceededError):
            other.check_charge("job", "q2", COSTLY)
        first.close()
        other.charge("job", "q2", COSTLY)


_RESERVING_PROCESS = textwrap.dedent("""
    import os, sys
    from privadapt.client.ledger.privacy_ledger import PrivacyLedger
    from privadapt.client.policy import SitePolicy
    from privadapt.common.mechanisms import Adjacency, LaplaceMechanism
    ledger = PrivacyLedger(sys.argv[1], SitePolicy("st-mary", 1.0, 0.0, adjacency="add_remove_one"))
    ledger.check_charge("job", "held", LaplaceMechanism(1.0, 1.25, Adjacency.ADD_REMOVE_ONE))
    print("reserved", flush=True)
    sys.stdin.readline()
    os._exit(0)  # a crash: nothing is released, the reservation row stays
""")


def test_a_live_process_reservation_blocks_and_a_crashed_one_is_released(tmp_path):
    db = tmp_path / "ledger.db"
    PrivacyLedger(db, _policy(), create=True).close()
    child = subprocess.Popen([sys.executable, "-c", _RESERVING_PROCESS, str(db)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "reserved"
        with PrivacyLedger(db, _policy()) as ledger:
            with pytest.raises(BudgetExceededError, match="reserved"):
                ledger.check_charge("job", "q1", COSTLY)
            child.stdin.write("\n")
            child.stdin.flush()
            child.wait(30)
            assert _reserved_rows(ledger) == 1  # the crash left its row
            with ledger.reservation("job", "q1", COSTLY) as checked:  # dropped as dead
                ledger.charge("job", "q1", COSTLY, checked=checked)
            assert _reserved_rows(ledger) == 0
    finally:
        child.kill()
        child.wait()
    assert list(owners_directory(db).iterdir()) == []


def test_a_ledger_opened_for_writing_holds_its_owner_lock_before_its_first_check(tmp_path):
    db = tmp_path / "ledger.db"
    with PrivacyLedger(db, _policy(), create=True) as ledger:
        (owner,) = owners_directory(db).iterdir()
        assert owner_alive(db, owner.name)  # held by the open ledger, no query yet
        with ledger.reservation("job", "q1", COSTLY) as checked:
            assert list(owners_directory(db).iterdir()) == [owner]
            ledger.charge("job", "q1", COSTLY, checked=checked)
    assert list(owners_directory(db).iterdir()) == []


def test_an_open_for_writing_remakes_a_missing_owners_directory_and_a_reader_makes_none(
        tmp_path):
    db = tmp_path / "ledger.db"
    PrivacyLedger(db, _policy(), create=True).close()
    owners_directory(db).rmdir()
    PrivacyLedger.open_readonly(db).close()
    assert not owners_directory(db).exists()
    with PrivacyLedger(db, _policy()) as ledger:
        assert len(list(owners_directory(db).iterdir())) == 1
        with ledger.reservation("job", "q1", COSTLY) as checked:
            ledger.charge("job", "q1", COSTLY, checked=checked)


def test_an_owners_directory_that_cannot_be_made_is_a_config_error_naming_it(tmp_path):
    db = tmp_path / "ledger.db"
    PrivacyLedger(db, _policy(), create=True).close()
    owners_directory(db).rmdir()
    owners_directory(db).write_text("not a directory")
    with pytest.raises(ConfigError, match=r"owner file in .*ledger\.db\.owners"):
        PrivacyLedger(db, _policy())


def test_a_closed_ledger_asked_to_check_does_not_bring_its_reservations_back(tmp_path):
    """A ledger closed with a reservation outstanding (its query's thread
    still running) has released it; a check on it afterwards is refused, and
    must not take its owner lock again, which would make the reservation it
    left live once more, blocking every other ledger's budget until the
    process ends."""
    db = tmp_path / "ledger.db"
    with PrivacyLedger(db, _policy(), create=True) as other:
        first = PrivacyLedger(db, _policy())
        first.check_charge("job", "q1", COSTLY)  # its query still runs as it closes
        first.close()
        with pytest.raises(RuntimeError, match="closed"):
            first.check_charge("job", "q2", COSTLY)
        other.charge("job", "q3", COSTLY)


def test_a_reservation_holds_for_a_ledger_opened_by_another_path_to_the_same_file(tmp_path):
    """Two processes may name the site's ledger differently (one through a
    symlink): the reservation of one is live for the other, not taken for a
    dead owner's and dropped, which let a second query through its check to
    be refused only at its charge, after its kernel ran."""
    db = tmp_path / "real" / "ledger.db"
    db.parent.mkdir()
    PrivacyLedger(db, _policy(), create=True).close()
    (tmp_path / "site.db").symlink_to(db)
    first, other = PrivacyLedger(tmp_path / "site.db", _policy()), PrivacyLedger(db, _policy())
    with first, other, first.reservation("job", "q1", COSTLY), \
            pytest.raises(BudgetExceededError, match="reserved"):
        other.check_charge("job", "q2", COSTLY)
