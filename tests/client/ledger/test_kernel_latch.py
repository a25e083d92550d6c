"""A kernel latched off after a failed floating-point certificate stays latched
across restarts (a refusal that depends on the data is one bit, and a
restart must not re-arm it): the latch is committed in the ledger before the
refusal leaves, survives a crash in between, is refused before anything is
admitted, reserved, charged or read, in the same words for every latched
kernel and every run; a ledger from schema 3 is upgraded; the operator sees
the latch and clears it with ``privadapt ledger clear-latch``.

A hostile coordinator must not get more than that bit per kernel per
clearing: not by queries in flight together on one ledger, not when the
latch cannot be written, and not when the latch cannot be read."""

from __future__ import annotations

import contextlib
import io
import json
import math
import sqlite3
import threading

import numpy as np
import pytest

from privadapt.cli.main import main
from privadapt.client.daemon.round_progress import RoundProgress
from privadapt.client.daemon.worker import SiteIdentity, SiteWorker
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
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.secure import certs
from privadapt.common.wire.messages import query_to_proto
from tests.client.daemon.test_site_worker import Calls

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
    # The latch is armed, and committed, before the kernel reads a record: a
    # process that dies during the certificate leaves it set.
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
    """Turn a ledger into the file schema 3 wrote (no latch table, no counts)."""
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TABLE kernel_latches")
        conn.execute("DROP TABLE certificate_counts")
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
        assert read_only.certificates_run(EXACT) == 0
    # A site opening it upgrades it: every charge kept, the chain still verifies.
    reopened = open_site(db)
    assert [c.query_id for c in reopened.ledger.charges()] == ["q-1", "q-2"]
    assert "2 charges" in reopened.ledger.verify()
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'"
                            ).fetchone() == ("6",)
    conn.close()
    assert reopened.ledger.certificates_run(EXACT) == 0
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


# ------------------------------------------------- queries in flight together
# The certificate failure is simulated by a ``compute`` that fails when a
# coordinator-chosen condition holds on the private data: exactly the threat
# the latch exists for. Two site processes on one ledger (which the ledger
# supports) once both passed the latch check, both ran the certificate, and
# each outcome was its own data-dependent bit.

EXACT_KERNEL = get_kernel(EXACT)
HONEST_COMPUTE = type(EXACT_KERNEL).compute


def radius_params(radius: float) -> dict:
    # The radius is the coordinator's "which bit" selector in the simulation.
    return {"feature_norm": 1.0, "label_bound": 1.0, "radius": radius,
            "public_moments": np.eye(DIM + 1) * 0.1}


def radius_query(query_id: str, radius: float) -> Query:
    typed = EXACT_KERNEL.Params.from_wire(radius_params(radius), DIM)
    mechanism = EXACT_KERNEL.mechanism(typed, math.inf, Adjacency.REPLACE_ONE, dim=DIM)
    return Query("job", query_id, EXACT, radius_params(radius), mechanism, fractional_bits=48)


def secret_dataset(secret_bits: tuple[bool, bool]) -> Dataset:
    """Records whose first two labels carry two private bits."""
    labels = np.zeros(NUM)
    labels[0], labels[1] = float(secret_bits[0]), float(secret_bits[1])
    features = np.random.default_rng(1).normal(size=(NUM, DIM)) * 0.2
    return Dataset(features, labels, NAMES)


def data_dependent_certificate(monkeypatch, barrier: threading.Barrier | None,
                               failures: list) -> None:
    """The certificate of the query with radius 1 + i fails iff label i of the
    private data is 1 (a stand-in for a numerical library whose accuracy the
    coordinator's params steer onto a record). With a barrier, every query
    reaches the certificate before any of them ends (two processes in flight)."""

    def compute(self, data, typed, state):
        if barrier is not None:
            # A site that serialises the certificates breaks the barrier: go on.
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait()
        index = round(typed.radius) - 1
        if data.labels[index] == 1.0:
            failures.append(index)
            raise UncertifiedComputationError("simulated: the certificate's width is too large")
        return HONEST_COMPUTE(self, data, typed, state)

    monkeypatch.setattr(type(EXACT_KERNEL), "compute", compute)


def concurrent_outcomes(tmp_path, monkeypatch, secret: tuple[bool, bool], tag: str
                        ) -> tuple[tuple[str, str], list]:
    """Two site processes (two Site objects, each with its own ledger
    connection) on one ledger, each answering one query at the same time."""
    db = tmp_path / f"{tag}.db"
    PrivacyLedger(db, policy(), create=True).close()
    data = secret_dataset(secret)
    sites = [Site(data, policy(), PrivacyLedger(db, policy())) for _ in range(2)]
    barrier = threading.Barrier(2, timeout=3.0)
    failures: list = []
    outcomes = ["", ""]
    with monkeypatch.context() as patch:
        data_dependent_certificate(patch, barrier, failures)

        def run(index: int) -> None:
            try:
                sites[index].answer(radius_query(f"q-{index}", 1.0 + index), 1)
                outcomes[index] = "answered"
            except QueryRefusedError:
                outcomes[index] = "refused"

        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    for each in sites:
        each.ledger.close()
    return (outcomes[0], outcomes[1]), failures


def test_concurrent_queries_on_one_ledger_reach_at_most_one_failing_certificate(
        tmp_path, monkeypatch):
    _, failures = concurrent_outcomes(tmp_path, monkeypatch, (True, True), "both")
    assert len(failures) <= 1, (
        f"{len(failures)} data-dependent certificate failures were reached on one latch")


def test_two_concurrent_queries_give_at_most_three_outcomes(tmp_path, monkeypatch):
    # The armed latch serialises the certificates, so what leaks is where the
    # first failure falls among them: with Q queries at most Q + 1 outcomes
    # (client/ledger/latches.py), not one per query (four datasets, four
    # outcome pairs, both private bits read off one round).
    seen = {}
    for number, secret in enumerate(((False, False), (True, False), (False, True),
                                     (True, True))):
        outcome, _ = concurrent_outcomes(tmp_path, monkeypatch, secret, f"s{number}")
        seen[secret] = outcome
    distinct = len(set(seen.values()))
    assert distinct <= 3, f"{distinct} distinguishable outcomes (both bits): {seen}"


# ------------------------------------------------- a latch that cannot be written


def locked_latch(self, kernel, job_id, query_id):
    raise sqlite3.OperationalError("database is locked")


def test_a_latch_that_cannot_be_written_still_stops_the_next_certificate(tmp_path,
                                                                         monkeypatch):
    # The first failure must not escape unlatched (the worker would send an
    # INTERNAL refusal: the bit is out) and leave the next query to run the
    # certificate again: another data-dependent bit.
    db = tmp_path / "site.db"
    site = Site(secret_dataset((True, True)), policy(), PrivacyLedger(db, policy(), create=True))
    failures: list = []
    data_dependent_certificate(monkeypatch, None, failures)
    monkeypatch.setattr(PrivacyLedger, "latch_kernel", locked_latch)
    for index in range(2):
        with pytest.raises((QueryRefusedError, sqlite3.OperationalError)):
            site.answer(radius_query(f"q-{index}", 1.0 + index), 1)
    assert len(failures) <= 1, (
        f"the certificate ran and failed {len(failures)} times with no latch stored")


def test_the_worker_sends_no_refusal_without_a_stored_latch(make_site, tmp_path, monkeypatch):
    # A refusal ("no share", against a share on the neighbour) is the bit:
    # the daemon's worker must not send one for a failure nothing latched.
    certs.init_ca(tmp_path / "pki")
    certs.issue_certificate(tmp_path / "pki", "site", "site-a")
    site = make_site(name="site-a", num_records=NUM, dim=DIM, epsilon_cap=math.inf)
    identity = SiteIdentity("site-a", (tmp_path / "pki" / "site-a.crt").read_bytes(),
                            certs.load_private_key(tmp_path / "pki" / "site-a.key"),
                            (tmp_path / "pki" / "ca.crt").read_bytes())
    worker = SiteWorker(site, identity, RoundProgress(site.ledger.path))

    def always_fails(self, data, typed, state):
        raise UncertifiedComputationError("simulated")

    monkeypatch.setattr(type(EXACT_KERNEL), "compute", always_fails)
    monkeypatch.setattr(PrivacyLedger, "latch_kernel", locked_latch)
    calls = Calls()
    sent = radius_query("q-w", 1.0)
    worker.handle(pb.WorkItem(round_announcement=pb.RoundAnnouncement(
        job_id="job", round=1, query_id="q-w", query=query_to_proto(sent, 1),
        fractional_bits=sent.fractional_bits)), calls)
    key = calls.only("key")
    worker.handle(pb.WorkItem(roster=pb.Roster(job_id="job", round=1, query_id="q-w",
                                               keys=[key])), calls)
    refusals = [request for kind, request in calls.sent if kind == "refusal"]
    assert site.ledger.active_latch(EXACT) is not None or not refusals, (
        f"a refusal ({[pb.Refusal.Reason.Name(r.reason) for r in refusals]}) left the site "
        "with no latch stored")


# ------------------------------------------------- a latch that cannot be read
# A site always opens its ledger for charging, which creates the latch table,
# so an OperationalError on its lookup means the database is failing (an I/O
# error, a busy WAL recovery, a table dropped under it). Answering "not
# latched" then would run the latched kernel's certificate again on the
# private data: the lookup fails closed.

FAIL_OPEN_DIM = 2
FAIL_OPEN_PARAMS = {"feature_norm": 1.0, "label_bound": 1.0, "radius": 1.0,
                    "public_moments": np.eye(FAIL_OPEN_DIM + 1) * 0.1}


class FailingLatchReads:
    """A ledger connection whose reads of ``kernel_latches`` fail (I/O)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def execute(self, sql: str, *args):
        if "kernel_latches" in sql and sql.lstrip().upper().startswith("SELECT"):
            raise sqlite3.OperationalError("disk I/O error")
        return self._conn.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self._conn, name)


def test_a_failing_latch_lookup_does_not_rerun_the_certificate(tmp_path, monkeypatch):
    small = SitePolicy("s", math.inf, 1e-5, adjacency=Adjacency.REPLACE_ONE,
                       allow_non_private=True, max_records=8)
    data = Dataset(np.full((4, FAIL_OPEN_DIM), 0.3), np.zeros(4), ("a", "b"))
    site = Site(data, small, PrivacyLedger(tmp_path / "site.db", small, create=True))
    mechanism = EXACT_KERNEL.mechanism(
        EXACT_KERNEL.Params.from_wire(FAIL_OPEN_PARAMS, FAIL_OPEN_DIM), math.inf,
        Adjacency.REPLACE_ONE, dim=FAIL_OPEN_DIM)
    runs = []

    def failing_certificate(self, records, typed, state):
        runs.append(1)
        raise UncertifiedComputationError("simulated")

    monkeypatch.setattr(type(EXACT_KERNEL), "compute", failing_certificate)
    with pytest.raises(QueryRefusedError):
        site.answer(Query("job", "q-1", EXACT, FAIL_OPEN_PARAMS, mechanism,
                          fractional_bits=48), 1)
    assert site.ledger.active_latch(EXACT) is not None and runs == [1]
    honest = site.ledger._connection
    monkeypatch.setattr(site.ledger, "_connection", lambda: FailingLatchReads(honest()))
    # The insert's own lookup must not fail open either (the unique index
    # would then refuse a second row with an IntegrityError).
    with pytest.raises(Exception) as raised:  # any exit: what ran matters
        site.answer(Query("job", "q-2", EXACT, FAIL_OPEN_PARAMS, mechanism,
                          fractional_bits=48), 1)
    assert runs == [1], (f"the latched kernel's certificate ran again on the private data "
                         f"(and {type(raised.value).__name__} escaped)")
