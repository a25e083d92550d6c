"""A job's privacy plan: its releases, what each site will be charged for them
and what each site will have left (``privadapt launch --dry-run``), and the
launch refusal when a site's remaining budget cannot cover the job.

The releases come from the job's own algorithm (server/federation/planning.py).
Each site's charge is previewed as its ledger would account it: every release
charged by the rule the site itself charges with
(:func:`~privadapt.common.kernels.site_charge.site_charge`: the release's
noise against the kernel's own sensitivities under the site's adjacency, the
larger of replace-one and add/remove on a record part, with the rounding onto
the job's grid and the float error at the site's public record bound),
composed by the site's accounting method
(:class:`~privadapt.common.accounting.accountant.PrivacyAccountant`, the accountant the
ledgers use), read at the site's cap delta. The budget is what the site
reported from its own ledger (Register, Heartbeat: ``pb.SiteBudget``).

This is a preview. The record bound of an add/remove site is its policy's
``max_records``, which it does not register: the preview assumes the default
(:data:`~privadapt.common.kernels.base.SIZING_RECORDS`), so such a site's
float-error term can differ slightly; every site checks every release against
its cap whatever the coordinator believes. What a site reports is only used
to *refuse* a launch (never to allow anything the site's ledger would not): a
site that overstates its spend blocks only jobs that involve it.

"What is left" subtracts the job's epsilon from what the site has left (the
cap minus the epsilon spent): the coordinator sees one number of the site's
history, not its releases, so it cannot compose them. The ledger composes the
whole history, which for Gaussian releases comes to less than the sum, so a
site usually has somewhat more left than the preview says. A launch is refused
when, by that sum, the job would exceed a site's remaining budget: possibly a
job the ledger would still have admitted, never one it would refuse less
safely (the ledger checks every release anyway).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import groupby

from privadapt.common.accounting.accountant import AccountingMethod, PrivacyAccountant
from privadapt.common.errors import ConfigError
from privadapt.common.kernels.base import SIZING_RECORDS
from privadapt.common.mechanisms import Adjacency, Mechanism
from privadapt.common.proto import federation_pb2 as pb
from privadapt.server.federation.planning import PlannedRelease, charged_at_site

PREVIEW_NOTE = ("a preview: each site's own ledger recomputes and checks every charge "
                "against its cap, and is the authority on what it spends")
# Float noise in composing the same releases twice.
_TOLERANCE = 1e-9


@dataclass(frozen=True)
class SiteBudgetPreview:
    """One site's budget before and after the job, at its cap's delta."""

    site: str
    adjacency: Adjacency
    budget: pb.SiteBudget | None  # None: the site reported none
    job_epsilon: float | None  # None: not computable without the budget's delta

    @property
    def remaining(self) -> float | None:
        if self.budget is None:
            return None
        return max(0.0, self.budget.epsilon_cap - self.budget.epsilon_spent)

    @property
    def left_after(self) -> float | None:
        if self.remaining is None or self.job_epsilon is None:
            return None
        return self.remaining - self.job_epsilon

    @property
    def exceeds(self) -> bool:
        left = self.left_after
        return left is not None and left < -_TOLERANCE * max(1.0, self.job_epsilon or 0.0)


def preview_site(site: str, adjacency: Adjacency, budget: pb.SiteBudget | None,
                 releases: Sequence[PlannedRelease], dim: int,
                 max_records: int = SIZING_RECORDS) -> SiteBudgetPreview:
    """What ``releases`` cost ``site`` at its cap's delta by its method."""
    if budget is None:
        return SiteBudgetPreview(site, adjacency, None, None)
    accountant = PrivacyAccountant(adjacency, AccountingMethod(budget.accounting))
    for release in releases:
        if release.sites is None or site in release.sites:  # asked of this site
            accountant.compose(charged_at_site(release, adjacency, dim, max_records))
    return SiteBudgetPreview(site, adjacency, budget,
                             accountant.report(budget.delta_cap).epsilon)


def refuse_over_budget(previews: Sequence[SiteBudgetPreview]) -> None:
    """ConfigError naming every site whose remaining budget the job exceeds."""
    over = [p for p in previews if p.exceeds]
    if not over:
        return
    details = "; ".join(
        f"site {p.site!r} has epsilon {_number(p.remaining)} left of its cap "
        f"{_number(p.budget.epsilon_cap)} at delta {p.budget.delta_cap:g} (its ledger), and "
        f"this job would cost it {_number(p.job_epsilon)} there" for p in over)
    raise ConfigError(f"job: it would exceed the remaining privacy budget of "
                      f"{len(over)} site(s): {details}. Lower [job] epsilon or the number of "
                      "iterations, or leave these sites out ([job] sites); nothing was started")


def describe_release(mechanism: Mechanism) -> str:
    """Every field that sets the release's cost: the kind and adjacency, then
    the mechanism's own fields (sensitivity and noise per block, a sampling
    rate, an epsilon), as the ledgers store them."""
    fields = {k: v for k, v in mechanism.to_dict().items() if k not in ("kind", "adjacency")}
    text = ", ".join(f"{name}={_compact(value)}" for name, value in fields.items())
    return f"{mechanism.summary} [{mechanism.adjacency.value}] {text}"


def plan_lines(releases: Sequence[PlannedRelease],
               previews: Sequence[SiteBudgetPreview]) -> list[str]:
    """The plan as text: runs of identical releases, then one line per site."""
    lines = [f"privacy plan: {len(releases)} release(s), each charged to every "
             "participating site (or to the sites it names)"]
    position = 1
    for (kernel, form, mechanism, sites), run in groupby(
            releases, key=lambda r: (r.kernel, r.form.value, r.mechanism, r.sites)):
        count = len(list(run))
        span = (f"release {position}" if count == 1
                else f"releases {position}-{position + count - 1}")
        only = "" if sites is None else f" (only {', '.join(sites)})"
        lines.append(f"  {span} ({count}x): kernel {kernel}, {form}{only}, "
                     f"{describe_release(mechanism)}")
        position += count
    lines.append("each site at its own cap's delta (epsilon spent as its ledger reported it):")
    for p in previews:
        if p.budget is None:
            lines.append(f"  {p.site:<20} budget not reported (site not connected, or older "
                         "than this coordinator); its ledger still checks every release")
            continue
        lines.append(
            f"  {p.site:<20} this job {_number(p.job_epsilon)} at delta "
            f"{p.budget.delta_cap:g} ({p.budget.accounting.upper()}, {p.adjacency.value}); "
            f"spent {_number(p.budget.epsilon_spent)} of cap {_number(p.budget.epsilon_cap)}, "
            f"left {_number(p.remaining)} -> about {_number(p.left_after)} after"
            f"{'  EXCEEDS' if p.exceeds else ''}")
    lines.append(f"this is {PREVIEW_NOTE}")
    return lines


def previews_for(releases: Sequence[PlannedRelease], sites: Sequence[str],
                 adjacencies: Mapping[str, Adjacency], budgets: Mapping[str, pb.SiteBudget],
                 dim: int, sizes: Mapping[str, int | None] | None = None
                 ) -> list[SiteBudgetPreview]:
    """One preview per named site (registered ones; others have no adjacency).
    ``sizes``: each site's public n (None or absent where it is private: the
    preview then assumes the default record bound)."""
    sizes = sizes or {}
    return [preview_site(name, adjacencies[name], budgets.get(name), releases, dim,
                         sizes.get(name) or SIZING_RECORDS)
            for name in sites if name in adjacencies]


def _number(value: float | None) -> str:
    if value is None:
        return "?"
    return "inf" if math.isinf(value) else f"{value:.4g}"


def _compact(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_compact(v) for v in value) + "]"
    return str(value)
