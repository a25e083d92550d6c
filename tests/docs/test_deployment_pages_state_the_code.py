"""The facts the deployment pages state about the simulated federation (the
Adult split, the sites' cap and policy, how many jobs it runs and which) are
the ones `privadapt simulate` and `make demo` use: each is read from the code
and looked for, as written, in the pages."""

from __future__ import annotations

import re
import tomllib

import pytest

from privadapt.common.data.datasets.adult import DEMO_RECORDS_PER_SITE, DEMO_SPLIT
from privadapt.simulation.simulate import site_policy, write_demo_jobs
from tests.paths import REPO_ROOT

DOCS = REPO_ROOT / "docs"
TUTORIAL = DOCS / "tutorials" / "three-sites.md"
DEMO_PAGE = DOCS / "explanation" / "demo.md"
NUMBER_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 8: "eight"}


def written(value: float) -> str:
    """A number as the pages write it: 10, 0.5, 1e-5."""
    return f"{value:g}".replace("e-0", "e-")


def text(path) -> str:
    return re.sub(r"\s+", " ", path.read_text())


@pytest.fixture(scope="module")
def demo_jobs(tmp_path_factory) -> list[dict]:
    """The job files the simulation writes for three sites."""
    folder = tmp_path_factory.mktemp("demo-jobs")
    paths = write_demo_jobs(folder, ["site-1", "site-2", "site-3"])
    return [tomllib.loads(path.read_text())["job"] for path in paths]


@pytest.mark.parametrize("page", [TUTORIAL, DEMO_PAGE], ids=["tutorial", "demo"])
def test_the_pages_name_the_split_the_simulation_loads(page):
    assert f"`{DEMO_SPLIT}`" in text(page)


@pytest.mark.parametrize("page", [TUTORIAL, DEMO_PAGE], ids=["tutorial", "demo"])
def test_the_pages_count_the_jobs_the_simulation_runs(page, demo_jobs):
    assert f"{NUMBER_WORDS[len(demo_jobs)]} jobs" in text(page)


def test_the_tutorial_names_each_demo_algorithm_and_epsilon(demo_jobs):
    page = text(TUTORIAL)
    for algorithm in {job["algorithm"] for job in demo_jobs}:
        assert f"`{algorithm}`" in page
    epsilons = sorted({job["epsilon"] for job in demo_jobs})
    assert "each at epsilon " + " and ".join(written(e) for e in epsilons) in page


def test_the_tutorial_states_the_simulated_sites_policy():
    policy = site_policy("site-1", 3)
    page = text(TUTORIAL)
    cap, delta = written(policy.epsilon_cap), written(policy.delta_cap)
    assert f"a cap epsilon {cap} at delta {delta}" in page
    assert f"`min_participants` {policy.min_participants}" in page
    assert f"clip norms up to {written(policy.max_clip_norm)}" in page
    assert f"their cap of {written(policy.epsilon_cap)} is reached" in page


def test_the_tutorial_states_the_records_per_site():
    assert f"at most {DEMO_RECORDS_PER_SITE} records each" in text(TUTORIAL)
