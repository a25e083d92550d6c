"""How a privacy figure reads wherever it is printed: commands, log lines,
reports and plots.

One presentation, so that the same spend never reads as two numbers:

* the headline is a job's spend **at the job's delta**, from each site's own
  ledger (the privacy report a site sends at the job's end);
* beside it, the site's **lifetime total at its cap's delta**, with the cap
  and what is left: the figure the cap is checked against;
* while a job runs, the figure a site states with each share is the job's
  spend so far **at the site's cap delta** (a site does not know the job's
  delta before its report); it is printed as that, never as the headline;
* every figure names its delta;
* a ledger's admission bound (``Charge.epsilon_after``, an upper bound that
  can sit at the cap while the exact total is below it) is never printed as
  a spend.

Every figure is rounded by :func:`epsilon_text`, so two places that print
the same number print the same text.
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def epsilon_text(value: float) -> str:
    """``value`` rounded for the eye: 4 significant digits, or "inf"."""
    return "inf" if math.isinf(value) else f"{value:.4g}"


def job_spend_text(epsilon: float, delta: float) -> str:
    """The headline: ``this job epsilon 0.9989 at delta 1e-06 (the job's)``."""
    return f"this job epsilon {epsilon_text(epsilon)} at delta {delta:g} (the job's)"


def site_total_text(epsilon: float, delta: float, cap: float) -> str:
    """Beside the headline: ``site total epsilon 0.8715 at delta 1e-05 (the
    cap's), cap 3, 2.128 left``."""
    left = max(0.0, cap - epsilon) if math.isfinite(epsilon) else 0.0
    return (f"site total epsilon {epsilon_text(epsilon)} at delta {delta:g} (the cap's), "
            f"cap {epsilon_text(cap)}, {epsilon_text(left)} left")


def running_spend_text(epsilon: float, cap_delta: float | None = None) -> str:
    """While a job runs: ``job epsilon so far 0.41 at delta 1e-05 (the sites'
    cap)``; without one delta shared by the sites, ``at each site's cap delta``."""
    where = ("at each site's cap delta" if cap_delta is None
             else f"at delta {cap_delta:g} (the sites' cap)")
    return f"job epsilon so far {epsilon_text(epsilon)} {where}"


def shared_delta(deltas: Iterable[float]) -> float | None:
    """The one cap delta all of ``deltas`` share, else None."""
    distinct = set(deltas)
    return distinct.pop() if len(distinct) == 1 else None


def site_privacy_line(name: str, site: dict) -> str:
    """One site of a job's privacy report (``privacy_report.json``'s
    ``sites`` entry) as one line: the headline, then the site's total."""
    return (f"{name}: {job_spend_text(site['job_epsilon'], site['delta'])}; "
            f"{site_total_text(site['total_epsilon'], site['total_delta'], site['cap_epsilon'])}")
