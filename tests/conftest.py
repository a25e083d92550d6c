"""Shared fixtures: small synthetic sites with their own ledgers."""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable

import pytest
from hypothesis import settings

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.client.site import Site
from privadapt.common.noise.floating import SeededRandomBits
from tests.synthetic_data import synthetic_dataset

SiteFactory = Callable[..., Site]

# Hypothesis fails an example that takes over 200 ms by default: a timing
# assertion that a loaded machine trips. No test here is about speed, so no
# example has a deadline (a test's own settings inherit this profile).
settings.register_profile("no-deadline", deadline=None)
settings.load_profile("no-deadline")

RAM_DIRECTORY = "/dev/shm"
RAM_NEEDED = 2 << 30  # bytes free; a container's default /dev/shm (64 MiB) is too small


def pytest_configure(config: pytest.Config) -> None:
    """Temporary files (tmp_path, the ledgers, the site daemons' folders) on a
    RAM filesystem when there is a roomy one and TMPDIR is not chosen: a
    ledger commits every charge synchronously, and on a busy disk the tests
    waited on those commits, not on their own work. Workers and the processes
    tests start inherit TMPDIR."""
    if "TMPDIR" in os.environ or not os.path.isdir(RAM_DIRECTORY):
        return
    if not os.access(RAM_DIRECTORY, os.W_OK | os.X_OK):
        return
    free = os.statvfs(RAM_DIRECTORY)
    if free.f_bavail * free.f_frsize >= RAM_NEEDED:
        os.environ["TMPDIR"] = RAM_DIRECTORY
        tempfile.tempdir = None  # gettempdir() reads TMPDIR again


@pytest.fixture
def make_site(tmp_path) -> SiteFactory:
    """Build a Site over synthetic data with a ledger in tmp_path."""

    def factory(
        name: str = "site-a",
        num_records: int = 200,
        dim: int = 5,
        seed: int = 0,
        noise_seed: int | None = 0,
        **policy_fields,
    ) -> Site:
        policy_fields.setdefault("epsilon_cap", 10.0)
        policy_fields.setdefault("delta_cap", 1e-5)
        if math.isinf(policy_fields["epsilon_cap"]):
            policy_fields.setdefault("allow_non_private", True)
        policy = SitePolicy(site_name=name, **policy_fields)
        ledger = PrivacyLedger(tmp_path / f"{name}.db", policy, create=True)
        source = None if noise_seed is None else SeededRandomBits(noise_seed)
        return Site(synthetic_dataset(num_records, dim, seed), policy, ledger, source)

    return factory


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Modules with a test marked slow run first, each whole (its module
    fixtures set up once), the rest in their usual order. pytest-xdist's
    worksteal gives each worker a contiguous share of this list and later
    steals from the end of a worker's queue, so a long test collected late
    starts last and the whole run waits for it alone; started first, the
    short tests fill in around it."""
    slow_modules = {item.module for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.module not in slow_modules)


@pytest.fixture(scope="session")
def ray_instance():
    """A local Ray instance for the tests that place work in it (two CPUs and
    no dashboard: Ray's own start-up is not light), shut down at the end."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
