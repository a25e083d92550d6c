"""CoordinatorStore: everything a restarted coordinator needs is on disk once a
method returns, arrays come back bit for bit, and the audit log only grows."""

from __future__ import annotations

import math
import shutil
import sqlite3
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from privadapt.common.errors import ConfigError
from privadapt.server.store import (
    FINISHED_STATES,
    CoordinatorStore,
    RoundRecord,
    StoredAnswer,
)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "coordinator.db"


@pytest.fixture
def store(db: Path) -> Iterator[CoordinatorStore]:
    with CoordinatorStore(db) as opened:
        yield opened


def a_round(job_id: str = "job-1", rnd: int = 1, step: int = 1, aborted: bool = False,
            reason: str = "") -> RoundRecord:
    return RoundRecord(job_id, rnd, step, f"q-{step}", ("st-mary", "st-paul"), 10.0, 12.5,
                       aborted, reason, 0.25 * rnd)


def an_answer(blocks: tuple[np.ndarray, ...], job_id: str = "job-1", step: int = 1,
              rnd: int = 1) -> StoredAnswer:
    return StoredAnswer(job_id, step, rnd, f"q-{step}", "fp-abc", blocks, ("st-mary", "st-paul"))


def assert_exact(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    assert got.tobytes() == want.tobytes()


ODD_ARRAYS = (
    np.array(3.5),
    np.zeros(0),
    np.array([1e308, -1e-308, 5e-324, np.pi, -0.0]),
    np.arange(12, dtype=np.float64).reshape(3, 4) * (1 / 3),
    np.arange(5, dtype=np.int64) * 2**61,
)


# -- opening -------------------------------------------------------------------


def test_store_file_is_in_wal_mode(store: CoordinatorStore, db: Path) -> None:
    store.audit("opened")
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_store_refuses_a_file_that_is_not_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(b"this is a text file, not a database" * 100)
    with pytest.raises(ConfigError, match="not a usable SQLite database"):
        CoordinatorStore(path)


def test_store_refuses_another_sqlite_database(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    with pytest.raises(ConfigError, match="not a privadapt coordinator store"):
        CoordinatorStore(path)


def test_store_refuses_a_newer_schema(db: Path) -> None:
    CoordinatorStore(db).close()
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(ConfigError, match="schema version 99 is newer"):
        CoordinatorStore(db)


def test_version_1_store_is_upgraded_with_its_rounds_ended(db: Path) -> None:
    with sqlite3.connect(db) as conn:  # the v1 tables a job's rounds need, as v1 wrote them
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.executemany("INSERT INTO meta VALUES (?, ?)",
                         [("kind", "privadapt-coordinator"), ("schema_version", "1")])
        conn.execute("""CREATE TABLE jobs (job_id TEXT PRIMARY KEY, algorithm TEXT NOT NULL,
            spec_json TEXT NOT NULL, seed INTEGER NOT NULL, state TEXT NOT NULL,
            message TEXT NOT NULL, created REAL NOT NULL, updated REAL NOT NULL)""")
        conn.execute("""CREATE TABLE rounds (job_id TEXT NOT NULL REFERENCES jobs (job_id),
            round INTEGER NOT NULL, step INTEGER NOT NULL, query_id TEXT NOT NULL,
            participants TEXT NOT NULL, started REAL NOT NULL, finished REAL NOT NULL,
            aborted INTEGER NOT NULL, abort_reason TEXT NOT NULL, epsilon_so_far REAL,
            PRIMARY KEY (job_id, round))""")
        conn.execute("INSERT INTO jobs VALUES ('job-1', 'noisy_gd', '{}', 0, 'running', '', "
                     "1.0, 1.0)")
        conn.execute("INSERT INTO rounds VALUES ('job-1', 1, 1, 'q-1', '[\"st-mary\", "
                     "\"st-paul\"]', 10.0, 12.5, 1, 'dropout', 0.25)")
        conn.execute("INSERT INTO rounds VALUES ('job-1', 2, 1, 'q-1', '[\"st-mary\", "
                     "\"st-paul\"]', 10.0, 12.5, 0, '', 0.5)")
    with CoordinatorStore(db) as upgraded:
        assert [r.state for r in upgraded.rounds("job-1")] == ["aborted", "answered"]
        # Every round before release forms was a secure sum.
        assert [r.form for r in upgraded.rounds("job-1")] == ["secure_sum"] * 2
        upgraded.start_round(RoundRecord.starting("job-1", 3, 2, "q-2", ("st-mary",), 20.0,
                                                  "per_site"))
        assert upgraded.last_round("job-1") == 3
        assert upgraded.rounds("job-1", include_started=True)[-1].form == "per_site"
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'"
                            ).fetchone() == ("3",)


def test_store_in_a_missing_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot open"):
        CoordinatorStore(tmp_path / "no-such-dir" / "coordinator.db")


def test_closed_store_refuses_use(db: Path) -> None:
    store = CoordinatorStore(db)
    store.close()
    with pytest.raises(RuntimeError, match="closed"):
        store.jobs()


# -- sites -----------------------------------------------------------------------


def test_site_round_trip_keeps_first_seen_on_update(store: CoordinatorStore) -> None:
    store.upsert_site("st-mary", num_records=100, num_features=5, kernels=["grad", "moments"],
                      policy_version="v1", certificate_expiry=2e9, now=100.0)
    store.upsert_site("st-mary", num_records=120, num_features=5, kernels=["grad"],
                      policy_version="v2", certificate_expiry=None, now=200.0)
    store.touch_site("st-mary", now=250.0)
    (site,) = store.sites()
    assert (site.name, site.num_records, site.num_features) == ("st-mary", 120, 5)
    assert site.kernels == ("grad",)
    assert (site.policy_version, site.certificate_expiry) == ("v2", None)
    assert (site.first_seen, site.last_seen) == (100.0, 250.0)


def test_touching_an_unregistered_site_is_refused(store: CoordinatorStore) -> None:
    with pytest.raises(KeyError, match="not registered"):
        store.touch_site("nobody")


# -- jobs ------------------------------------------------------------------------


def test_job_round_trip_in_creation_order(store: CoordinatorStore) -> None:
    first = store.create_job("job-b", "noisy_gd", '{"epsilon": 1.0}', seed=7)
    store.create_job("job-a", "pcnvxadap", "{}", seed=8)
    assert first.state == "pending"
    assert store.job("job-b") == first
    assert [job.job_id for job in store.jobs()] == ["job-b", "job-a"]
    assert store.job("missing") is None


def test_duplicate_job_id_is_refused(store: CoordinatorStore) -> None:
    store.create_job("job-1", "noisy_gd", "{}", seed=1)
    with pytest.raises(ConfigError, match="job 'job-1' already exists"):
        store.create_job("job-1", "noisy_gd", "{}", seed=2)


def test_a_job_that_failed_before_its_first_round_frees_its_id(store: CoordinatorStore) -> None:
    store.create_job("job-1", "noisy_gd", "{}", seed=1)
    assert not store.discard_unstarted_failure("job-1")  # pending: not failed
    store.set_job_state("job-1", "failed", "site 'ghost' never connected")
    assert store.discard_unstarted_failure("job-1")
    assert store.job("job-1") is None
    store.create_job("job-1", "noisy_gd", "{}", seed=2)
    assert store.job("job-1").seed == 2


def test_a_job_that_failed_after_a_round_keeps_its_id(store: CoordinatorStore) -> None:
    store.create_job("job-1", "noisy_gd", "{}", seed=1)
    store.record_round(a_round(aborted=True, reason="site refused"))
    store.set_job_state("job-1", "failed", "site refused")
    assert not store.discard_unstarted_failure("job-1")
    with pytest.raises(ConfigError, match="already exists"):
        store.create_job("job-1", "noisy_gd", "{}", seed=2)


def test_job_state_changes_and_unfinished_jobs(store: CoordinatorStore) -> None:
    for job_id in ("j1", "j2", "j3"):
        store.create_job(job_id, "noisy_gd", "{}", seed=0)
    store.set_job_state("j1", "running")
    store.set_job_state("j2", "running")
    store.set_job_state("j2", "failed", "site 'st-mary' exhausted its budget")
    job = store.job("j2")
    assert job is not None
    assert (job.state, job.message) == ("failed", "site 'st-mary' exhausted its budget")
    assert [job.job_id for job in store.unfinished_jobs()] == ["j1", "j3"]


@pytest.mark.parametrize("finished", FINISHED_STATES)
def test_finished_job_state_is_frozen(store: CoordinatorStore, finished: str) -> None:
    store.create_job("job-1", "noisy_gd", "{}", seed=0)
    store.set_job_state("job-1", finished)
    with pytest.raises(ValueError, match=f"already {finished}"):
        store.set_job_state("job-1", "running")


def test_job_state_errors(store: CoordinatorStore) -> None:
    store.create_job("job-1", "noisy_gd", "{}", seed=0)
    with pytest.raises(ValueError, match="must be one of"):
        store.set_job_state("job-1", "exploded")
    with pytest.raises(KeyError, match="no job 'ghost'"):
        store.set_job_state("ghost", "running")


# -- rounds and answers ------------------------------------------------------------


def test_round_round_trip_and_last_round(store: CoordinatorStore) -> None:
    store.create_job("job-1", "noisy_gd", "{}", seed=0)
    assert store.last_round("job-1") == 0
    aborted = a_round(rnd=1, aborted=True, reason="site 'st-paul' dropped")
    store.record_round(aborted)
    store.record_round(a_round(rnd=2))
    assert store.rounds("job-1") == [aborted, a_round(rnd=2)]
    assert store.last_round("job-1") == 2


def test_aborted_round_with_unknown_epsilon_round_trips(store: CoordinatorStore) -> None:
    store.create_job("job-1", "noisy_gd", "{}", seed=0)
    store.record_round(replace(a_round(aborted=True, reason="timeout"), epsilon_so_far=math.nan))
    (stored,) = store.rounds("job-1")
    assert stored.aborted and stored.abort_reason == "timeout"
    assert math.isnan(stored.epsilon_so_far)


def test_duplicate_round_is_refused(store: CoordinatorStore) -> None:
    store.create_job("job-1", "noisy_gd", "{}", seed=0)
    store.record_round(a_round())
    with pytest.raises(ValueError, match="round 1 of job 'job-1' is already recorded"):
        store.record_round(a_round())


def a_started_round(rnd: int = 1, step: int = 1) -> RoundRecord:
    return RoundRecord.starting("job-1", rnd, step, f"q-{step}", ("st-mary", "st-paul"), 10.0)


def test_round_is_stored_before_it_is_announced_and_completed_when_it_ends(
    store: CoordinatorStore,
) -> None:
    store.create_job("job-1", "noisy_gd", "{}", seed=0)
    store.start_round(a_started_round())
    assert store.last_round("job-1") == 1
    assert store.rounds("job-1") == []  # not listed as ended while in flight
    (in_flight,) = store.rounds("job-1", include_started=True)
    assert in_flight.state == "started" and not in_flight.aborted
    store.record_round(a_round(aborted=True, reason="site 'st-paul' dropped"))
    assert store.rounds("job-1") == [a_round(aborted=True, reason="site 'st-paul' dropped")]
    with pytest.raises(ValueError, match="already recorded"):
        store.record_round(a_round())


def test_answer_completes_its_started_round(store: CoordinatorStore) -> None:
    store.create_job("job-1", "noisy_gd", "{}", seed=0)
    store.start_round(a_started_round())
    store.save_answer(an_answer((np.ones(2),)), a_round())
    assert store.rounds("job-1", include_started=True) == [a_round()]
    assert store.rounds("job-1")[0].state == "answered"


def test_started_round_cannot_end_as_another_step(store: CoordinatorStore) -> None:
    store.create_job("job-1", "noisy_gd", "{}", seed=0)
    store.start_round(a_started_round(step=1))
    with pytest.raises(ValueError, match="was started for step 1"):
        store.record_round(a_round(step=2))
    with pytest.raises(ValueError, match="already recorded"):
        store.start_round(a_started_round())


def test_rounds_left_started_by_a_crash_are_reconciled_as_interrupted(
    store: CoordinatorStore, db: Path,
) -> None:
    store.create_job("job-1", "noisy_gd", "{}", seed=0)
    store.start_round(a_started_round(rnd=1))
    store.save_answer(an_answer((np.ones(2),)), a_round(rnd=1))
    store.start_round(a_started_round(rnd=2, step=2))
    # The coordinator dies here; the next one opens the same file.
    with CoordinatorStore(db) as resumed:
        (interrupted,) = resumed.interrupt_rounds("job-1", "interrupted: crash", now=99.0)
        assert (interrupted.round, interrupted.step, interrupted.state) == (2, 2, "interrupted")
        assert interrupted.aborted and interrupted.abort_reason == "interrupted: crash"
        assert interrupted.finished == 99.0
        assert resumed.rounds("job-1") == [a_round(rnd=1), interrupted]
        assert resumed.interrupt_rounds("job-1", "again") == []
        assert resumed.last_round("job-1") == 2


def test_an_answer_lost_with_its_unsynced_commit_leaves_its_round_interrupted(
    store: CoordinatorStore, db: Path, tmp_path: Path,
) -> None:
    store.create_job("job-1", "noisy_gd", "{}", seed=0)
    store.start_round(a_started_round(rnd=1))
    synced = tmp_path / "at-power-cut"
    synced.mkdir()
    for suffix in ("", "-wal"):
        shutil.copy(db.with_name(db.name + suffix), synced / (db.name + suffix))
    store.save_answer(an_answer((np.ones(2),)), a_round(rnd=1))
    # The next commit syncs the answer with it: the connection syncs fully again.
    assert store._connection().execute("PRAGMA synchronous").fetchone() == (2,)
    # A power cut before the next round's start loses the answer's commit whole.
    with CoordinatorStore(synced / db.name) as resumed:
        assert resumed.answer("job-1", 1) is None
        (interrupted,) = resumed.interrupt_rounds("job-1", "interrupted: power cut")
        assert (interrupted.round, interrupted.step) == (1, 1)


@pytest.mark.parametrize(("aborted", "state"), [(True, "answered"), (False, "interrupted"),
                                                (False, "lost")])
def test_round_state_must_agree_with_aborted(aborted: bool, state: str) -> None:
    with pytest.raises(ValueError, match="round"):
        replace(a_round(), aborted=aborted, state=state)


def test_round_of_unknown_job_is_refused(store: CoordinatorStore) -> None:
    with pytest.raises(KeyError, match="no job 'job-1'"):
        store.record_round(a_round())


def test_answer_arrays_round_trip_exactly(store: CoordinatorStore) -> None:
    store.create_job("job-1", "noisy_gd", "{}", seed=0)
    rng = np.random.default_rng(0)
    blocks = (*ODD_ARRAYS, rng.normal(size=(300, 200)) * 1e12)
    store.save_answer(an_answer(blocks), a_round())
    got = store.answer("job-1", 1)
    assert got is not None
    assert (got.round, got.query_id, got.fingerprint) == (1, "q-1", "fp-abc")
    assert got.participants == ("st-mary", "st-paul")
    assert len(got.blocks) == len(blocks)
    for stored, original in zip(got.blocks, blocks, strict=True):
        assert_exact(stored, original)
    assert store.rounds("job-1") == [a_round()]
    assert store.answer("job-1", 2) is None


def test_duplicate_answer_is_refused_and_its_round_not_recorded(store: CoordinatorStore) -> None:
    store.create_job("job-1", "noisy_gd", "{}", seed=0)
    store.save_answer(an_answer((np.ones(3),)), a_round())
    with pytest.raises(ValueError, match="step 1 of job 'job-1' already has a stored answer"):
        store.save_answer(an_answer((np.zeros(3),), rnd=2), a_round(rnd=2))
    assert store.last_round("job-1") == 1
    stored = store.answer("job-1", 1)
    assert stored is not None
    assert_exact(stored.blocks[0], np.ones(3))


def test_answer_is_stored_with_its_round_or_not_at_all(store: CoordinatorStore) -> None:
    store.create_job("job-1", "noisy_gd", "{}", seed=0)
    store.record_round(a_round(rnd=1, step=1))
    # The answer is new but its round number is taken: neither may be written.
    with pytest.raises(ValueError, match="already recorded"):
        store.save_answer(an_answer((np.ones(2),)), a_round(rnd=1, step=1))
    assert store.answer("job-1", 1) is None


def test_answer_and_round_must_agree(store: CoordinatorStore) -> None:
    store.create_job("job-1", "noisy_gd", "{}", seed=0)
    with pytest.raises(ValueError, match="disagree on round"):
        store.save_answer(an_answer((np.ones(2),), rnd=3), a_round(rnd=4))
    with pytest.raises(ValueError, match="aborted"):
        store.save_answer(an_answer((np.ones(2),)), a_round(aborted=True))


# -- checkpoints and results -------------------------------------------------------


def test_latest_checkpoint_round_trip(store: CoordinatorStore) -> None:
    store.create_job("job-1", "noisy_gd", "{}", seed=0)
    assert store.latest_checkpoint("job-1") is None
    store.save_checkpoint("job-1", 1, {"w": np.ones(4)})
    store.save_checkpoint("job-1", 2, {"w": ODD_ARRAYS[2], "empty": np.zeros(0), "t": 2,
                                       "lr": 0.5})
    latest = store.latest_checkpoint("job-1")
    assert latest is not None
    step, model = latest
    assert step == 2
    assert list(model) == ["w", "empty", "t", "lr"]
    assert_exact(model["w"], ODD_ARRAYS[2])
    assert_exact(model["empty"], np.zeros(0))
    assert model["t"].shape == () and model["t"] == 2
    assert model["lr"].shape == () and model["lr"] == 0.5


@settings(max_examples=40, deadline=None)
@given(
    hnp.arrays(
        dtype=st.sampled_from([np.float64, np.float32, np.int64, np.uint64, np.dtype(">f8")]),
        shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4),
    )
)
def test_any_numeric_array_round_trips_bit_for_bit(array: np.ndarray) -> None:
    with tempfile.TemporaryDirectory() as tmp, CoordinatorStore(Path(tmp) / "c.db") as store:
        store.create_job("job-1", "noisy_gd", "{}", seed=0)
        store.save_checkpoint("job-1", 1, {"x": array})
        latest = store.latest_checkpoint("job-1")
        assert latest is not None
        assert_exact(latest[1]["x"], array)


def test_saving_a_checkpoint_again_replaces_it(store: CoordinatorStore) -> None:
    store.create_job("job-1", "noisy_gd", "{}", seed=0)
    store.save_checkpoint("job-1", 1, {"w": np.ones(4), "b": 1.0})
    store.save_checkpoint("job-1", 1, {"w": np.zeros(2)})
    latest = store.latest_checkpoint("job-1")
    assert latest is not None
    step, model = latest
    assert step == 1 and list(model) == ["w"]
    assert_exact(model["w"], np.zeros(2))


def test_object_arrays_are_refused(store: CoordinatorStore) -> None:
    store.create_job("job-1", "noisy_gd", "{}", seed=0)
    with pytest.raises(ValueError, match="cannot store array 'w' of job 'job-1'"):
        store.save_checkpoint("job-1", 1, {"w": np.array([{"a": 1}], dtype=object)})


def test_result_round_trip_and_final_once_job_finished(store: CoordinatorStore) -> None:
    store.create_job("job-1", "noisy_gd", "{}", seed=0)
    assert store.result("job-1") is None
    store.save_result("job-1", {"w": ODD_ARRAYS[3], "bias": 0.125}, '{"epsilon": 1.0}')
    store.set_job_state("job-1", "succeeded")
    got = store.result("job-1")
    assert got is not None
    model, report = got
    assert report == '{"epsilon": 1.0}'
    assert_exact(model["w"], ODD_ARRAYS[3])
    assert_exact(model["bias"], np.asarray(0.125))
    with pytest.raises(ValueError, match="result is final"):
        store.save_result("job-1", {"w": np.zeros(1)}, "{}")


# -- audit log ---------------------------------------------------------------------


def test_audit_log_round_trip_filtered_by_job(store: CoordinatorStore) -> None:
    store.audit("site_registered", site_name="st-mary", detail="100 records")
    store.audit("job_launched", job_id="job-1")
    store.audit("round_aborted", job_id="job-1", site_name="st-paul", detail="timeout")
    entries = store.audit_log()
    assert [e.event for e in entries] == ["site_registered", "job_launched", "round_aborted"]
    assert entries[0].job_id is None and entries[0].detail == "100 records"
    (last,) = [e for e in store.audit_log("job-1") if e.site_name]
    assert (last.event, last.site_name, last.detail) == ("round_aborted", "st-paul", "timeout")
    assert entries[0].id < entries[1].id < entries[2].id


@pytest.mark.parametrize(
    "statement", ["UPDATE audit SET detail = 'forged'", "DELETE FROM audit"]
)
def test_audit_log_refuses_update_and_delete(
    store: CoordinatorStore, db: Path, statement: str
) -> None:
    store.audit("job_launched", job_id="job-1", detail="original")
    conn = sqlite3.connect(db)
    try:
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute(statement)
    finally:
        conn.close()
    assert [e.detail for e in store.audit_log()] == ["original"]


# -- durability and threads ----------------------------------------------------------


def test_second_store_on_same_file_sees_every_write(store: CoordinatorStore, db: Path) -> None:
    store.upsert_site("st-mary", num_records=10, num_features=2, kernels=["grad"],
                      policy_version="v1", certificate_expiry=None, now=1.0)
    store.create_job("job-1", "noisy_gd", "{}", seed=3)
    store.set_job_state("job-1", "running")
    store.record_round(a_round(rnd=1, aborted=True, reason="dropout"))
    store.save_answer(an_answer((ODD_ARRAYS[2],), rnd=2), a_round(rnd=2))
    store.save_checkpoint("job-1", 1, {"w": ODD_ARRAYS[3]})
    store.audit("round_finished", job_id="job-1")
    # The first store stays open, as after a crash: nothing relies on close().
    with CoordinatorStore(db) as reopened:
        assert reopened.sites() == store.sites()
        assert reopened.unfinished_jobs() == store.unfinished_jobs()
        assert reopened.rounds("job-1") == store.rounds("job-1")
        assert reopened.last_round("job-1") == 2
        answer = reopened.answer("job-1", 1)
        assert answer is not None
        assert_exact(answer.blocks[0], ODD_ARRAYS[2])
        latest = reopened.latest_checkpoint("job-1")
        assert latest is not None
        step, model = latest
        assert step == 1
        assert_exact(model["w"], ODD_ARRAYS[3])
        assert reopened.audit_log() == store.audit_log()


def test_concurrent_writes_from_threads_all_land(store: CoordinatorStore, db: Path) -> None:
    threads, per_thread = 8, 15
    for t in range(threads):
        store.create_job(f"job-{t}", "noisy_gd", "{}", seed=t)
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def work(t: int) -> None:
        try:
            start.wait()
            for i in range(1, per_thread + 1):
                job_id = f"job-{t}"
                store.save_answer(an_answer((np.full(3, float(i)),), job_id, step=i, rnd=i),
                                  a_round(job_id, rnd=i, step=i))
                store.audit("round_finished", job_id=job_id, detail=str(i))
        except BaseException as err:
            errors.append(err)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert errors == []
    with CoordinatorStore(db) as reopened:
        assert len(reopened.audit_log()) == threads * per_thread
        for t in range(threads):
            assert reopened.last_round(f"job-{t}") == per_thread
            answer = reopened.answer(f"job-{t}", per_thread)
            assert answer is not None
            assert_exact(answer.blocks[0], np.full(3, float(per_thread)))
