"""``privadapt ledger show``: the operator sees every charge and the totals,
and a wrong path gets a one-line message and exit code 2."""

import io
import json

import pytest

from privadapt.client.ledger.cli import describe_mechanism, show_ledger
from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.common.accounting.accountant import PrivacyAccountant, epsilon_spent
from privadapt.common.mechanisms import (
    Adjacency,
    GaussianBlock,
    GaussianMechanism,
    LaplaceMechanism,
    NoNoise,
    mechanism_from_dict,
)

TWO_BLOCKS = GaussianMechanism((GaussianBlock(1.0, 4.0), GaussianBlock(1.0, 4.0)))


@pytest.fixture
def site_db(tmp_path):
    path = tmp_path / "st-mary.db"
    with PrivacyLedger(path, SitePolicy("st-mary", 5.0, 1e-5), create=True) as ledger:
        ledger.charge("job-1", "grad-1", TWO_BLOCKS)
        ledger.charge("job-1", "count-1", LaplaceMechanism(1.0, 2.0))
        ledger.charge("job-2", "grad-1", GaussianMechanism.single(1.0, 10.0))
    return path


def show(path, job=None):
    out = io.StringIO()
    return show_ledger(path, job=job, out=out), out.getvalue()


def test_show_prints_site_cap_and_every_charge(site_db):
    code, text = show(site_db)
    assert code == 0
    assert "site 'st-mary'" in text and "epsilon=5 at delta=1e-05" in text and "PLD" in text
    lines = text.splitlines()
    assert any("job-1" in line and "grad-1" in line and "gaussian z=2.83 (2 blocks)" in line
               for line in lines)
    assert any("count-1" in line and "laplace eps=0.5" in line for line in lines)
    assert any("job-2" in line and "gaussian z=10 (1 block)" in line for line in lines)


def test_show_prints_the_composed_epsilon_per_job_and_overall(site_db):
    _, text = show(site_db)
    job1 = epsilon_spent([TWO_BLOCKS, LaplaceMechanism(1.0, 2.0)], 1e-5).epsilon
    with PrivacyLedger.open_readonly(site_db) as ledger:
        total = ledger.spent().epsilon
    assert f"job job-1         2 charges  epsilon={job1:.4g} (PLD)" in text
    assert f"3 charges  epsilon={total:.4g} (PLD)" in text


def test_show_with_a_job_lists_only_that_job(site_db):
    code, text = show(site_db, job="job-2")
    assert code == 0 and "job-2" in text
    assert "count-1" not in text and "job job-1" not in text


def test_show_of_a_missing_file_exits_2_with_a_message(tmp_path, capsys):
    code, text = show(tmp_path / "nope.db")
    err = capsys.readouterr().err
    assert code == 2 and text == ""
    assert "no such file" in err and "nope.db" in err and "Traceback" not in err


def test_show_of_a_file_that_is_not_a_ledger_exits_2(tmp_path, capsys):
    junk = tmp_path / "notes.db"
    junk.write_text("these are not the charges you are looking for\n" * 50)
    assert show(junk)[0] == 2
    assert "not a privadapt ledger" in capsys.readouterr().err


def test_show_of_an_unknown_job_exits_2_and_lists_the_jobs(site_db, capsys):
    assert show(site_db, job="job-9")[0] == 2
    assert "jobs charged: job-1, job-2" in capsys.readouterr().err


def test_show_of_an_empty_ledger_says_so(tmp_path):
    path = tmp_path / "empty.db"
    PrivacyLedger(path, SitePolicy("st-mary", 5.0, 1e-5), create=True).close()
    code, text = show(path)
    assert code == 0 and "no charges yet" in text


def test_show_does_not_create_a_missing_ledger(tmp_path):
    show(tmp_path / "nope.db")
    assert not (tmp_path / "nope.db").exists()


@pytest.mark.parametrize(
    ("mechanism", "summary"),
    [
        (GaussianMechanism.single(1.0, 3.21), "gaussian z=3.21 (1 block)"),
        (
            GaussianMechanism.single(1.0, 1.73, Adjacency.ADD_REMOVE_ONE, 0.01),
            "poisson-sampled gaussian q=0.01 z=1.73 (1 block) [add_remove_one]",
        ),
        (LaplaceMechanism(1.0, 2.0), "laplace eps=0.5"),
        (NoNoise((0.0,)), "no noise (free)"),
        (NoNoise((1.0,)), "no noise (NOT PRIVATE)"),
        (
            LaplaceMechanism(1.0, 2.0, Adjacency.ADD_REMOVE_ONE),
            "laplace eps=0.5 [add_remove_one]",
        ),
    ],
)
def test_mechanism_summary(mechanism, summary):
    assert describe_mechanism(mechanism, Adjacency.REPLACE_ONE) == summary


def test_every_field_of_a_charge_is_printed_so_the_totals_can_be_recomputed(tmp_path):
    """A Poisson-sampled charge printed as its z alone made a
    reader's recomputation far larger than the totals; each line and each
    group names the sampling rate, and the groups' counts x mechanisms
    compose to the printed site total."""
    path = tmp_path / "sgd.db"
    sampled = GaussianMechanism.single(1.0, 1.73, Adjacency.ADD_REMOVE_ONE, 0.01)
    plain = GaussianMechanism.single(1.0, 10.0, Adjacency.ADD_REMOVE_ONE)
    policy = SitePolicy("sgd", 5.0, 1e-5, adjacency=Adjacency.ADD_REMOVE_ONE)
    with PrivacyLedger(path, policy, create=True) as ledger:
        for step in range(20):
            ledger.charge("job-1", f"step-{step}", sampled)
        ledger.charge("job-2", "once", plain)
        total = ledger.spent().epsilon
    _, text = show(path)
    assert text.count("poisson-sampled gaussian q=0.01 z=1.73 (1 block)") >= 21
    groups = [line for line in text.splitlines() if " x " in line and "alone" in line]
    assert len(groups) == 2
    accountant = PrivacyAccountant(Adjacency.ADD_REMOVE_ONE)
    for line in groups:
        count = int(line.split(" x ")[0])
        stored = json.loads(line[line.index("{"):])
        assert stored.get("sampling_rate") in (None, 0.01)
        accountant.compose(mechanism_from_dict(stored), count)
    assert "   20 x poisson-sampled gaussian q=0.01" in text
    assert accountant.get_epsilon(1e-5) == pytest.approx(total, rel=1e-9)
    assert f"21 charges  epsilon={total:.4g} (PLD)" in text


def test_show_json_holds_every_charge_and_the_ledgers_own_totals(site_db):
    out = io.StringIO()
    assert show_ledger(site_db, out=out, as_json=True) == 0
    document = json.loads(out.getvalue())
    with PrivacyLedger.open_readonly(site_db) as ledger:
        assert document["total"]["epsilon"] == ledger.spent().epsilon
        assert document["jobs"]["job-1"]["epsilon"] == ledger.spent_by_job("job-1").epsilon
        stored = ledger.charges()
    assert document["cap"] == {"epsilon": 5.0, "delta": 1e-5, "adjacency": "replace_one",
                               "accounting": "pld"}
    assert [(c["job_id"], c["query_id"]) for c in document["charges"]] == \
        [(c.job_id, c.query_id) for c in stored]
    # The stored mechanism is every field its cost depends on: it reads back equal.
    assert [mechanism_from_dict(c["mechanism"]) for c in document["charges"]] == \
        [c.mechanism for c in stored]
    assert document["charges"][0]["summary"] == "gaussian z=2.83 (2 blocks)"
    assert document["verified"].startswith("hash chain verified: 3 charges")


def test_show_json_of_one_job(site_db):
    out = io.StringIO()
    assert show_ledger(site_db, job="job-2", out=out, as_json=True) == 0
    document = json.loads(out.getvalue())
    assert list(document["jobs"]) == ["job-2"] and len(document["charges"]) == 1
    assert document["total"]["charges"] == 3


def test_show_summary_prints_the_cap_and_the_totals_only(site_db):
    out = io.StringIO()
    assert show_ledger(site_db, out=out, summary=True) == 0
    text = out.getvalue()
    with PrivacyLedger.open_readonly(site_db) as ledger:
        total = ledger.spent().epsilon
    assert "epsilon=5 at delta=1e-05" in text and "totals (composed epsilon at delta=1e-05" in text
    assert f"3 charges  epsilon={total:.4g} (PLD)" in text
    assert "grad-1" not in text and "count-1" not in text and " x " not in text
    document = io.StringIO()
    assert show_ledger(site_db, out=document, as_json=True, summary=True) == 0
    summary = json.loads(document.getvalue())
    assert "charges" not in summary and summary["total"]["epsilon"] == total
    assert summary["total"]["delta"] == 1e-5 and set(summary["jobs"]) == {"job-1", "job-2"}
