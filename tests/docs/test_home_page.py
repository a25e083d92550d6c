"""The documentation's home page, as a new user opens it in a browser: it
renders, and one click from it leads to running on your own CSV files, to
deploying three sites and to reading a site's ledger. Reads the site that
`make docs` built (site/); a screenshot goes to build/docs-home.png."""

from __future__ import annotations

import shutil

import pytest

from tests.paths import REPO_ROOT

SITE = REPO_ROOT / "site"
SCREENSHOT = REPO_ROOT / "build" / "docs-home.png"
# (the link's text on the home page, a command the page it opens must show)
TASKS = (
    ("First simulation on your own data", "privadapt simulate --public"),
    ("First three-site deployment", "privadapt-site --config"),
    ("Read and back up a ledger", "privadapt ledger show"),
)


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium from the system packages, driven by Selenium; the
    test is skipped, saying what is missing, only when the built site, Selenium
    or the browser is absent (.ci/run runs it after `make docs`)."""
    if not (SITE / "index.html").exists():
        pytest.skip("no built site: run `make docs` first")
    webdriver = pytest.importorskip(
        "selenium.webdriver", reason="selenium is not installed (pip install -e '.[test]')")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if chromium is None or driver is None:
        pytest.skip("no chromium/chromedriver on PATH: apt-get install chromium chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1280,1400"):
        options.add_argument(flag)
    session = webdriver.Chrome(options=options, service=webdriver.ChromeService(driver))
    yield session
    session.quit()


def test_the_home_page_renders_with_its_navigation(browser):
    from selenium.webdriver.common.by import By

    browser.get((SITE / "index.html").as_uri())
    assert browser.execute_script("return document.readyState") == "complete"
    assert browser.find_element(By.TAG_NAME, "h1").text == "privadapt"
    # The theme's stylesheet applied: the navigation is laid out, not a bare list.
    navigation = browser.find_element(By.CSS_SELECTOR, "nav.md-nav--primary")
    assert navigation.size["width"] > 100
    SCREENSHOT.parent.mkdir(exist_ok=True)
    browser.save_screenshot(str(SCREENSHOT))
    assert SCREENSHOT.stat().st_size > 10_000  # a drawn page, not a blank one


@pytest.mark.parametrize(("link", "command"), TASKS, ids=[task[0] for task in TASKS])
def test_one_click_from_home_leads_to_the_task(browser, link, command):
    from selenium.webdriver.common.by import By

    browser.get((SITE / "index.html").as_uri())
    article = browser.find_element(By.CSS_SELECTOR, "article")
    article.find_element(By.LINK_TEXT, link).click()
    assert browser.find_element(By.TAG_NAME, "h1").text == link
    assert command in browser.find_element(By.CSS_SELECTOR, "article").text


def test_no_built_page_names_a_folder_outside_the_repository():
    """Generated parts too (docstrings, the layout's module table): a reader
    of the site has nothing outside the repository."""
    if not (SITE / "index.html").exists():
        pytest.skip("no built site: run `make docs` first")
    for page in SITE.rglob("*.html"):
        text = page.read_text()
        assert "../shared" not in text and "DESIGN.md" not in text, page
