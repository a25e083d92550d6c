"""``privadapt result JOB --out DIR`` writes the job's HTML page: its
numbers are the job store's, it references nothing outside
itself, and, in a real headless Chromium (driven by Selenium), it and a site's
ledger report open without errors, their figures render, and the numbers the
browser reads are the job store's and the ledger's."""

from __future__ import annotations

import json
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from privadapt.cli import main as cli
from privadapt.client.ledger.privacy_ledger import PrivacyLedger
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
JOB = "page-job"


class Page(HTMLParser):
    """The data-field cells (with their row's site or round), the tags and
    every attribute that could load something."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: dict[str, list[tuple[str | None, float]]] = {}
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self._row: str | None = None

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        self.tags.append((tag, attributes))
        if tag == "tr":
            self._row = attributes.get("data-site") or attributes.get("data-round")
        if "data-field" in attributes:
            self.fields.setdefault(attributes["data-field"], []).append(
                (self._row, float(attributes["data-value"])))


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A coordinator, two sites and a finished 4-round job; yields the
    coordinator, the result directory and the sites' directory."""
    tmp_path = tmp_path_factory.mktemp("job-page")
    pki = make_pki(tmp_path / "pki", SITES)
    sites = ThreadSites()
    with in_process_coordinator(write_coordinator_config(tmp_path, pki)) as coordinator:
        for k, name in enumerate(SITES):
            sites.start(write_site(tmp_path, pki, name, synthetic_dataset(40, 3, seed=k),
                                   coordinator.port, epsilon_cap=20.0))
        operator = LocalDeployment(tmp_path, pki).write_operator(f"127.0.0.1:{coordinator.port}")
        job = tmp_path / "job.toml"
        job.write_text(
            f'[job]\nid = "{JOB}"\nalgorithm = "noisy_gd"\nepsilon = 1.0\ndelta = 1e-6\n'
            'sites = ["site-a", "site-b"]\nseed = 3\n[hyperparameters]\nloss = "logistic"\n'
            "iterations = 4\nlearning_rate = 1.0\nradius = 5.0\nclip_norm = 1.0\n")
        config = ["--config", str(operator)]
        try:
            assert cli.main(["launch", str(job), "--follow", *config]) == 0
            assert cli.main(["result", JOB, "--out", str(tmp_path / "out"), *config]) == 0
            yield coordinator, tmp_path / "out", tmp_path
        finally:
            sites.stop()


def test_the_pages_numbers_are_the_job_stores(finished):
    coordinator, out, _ = finished
    page = Page()
    page.feed((out / "report.html").read_text())
    report = json.loads(coordinator.store.result(JOB)[1])
    for name, site in report["sites"].items():
        assert (name, site["job_epsilon"]) in page.fields["site_job_epsilon"]
        assert (name, site["total_epsilon"]) in page.fields["site_total_epsilon"]
        assert (name, site["cap_epsilon"] - site["total_epsilon"]) in \
            page.fields["site_left_epsilon"]
    assert len(page.fields["site_job_epsilon"]) == len(SITES)
    rounds = coordinator.store.rounds(JOB)
    assert page.fields["round_epsilon"] == [(str(r.round), r.epsilon_so_far) for r in rounds
                                            if not r.aborted]
    assert page.fields["rounds_done"] == [(None, 4.0)]
    assert page.fields["planned_rounds"] == [(None, 4.0)]
    assert page.fields["target_epsilon"] == [(None, 1.0)]
    polyline = [a for tag, a in page.tags if tag == "polyline"]
    # From 0, a rise per release, and the last value held to the end of the axis.
    assert len(polyline) == 1 and len(polyline[0]["points"].split()) == 1 + 2 * 4 + 1
    text = (out / "report.html").read_text()
    assert "job_launched" in text and "job_succeeded" in text  # the store's audit events
    # Self-contained: nothing to fetch, nothing to run.
    assert not any(tag in ("script", "link", "img", "iframe") for tag, _ in page.tags)
    assert not any(key in ("src", "href") for _, attrs in page.tags for key in attrs)


def _browser():
    """A headless Chromium from the system packages, driven by Selenium; the
    test is skipped, saying what is missing, only when one of them is absent
    (.ci/run installs both)."""
    webdriver = pytest.importorskip(
        "selenium.webdriver", reason="selenium is not installed (pip install -e '.[test]')")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if chromium is None or driver is None:
        pytest.skip("no chromium/chromedriver on PATH: apt-get install chromium chromium-driver "
                    "(.ci/run does)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1000,2000"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # The system's chromedriver: Selenium downloads nothing.
    return webdriver.Chrome(options=options, service=webdriver.ChromeService(driver))


def _read_in_browser(browser, path: Path, screenshot: Path) -> dict[str, list[tuple[str, float]]]:
    """Open ``path`` and return its data-field values as the DOM has them,
    after checking the console is clean and the figure has a size."""
    from selenium.webdriver.common.by import By

    browser.get(path.as_uri())
    assert browser.execute_script("return document.readyState") == "complete"
    severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == []
    # Nothing but the page itself was loaded (no stylesheet, font, image or script).
    assert browser.execute_script(
        "return performance.getEntriesByType('resource').length") == 0
    figure = browser.find_element(By.CSS_SELECTOR, "svg polyline.cumulative")
    box = browser.execute_script("const b = arguments[0].getBBox(); return [b.width, b.height]",
                                 figure)
    assert box[0] > 100 and box[1] > 0, box  # drawn (a small spend against a large cap is low)
    assert browser.find_element(By.CSS_SELECTOR, "svg").is_displayed()
    browser.save_screenshot(str(screenshot))
    assert screenshot.stat().st_size > 10_000  # a drawn page, not a blank one
    values: dict[str, list[tuple[str, float]]] = {}
    for element in browser.find_elements(By.CSS_SELECTOR, "[data-field]"):
        row = element.find_element(By.XPATH, "./ancestor::tr[1]")
        key = row.get_attribute("data-site") or row.get_attribute("data-round") or \
            row.get_attribute("data-job") or ""
        values.setdefault(element.get_attribute("data-field"), []).append(
            (key, float(element.get_attribute("data-value"))))
        # What a reader sees is the same number, rounded.
        shown = element.text
        exact = float(element.get_attribute("data-value"))
        assert shown == "inf" or abs(float(shown) - exact) <= 5e-4 * max(1.0, abs(exact)), \
            (shown, exact)
    return values


@pytest.mark.slow
def test_the_job_page_and_a_site_ledger_report_in_a_headless_browser(finished, tmp_path):
    coordinator, out, workdir = finished
    site_db = workdir / "site-a" / "site.db"
    ledger_page = tmp_path / "ledger.html"
    assert cli.main(["ledger", "report", "--site-db", str(site_db), "--out",
                     str(ledger_page)]) == 0
    browser = _browser()
    try:
        job = _read_in_browser(browser, out / "report.html", tmp_path / "job.png")
        assert browser.title == f"Privacy report: job {JOB}"
        site = _read_in_browser(browser, ledger_page, tmp_path / "ledger.png")
    finally:
        browser.quit()
    report = json.loads(coordinator.store.result(JOB)[1])
    assert sorted(job["site_job_epsilon"]) == sorted(
        (name, s["job_epsilon"]) for name, s in report["sites"].items())
    assert job["round_epsilon"] == [(str(r.round), r.epsilon_so_far)
                                    for r in coordinator.store.rounds(JOB)]
    with PrivacyLedger.open_readonly(site_db) as ledger:
        assert site["total_epsilon"] == [("", ledger.spent().epsilon)]
        assert site["job_epsilon"] == [(JOB, ledger.spent_by_job(JOB).epsilon)]
        assert site["total_after_job"] == [(JOB, ledger.spent().epsilon)]
