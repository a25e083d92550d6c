"""Shared fixtures: small synthetic sites with their own ledgers."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.client.site import Site
from privadapt.common.noise.floating import SeededRandomBits
from tests.synthetic_data import synthetic_dataset

SiteFactory = Callable[..., Site]


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
