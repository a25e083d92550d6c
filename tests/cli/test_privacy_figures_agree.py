"""Every place that prints a privacy figure agrees on a real job: two site
daemons and a coordinator (threads, mutual-TLS gRPC), two jobs, then every
command, log line, report and JSON document an operator reads.

One presentation (common/privacy_figures.py): the job's spend at the job's
delta as the headline, the site's total at its cap's delta beside it, the
running figure during a job at the cap's delta and named so, and never the
bound a charge was admitted under."""

from __future__ import annotations

import io
import json
import logging
import re
from contextlib import redirect_stdout
from html.parser import HTMLParser

import pytest

from privadapt.cli import main as cli
from privadapt.client.daemon.config import SiteConfig
from privadapt.client.ledger.cli import show_ledger
from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.common.privacy_figures import (
    job_spend_text,
    running_spend_text,
    site_privacy_line,
    site_total_text,
)
from privadapt.simulation.local_deployment import LocalDeployment
from tests.network_harness import (
    ThreadSites,
    in_process_coordinator,
    make_pki,
    write_coordinator_config,
    write_site,
)
from tests.synthetic_data import synthetic_dataset

SITES = ("site-a", "site-b")
JOB, EARLIER = "agree-job", "earlier-job"
CAP, CAP_DELTA, JOB_DELTA = 20.0, 1e-5, 1e-6


class _Fields(HTMLParser):
    """Each data-field's exact values, with the row's site or job."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: dict[str, list[tuple[str | None, float]]] = {}
        self._row: str | None = None

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag == "tr":
            self._row = attributes.get("data-site") or attributes.get("data-job")
        if "data-field" in attributes:
            self.fields.setdefault(attributes["data-field"], []).append(
                (self._row, float(attributes["data-value"])))


def _fields(html: str) -> dict[str, list[tuple[str | None, float]]]:
    page = _Fields()
    page.feed(html)
    return page.fields


def _job_file(tmp_path, job_id: str, iterations: int) -> str:
    path = tmp_path / f"{job_id}.toml"
    path.write_text(
        f'[job]\nid = "{job_id}"\nalgorithm = "noisy_gd"\nepsilon = 1.0\n'
        f'delta = {JOB_DELTA}\nsites = ["site-a", "site-b"]\nseed = 5\n[hyperparameters]\n'
        f'loss = "logistic"\niterations = {iterations}\nlearning_rate = 1.0\nradius = 5.0\n'
        "clip_norm = 1.0\n")
    return str(path)


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """Run two jobs and capture everything an operator reads about the second."""
    tmp_path = tmp_path_factory.mktemp("agree")
    pki = make_pki(tmp_path / "pki", SITES)
    sites = ThreadSites()
    captured: dict = {"databases": {}}
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("privadapt")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    with in_process_coordinator(write_coordinator_config(tmp_path, pki)) as coordinator:
        for k, name in enumerate(SITES):
            config = write_site(tmp_path, pki, name, synthetic_dataset(40, 3, seed=k),
                                coordinator.port, epsilon_cap=CAP)
            captured["databases"][name] = SiteConfig.from_toml(config).database
            sites.start(config)
        operator = LocalDeployment(tmp_path, pki).write_operator(f"127.0.0.1:{coordinator.port}")
        config = ["--config", str(operator)]

        def run(*argv: str) -> str:
            out = io.StringIO()
            with redirect_stdout(out):
                assert cli.main([*argv, *config]) == 0
            return out.getvalue()

        try:
            run("launch", _job_file(tmp_path, EARLIER, 2), "--follow")
            captured["follow"] = run("launch", _job_file(tmp_path, JOB, 4), "--follow")
            captured["status"] = run("status", JOB)
            captured["result"] = run("result", JOB, "--out", str(tmp_path / "out"))
            captured["result_json"] = json.loads(
                run("result", JOB, "--out", str(tmp_path / "out2"), "--json"))
            captured["page"] = (tmp_path / "out" / "report.html").read_text()
            captured["sites"] = run("sites")
            captured["rounds"] = coordinator.store.rounds(JOB)
            for name, database in captured["databases"].items():
                text = io.StringIO()
                assert show_ledger(database, out=text) == 0
                document = io.StringIO()
                assert show_ledger(database, out=document, as_json=True) == 0
                captured[f"ledger_show:{name}"] = text.getvalue()
                captured[f"ledger_json:{name}"] = json.loads(document.getvalue())
                page = tmp_path / f"{name}.html"
                assert cli.main(["ledger", "report", "--site-db", str(database),
                                 "--out", str(page)]) == 0
                captured[f"ledger_page:{name}"] = page.read_text()
            captured["log"] = [r.getMessage() for r in records]
            yield captured
        finally:
            sites.stop()
            logger.removeHandler(handler)
            logger.setLevel(level)


def _spend(outputs, name: str):
    """The site's own ledger: the job's spend at the job's and the cap's
    delta, and its total at the cap's delta."""
    with PrivacyLedger.open_readonly(outputs["databases"][name]) as ledger:
        return (ledger.spent_by_job(JOB, JOB_DELTA).epsilon,
                ledger.spent_by_job(JOB).epsilon, ledger.spent().epsilon)


@pytest.mark.parametrize("name", SITES)
def test_the_headline_and_the_site_total_are_the_ledgers_everywhere(outputs, name):
    job, _, total = _spend(outputs, name)
    report = outputs["result_json"]["privacy_report"]
    site = report["sites"][name]
    assert (site["job_epsilon"], site["delta"]) == (job, JOB_DELTA)
    assert (site["total_epsilon"], site["total_delta"]) == (total, CAP_DELTA)
    line = site_privacy_line(name, site)
    assert line == (f"{name}: {job_spend_text(job, JOB_DELTA)}; "
                    f"{site_total_text(total, CAP_DELTA, CAP)}")
    # The same line after --follow, in status, in result, in both logs.
    for where in ("follow", "status", "result"):
        assert f"  {line}\n" in outputs[where], where
    assert any(message.endswith(f"privacy report: {line.split(': ', 1)[1]}")
               for message in outputs["log"] if message.startswith(f"site={name} job={JOB}"))
    assert f"job={JOB} site={name} {line.split(': ', 1)[1]}" in outputs["log"]
    # The operator's site list: the total its ledger last stated.
    assert f"{site_total_text(total, CAP_DELTA, CAP)}" in outputs["sites"]
    # The job's HTML page, exactly.
    fields = _fields(outputs["page"])
    assert (name, job) in fields["site_job_epsilon"]
    assert (name, total) in fields["site_total_epsilon"]
    # The ledger's own pages: the total at the cap's delta, after this job too.
    document = outputs[f"ledger_json:{name}"]
    assert (document["total"]["epsilon"], document["total"]["delta"]) == (total, CAP_DELTA)
    ledger_fields = _fields(outputs[f"ledger_page:{name}"])
    assert ledger_fields["total_epsilon"] == [(None, total)]
    assert (JOB, total) in ledger_fields["total_after_job"]  # the last job
    shown = re.search(r"site all jobs\s+\d+ charges  epsilon=(\S+)",
                      outputs[f"ledger_show:{name}"])
    assert shown is not None and shown.group(1) == f"{total:.4g}"


def test_the_progress_figure_ends_on_the_headline_against_the_target(outputs):
    report = outputs["result_json"]["privacy_report"]
    for site in report["sites"].values():
        curve = site["spend_curve"]
        assert curve["releases"][-1] == site["releases"] == 4
        assert curve["epsilon"][-1] == pytest.approx(site["job_epsilon"], rel=1e-12)
    assert "at delta 1e-06 (the job&#39;s)" in outputs["page"]
    assert _fields(outputs["page"])["target_epsilon"] == [(None, 1.0)]


def test_the_running_figure_is_the_ledgers_spend_at_the_cap_delta_and_says_so(outputs):
    at_cap = {name: _spend(outputs, name)[1] for name in SITES}
    last = outputs["rounds"][-1]
    assert last.epsilon_so_far == max(at_cap.values())
    text = running_spend_text(last.epsilon_so_far, CAP_DELTA)
    assert text in outputs["follow"] and text in outputs["status"]
    # The coordinator's round line and each site's answer line.
    assert any(m.startswith(f"job={JOB} round=") and m.endswith(text) for m in outputs["log"])
    for name, epsilon in at_cap.items():
        assert any(m.startswith(f"site={name} job={JOB}") and
                   m.endswith(running_spend_text(epsilon, CAP_DELTA)) for m in outputs["log"])
        jobs = outputs[f"ledger_json:{name}"]["jobs"]
        assert (jobs[JOB]["epsilon"], jobs[JOB]["delta"]) == (epsilon, CAP_DELTA)


def test_no_place_prints_the_admission_bound_as_a_spend(outputs):
    for name in SITES:
        assert "epsilon after" not in outputs[f"ledger_show:{name}"]
        charges = outputs[f"ledger_json:{name}"]["charges"]
        assert all("epsilon_after" not in c and "admission_bound" in c for c in charges)
    assert not any("epsilon_spent=" in m for m in outputs["log"])
