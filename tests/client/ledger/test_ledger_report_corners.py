"""The ledger report at its corners: a site name with markup in it (the
operator's, but printed on an auditor's page) is shown as text, in the title
and the heading alike; a ledger whose charges all fall in one instant (one
charge) still gets its figure."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.ledger.report import render_report
from privadapt.client.policy import SitePolicy
from privadapt.common.mechanisms import Adjacency, LaplaceMechanism

SITE = 'st-<script>alert("x")</script>'


class _Title(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.title = ""

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)

    def handle_data(self, data):
        if self.tags and self.tags[-1] == "title":
            self.title += data


def test_a_site_name_with_a_script_tag_is_shown_as_text(tmp_path: Path):
    path = tmp_path / "site.db"
    with PrivacyLedger(path, SitePolicy(SITE, 3.0, 1e-5), create=True) as ledger:
        ledger.charge("job-1", "q1", LaplaceMechanism(1.0, 4.0, Adjacency.ADD_REMOVE_ONE))
    with PrivacyLedger.open_readonly(path) as ledger:
        text = render_report(ledger, "hash chain verified", path)
    page = _Title()
    page.feed(text)
    assert "<script>" not in text and "script" not in page.tags
    assert page.title == f"Privacy report: site {SITE}"
    assert "<h1>Privacy report of site st-&lt;script&gt;" in text


def test_a_ledger_with_one_charge_gets_its_figure(tmp_path: Path):
    path = tmp_path / "site.db"
    with PrivacyLedger(path, SitePolicy("st-mary", 3.0, 1e-5), create=True) as ledger:
        ledger.charge("job-1", "q1", LaplaceMechanism(1.0, 4.0, Adjacency.ADD_REMOVE_ONE))
    with PrivacyLedger.open_readonly(path) as ledger:
        text = render_report(ledger, "hash chain verified", path)
    assert text.count('<polyline class="cumulative"') == 1
