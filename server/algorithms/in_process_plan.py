"""What a networked launch checks before its first release, checked by an
estimator's ``fit`` on an in-process federation that states its sites'
budgets (``LocalFederation.site_budgets``) before its first query:

* the job's delta: in (0, 1), below 1e-3 and below 1/n of the smallest site
  whose size is public (the rules of server/jobs/spec.py and
  ``launch_checks.check_delta_against_sizes``), unless every site's policy
  means large deltas;
* one federation is one job: a fit on a federation whose job was already
  charged (an earlier fit) is refused; a new job is ``federation.new_job()``;
* the job's privacy plan: the estimator's own fit on stand-ins
  (:class:`~privadapt.server.federation.planning.PlanningFederation`, as
  ``privadapt launch --dry-run`` runs it), each release charged as the site
  charges it and composed, by the site's own accountant, with every release
  its ledger holds (an in-process site states them; a daemon states only its
  spend, so a launch composes basically); refused when the job would take a
  site over its cap, so no budget is spent on a job that cannot finish.

The sites' ledgers still check every release against their caps.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from privadapt.common.accounting.accountant import AccountingMethod, PrivacyAccountant
from privadapt.common.accounting.delta_guard import large_delta_refusal
from privadapt.common.errors import ConfigError, PrivadaptError
from privadapt.common.federation import SiteBudgetStatement, SitePrivacy
from privadapt.common.kernels.base import SIZING_RECORDS
from privadapt.common.mechanisms import Adjacency
from privadapt.common.numerics.fixed_point import FixedPointCodec
from privadapt.server.federation.planning import (
    PlannedRelease,
    PlanningFederation,
    charged_at_site,
)

logger = logging.getLogger(__name__)
# A job whose target is this many times inside what every site has left needs
# no plan (_surely_fits).
_MARGIN = 4.0
# Float noise in composing the same releases twice.
_TOLERANCE = 1e-9


@runtime_checkable
class BudgetedFederation(Protocol):
    """An in-process federation whose sites state their budgets."""

    codec: FixedPointCodec

    @property
    def job_id(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def site_budgets(self) -> Mapping[str, SiteBudgetStatement]: ...

    def privacy_spent(self, delta: float | None = None) -> dict[str, SitePrivacy]: ...

    def releases_charged(self) -> dict[str, int]: ...


def check_before_first_release(federation: BudgetedFederation, name: str,
                               params: Mapping[str, Any],
                               fit_stand_in: Callable[[PlanningFederation], object]) -> None:
    """ConfigError, before any query, for what a networked launch of the
    estimator ``name`` (hyperparameters ``params``) would refuse;
    ``fit_stand_in`` fits a clone of it on the planning federation given."""
    budgets = federation.site_budgets()
    _check_delta(name, params, budgets)
    _check_new_job(name, federation)
    if _surely_fits(params, budgets):
        return
    sizes = {site: b.num_records for site, b in budgets.items()}
    planning = PlanningFederation(federation.job_id, sizes, federation.dim, federation.codec)
    try:
        fit_stand_in(planning)
    except (PrivadaptError, ValueError):
        return  # the real fit meets the same error, worded by the sites; the ledgers still check
    except Exception as err:  # the preview must not stop a fit the ledgers would check
        logger.warning("%s.fit: the plan could not be previewed (%s); each site's ledger "
                       "still refuses any release over its cap", name, err)
        return
    try:
        after = {site: _total_after(b, planning.releases, federation.dim, site)
                 for site, b in budgets.items()}
    except ValueError as err:  # a charge the site itself words when it meets it
        logger.warning("%s.fit: the plan's charges could not be previewed (%s)", name, err)
        return
    over = [site for site, total in after.items()
            if total > budgets[site].epsilon_cap * (1 + _TOLERANCE)]
    if over:
        details = "; ".join(
            f"site {site!r} has spent {budgets[site].epsilon_spent:.4g} of its cap "
            f"{budgets[site].epsilon_cap:g} at delta {budgets[site].delta_cap:g}, and with this "
            f"job it would reach {after[site]:.4g}" for site in over)
        raise ConfigError(
            f"{name}.fit: the job would exceed the remaining privacy budget of {len(over)} "
            f"site(s): {details} (its plan, as `privadapt launch --dry-run` previews it, "
            "composed with everything the site's ledger holds). Lower epsilon or the number of "
            "iterations, or fit on fewer sites; nothing was released")


def _surely_fits(params: Mapping[str, Any], budgets: Mapping[str, SiteBudgetStatement]
                 ) -> bool:
    """Whether the plan need not be made: every cap is infinite (simulation
    sites), or the job's target is far inside what every site has left at a
    cap delta no smaller than the job's (a margin of :data:`_MARGIN` for the
    site's own adjacency and the rounding it charges). The plan costs a second
    fit on stand-ins; a job it skips wrongly still meets every ledger's cap."""
    if all(math.isinf(b.epsilon_cap) for b in budgets.values()):
        return True
    epsilon, delta = params.get("epsilon"), params.get("delta")
    if not isinstance(epsilon, (int, float)) or not math.isfinite(epsilon):
        return False
    return all(b.epsilon_cap - b.epsilon_spent >= _MARGIN * epsilon
               and isinstance(delta, (int, float)) and b.delta_cap >= delta
               for b in budgets.values())


def _total_after(statement: SiteBudgetStatement, releases: Sequence[PlannedRelease], dim: int,
                 site: str) -> float:
    """The site's epsilon at its cap's delta after the planned releases, by
    its own accounting over everything its ledger holds and the job's
    charges, each charged as the site charges it (its adjacency, its record
    bound: its public n, else its policy's)."""
    accountant = PrivacyAccountant(statement.adjacency, AccountingMethod(statement.accounting))
    for mechanism, count in statement.history:
        accountant.compose(mechanism, count)
    records = statement.num_records or statement.max_records or SIZING_RECORDS
    for release in releases:
        if release.sites is None or site in release.sites:
            accountant.compose(charged_at_site(release, statement.adjacency, dim, records))
    return accountant.report(statement.delta_cap).epsilon


def _check_delta(name: str, params: Mapping[str, Any],
                 budgets: Mapping[str, SiteBudgetStatement]) -> None:
    delta, epsilon = params.get("delta"), params.get("epsilon")
    if not isinstance(delta, (int, float)) or delta == 0 or (
            isinstance(epsilon, (int, float)) and math.isinf(epsilon)):
        return  # no delta, a pure-DP job, or the noise-free run
    if not 0 < delta < 1:
        raise ConfigError(f"{name}: delta must be in (0, 1), got {delta}")
    if all(b.large_delta_meant for b in budgets.values()):
        return
    refusal = large_delta_refusal(delta, "delta", "the sites' allow_large_delta")
    if refusal:
        raise ConfigError(f"{name}: {refusal}")
    public = {site: b.num_records for site, b in budgets.items()
              if b.adjacency == Adjacency.REPLACE_ONE and b.num_records}
    if public:
        site = min(public, key=lambda s: (public[s], s))
        n = public[site]
        if delta >= 1.0 / n:
            raise ConfigError(
                f"{name}: delta = {delta:g} is not below 1/n = {1.0 / n:.3g} of site {site!r} "
                f"(n = {n} records, the smallest site), so it protects no one there; use a "
                f"delta below {1.0 / n:.3g}, such as 1e-6")


def _check_new_job(name: str, federation: BudgetedFederation) -> None:
    charged = {site: count for site, count in federation.releases_charged().items() if count}
    if charged:
        raise ConfigError(
            f"{name}.fit: job {federation.job_id!r} of this federation was already charged "
            f"({', '.join(f'{s}: {n} releases' for s, n in sorted(charged.items()))}) by an "
            "earlier fit; one federation is one job, whose spend each fit reports: fit on "
            "federation.new_job() for a new job")
