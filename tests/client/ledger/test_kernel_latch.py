"""A kernel latched off after a failed floating-point certificate stays latched
across restarts (issue 17: a refusal that depends on the data is one bit,
and a restart must not re-arm it): the latch is committed in the ledger
before the refusal leaves, survives a crash in between, is refused before
anything is admitted, reserved, charged or read, in the same words for every
latched kernel and every run; a ledger from schema 3 is upgraded; the
operator sees the latch and clears it with ``privadapt ledger clear-latch``."""

from __future__ import annotations

import io
import json
import math
import sqlite3

import numpy as np
import pytest

from privadapt.cli.main import main
from privadapt.client.ledger import latches as ledger_latches
from privadapt.client.ledger.cli import show_ledger
from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.ledger.report import write_report
from privadapt.client.policy import SitePolicy
from privadapt.client.site import DISABLED_KERNEL_REASON, Site
from privadapt.common.data.dataset import Dataset
from privadapt.common.errors import ConfigError, QueryRefusedError, UncertifiedComputationError
from privadapt.common.federation import Query
from privadapt.common.kernels import get_kernel
from privadapt.common.mechanisms import Adjacency

DIM, NUM = 3, 10
NAMES = tuple(f"x{i}" for i in range(DIM))
DATA = Dataset(np.random.default_rng(3).normal(size=(NUM, DIM)) * 0.3,
               np.linspace(-1, 1, NUM), NAMES)
EXACT = "exact_discrepancy"
MOMENTS = "second_moments"


def policy() -> SitePolicy:
    return SitePolicy("s", math.inf, 1e-5, adjacency=Adjacency.REPLACE_ONE,
                      allow_non_private=True, max_records=2 * NUM)


def open_site(db, create: bool = False) -> Site:
    return Site(DATA, policy(), PrivacyLedger(db, policy(), create=create))


def params_of(kernel: str) -> dict:
    if kernel == EXACT:
        public = np.eye(DIM + 1) * 0.1
        return {"feature_norm": 1.0, "label_bound": 1.0, "radius": 3.0,
                "public_moments": public}
    return {"feature_norm": 1.0, "label_bound": 1.0}


def query(kernel: str, query_id: str, job: str = "job") -> Query:
    found = get_kernel(kernel)
    params = params_of(kernel)
    mechanism = found.mechanism(found.Params.from_wire(params, DIM), math.inf,
                                Adjacency.REPLACE_ONE, dim=DIM)
    return Query(job, query_id, kernel, params, mechanism, fractional_bits=48)


def fail_certificate(monkeypatch, kernel: str) -> None:
    """``kernel``'s certificate fails on every query (as if LAPACK broke its
    documented accuracy; tests/client/test_exact_discrepancy_certificate.py corrupts it
    for real)."""
    def uncertified(self, data, params, state):
        raise UncertifiedComputationError(f"{kernel}: certified error 1e-3 exceeds 1e-12")

    monkeypatch.setattr(type(get_kernel(kernel)), "compute", uncertified)


def reason(refused: pytest.ExceptionInfo) -> str:
    """The words after the refusal's prefix (site, query, job and kernel)."""
    return str(refused.value).split("): ", 1)[1]


def refuse(site: Site, kernel: str, query_id: str) -> str:
    with pytest.raises(QueryRefusedError) as refused:
        site.answer(query(kernel, query_id), 1)
    assert reason(refused) == DISABLED_KERNEL_REASON
    return str(refused.value)


def latch(db, monkeypatch, kernel: str = EXACT) -> str:
    """A site on ``db`` whose ``kernel`` fails its certificate once; its
    refusal, and the ledger closed (the site process ends)."""
    site = open_site(db, create=not db.exists())
    with monkeypatch.context() as patch:
        fail_certificate(patch, kernel)
        words = refuse(site, kernel, "q-fail")
    site.ledger.close()
    return words


def test_the_latch_survives_a_restart_with_the_same_words_and_no_charge(tmp_path, monkeypatch):
    db = tmp_path / "site.db"
    first = latch(db, monkeypatch)
    restarted = open_site(db)  # a new process: honest libraries, the same ledger
    assert restarted.disabled_kernels == {EXACT}
    again = refuse(restarted, EXACT, "q-fail")  # the same query id: the same message
    assert again == first
    refuse(restarted, EXACT, "q-later")
    assert restarted.ledger.charges() == []  # nothing charged, nothing reserved
    assert restarted.ledger.outstanding_reservations() == 0
    # Other kernels still answer, and are charged.
    assert restarted.answer(query(MOMENTS, "q-other"), 1).blocks
    assert [c.kernel for c in restarted.ledger.charges()] == [MOMENTS]


def test_a_crash_during_the_certificate_keeps_the_latch(tmp_path, monkeypatch):
    # The latch is armed, and committed, before the kernel reads a record
    # (review 10a): a process that dies during the certificate leaves it set.
    db = tmp_path / "site.db"
    site = open_site(db, create=True)
    committed = []

    class Crash(BaseException):
        """The process dies inside the certificate."""

    def crash_inside(self, data, typed, state):
        # Another connection sees the armed row: committed, not only written.
        with sqlite3.connect(db) as other:
            committed.extend(other.execute(
                "SELECT kernel, outcome FROM kernel_latches").fetchall())
        other.close()
        raise Crash

    monkeypatch.setattr(type(get_kernel(EXACT)), "compute", crash_inside)
    with pytest.raises(Crash):  # no reply left the site
        site.answer(query(EXACT, "q-1"), 1)
    assert committed == [(EXACT, "running")]
    monkeypatch.undo()
    refuse(open_site(db), EXACT, "q-2")
    (held,) = open_site(db).ledger.latches()
    assert held.active and held.outcome == "running"


def test_a_latch_that_cannot_be_armed_stops_the_query_before_the_kernel(tmp_path,
                                                                        monkeypatch):
    # A full disk: the query fails before any record reaches the kernel, so
    # the failure depends on the storage, never on the data.
    site = open_site(tmp_path / "site.db", create=True)
    ran = []

    def disk_full(self, kernel, job_id, query_id):
        raise sqlite3.OperationalError("database or disk is full")

    def compute(self, data, typed, state):
        ran.append(1)
        raise UncertifiedComputationError("simulated")

    monkeypatch.setattr(PrivacyLedger, "arm_certificate", disk_full)
    monkeypatch.setattr(type(get_kernel(EXACT)), "compute", compute)
    for number in range(2):
        with pytest.raises(sqlite3.OperationalError):
            site.answer(query(EXACT, f"q-{number}"), 1)
    assert ran == [] and site.ledger.charges() == []


def test_a_passing_certificate_unarms_and_any_other_error_keeps_the_latch(tmp_path,
                                                                           monkeypatch):
    db = tmp_path / "site.db"
    site = open_site(db, create=True)
    assert site.answer(query(EXACT, "q-1"), 1).blocks
    assert site.ledger.latches() == [] and site.disabled_kernels == frozenset()

    def unexpected(self, data, typed, state):
        raise ValueError("a kernel error no one planned for")

    monkeypatch.setattr(type(get_kernel(EXACT)), "compute", unexpected)
    with pytest.raises(ValueError):
        site.answer(query(EXACT, "q-2"), 1)
    monkeypatch.undo()
    refuse(site, EXACT, "q-3")  # an unexplained exit may have told something: off
    assert [c.kernel for c in site.ledger.charges()] == [EXACT]


def test_a_latched_kernel_is_refused_before_anything_else(tmp_path, monkeypatch):
    db = tmp_path / "site.db"
    latch(db, monkeypatch)
    site = open_site(db)

    def untouchable(*args, **kwargs):
        raise AssertionError("reached after the latch")

    monkeypatch.setattr(site._admission, "admit", untouchable)
    monkeypatch.setattr(site.ledger, "check_charge", untouchable)
    monkeypatch.setattr(site.ledger, "charge", untouchable)
    monkeypatch.setattr(site._splitter, "records", untouchable)
    monkeypatch.setattr(type(get_kernel(EXACT)), "compute", untouchable)
    refuse(site, EXACT, "q-2")
    # Even a query the admission would refuse is refused in the latch's words.
    broken = Query("job", "q-3", EXACT, {"radius": -1.0}, query(EXACT, "x").mechanism)
    with pytest.raises(QueryRefusedError) as refused:
        site.answer(broken, 1)
    assert reason(refused) == DISABLED_KERNEL_REASON


def test_the_words_are_the_same_for_every_latched_kernel_and_run(tmp_path, monkeypatch):
    db = tmp_path / "site.db"
    now_exact = latch(db, monkeypatch, EXACT)
    now_moments = latch(db, monkeypatch, MOMENTS)
    site = open_site(db)
    assert site.disabled_kernels == {EXACT, MOMENTS}
    later_exact, later_moments = refuse(site, EXACT, "q-fail"), refuse(site, MOMENTS, "q-fail")
    assert now_exact == later_exact and now_moments == later_moments
    assert now_exact.replace(EXACT, MOMENTS) == now_moments
    assert not any(character.isdigit() for character in DISABLED_KERNEL_REASON)


def test_a_latched_kernel_is_refused_alike_on_neighbouring_datasets(tmp_path, monkeypatch):
    # The latch is the one bit already out; what the site says afterwards
    # reads no record, so neighbours (replace-one, add/remove) say the same.
    extreme = Dataset(np.vstack([DATA.features, np.full(DIM, 1e6)]),
                      np.append(DATA.labels, 7.0), NAMES)
    replaced = Dataset(extreme.features[1:], extreme.labels[1:], NAMES)
    messages = set()
    for index, data in enumerate((DATA, extreme, replaced)):
        db = tmp_path / f"site-{index}.db"
        latch(db, monkeypatch)
        site = Site(data, policy(), PrivacyLedger(db, policy()))
        messages.add(refuse(site, EXACT, "q-later"))
        assert site.ledger.charges() == []
    assert len(messages) == 1


def test_a_latch_set_by_another_process_is_seen_at_the_next_query(tmp_path, monkeypatch):
    db = tmp_path / "site.db"
    running = open_site(db, create=True)  # opened before the latch exists
    assert running.answer(query(EXACT, "q-0"), 1).blocks
    latch(db, monkeypatch)  # another site process on the same ledger
    refuse(running, EXACT, "q-1")


def test_the_lookup_reads_the_index_not_the_history(tmp_path, monkeypatch):
    db = tmp_path / "site.db"
    latch(db, monkeypatch)
    with sqlite3.connect(db) as conn:
        plan = " ".join(str(row) for row in conn.execute(
            "EXPLAIN QUERY PLAN SELECT kernel FROM kernel_latches "
            "WHERE kernel = ? AND cleared_at IS NULL", (EXACT,)))
    conn.close()
    assert "kernel_latches_active" in plan


def _as_schema_3(db) -> None:
    """Turn a ledger into the file schema 3 wrote (no latch table)."""
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TABLE kernel_latches")
        conn.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    conn.close()


def test_a_schema_3_ledger_is_read_and_upgraded_without_loss(tmp_path, monkeypatch):
    db = tmp_path / "site.db"
    site = open_site(db, create=True)
    site.answer(query(MOMENTS, "q-1"), 1)
    site.answer(query(EXACT, "q-2"), 1)
    site.ledger.close()
    _as_schema_3(db)
    # Read-only (ledger show): nothing upgraded, no latches, the chain verifies.
    out = io.StringIO()
    assert show_ledger(db, out=out, as_json=True) == 0
    document = json.loads(out.getvalue())
    assert document["latched_kernels"] == [] and document["total"]["charges"] == 2
    with PrivacyLedger.open_readonly(db) as read_only:
        assert read_only.latches() == [] and read_only.active_latch(EXACT) is None
    # A site opening it upgrades it: every charge kept, the chain still verifies.
    reopened = open_site(db)
    assert [c.query_id for c in reopened.ledger.charges()] == ["q-1", "q-2"]
    assert "2 charges" in reopened.ledger.verify()
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'"
                            ).fetchone() == ("4",)
    conn.close()
    reopened.ledger.close()
    latch(db, monkeypatch)
    assert open_site(db).disabled_kernels == {EXACT}


def test_show_and_report_list_the_latch_with_its_time(tmp_path, monkeypatch):
    db = tmp_path / "site.db"
    latch(db, monkeypatch)
    out = io.StringIO()
    assert show_ledger(db, out=out) == 0
    text = out.getvalue()
    assert "latched kernels" in text
    (line,) = [each for each in text.splitlines() if each.strip().startswith(EXACT)]
    assert "latched 20" in line and "'q-fail'" in line  # the time (UTC) and the query
    out = io.StringIO()
    assert show_ledger(db, out=out, as_json=True) == 0
    (held,) = json.loads(out.getvalue())["latched_kernels"]
    assert held["kernel"] == EXACT and held["cleared_at"] is None and held["latched_at"] > 0
    page = tmp_path / "report.html"
    assert write_report(db, page) == 0
    html = page.read_text()
    assert "Latched kernels" in html and 'data-active="true"' in html
    assert f'<td class="kernel">{EXACT}</td>' in html


def test_the_report_escapes_the_coordinator_ids_of_a_latch(tmp_path, monkeypatch):
    db = tmp_path / "site.db"
    with PrivacyLedger(db, policy(), create=True) as ledger:
        ledger.latch_kernel(EXACT, "<script>job</script>", "<b>q</b>")
    page = tmp_path / "report.html"
    assert write_report(db, page) == 0
    html = page.read_text()
    assert "<script>" not in html and "&lt;b&gt;q&lt;/b&gt;" in html


def test_the_operator_clears_a_latch_and_the_kernel_answers_again(tmp_path, monkeypatch,
                                                                  capsys):
    db = tmp_path / "site.db"
    latch(db, monkeypatch)
    running = open_site(db)
    refuse(running, EXACT, "q-1")
    assert main(["ledger", "clear-latch", "--site-db", str(db), "--kernel", EXACT]) == 0
    said = capsys.readouterr().out
    assert "cleared the latch" in said and "one more bit" in said
    # The running site answers from its next query on, and so does a restart.
    assert running.answer(query(EXACT, "q-2"), 1).blocks
    assert open_site(db).answer(query(EXACT, "q-3"), 1).blocks
    # Still listed, as cleared: the bit it released stays on record.
    with PrivacyLedger.open_readonly(db) as ledger:
        (cleared,) = ledger.latches()
    assert cleared.kernel == EXACT and cleared.cleared_at is not None
    out = io.StringIO()
    assert show_ledger(db, out=out) == 0
    assert "cleared latches" in out.getvalue()
    # It can latch again (one more bit), and be cleared again.
    latch(db, monkeypatch)
    assert main(["ledger", "clear-latch", "--site-db", str(db), "--kernel", EXACT]) == 0
    with PrivacyLedger.open_readonly(db) as ledger:
        assert [each.active for each in ledger.latches()] == [False, False]


def test_clearing_what_is_not_latched_changes_nothing(tmp_path, monkeypatch, capsys):
    db = tmp_path / "site.db"
    latch(db, monkeypatch)
    capsys.readouterr()
    assert main(["ledger", "clear-latch", "--site-db", str(db), "--kernel", MOMENTS]) == 2
    err = capsys.readouterr().err
    assert "not latched" in err and EXACT in err
    assert open_site(db).disabled_kernels == {EXACT}
    assert main(["ledger", "clear-latch", "--site-db", str(tmp_path / "none.db"),
                 "--kernel", EXACT]) == 2
    assert not (tmp_path / "none.db").exists()
    with PrivacyLedger.open_readonly(db) as ledger, pytest.raises(RuntimeError):
        ledger.clear_latch(EXACT)


def test_an_altered_ledger_is_not_cleared(tmp_path, monkeypatch, capsys):
    db = tmp_path / "site.db"
    site = open_site(db, create=True)
    site.answer(query(MOMENTS, "q-1"), 1)
    site.ledger.close()
    latch(db, monkeypatch)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE charges SET query_id = 'forged'")
    conn.close()
    assert main(["ledger", "clear-latch", "--site-db", str(db), "--kernel", EXACT]) == 2
    assert "corrupted or edited" in capsys.readouterr().err
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT cleared_at FROM kernel_latches").fetchall() == [(None,)]
    conn.close()


def test_the_help_says_clearing_releases_one_more_bit(capsys):
    with pytest.raises(SystemExit):
        main(["ledger", "clear-latch", "--help"])
    assert "one more bit" in " ".join(capsys.readouterr().out.split())
    with pytest.raises(SystemExit):
        main(["ledger", "--help"])
    assert "one more bit" in " ".join(capsys.readouterr().out.split())


def test_latches_module_refuses_a_second_active_row(tmp_path):
    db = tmp_path / "site.db"
    with PrivacyLedger(db, policy(), create=True) as ledger:
        first = ledger.latch_kernel(EXACT, "job", "q-1")
        assert ledger.latch_kernel(EXACT, "job", "q-2") == first  # already latched
    with sqlite3.connect(db) as conn, pytest.raises(sqlite3.IntegrityError):
        conn.execute("INSERT INTO kernel_latches (kernel, latched_at, job_id, query_id) "
                     "VALUES (?, 1.0, 'j', 'q')", (EXACT,))
    conn.close()
    with PrivacyLedger.open_readonly(db) as ledger:
        assert ledger.latches() == [first]
    assert isinstance(first, ledger_latches.KernelLatch)
    with pytest.raises(ConfigError):
        PrivacyLedger.open_for_operator(tmp_path / "missing.db")
