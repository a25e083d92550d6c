"""A self-certifying kernel runs at most the policy's ``max_certificates``
certificates between two clearings of its latch, so where its first failure
falls is one of at most max_certificates + 1 outcomes: log2 of that many bits,
a public number (client/ledger/latches.py). The count survives a restart,
counts failed certificates too, and only the operator's clearing sets it back
to 0; the refusal names the policy's number and reads the same on
neighbouring datasets."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privadapt.client.ledger.latches import EXHAUSTED
from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import DEFAULT_MAX_CERTIFICATES, SitePolicy
from privadapt.client.site import DISABLED_KERNEL_REASON, EXHAUSTED_KERNEL_REASON, Site
from privadapt.common.data.dataset import Dataset
from privadapt.common.errors import ConfigError, QueryRefusedError, UncertifiedComputationError
from privadapt.common.kernels import get_kernel
from privadapt.common.mechanisms import Adjacency
from tests.client.ledger.test_kernel_latch import DATA, EXACT, NUM, query

LIMIT = 3


def capped_policy(limit: int | None = LIMIT) -> SitePolicy:
    return SitePolicy("s", math.inf, 1e-5, adjacency=Adjacency.REPLACE_ONE,
                      allow_non_private=True, max_records=2 * NUM, max_certificates=limit)


def open_site(db, data: Dataset = DATA, limit: int | None = LIMIT) -> Site:
    policy = capped_policy(limit)
    return Site(data, policy, PrivacyLedger(db, policy, create=not db.exists()))


@pytest.fixture
def computes(monkeypatch):
    """How many times the certificate ran; ``fail_at`` makes that run's fail."""
    kernel = type(get_kernel(EXACT))
    compute = kernel.compute
    runs = {"count": 0, "fail_at": None}

    def counted(self, data, params, state):
        runs["count"] += 1
        if runs["count"] == runs["fail_at"]:
            raise UncertifiedComputationError("certified error 1e-3 exceeds 1e-12")
        return compute(self, data, params, state)

    monkeypatch.setattr(kernel, "compute", counted)
    return runs


def transcript(site: Site, queries: int, first: int = 1) -> list[str]:
    """What a coordinator sees of ``queries`` queries: "answered" or the refusal's words."""
    seen = []
    for number in range(first, first + queries):
        try:
            site.answer(query(EXACT, f"q-{number}"), 1)
            seen.append("answered")
        except QueryRefusedError as refused:
            seen.append(str(refused).split("): ", 1)[1])
    return seen


EXHAUSTED_WORDS = EXHAUSTED_KERNEL_REASON.format(limit=LIMIT)


def test_a_kernel_runs_at_most_max_certificates_between_clearings(tmp_path, computes):
    db = tmp_path / "site.db"
    site = open_site(db)
    assert transcript(site, 5) == ["answered"] * LIMIT + [EXHAUSTED_WORDS] * 2
    assert computes["count"] == LIMIT  # the refused queries ran nothing
    assert len(site.ledger.charges()) == LIMIT  # nor were they charged
    assert site.ledger.certificates_run(EXACT) == LIMIT
    assert site.ledger.active_latch(EXACT).outcome == EXHAUSTED
    site.ledger.close()
    # A restart keeps the count and the latch.
    site = open_site(db)
    assert transcript(site, 1, first=6) == [EXHAUSTED_WORDS]
    assert site.disabled_kernels == {EXACT}
    # The operator's clearing sets the count back to 0: LIMIT more.
    site.ledger.clear_latch(EXACT)
    assert site.ledger.certificates_run(EXACT) == 0
    assert transcript(site, LIMIT + 1, first=7) == ["answered"] * LIMIT + [EXHAUSTED_WORDS]
    assert computes["count"] == 2 * LIMIT


def test_where_the_first_failure_falls_is_one_of_max_certificates_plus_one_outcomes(
        tmp_path, computes):
    # Every position the first failure can take, and none: the coordinator's
    # transcripts of many more queries than the cap are LIMIT + 1 in all.
    transcripts = set()
    for fail_at in (*range(1, 2 * LIMIT + 1), None):
        computes.update(count=0, fail_at=fail_at)
        site = open_site(tmp_path / f"fail-at-{fail_at}.db")
        seen = transcript(site, 3 * LIMIT)
        site.ledger.close()
        assert computes["count"] <= LIMIT
        transcripts.add(tuple(seen))
    assert len(transcripts) == LIMIT + 1
    assert math.log2(len(transcripts)) == math.log2(LIMIT + 1)  # 2 bits here
    failed = [t for t in transcripts if DISABLED_KERNEL_REASON in t]
    assert all(t.index(DISABLED_KERNEL_REASON) < LIMIT for t in failed)


def test_a_failed_certificate_counts_and_its_clearing_resets_the_count(tmp_path, computes):
    computes["fail_at"] = 2
    site = open_site(tmp_path / "site.db")
    assert transcript(site, 3) == ["answered", DISABLED_KERNEL_REASON, DISABLED_KERNEL_REASON]
    assert site.ledger.certificates_run(EXACT) == 2
    site.ledger.clear_latch(EXACT)
    assert transcript(site, LIMIT + 1, first=4) == ["answered"] * LIMIT + [EXHAUSTED_WORDS]


def test_a_policy_lowered_below_the_count_refuses_before_the_certificate(tmp_path, computes):
    db = tmp_path / "site.db"
    site = open_site(db, limit=5)
    assert transcript(site, LIMIT) == ["answered"] * LIMIT
    site.ledger.close()
    site = open_site(db, limit=2)
    assert transcript(site, 2, first=4) == [EXHAUSTED_KERNEL_REASON.format(limit=2)] * 2
    assert computes["count"] == LIMIT and len(site.ledger.charges()) == LIMIT


def test_the_refusals_read_the_same_on_neighbouring_datasets(tmp_path, computes):
    features, labels = DATA.features.copy(), DATA.labels.copy()
    features[0], labels[0] = -features[0], -labels[0]
    neighbour = Dataset(features, labels, DATA.feature_names)
    assert not np.array_equal(neighbour.features, DATA.features)
    seen = [transcript(open_site(tmp_path / f"{k}.db", data), 2 * LIMIT)
            for k, data in enumerate((DATA, neighbour))]
    assert seen[0] == seen[1] == ["answered"] * LIMIT + [EXHAUSTED_WORDS] * LIMIT


def test_a_deployed_policy_caps_certificates_by_default_and_checks_the_key():
    deployed = SitePolicy("s", 1.0, 1e-5, simulation=False, min_participants=2)
    assert deployed.max_certificates == DEFAULT_MAX_CERTIFICATES == 2**16 - 1
    assert capped_policy(None).max_certificates is None  # a simulation site: no bound
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ConfigError, match="max_certificates must be a whole number >= 1"):
            capped_policy(bad)
    toml = SitePolicy.from_dict(
        {"site": {"name": "s", "simulation": True},
         "privacy": {"epsilon_cap": 1.0, "delta_cap": 1e-5},
         "queries": {"max_certificates": 7}}, "policy.toml")
    assert toml.max_certificates == 7


def test_a_certificate_interrupted_before_it_ends_is_counted_and_stays_counted(
        tmp_path, monkeypatch):
    # The count is written with the armed row, in one transaction: a site
    # that dies inside the certificate (here: an unexpected error, which
    # leaves the row armed) has counted it, across a restart too, so a
    # coordinator cannot buy uncounted certificates with crashes.
    kernel = type(get_kernel(EXACT))

    def interrupted(self, data, params, state):
        raise MemoryError("the site dies inside the certificate")

    db = tmp_path / "site.db"
    site = open_site(db)
    with monkeypatch.context() as patch:
        patch.setattr(kernel, "compute", interrupted)
        with pytest.raises(MemoryError):
            site.answer(query(EXACT, "q-1"), 1)
    site.ledger.close()
    site = open_site(db)
    assert site.ledger.certificates_run(EXACT) == 1
    assert site.ledger.active_latch(EXACT).outcome == "running"
    assert transcript(site, 1, first=2) == [DISABLED_KERNEL_REASON]
    site.ledger.clear_latch(EXACT)
    assert transcript(site, LIMIT + 1, first=3) == ["answered"] * LIMIT + [EXHAUSTED_WORDS]
