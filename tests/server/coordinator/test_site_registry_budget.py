"""The budget a dry run previews against: a site's end-of-job privacy report
refreshes the spent figure its last heartbeat stated, on the same terms only."""

import pytest

from privadapt.common.proto import federation_pb2 as pb
from privadapt.server.coordinator.site_registry import SiteRegistry

BUDGET = pb.SiteBudget(epsilon_cap=10.0, delta_cap=1e-5, epsilon_spent=0.5, accounting="pld")


def registry_with_site():
    registry = SiteRegistry()
    registry.register("site-1", pb.RegisterRequest(site_name="site-1", budget=BUDGET))
    return registry


def report(total, delta=1e-5, method="pld", site="site-1"):
    return pb.SitePrivacyReport(job_id="j", site_name=site, total_epsilon=total,
                                total_delta=delta, total_method=method)


def test_an_end_of_job_report_refreshes_the_spent_figure():
    registry = registry_with_site()
    registry.note_spent(report(2.25))
    budget = registry.budgets()["site-1"]
    assert budget.epsilon_spent == 2.25
    assert (budget.epsilon_cap, budget.delta_cap, budget.accounting) == (10.0, 1e-5, "pld")
    assert BUDGET.epsilon_spent == 0.5  # the stated message itself is not changed


@pytest.mark.parametrize("stale", [
    report(3.0, delta=1e-6),        # another delta: not comparable
    report(3.0, method="rdp"),      # another accountant
    report(0.25),                   # smaller than what the ledger already stated
    report(float("nan")),
    report(3.0, site="site-2"),     # no such session
])
def test_a_report_on_other_terms_changes_nothing(stale):
    registry = registry_with_site()
    registry.note_spent(stale)
    assert registry.budgets()["site-1"].epsilon_spent == 0.5
