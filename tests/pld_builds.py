"""Counting the privacy loss distributions dp-accounting builds, so that a
test can check that a refusal or a calibration builds none (the property that
made them cheap) without reading a clock."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from dp_accounting.pld import pld_pmf

from privadapt.client.ledger import accounting as ledger_accounting
from privadapt.client.ledger import totals
from privadapt.common.accounting import calibration, pld


def forget_cached_accounting() -> None:
    """Empty the process's caches of PLDs and of figures computed with them
    (pure functions of public values: clearing them changes no result), so a
    count sees the work a freshly started site would do, whatever ran before
    in this process."""
    for cached in (totals.release_pld_terms, pld._sampled_gaussian_single,
                   calibration._default_multiplier, calibration._reused_multiplier):
        cached.cache_clear()
    with ledger_accounting._CACHE_LOCK:
        ledger_accounting._CACHE.clear()


@contextmanager
def counted_pld_builds() -> Iterator[list[str]]:
    """A list that gains the class name of every probability mass function
    dp-accounting builds inside the block (each PLD, and each composition of
    two, is made of one or two, so an empty list means no PLD was built),
    starting from empty accounting caches."""
    forget_cached_accounting()
    built: list[str] = []
    original = pld_pmf.PLDPmf.__init__

    def counting(self, *args, **kwargs):
        built.append(type(self).__name__)
        original(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pld_pmf.PLDPmf, "__init__", counting)
        yield built
