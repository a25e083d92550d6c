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
  ``privadapt launch --dry-run`` runs it), each site's charge previewed as
  its ledger will account it (server/jobs/privacy_plan.py); refused when the
  job would exceed what a site has left, so no budget is spent on a job that
  cannot finish.

The sites' ledgers still check every release against their caps.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from privadapt.common.accounting.delta_guard import large_delta_refusal
from privadapt.common.errors import ConfigError, PrivadaptError
from privadapt.common.federation import SiteBudgetStatement, SitePrivacy
from privadapt.common.kernels.base import SIZING_RECORDS
from privadapt.common.mechanisms import Adjacency
from privadapt.common.numerics.fixed_point import FixedPointCodec
from privadapt.common.proto import federation_pb2 as pb
from privadapt.server.federation.planning import PlanningFederation
from privadapt.server.jobs.privacy_plan import SiteBudgetPreview, preview_site

logger = logging.getLogger(__name__)


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


def check_before_first_release(federation: BudgetedFederation, name: str,
                               params: Mapping[str, Any],
                               fit_stand_in: Callable[[PlanningFederation], object]) -> None:
    """ConfigError, before any query, for what a networked launch of the
    estimator ``name`` (hyperparameters ``params``) would refuse;
    ``fit_stand_in`` fits a clone of it on the planning federation given."""
    budgets = federation.site_budgets()
    _check_delta(name, params, budgets)
    _check_new_job(name, federation)
    if all(math.isinf(b.epsilon_cap) for b in budgets.values()):
        return  # simulation sites: nothing to run out of
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
        # Each site's record bound: its public n, else its policy's (as it charges).
        previews = [preview_site(site, b.adjacency, _as_budget(b), planning.releases,
                                 federation.dim, b.num_records or b.max_records or SIZING_RECORDS)
                    for site, b in budgets.items()]
    except ValueError as err:  # a charge the site itself words when it meets it
        logger.warning("%s.fit: the plan's charges could not be previewed (%s)", name, err)
        return
    over = [p for p in previews if p.exceeds]
    if over:
        raise ConfigError(f"{name}.fit: the job would exceed the remaining privacy budget of "
                          f"{len(over)} site(s): {'; '.join(_over(p) for p in over)}. Lower "
                          "epsilon or the number of iterations, or fit on fewer sites; nothing "
                          "was released")


def _as_budget(statement: SiteBudgetStatement) -> pb.SiteBudget:
    return pb.SiteBudget(epsilon_cap=statement.epsilon_cap, delta_cap=statement.delta_cap,
                         epsilon_spent=statement.epsilon_spent,
                         accounting=statement.accounting)


def _over(preview: SiteBudgetPreview) -> str:
    return (f"site {preview.site!r} has epsilon {preview.remaining:.4g} left of its cap "
            f"{preview.budget.epsilon_cap:g} at delta {preview.budget.delta_cap:g} (its "
            f"ledger), and this job would cost it {preview.job_epsilon:.4g} there (its plan, "
            "as `privadapt launch --dry-run` previews it)")


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
    charged = {site: len(p.mechanisms) for site, p in federation.privacy_spent().items()
               if p.mechanisms}
    if charged:
        raise ConfigError(
            f"{name}.fit: job {federation.job_id!r} of this federation was already charged "
            f"({', '.join(f'{s}: {n} releases' for s, n in sorted(charged.items()))}) by an "
            "earlier fit; one federation is one job, whose spend each fit reports: fit on "
            "federation.new_job() for a new job")
