"""``privadapt provision federation.toml``: a startup kit per participant.

One file names the coordinator, the sites and the operators (the way
``nvflare provision`` reads ``project.yml``)::

    [federation]
    config_dir = "/etc/privadapt"      # where each kit is installed (systemd units)
    venv = "/opt/privadapt/.venv"      # the daemons' virtual environment
    schema = "adult.schema.toml"       # optional: copied into every site kit
    cert_days = 365                    # validity of the parties' certificates

    [coordinator]
    host = "coord.example.org"         # the name sites and operators dial
    port = 50051
    extra_hosts = ["10.0.0.5"]         # optional: more names in its certificate
    min_sites = 2                      # optional further [coordinator] keys

    [policy.privacy]                   # every site's policy template (policy TOML
    epsilon_cap = 3.0                  # sections), a site's own [site.policy] on top
    [policy.queries]
    allowed_kernels = ["linear_gradient", "validation_loss", "loss_difference_histogram"]

    [[site]]
    name = "st-mary"
    data = "/srv/privadapt/records.csv"

    [[operator]]
    name = "alice"

It writes, under ``--out`` (default: ``kits/`` beside the file), ``ca/`` (the
federation CA: ``ca.key`` stays on this machine) and one directory per party
holding exactly what that machine's ``/etc/privadapt`` needs: ``tls/`` (its
certificate, its key (0600) and ``ca.crt``), its configuration with the right
address, a site's ``policy.toml`` (peers: the federation's other sites) and
the schema, and the systemd unit. Everything is checked by the daemons' own
loaders before a file is written. An existing CA is reused (a federation grows
by provisioning again with ``--force``); an existing kit is not overwritten
unless ``--force``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from privadapt.cli.operator import OperatorConfig
from privadapt.client.daemon.config import SiteConfig
from privadapt.client.policy import SitePolicy
from privadapt.common.config import Layout, read_sections, read_toml
from privadapt.common.data.schema import Schema
from privadapt.common.errors import ConfigError
from privadapt.common.secure import certs
from privadapt.provisioning.systemd_units import (
    DEFAULT_CONFIG_DIR,
    DEFAULT_VENV,
    render_unit,
    unit_file_name,
)
from privadapt.server.coordinator.main import CoordinatorConfig

COORDINATOR_DATABASE = "/var/lib/privadapt-coordinator/coordinator.db"
SITE_DATABASE = "/var/lib/privadapt-site/site.db"
SCHEMA_FILE = "schema.toml"
# What every site's policy starts from, unless the federation file says
# otherwise: a deployed site's policy, capping something (client/policy.py).
DEFAULT_POLICY: dict[str, dict[str, Any]] = {
    "site": {"simulation": False},
    "privacy": {"epsilon_cap": 3.0, "delta_cap": 1e-6, "min_noise_multiplier": 1.0,
                "min_participants": 2},
    "queries": {"allowed_kernels": ["linear_gradient", "validation_loss",
                                    "loss_difference_histogram"], "max_clip_norm": 1.0,
                "max_label_bound": 1.0, "allow_per_site_releases": False},
}

_FEDERATION: Layout = {"federation": {
    "config_dir": (str, False), "venv": (str, False), "schema": (str, False),
    "cert_days": (int, False), "ca_name": (str, False)}}
_COORDINATOR: Layout = {"coordinator": {
    "name": (str, False), "host": (str, True), "port": (int, True),
    "extra_hosts": (list, False), "listen": (str, False), "database": (str, False),
    "round_timeout_s": ((int, float), False), "site_wait_timeout_s": ((int, float), False),
    "min_sites": (int, False), "max_sites": (int, False), "public_source": (str, False)}}
_SITE: Layout = {"site": {"name": (str, True), "data": (str, True), "database": (str, False)}}
_OPERATOR: Layout = {"operator": {"name": (str, True), "days": (int, False)}}
_TOP_LEVEL = ("federation", "coordinator", "policy", "site", "operator")


@dataclass(frozen=True)
class Kit:
    """One participant's startup kit: its role, name and directory."""

    role: str
    name: str
    directory: Path


def provision(federation_file: Path, out: Path | None = None, force: bool = False) -> list[Kit]:
    """Write every participant's kit under ``out``; the kits written."""
    federation_file = Path(federation_file)
    plan = _read_federation(federation_file)
    out = Path(out) if out is not None else federation_file.parent / "kits"
    kits = [Kit("coordinator", plan.coordinator_name, out / plan.coordinator_name),
            *(Kit("site", site["name"], out / site["name"]) for site in plan.sites),
            *(Kit("operator", op["name"], out / op["name"]) for op in plan.operators)]
    names = [kit.name for kit in kits]
    duplicates = sorted({n for n in names if names.count(n) > 1} | ({"ca"} & set(names)))
    if duplicates:
        raise ConfigError(f"{federation_file}: every party needs its own name (and not 'ca'); "
                          f"repeated: {', '.join(duplicates)}")
    existing = [str(kit.directory) for kit in kits if kit.directory.exists()]
    if existing and not force:
        raise ConfigError(f"kit(s) already exist: {', '.join(existing)}; pass --force to "
                          "replace them (their certificates are issued again)")
    policies = {site["name"]: plan.policy(site["name"]) for site in plan.sites}
    ca = out / "ca"
    if not (ca / certs.CA_CERT_FILE).exists():
        certs.init_ca(ca, name=plan.ca_name)
    for kit in kits:
        if kit.directory.exists():
            shutil.rmtree(kit.directory)
        kit.directory.mkdir(parents=True)
        (kit.directory / "tls").mkdir(mode=0o700)
    _write_coordinator(plan, kits[0].directory, ca)
    for site, kit in zip(plan.sites, kits[1:1 + len(plan.sites)], strict=True):
        _write_site(plan, site, policies[site["name"]], kit.directory, ca)
    for operator, kit in zip(plan.operators, kits[1 + len(plan.sites):], strict=True):
        _write_operator(plan, operator, kit.directory, ca)
    return kits


@dataclass(frozen=True)
class _Federation:
    source: Path
    settings: Mapping[str, Any]
    coordinator: Mapping[str, Any]
    policy_template: Mapping[str, Any]
    sites: list[dict[str, Any]]
    operators: list[dict[str, Any]]

    @property
    def coordinator_name(self) -> str:
        return self.coordinator.get("name", "coordinator")

    @property
    def ca_name(self) -> str:
        return self.settings.get("ca_name", "privadapt-ca")

    @property
    def address(self) -> str:
        host = self.coordinator["host"]
        return f"[{host}]:{self.coordinator['port']}" if ":" in host else \
            f"{host}:{self.coordinator['port']}"

    @property
    def schema(self) -> Path | None:
        schema = self.settings.get("schema")
        return None if schema is None else self.source.parent / schema

    def policy(self, name: str) -> SitePolicy:
        """The site's policy: the defaults, the federation's template, the
        site's own table; peers are the other sites unless one of those says."""
        merged = {section: dict(values) for section, values in DEFAULT_POLICY.items()}
        site = next(s for s in self.sites if s["name"] == name)
        for layer in (self.policy_template, site.get("policy", {})):
            for section, values in layer.items():
                if not isinstance(values, Mapping):
                    raise ConfigError(f"{self.source}: policy [{section}] must be a table")
                merged.setdefault(section, {}).update(values)
        merged["site"]["name"] = name
        merged.setdefault("federation", {}).setdefault(
            "peers", sorted(s["name"] for s in self.sites if s["name"] != name))
        return SitePolicy.from_dict(merged, source=f"{self.source}: policy of site {name!r}")


def _read_federation(path: Path) -> _Federation:
    data = read_toml(path, "federation file", "pass the federation TOML to provision")
    source = f"federation file {path}"
    unknown = sorted(set(data) - set(_TOP_LEVEL))
    if unknown:
        raise ConfigError(f"{source}: unknown section(s) {', '.join(unknown)}; known: "
                          f"{', '.join(_TOP_LEVEL)}")
    settings = read_sections({"federation": data.get("federation", {})}, _FEDERATION, source)
    if "coordinator" not in data:
        raise ConfigError(f"{source}: missing [coordinator] (its host and port)")
    coordinator = read_sections({"coordinator": data["coordinator"]}, _COORDINATOR, source)
    sites = [_entry(entry, "site", _SITE, source) for entry in _tables(data, "site", source)]
    operators = [_entry(entry, "operator", _OPERATOR, source)
                 for entry in _tables(data, "operator", source)]
    if not sites:
        raise ConfigError(f"{source}: name at least one [[site]]")
    policy = data.get("policy", {})
    if not isinstance(policy, Mapping):
        raise ConfigError(f"{source}: [policy] must be a table of policy sections")
    plan = _Federation(path, settings, coordinator, policy, sites, operators)
    if plan.schema is not None:
        Schema.from_toml(plan.schema)  # a bad schema is refused before anything is written
    return plan


def _tables(data: Mapping[str, Any], key: str, source: str) -> list[Mapping[str, Any]]:
    tables = data.get(key, [])
    if not isinstance(tables, list) or not all(isinstance(t, Mapping) for t in tables):
        raise ConfigError(f"{source}: write each {key} as a [[{key}]] table")
    return tables


def _entry(table: Mapping[str, Any], kind: str, layout: Layout, source: str) -> dict[str, Any]:
    own = {k: v for k, v in table.items() if not (kind == "site" and k == "policy")}
    values = read_sections({kind: own}, layout, source)
    certs.validate_name(values["name"], f"[[{kind}]] name")
    if kind == "site" and "policy" in table:
        values["policy"] = table["policy"]
    return values


def _issue(ca: Path, kit: Path, role: str, name: str, days: int,
           hosts: tuple[str, ...] = ("localhost", "127.0.0.1")) -> dict[str, Path]:
    """Issue ``name``'s certificate from ``ca`` and move it, its key (mode
    0600 kept) and the CA certificate into ``kit/tls``: the key does not stay
    on the CA machine."""
    stale = [ca / f"{name}.{ext}" for ext in ("key", "crt")]
    for path in stale:  # left by an interrupted run: the kit is issued again
        path.unlink(missing_ok=True)
    issued = certs.issue_certificate(ca, role, name, valid_days=days, hosts=hosts)  # type: ignore[arg-type]
    tls = kit / "tls"
    files = {"cert": tls / f"{name}.crt", "key": tls / f"{name}.key",
             "ca": tls / certs.CA_CERT_FILE}
    os.replace(issued.cert, files["cert"])
    os.replace(issued.key, files["key"])
    shutil.copyfile(ca / certs.CA_CERT_FILE, files["ca"])
    return files


def _write_coordinator(plan: _Federation, kit: Path, ca: Path) -> None:
    settings = dict(plan.coordinator)
    host, port = settings.pop("host"), settings.pop("port")
    hosts = (host, *settings.pop("extra_hosts", []))
    name = settings.pop("name", "coordinator")
    files = _issue(ca, kit, "coordinator", name, plan.settings.get("cert_days", 365), hosts)
    listen = settings.pop("listen", f"0.0.0.0:{port}")
    database = kit / settings.pop("database", COORDINATOR_DATABASE)
    public_source = settings.pop("public_source", None)
    # The coordinator keeps the schema even without a public sample: it names
    # the features of the models (server/jobs/result_files.py model_features).
    schema = None if plan.schema is None else shutil.copyfile(plan.schema, kit / SCHEMA_FILE)
    config = CoordinatorConfig(listen=listen, database=database, name=name,
                               public_source=None if public_source is None
                               else kit / public_source,
                               public_source_schema=schema, **files, **settings)
    _write(kit / "coordinator.toml", config.to_toml(kit))
    _write(kit / unit_file_name("coordinator"), render_unit("coordinator", *_install(plan)))
    _write(kit / "README.txt", _next_steps("coordinator", name, plan))


def _write_site(plan: _Federation, site: Mapping[str, Any], policy: SitePolicy, kit: Path,
                ca: Path) -> None:
    name = site["name"]
    files = _issue(ca, kit, "site", name, plan.settings.get("cert_days", 365))
    schema = None if plan.schema is None else shutil.copyfile(plan.schema, kit / SCHEMA_FILE)
    policy_path = _write(kit / "policy.toml", _POLICY_HEADER + policy.to_toml())
    config = SiteConfig(coordinator=plan.address, data=kit / site["data"], policy=policy_path,
                        database=kit / site.get("database", SITE_DATABASE), schema=schema,
                        **files)
    _write(kit / "site.toml", config.to_toml(kit))
    _write(kit / unit_file_name("site"), render_unit("site", *_install(plan)))
    _write(kit / "README.txt", _next_steps("site", name, plan, config.database))


def _write_operator(plan: _Federation, operator: Mapping[str, Any], kit: Path, ca: Path) -> None:
    name = operator["name"]
    files = _issue(ca, kit, "operator", name, operator.get("days", 90))
    _write(kit / "operator.toml", OperatorConfig(plan.address, **files).to_toml(kit))
    _write(kit / "README.txt", _next_steps("operator", name, plan))


def _install(plan: _Federation) -> tuple[str, str]:
    return (plan.settings.get("config_dir", DEFAULT_CONFIG_DIR),
            plan.settings.get("venv", DEFAULT_VENV))


_POLICY_HEADER = """\
# This site's privacy policy, provisioned from the federation file as a
# template: the terms are the site operator's own decision. Review every value
# (deploy/policy.toml explains each) before `privadapt ledger init`.
"""


def _next_steps(role: str, name: str, plan: _Federation, database: Path | None = None) -> str:
    config_dir, venv = _install(plan)
    where = "the operator's machine" if role == "operator" else f"{config_dir} on its machine"
    lines = [f"Startup kit of {role} {name!r}. Copy this directory to {where} over a "
             "channel you trust (tls/ holds its private key, mode 0600)."]
    if role == "coordinator":
        lines += [f"Then: install -m 0644 {unit_file_name('coordinator')} /etc/systemd/system/",
                  "      systemctl daemon-reload && systemctl enable --now privadapt-coordinator"]
    elif role == "site":
        lines += ["Then review policy.toml, put the data where site.toml says, and, once, as "
                  "the service user:",
                  f"      {venv}/bin/privadapt ledger init --site-db {database} "
                  f"--policy {config_dir}/policy.toml",
                  f"      install -m 0644 {unit_file_name('site')} /etc/systemd/system/",
                  "      systemctl daemon-reload && systemctl enable --now privadapt-site"]
    else:
        lines += ["Then: privadapt sites --config operator.toml"]
    return "\n".join(lines) + "\n"


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
