"""The installed privadapt version, as ``--version`` prints it on every
command line (``privadapt``, ``privadapt-site``, ``privadapt-coordinator``)."""

from __future__ import annotations

import importlib.metadata


def installed_version() -> str:
    """The installed distribution's version (pyproject.toml)."""
    try:
        return importlib.metadata.version("privadapt")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"
