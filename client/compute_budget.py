"""A site's CPU as a budget: the work of each job, and of unpaid queries.

A coordinator chooses the public parameters that set how much work a query
costs a site. The policy (:mod:`privadapt.client.policy`) bounds that work, in
the kernels' declared units (``Kernel.work``: multiply-adds estimated from the
query and the public record count):

* per query, ``max_query_work`` (:mod:`privadapt.client.query_admission`);
* per job, ``max_job_work``: the sum over the job's answered queries;
* per daemon run, over every job, ``max_unpaid_work``: the work of *unpaid*
  queries, those whose release costs less than ``min_query_epsilon`` (one
  release of the charged mechanism, at the cap's delta, by the closed-form
  lower bound the ledger checks first). Such a query buys work at no price,
  and a new job is free, so without this pool a coordinator could start job
  after job of queries at noise multiplier 10^6.

A bound left None (only a simulation site may) is not checked. Every
decision reads public things only: the query's parameters and
mechanism, the policy, the public record count (n under replace-one, the
policy's bound under add/remove) and the earlier queries, which the
coordinator itself sent. So a refusal, and its words, are the same on
neighbouring datasets. Work is spent once the ledger has reserved the
query's budget and the job's state admits it, just before the first record
is read; a query refused earlier costs nothing here.

Kept in memory: a restarted daemon starts every pool afresh (a coordinator
cannot restart a site; the ledger's format keeps no work figures).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

from privadapt.client.policy import SitePolicy
from privadapt.common.accounting.cases import release_epsilon_lower_bound
from privadapt.common.mechanisms import Mechanism


@dataclass(frozen=True)
class WorkSpent:
    """What one answered query cost: its work, whether it was unpaid, and
    the job's total after it."""

    work: float
    unpaid: bool
    job_total: float


class ComputeBudget:
    """The work a site has spent, per job and on unpaid queries; thread-safe
    (the daemon answers several jobs at once)."""

    def __init__(self, policy: SitePolicy) -> None:
        self.policy = policy
        self._jobs: dict[str, float] = {}
        self._unpaid = 0.0
        self._lock = threading.Lock()

    @property
    def unpaid_spent(self) -> float:
        with self._lock:
            return self._unpaid

    def job_spent(self, job_id: str) -> float:
        with self._lock:
            return self._jobs.get(job_id, 0.0)

    def is_unpaid(self, charged: Mechanism) -> bool:
        """Whether one release of ``charged`` costs less than the policy's
        ``min_query_epsilon`` at the cap's delta (a release without noise
        costs inf: never unpaid)."""
        epsilon = release_epsilon_lower_bound(charged, self.policy.delta_cap)
        return not epsilon >= self.policy.min_query_epsilon

    def spend(self, job_id: str, work: float, charged: Mechanism) -> WorkSpent:
        """Spend ``work`` on ``job_id``, or raise ``ValueError`` with the
        public reason the site refuses (nothing spent then)."""
        policy = self.policy
        unpaid = self.is_unpaid(charged)
        bounded = policy.max_job_work is not None or (unpaid and policy.max_unpaid_work is not None)
        if bounded and not math.isfinite(work):
            raise ValueError("the query's work cannot be estimated")
        with self._lock:
            job_total = self._jobs.get(job_id, 0.0) + work
            if policy.max_job_work is not None and job_total > policy.max_job_work:
                raise ValueError(
                    f"the job's queries would cost {job_total:.3g} multiply-adds in all, over "
                    f"the policy's max_job_work {policy.max_job_work:.3g} (this query "
                    f"{work:.3g}); start no more queries in this job")
            if (unpaid and policy.max_unpaid_work is not None
                    and self._unpaid + work > policy.max_unpaid_work):
                raise ValueError(
                    f"the query's release costs less than epsilon {policy.min_query_epsilon:g} "
                    f"(the policy's min_query_epsilon), so its {work:.3g} multiply-adds are "
                    f"unpaid, and this site's unpaid work would reach "
                    f"{self._unpaid + work:.3g}, over its max_unpaid_work "
                    f"{policy.max_unpaid_work:.3g}; ask for less noise")
            self._jobs[job_id] = job_total
            if unpaid:
                self._unpaid += work
        return WorkSpent(work, unpaid, job_total)
