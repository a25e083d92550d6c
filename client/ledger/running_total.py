"""A site's exact total after some of its charges, for ``ledger show`` and
``ledger report``.

Each charge stores the running epsilon that admitted it
(``Charge.epsilon_after``): the exact figure when the charge needed it,
otherwise an upper bound (client/ledger/totals.py) that can sit at the cap
while the exact total is below it. An operator must never read that bound as
the spend, so what these pages print after a charge is the policy's exact
accountant over the charges up to it, at the cap's delta
(:func:`~privadapt.client.ledger.accounting.exact_report`). Each figure is one
accountant report, so they are computed at a bounded number of charges:
every job's last charge and evenly spaced ones.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from privadapt.client.ledger.accounting import exact_report, mechanism_json
from privadapt.client.ledger.view import Charge
from privadapt.client.policy import SitePolicy

MAX_POINTS = 60


def chosen_charges(charges: Sequence[Charge], points: int = MAX_POINTS) -> list[int]:
    """Indices (0-based) to compute the total after: the last charge of
    every job (when there are at most ``points`` jobs) and at most
    ``points`` evenly spaced ones, always the last."""
    total = len(charges)
    if total == 0:
        return []
    count = min(points, total)
    chosen = {max(0, round(total * (i + 1) / count) - 1) for i in range(count)}
    last_of_job = {charge.job_id: index for index, charge in enumerate(charges)}
    if len(last_of_job) <= points:
        chosen |= set(last_of_job.values())
    return sorted(chosen)


def exact_totals(charges: Sequence[Charge], policy: SitePolicy,
                 indices: Sequence[int]) -> dict[int, float]:
    """The site's exact epsilon at its cap's delta after each charge of
    ``indices`` (0-based, ascending)."""
    wanted = set(indices)
    groups: Counter[str] = Counter()
    totals = {}
    for index, charge in enumerate(charges[:max(wanted, default=-1) + 1]):
        groups[mechanism_json(charge.mechanism)] += 1
        if index in wanted:
            totals[index] = exact_report(dict(groups), policy).epsilon
    return totals
