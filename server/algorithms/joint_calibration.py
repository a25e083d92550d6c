"""Joint calibration: scale a job's sub-budgets so that the accountant the
sites' ledgers use composes the job's releases to its whole epsilon.

Why. A job made of steps (candidates, a selection, ...) splits its (epsilon,
delta) among them by basic composition and calibrates each step's noise to
its own (epsilon_i, delta_i). The sites' ledgers compose the same releases
with the PLD accountant (common/accounting/accountant.py), which is much tighter: for
the selection job at epsilon 1 a ledger's total came to about 0.57 epsilon,
so 43% of the budget bought no accuracy.

How. ``releases_at(c)`` runs the job's own algorithm with every step's
epsilon multiplied by a common factor c (every delta_i kept as planned) on
stand-ins (:class:`~privadapt.server.federation.planning.PlanningFederation`,
what ``launch --dry-run`` uses) and returns the releases it made.
:func:`calibrate_scale` searches c (a secant step, then a power-law
interpolation across the bracket, each safeguarded by bisection) for the largest c
whose releases, each as a site charges it (``charged_at_site``, under every
adjacency given), composed by ``PrivacyAccountant`` (the ledgers' class and
method), give at most epsilon at the job's delta; it stops once the total is
within ``tolerance`` below epsilon, and never returns a c whose total it has
not computed to be <= epsilon.

Soundness is by construction: the job's guarantee is the accountant's
composition of exactly the releases that run, provided the algorithm, run
again at the chosen c on the real federation, makes the same releases. That
holds when the release sequence is data-independent: which kernels are asked,
how often and with which mechanism must depend only on public settings
(epsilon, delta, T, clipping, the public sizes and dimension, public data),
never on an answer (the stand-ins answer zeros). A caller whose release
count depends on answers must not use this. The real sites' ledgers
recompute each sensitivity from their own clipping and grid; an algorithm
declares the coarsest grid and :data:`~privadapt.common.kernels.base.SIZING_RECORDS`,
so a site charges no more than the plan.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from privadapt.common.accounting.accountant import AccountingMethod, PrivacyAccountant
from privadapt.common.data.record_parts import RecordPart
from privadapt.common.federation import Federation, RecordPartView
from privadapt.common.mechanisms import Adjacency
from privadapt.server.federation.planning import (
    PlannedRelease,
    PlanningFederation,
    charged_at_site,
)

DEFAULT_TOLERANCE = 0.01  # stop once the total is within 1% below epsilon
MAX_EVALUATIONS = 40
# Scales stop being told apart below this relative width (the total is then
# as close to epsilon as the search can bring it).
_RESOLUTION = 1e-9
_MAX_SCALE = 1e6
_MIN_SCALE = 1e-6


@dataclass(frozen=True)
class JointCalibration:
    """The factor c found, the releases the job makes at c and their
    composed epsilon (the largest over the adjacencies), at ``delta``."""

    scale: float
    epsilon_total: float
    delta: float
    releases: tuple[PlannedRelease, ...]
    evaluations: int
    seconds: float


def composed_epsilon(releases: Sequence[PlannedRelease], delta: float, dim: int,
                     adjacencies: Sequence[Adjacency] = (Adjacency.REPLACE_ONE,),
                     method: AccountingMethod | str = AccountingMethod.PLD) -> float:
    """The largest, over ``adjacencies``, epsilon at ``delta`` of ``releases``
    as a site accounting under that adjacency by ``method`` charges them."""
    worst = 0.0
    for adjacency in adjacencies:
        accountant = PrivacyAccountant(adjacency, method)
        for release in releases:
            accountant.compose(charged_at_site(release, adjacency, dim))
        worst = max(worst, accountant.report(delta).epsilon)
    return worst


def calibrate_scale(
    releases_at: Callable[[float], Sequence[PlannedRelease]],
    *,
    epsilon: float,
    delta: float,
    dim: int,
    adjacencies: Sequence[Adjacency] = (Adjacency.REPLACE_ONE,),
    method: AccountingMethod | str = AccountingMethod.PLD,
    tolerance: float = DEFAULT_TOLERANCE,
) -> JointCalibration:
    """The largest scale c found (module docstring) with
    ``composed_epsilon(releases_at(c)) <= epsilon``, stopping once it is at
    least ``(1 - tolerance) epsilon``. ``ValueError`` for a budget that is not
    finite and positive, or when no c in [1e-6, 1e6] fits."""
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be finite and > 0 to calibrate, got {epsilon!r}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1) to calibrate, got {delta!r}")
    if not 0 < tolerance < 1:
        raise ValueError(f"tolerance must be in (0, 1), got {tolerance!r}")
    if not adjacencies:
        raise ValueError("adjacencies must name at least one adjacency")
    started = time.perf_counter()
    target = (1.0 - tolerance / 2) * epsilon  # aim inside the window, not at its edge
    low: tuple[float, float, tuple[PlannedRelease, ...]] | None = None  # fits
    high: tuple[float, float] | None = None  # does not fit
    scale, evaluations = 1.0, 0
    while evaluations < MAX_EVALUATIONS:
        releases = tuple(releases_at(scale))
        total = composed_epsilon(releases, delta, dim, adjacencies, method)
        evaluations += 1
        if total <= epsilon:
            if low is None or scale > low[0]:
                low = (scale, total, releases)
        elif high is None or scale < high[0]:
            high = (scale, total)
        if low is not None and low[1] >= (1.0 - tolerance) * epsilon:
            break
        if low is not None and high is not None and high[0] <= low[0] * (1 + _RESOLUTION):
            break
        if low is not None and high is None and low[0] >= _MAX_SCALE:
            break
        if low is None and high is not None and high[0] <= _MIN_SCALE:
            break
        scale = _next_scale(low, high, target)
    if low is None:
        raise ValueError(f"no scale of the sub-budgets in [{_MIN_SCALE:g}, {_MAX_SCALE:g}] "
                         f"composes to at most epsilon {epsilon:g} at delta {delta:g}")
    return JointCalibration(low[0], low[1], delta, low[2], evaluations,
                            time.perf_counter() - started)


def _next_scale(low: tuple[float, float, tuple] | None, high: tuple[float, float] | None,
                target: float) -> float:
    """The next scale to try: with both ends of the bracket known, the power
    law total = a c^k through them solved for the target; with one, a secant
    step on total ~ c from it. Kept strictly inside the bracket (else its
    geometric midpoint, or a doubling or halving while one side is unknown)."""
    lower = low[0] if low is not None else 0.0
    upper = high[0] if high is not None else math.inf
    if low is not None and high is not None and 0 < low[1] < high[1] < math.inf:
        power = math.log(high[1] / low[1]) / math.log(high[0] / low[0])
        guess = lower * (target / low[1]) ** (1.0 / power)
    else:
        anchor = low if low is not None else high
        guess = (anchor[0] * target / anchor[1] if 0 < anchor[1] < math.inf
                 else 2.0 * anchor[0] if anchor is low else anchor[0] / 2.0)
    width = _RESOLUTION * max(lower, 1e-300)
    if lower + width < guess < upper - width:
        return min(max(guess, _MIN_SCALE), _MAX_SCALE)
    if low is not None and high is not None:
        return math.sqrt(lower * upper)
    return min(2.0 * lower, _MAX_SCALE) if high is None else max(upper / 2.0, _MIN_SCALE)


def stand_in(federation: Federation) -> tuple[PlanningFederation, Federation]:
    """(recorder, view): a :class:`PlanningFederation` with ``federation``'s
    job id, public sizes and dimension, and what an algorithm should query in
    place of ``federation``: the recorder restricted to the same record part
    when ``federation`` is a part view (so the algorithm sees the same public
    part sizes and every release carries the same part), else the recorder."""
    part = federation.records if isinstance(federation, RecordPartView) else RecordPart.ALL
    sizes = (federation.restricted_to(RecordPart.ALL).site_sizes if not part.is_all
             else federation.site_sizes)
    recorder = PlanningFederation(federation.job_id, sizes, federation.dim)
    return recorder, (recorder if part.is_all else recorder.restricted_to(part))
