"""``privadapt ledger report``: the HTML page's numbers are the ledger's, it
references nothing outside itself, and ids from a coordinator cannot inject
markup (the real-browser test is tests/cli/test_job_report_page.py)."""

from __future__ import annotations

import html
import re
import sqlite3
from collections import Counter
from html.parser import HTMLParser

import pytest

from privadapt.cli import main as cli
from privadapt.client.ledger.accounting import exact_report, mechanism_json
from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.common.mechanisms import (
    Adjacency,
    GaussianBlock,
    GaussianMechanism,
    LaplaceMechanism,
)

SAMPLED = GaussianMechanism.single(1.0, 1.73, Adjacency.ADD_REMOVE_ONE, 0.05)
TWO_BLOCKS = GaussianMechanism((GaussianBlock(1.0, 4.0), GaussianBlock(0.5, 3.0)),
                               Adjacency.ADD_REMOVE_ONE)
HOSTILE = 'job-<script>alert("x")</script>'


class Page(HTMLParser):
    """Every tag with its attributes, the data-field values, and the text."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.fields: dict[str, list[str]] = {}
        self.rows: list[dict[str, str | None]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        self.tags.append((tag, attributes))
        if "data-field" in attributes:
            self.fields.setdefault(attributes["data-field"], []).append(attributes["data-value"])
        if tag == "tr" and attributes.get("class") == "release":
            self.rows.append(attributes)

    def handle_data(self, data):
        self.text.append(data)


@pytest.fixture
def ledger_path(tmp_path):
    path = tmp_path / "site.db"
    policy = SitePolicy("st-mary", 3.0, 1e-5, adjacency=Adjacency.ADD_REMOVE_ONE)
    with PrivacyLedger(path, policy, create=True) as ledger:
        for step in range(12):
            ledger.charge("sgd-1", f"s{step:06d}-r{step:06d}", SAMPLED, kernel="linear_gradient")
        ledger.charge(HOSTILE, "q1", TWO_BLOCKS, kernel="<b>second_moments</b>")
        ledger.charge(HOSTILE, "q2", LaplaceMechanism(1.0, 4.0, Adjacency.ADD_REMOVE_ONE))
    return path


def _report(ledger_path, tmp_path, capsys) -> tuple[Page, str]:
    out = tmp_path / "report.html"
    assert cli.main(["ledger", "report", "--site-db", str(ledger_path), "--out", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    text = out.read_text()
    page = Page()
    page.feed(text)
    page.close()
    return page, text


def test_the_numbers_on_the_page_are_the_ledgers(ledger_path, tmp_path, capsys):
    page, text = _report(ledger_path, tmp_path, capsys)
    with PrivacyLedger.open_readonly(ledger_path) as ledger:
        charges = ledger.charges()
        total = ledger.spent().epsilon
        policy = ledger.policy
        jobs = {job: ledger.spent_by_job(job).epsilon for job in ledger.jobs()}
    assert page.fields["cap_epsilon"] == [repr(3.0)] and page.fields["delta_cap"] == [repr(1e-5)]
    assert page.fields["charges"] == [repr(len(charges))]
    assert float(page.fields["total_epsilon"][0]) == total
    assert float(page.fields["remaining_epsilon"][0]) == pytest.approx(3.0 - total)
    assert [float(v) for v in page.fields["job_epsilon"]] == list(jobs.values())
    # After each job: the site's exact total at the cap's delta, never the
    # bound a charge was admitted under.
    after = [exact_report(Counter(mechanism_json(c.mechanism) for c in charges[:end]),
                          policy).epsilon
             for end in (max(i for i, c in enumerate(charges) if c.job_id == job) + 1
                         for job in jobs)]
    assert [float(v) for v in page.fields["total_after_job"]] == after
    assert after[-1] == total
    alone = [exact_report({mechanism_json(c.mechanism): 1}, policy).epsilon for c in charges]
    assert [float(v) for v in page.fields["release_epsilon"]] == alone
    assert [r["data-job"] for r in page.rows] == [c.job_id for c in charges]
    words = " ".join(page.text)
    assert "Poisson sampling rate 0.05" in words and "1, 0.5 (l2)" in words
    kernels = [html.unescape(k) for k in re.findall(r'<td class="kernel">([^<]*)</td>', text)]
    assert "<b>" not in text  # a kernel name is escaped like every id
    assert kernels == [c.kernel for c in charges] == (
        ["linear_gradient"] * 12 + ["<b>second_moments</b>", "unknown"])


def test_the_page_is_self_contained_and_draws_the_cumulative_curve(ledger_path, tmp_path,
                                                                    capsys):
    page, text = _report(ledger_path, tmp_path, capsys)
    tags = [tag for tag, _ in page.tags]
    assert "script" not in tags and "link" not in tags and "img" not in tags
    assert "iframe" not in tags and "object" not in tags
    for _, attributes in page.tags:
        assert not {"src", "href", "srcset", "action"} & set(attributes)
    lowered = text.lower()
    for marker in ("http:", "https:", "//", "url(", "@import", "@font-face"):
        assert marker not in lowered.replace("<!--", "")
    svg = [a for tag, a in page.tags if tag == "polyline" and a.get("class") == "cumulative"]
    assert len(svg) == 1 and len(svg[0]["points"].split()) == 1 + 2 * 14
    assert any(tag == "line" and a.get("class") == "cap" for tag, a in page.tags)


def test_ids_from_a_coordinator_are_escaped(ledger_path, tmp_path, capsys):
    page, text = _report(ledger_path, tmp_path, capsys)
    assert "<script>" not in text
    assert HOSTILE in " ".join(page.text)  # shown as text, not run


def test_a_tampered_ledger_gets_no_report(ledger_path, tmp_path, capsys):
    with sqlite3.connect(ledger_path) as conn:
        conn.execute("UPDATE charges SET epsilon_after = 0 WHERE id = 3")
    out = tmp_path / "report.html"
    assert cli.main(["ledger", "report", "--site-db", str(ledger_path), "--out", str(out)]) == 2
    assert "privadapt ledger report:" in capsys.readouterr().err and not out.exists()
    assert cli.main(["ledger", "report", "--site-db", str(tmp_path / "none.db"),
                     "--out", str(out)]) == 2
