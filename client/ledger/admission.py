"""Whether a ledger admits one more release, and what it records (refusals
cheap enough to make before any record is read).

Every refusal is made by a closed-form lower bound (before any PLD is built)
or by the policy's exact figure; the additive upper bound of
:mod:`privadapt.client.ledger.totals` only ever admits. So the decision is
always the one the exact figure would make, and the exact figure is paid for
only near the cap.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from privadapt.client.ledger.accounting import (
    Multiset,
    cheap_bounds,
    exact_report,
    mechanism_json,
    pld_points,
)
from privadapt.client.ledger.totals import LedgerTotals
from privadapt.client.policy import SitePolicy
from privadapt.common.accounting.accountant import MAX_PLD_POINTS, AccountingMethod, EpsilonReport
from privadapt.common.accounting.cases import release_epsilon_lower_bound
from privadapt.common.errors import BudgetExceededError, QueryRefusedError
from privadapt.common.mechanisms import Mechanism

# A charge may land on the cap up to float rounding, never more.
_CAP_SLACK = 1e-12
# A closed-form lower bound may sit this far above the exact figure (the
# Gaussian root tolerance, float rounding); a cheap refusal leaves it room.
_LOWER_BOUND_SLACK = 1e-9


@dataclass(frozen=True)
class CheckedCharge:
    """What :meth:`~privadapt.client.ledger.privacy_ledger.PrivacyLedger.check_charge` found
    admissible, and the reservation it holds (``token``,
    client/ledger/reservations.py): the epsilon and method :func:`admit`
    gave for this release with the ledger at chain ``head`` under
    ``policy``. ``alone``: no other release was reserved then, so the
    figure is that of the committed charges plus this release only, and the
    committing charge reuses it while its ledger is still at ``head``;
    otherwise it computes the figure to record afresh (the decision was
    made, conservatively, with every other reservation counted)."""

    job_id: str
    query_id: str
    text: str
    head: str
    policy: SitePolicy
    epsilon: float
    method: AccountingMethod
    token: str
    alone: bool

    def applies(self, job_id: str, query_id: str, text: str, policy: SitePolicy) -> bool:
        """Whether this check was made for this release under this policy."""
        return (self.job_id, self.query_id, self.text) == (job_id, query_id, text) and (
            self.policy == policy)

    def reusable(self, head: str) -> bool:
        """Whether its figure is the one a charge at ``head`` would record."""
        return self.alone and self.head == head


def admit(
    policy: SitePolicy, totals: LedgerTotals, last: tuple[float, AccountingMethod] | None,
    job_id: str, query_id: str, mechanism: Mechanism, text: str,
    reserved: Multiset | None = None,
) -> tuple[float, AccountingMethod]:
    """The epsilon to record for this release, or a refusal: every refusal
    is the closed-form lower bound's or the exact figure's; the upper
    bound only ever admits. ``reserved``: releases other queries hold
    reservations for, composed as if charged (client/ledger/reservations.py);
    the figure is then that of the committed charges, the reserved releases
    and this one."""
    before = Counter(totals.groups)
    before.update(reserved or {})
    after = dict(before)
    after[text] = after.get(text, 0) + 1
    new = text not in before
    if new:  # before its terms build a PLD for it
        _refuse_unaffordable(policy, job_id, query_id, mechanism, after, bool(reserved))
    sums = totals.sums()
    for other, count in sorted((reserved or {}).items()):
        sums = sums.plus(other, policy.adjacency, count)
    sums = sums.plus(text, policy.adjacency)
    bound = sums.upper_bound(policy.delta_cap, policy.accounting)
    if within_cap(policy, bound):
        _refuse_oversized(policy, job_id, query_id, mechanism, pld_points(after, policy))
        epsilon, method = bound, sums.method(policy.accounting)
    else:
        if not new:
            _refuse_unaffordable(policy, job_id, query_id, mechanism, after, bool(reserved))
        report = exact_report(after, policy)
        if not within_cap(policy, report.epsilon):
            raise _budget_error(policy, job_id, query_id, mechanism, dict(before), report,
                                bool(reserved))
        epsilon, method = report.epsilon, report.method
    if last is not None and last[0] > epsilon:
        # Reopened under a policy with another cap delta, the figure can be
        # lower than one already recorded; the running total never goes down.
        epsilon, method = last
    return epsilon, method


def _refuse_unaffordable(
    policy: SitePolicy, job_id: str, query_id: str, mechanism: Mechanism, after: Multiset,
    reserved: bool = False,
) -> None:
    """Refuse, before any PLD is built, a release the cap cannot afford by
    a closed-form lower bound, or whose exact accounting would exceed the
    accountant's size bound (a Laplace of epsilon 1e4 once asked for a
    MemoryError, sigma 1e-300 a ZeroDivisionError). Depends only on the
    query and the ledger's history, so a refusal reveals no data; and a
    release the cap can afford passes to the exact figure unchanged."""
    lower, points = cheap_bounds(after, policy)
    if not within_cap(policy, lower - _LOWER_BOUND_SLACK):
        own = release_epsilon_lower_bound(
            mechanism.in_adjacency(policy.adjacency), policy.delta_cap)
        raise BudgetExceededError(
            f"site {policy.site_name!r} refuses query {query_id!r} of job {job_id!r}: its "
            f"privacy cap is epsilon={policy.epsilon_cap:g} at delta={policy.delta_cap:g} "
            f"({policy.adjacency.value}); this release ({mechanism.summary}) alone costs "
            f"epsilon={own:.6g} or more and would bring the total{_counting(reserved)} to "
            f"epsilon={lower:.6g} "
            "or more (closed-form bounds: no exact figure is computed for a release the "
            "cap cannot afford). Nothing was released or charged; the job needs more "
            "noise or fewer releases at this site."
        )
    _refuse_oversized(policy, job_id, query_id, mechanism, points)


def _refuse_oversized(
    policy: SitePolicy, job_id: str, query_id: str, mechanism: Mechanism, points: float
) -> None:
    if points > MAX_PLD_POINTS:
        raise QueryRefusedError(
            f"site {policy.site_name!r} refuses query {query_id!r} of job {job_id!r}: "
            f"accounting this release ({mechanism.summary}) would build a privacy loss "
            f"distribution of about {points:.3g} points (the site builds at most "
            f"{MAX_PLD_POINTS}); nothing was released or charged. Send a release with "
            "more noise."
        )


def _counting(reserved: bool) -> str:
    return ", counting releases reserved for queries being answered now," if reserved else ""


def within_cap(policy: SitePolicy, epsilon: float) -> bool:
    """Whether ``epsilon`` fits the cap (up to float rounding, never more)."""
    cap = policy.epsilon_cap
    return epsilon <= cap + _CAP_SLACK * cap


def _budget_error(
    policy: SitePolicy,
    job_id: str,
    query_id: str,
    mechanism: Mechanism,
    before: Multiset,
    total: EpsilonReport,
    reserved: bool = False,
) -> BudgetExceededError:
    spent = exact_report(before, policy)
    held = " or reserved for queries being answered now" if reserved else ""
    own = exact_report({mechanism_json(mechanism): 1}, policy)
    return BudgetExceededError(
        f"site {policy.site_name!r} refuses query {query_id!r} of job {job_id!r}: its "
        f"privacy cap is epsilon={policy.epsilon_cap:g} at delta={policy.delta_cap:g} "
        f"({policy.adjacency.value}, {total.method.value.upper()}); it has spent{held} "
        f"epsilon={spent.epsilon:.6g}, this release alone costs epsilon={own.epsilon:.6g} "
        f"and would bring the total to epsilon={total.epsilon:.6g}. Nothing was released "
        "or charged; the job needs more noise or fewer releases at this site."
    )
