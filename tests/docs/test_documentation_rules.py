"""What every document in the repository keeps to: a README a newcomer
reads in minutes, no path outside the repository, and no issue or review
numbers (a reader has neither)."""

from __future__ import annotations

import re

import pytest

from tests.paths import REPO_ROOT

README = REPO_ROOT / "README.md"
# Every Markdown file of the repository (not the virtual environment, the built
# site or other build output).
DOCUMENTS = sorted(path for path in REPO_ROOT.rglob("*.md")
                   if not {".venv", "site", "build"} & set(path.relative_to(REPO_ROOT).parts))
OUTSIDE = re.compile(r"\.\./shared|/work/")
TRACKER = re.compile(r"\b(issue|review|PR)\s*#?\d+", re.IGNORECASE)


def test_the_readme_is_at_most_250_lines():
    assert len(README.read_text().splitlines()) <= 250


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_a_document_names_no_folder_outside_the_repository(document):
    assert OUTSIDE.findall(document.read_text()) == []


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_a_document_cites_no_issue_or_review_number(document):
    assert TRACKER.findall(document.read_text()) == []


def test_the_readme_links_only_pages_that_exist():
    for target in re.findall(r"\]\(([^)#]+)", README.read_text()):
        if not target.startswith("http"):
            assert (REPO_ROOT / target).exists(), target
