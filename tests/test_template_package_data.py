"""Every HTML template ships in the wheel: each ``templates/`` folder of the
package is a listed package with its templates as package data, so an
installed (non-editable) site or coordinator finds its report's page."""

from __future__ import annotations

import tomllib
from fnmatch import fnmatch

from tests.paths import REPO_ROOT


def test_every_templates_folder_is_package_data():
    setuptools = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {folder: package for package, folder in setuptools["package-dir"].items()}
    found = 0
    for folder, package in folders.items():
        for templates in sorted((REPO_ROOT / folder).rglob("templates")):
            parts = templates.parent.relative_to(REPO_ROOT / folder).parts
            owner = ".".join((package, *parts, "templates"))
            assert owner in setuptools["packages"]
            patterns = setuptools["package-data"].get(owner, [])
            for template in templates.iterdir():
                found += 1
                assert any(fnmatch(template.name, p) for p in patterns), (owner, patterns)
    assert found >= 4  # the layout, the macros and the two reports' pages
