"""One step's own privacy line in a job of several steps, read off the sites'
ledger views (``Federation.privacy_spent``): how many releases each ledger
holds before the step, and the epsilon of those charged since. A stand-in
federation (server/federation/planning.py) reports no spend, so these read
as empty there.
"""

from __future__ import annotations

import math

from privadapt.common.accounting.accountant import epsilon_spent
from privadapt.common.federation import Federation


def report_delta(delta: float) -> float | None:
    """The delta to read a job's spend at: ``delta``, or None (each site's cap
    delta) for the noise-free run (delta 0)."""
    return None if delta == 0 else delta


def charges_so_far(federation: Federation) -> dict[str, int]:
    """How many releases each site's ledger holds for the job so far."""
    return {site: len(spent.mechanisms) for site, spent in federation.privacy_spent().items()}


def step_epsilon(federation: Federation, before: dict[str, int], delta: float
                 ) -> dict[str, float]:
    """Each site's epsilon at ``delta`` for the releases charged since ``before``
    (one step's own privacy line; inf for the noise-free run)."""
    if delta == 0:
        return {site: math.inf for site in before}
    spent = federation.privacy_spent()
    return {site: epsilon_spent(spent[site].mechanisms[before.get(site, 0):], delta).epsilon
            for site in spent}
