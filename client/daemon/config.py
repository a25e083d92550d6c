"""The site daemon's configuration file (TOML).

::

    [site]
    coordinator = "coordinator.example.org:50051"
    data = "records.csv"             # .csv/.csv.gz/.parquet (needs schema) or .npz
    schema = "records.schema.toml"   # optional for .npz
    policy = "policy.toml"           # the site's privacy policy (client/policy.py)
    database = "site.db"             # privacy ledger, round progress
    [tls]
    cert = "st-mary.crt"
    key = "st-mary.key"
    ca = "ca.crt"

Relative paths are relative to the configuration file's directory, so a site
directory can be moved as a whole. Every problem is a ``ConfigError`` naming
the file and the key.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from privadapt.common.config import Layout, read_sections, read_toml, render_layout
from privadapt.common.errors import ConfigError

_LAYOUT: Layout = {
    "site": {"coordinator": (str, True), "data": (str, True), "policy": (str, True),
             "database": (str, True), "schema": (str, False)},
    "tls": {"cert": (str, True), "key": (str, True), "ca": (str, True)},
}


@dataclass(frozen=True)
class SiteConfig:
    coordinator: str
    data: Path
    policy: Path
    database: Path
    cert: Path
    key: Path
    ca: Path
    schema: Path | None = None

    @classmethod
    def from_toml(cls, path: str | Path) -> SiteConfig:
        path = Path(path)
        data = read_toml(path, "site configuration", "pass --config PATH of the site's TOML")
        return cls.from_dict(data, base=path.parent, source=f"site configuration {path}")

    @classmethod
    def from_dict(cls, data: dict[str, Any], base: Path, source: str) -> SiteConfig:
        values = read_sections(data, _LAYOUT, source)
        coordinator = values.pop("coordinator")
        if ":" not in coordinator:
            raise ConfigError(f"{source}: [site] coordinator must be HOST:PORT, "
                              f"got {coordinator!r}")
        paths = {k: (base / v) for k, v in values.items()}
        return cls(coordinator=coordinator, **paths)

    def to_toml(self, relative_to: Path | None = None) -> str:
        """This configuration as TOML that :meth:`from_toml` reads back equal
        from a file in ``relative_to``; paths inside that directory are
        written relative to it (so the site directory can be moved)."""
        return render_layout(_LAYOUT, self, relative_to)

