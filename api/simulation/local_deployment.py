"""A federation's files in one work directory on this machine.

``privadapt simulate``, :mod:`privadapt.simulation.process_federation` (networked
experiments and benchmarks) and the networked tests all need the same files: a
federation CA with certificates for the coordinator, an operator and each
site; a coordinator configuration; and per site a directory with its data, its
policy and its configuration. :class:`LocalDeployment` writes them, rendering
every configuration with the object's own ``to_toml`` so the files are exactly
what the daemons' loaders read::

    pki = write_pki(workdir / "pki")                      # CA, coordinator, operator
    deployment = LocalDeployment(workdir, pki)
    coordinator_toml = deployment.write_coordinator(f"127.0.0.1:{port}", min_sites=2)
    site_toml = deployment.write_site(SitePolicy("site-1", 1.0, 1e-5), dataset,
                                      coordinator=f"127.0.0.1:{port}")

Starting the processes is :mod:`privadapt.simulation.local_processes`.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from privadapt.cli.operator import OperatorConfig
from privadapt.client.daemon.config import SiteConfig
from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.common.data.dataset import Dataset
from privadapt.common.secure import certs
from privadapt.server.coordinator.main import CoordinatorConfig

LOCALHOST = "127.0.0.1"
COORDINATOR_NAME = "coordinator"
OPERATOR_NAME = "operator"


def write_pki(pki: Path, site_names: Sequence[str] = ()) -> Path:
    """A new federation CA in ``pki`` and certificates for one coordinator, one
    operator and each of ``site_names``, each named by its role or site name
    (:meth:`LocalDeployment.write_site` issues a site's certificate itself if
    it is not among these)."""
    certs.init_ca(pki)
    certs.issue_certificate(pki, "coordinator", COORDINATOR_NAME)
    certs.issue_certificate(pki, "operator", OPERATOR_NAME)
    for name in site_names:
        certs.issue_certificate(pki, "site", name)
    return pki


def free_port() -> int:
    """A port free on 127.0.0.1 now, so the sites can be configured and
    started together with the coordinator (a race with another program taking
    it in between is possible, and makes the coordinator fail to start, loudly)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOCALHOST, 0))
        return probe.getsockname()[1]


class LocalDeployment:
    """The configuration files of a federation under ``workdir``, with the
    certificates of the CA in ``pki`` (made by :func:`write_pki`; by default
    ``workdir/pki``). A path inside the directory of the file that names it
    is written relative to that directory (which the loaders resolve it
    against), any other path as an absolute one."""

    def __init__(self, workdir: Path, pki: Path | None = None) -> None:
        self.workdir = Path(workdir).resolve()
        self.pki = self.workdir / "pki" if pki is None else Path(pki).resolve()

    def tls_files(self, name: str) -> dict[str, Path]:
        """The ``cert``, ``key`` and ``ca`` a party named ``name`` uses."""
        return {"cert": self.pki / f"{name}.crt", "key": self.pki / f"{name}.key",
                "ca": self.pki / certs.CA_CERT_FILE}

    def write_coordinator(self, listen: str, *, public_source: Dataset | Path | None = None,
                          **settings: Any) -> Path:
        """``workdir/coordinator.toml`` for a coordinator serving on ``listen``
        with its store ``workdir/coordinator.db``; a public source given as a
        dataset is saved as ``workdir/public-source.npz``. ``settings`` are
        further :class:`CoordinatorConfig` fields (``round_timeout_s``, ...)."""
        if isinstance(public_source, Dataset):
            public_source = _save_npz(public_source, self.workdir / "public-source.npz")
        config = CoordinatorConfig(listen=listen, database=self.workdir / "coordinator.db",
                                   public_source=public_source, **self.tls_files(COORDINATOR_NAME),
                                   **settings)
        return _write(self.workdir / "coordinator.toml", config.to_toml(self.workdir))

    def write_operator(self, coordinator: str, *, insecure: bool = False) -> Path:
        """``workdir/operator.toml`` for the operator certificate of :func:`write_pki`
        (no ``[tls]`` if ``insecure``: a plaintext coordinator)."""
        tls = dict.fromkeys(("cert", "key", "ca")) if insecure else self.tls_files(OPERATOR_NAME)
        config = OperatorConfig(coordinator, **tls, insecure=insecure)
        return _write(self.workdir / "operator.toml", config.to_toml(self.workdir))

    def write_site(self, policy: SitePolicy, data: Dataset | Path, coordinator: str, *,
                   schema: Path | None = None) -> Path:
        """The directory ``workdir/NAME`` of the site ``policy.site_name``: its
        data (a dataset is saved as ``data.npz``; a path, such as a CSV with
        its ``schema``, is used where it is), ``policy.toml``, its new ledger
        ``site.db`` (created here, as ``privadapt ledger init`` would), and
        ``site.toml`` dialling ``coordinator``, whose
        path is returned. The site's certificate is issued by the CA unless
        one of that name exists."""
        name = policy.site_name
        site_dir = self.workdir / name
        site_dir.mkdir(parents=True, exist_ok=True)
        if not (self.pki / f"{name}.crt").exists():
            certs.issue_certificate(self.pki, "site", name)
        if isinstance(data, Dataset):
            data = _save_npz(data, site_dir / "data.npz")
        policy_path = _write(site_dir / "policy.toml", policy.to_toml())
        # What `privadapt ledger init` does: a site daemon never creates its ledger.
        PrivacyLedger(site_dir / "site.db", policy, create=True).close()
        config = SiteConfig(coordinator=coordinator, data=Path(data).resolve(),
                            policy=policy_path, database=site_dir / "site.db",
                            schema=schema and Path(schema).resolve(), **self.tls_files(name))
        return _write(site_dir / "site.toml", config.to_toml(site_dir))


def _save_npz(data: Dataset, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, features=data.features, labels=data.labels)
    return path


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
