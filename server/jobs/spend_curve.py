"""A job's spend after each release, at the job's delta, from a site's own
charges: what the job report's progress figure draws against the job's
target (both at the job's delta, so a job that spent its target ends on it).

The running figure a site states with each share is at its cap's delta
(common/privacy_figures.py); this curve is recomputed from the mechanisms the
site reported for the job at its end, by the site's accounting method and
adjacency, so its last point is the site's own headline figure. At most
``points`` prefixes are composed (each is one accountant report).
"""

from __future__ import annotations

from collections.abc import Sequence

from privadapt.common.accounting.accountant import AccountingMethod, epsilon_spent
from privadapt.common.mechanisms import Adjacency, Mechanism

MAX_POINTS = 40


def spend_curve(mechanisms: Sequence[Mechanism], delta: float, adjacency: Adjacency,
                method: AccountingMethod, points: int = MAX_POINTS
                ) -> dict[str, list[float]]:
    """``{"releases": [k, ...], "epsilon": [...]}``: the epsilon at ``delta``
    of the first k releases, for at most ``points`` values of k ending at
    every release; empty lists for no release."""
    total = len(mechanisms)
    if total == 0:
        return {"releases": [], "epsilon": []}
    count = min(points, total)
    counts = sorted({max(1, round(total * (i + 1) / count)) for i in range(count)})
    return {"releases": [float(k) for k in counts],
            "epsilon": [epsilon_spent(mechanisms[:k], delta, adjacency, method).epsilon
                        for k in counts]}
