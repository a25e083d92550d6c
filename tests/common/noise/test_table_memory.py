"""The exact samplers' tables are bounded in bytes over every job of a
process (common/noise/table_inversion.py, "Memory"): a coordinator that asks
for a new noise parameter in every query makes the site build a table each
time, but never hold more than its policy's ``max_sampler_table_bytes``; which
tables are kept depends only on the (public) parameters asked for."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.client.site import Site
from privadapt.common.noise import table_inversion
from privadapt.common.noise.certified_laws import FoldedDiscreteLaplace
from privadapt.common.noise.discrete import KeystreamBits, discrete_laplace
from privadapt.common.noise.floating import SeededRandomBits
from privadapt.common.noise.table_inversion import (
    LARGEST_TABLE_BYTES,
    MAX_TABLE_ENTRIES,
    TableCache,
    inversion_table,
    sample_by_inversion,
)
from tests.synthetic_data import synthetic_dataset

SCALES = [Fraction(100 + 37 * i, 3) for i in range(12)]


@pytest.fixture
def small_cache(monkeypatch) -> TableCache:
    """A process cache that holds about three of the tables below."""
    bound = 3 * inversion_table(FoldedDiscreteLaplace(SCALES[-1])).nbytes
    cache = TableCache(bound)
    monkeypatch.setattr(table_inversion, "TABLES", cache)
    return cache


def _kept(cache: TableCache) -> list[Fraction]:
    return [law.scale for law, _ in cache._tables]


def test_a_new_parameter_in_every_query_never_holds_more_than_the_bound(small_cache):
    for index, scale in enumerate(SCALES):
        discrete_laplace(scale, 64, SeededRandomBits(index))
        assert small_cache.held_bytes <= small_cache.max_bytes
    assert 1 <= len(_kept(small_cache)) <= 3


def test_the_tables_kept_depend_only_on_the_parameters_asked_for(small_cache):
    order = SCALES[:6] + SCALES[:2]
    for scale in order:
        inversion_table(FoldedDiscreteLaplace(scale))
    first = _kept(small_cache)
    small_cache._tables.clear()
    for scale in order:
        inversion_table(FoldedDiscreteLaplace(scale))
    assert _kept(small_cache) == first
    assert first[-2:] == SCALES[:2]  # the least recently used left first


def test_an_evicted_table_rebuilt_draws_what_it_drew(small_cache):
    law = FoldedDiscreteLaplace(SCALES[0])
    first = sample_by_inversion(law, 1000, KeystreamBits(SeededRandomBits(7)))
    for scale in SCALES[6:]:
        inversion_table(FoldedDiscreteLaplace(scale))
    assert SCALES[0] not in _kept(small_cache)
    again = sample_by_inversion(law, 1000, KeystreamBits(SeededRandomBits(7)))
    np.testing.assert_array_equal(first, again)


def test_the_largest_table_fits_its_declared_bytes():
    assert LARGEST_TABLE_BYTES >= 2 * 8 * (MAX_TABLE_ENTRIES + 1) + 8 * 2**20
    assert LARGEST_TABLE_BYTES < 13 * 2**20


def test_a_site_bounds_the_process_tables_by_its_policy(tmp_path, monkeypatch):
    monkeypatch.setattr(table_inversion, "TABLES", TableCache())
    policy = SitePolicy("s", 1.0, 1e-5, max_sampler_table_bytes=LARGEST_TABLE_BYTES * 2)
    Site(synthetic_dataset(10, 2, 0), policy,
         PrivacyLedger(tmp_path / "s.db", policy, create=True))
    assert table_inversion.TABLES.max_bytes == LARGEST_TABLE_BYTES * 2
