"""The dry run's preview of a query on a record part is what a real site
charges: on a "train" or "validation" part under replace-one a site
charges the larger of the kernel's replace-one and add/remove sensitivities
(common/data/record_parts.py), and the preview uses the same rule
(common/kernels/site_charge.py). Checked against an in-process site's ledger."""

from __future__ import annotations

import numpy as np
import pytest

from privadapt.common.data.record_parts import RecordPart
from privadapt.common.federation import Query
from privadapt.common.kernels import get_kernel
from privadapt.common.kernels.base import SIZING_RECORDS
from privadapt.common.mechanisms import Adjacency
from privadapt.common.proto import federation_pb2 as pb
from privadapt.server.federation.planning import PlanningFederation
from privadapt.server.jobs.privacy_plan import charged_at_site, preview_site

DIM, NUM_RECORDS = 3, 200
PARTS = [RecordPart("train", 0.25, "job-salt"), RecordPart("validation", 0.25, "job-salt")]
PARAMS = {
    "record_count": {},
    "smoothed_discrepancy_gradient": {
        "feature_norm": 1.0, "source_points": np.array([[1.0, 0, 0], [0, 0.6, 0.8]]),
        "weights": np.array([0.5, 0.5]), "mu": 2.0, "scale": 1.0, "regularization": 0.0,
        "offset_bound": 0.0},
}
REPLACE, ADD_REMOVE = Adjacency.REPLACE_ONE, Adjacency.ADD_REMOVE_ONE


def _planned(kernel_name: str, declared: Adjacency, part: RecordPart):
    """The release as the planner records it, and the query a site receives."""
    kernel = get_kernel(kernel_name)
    params = kernel.Params.from_wire(PARAMS[kernel_name], DIM)
    mechanism = kernel.mechanism(params, 2.0, declared, dim=DIM, records=part)
    planner = PlanningFederation("job-1", {"site-a": NUM_RECORDS}, DIM)
    planner.query(kernel_name, PARAMS[kernel_name], mechanism, records=part)
    (release,) = planner.releases
    query = Query("job-1", "q1", kernel_name, PARAMS[kernel_name], mechanism, records=part,
                  fractional_bits=release.fractional_bits)
    return release, query


@pytest.mark.parametrize("kernel_name", sorted(PARAMS))
@pytest.mark.parametrize("part", PARTS, ids=lambda p: p.part)
@pytest.mark.parametrize("site_adjacency, declared", [
    (REPLACE, REPLACE), (REPLACE, ADD_REMOVE), (ADD_REMOVE, ADD_REMOVE),
    (ADD_REMOVE, REPLACE)])
def test_the_preview_of_a_query_on_a_part_is_what_the_sites_ledger_charges(
        make_site, kernel_name, part, site_adjacency, declared):
    release, query = _planned(kernel_name, declared, part)
    site = make_site(num_records=NUM_RECORDS, dim=DIM, adjacency=site_adjacency)
    site.answer(query, 1)
    (charge,) = site.ledger.charges("job-1")
    bound = NUM_RECORDS if site_adjacency == REPLACE else SIZING_RECORDS
    assert charged_at_site(release, site_adjacency, DIM, bound) == charge.mechanism
    budget = pb.SiteBudget(epsilon_cap=10.0, delta_cap=1e-5, epsilon_spent=0.0,
                           accounting=site.policy.accounting.value)
    preview = preview_site("site-a", site_adjacency, budget, [release], DIM, bound)
    assert preview.job_epsilon == pytest.approx(site.ledger.spent_by_job("job-1").epsilon,
                                                rel=1e-9)


def test_a_count_on_a_part_at_a_replace_one_site_is_previewed_at_sensitivity_one(make_site):
    # n is public under replace-one (sensitivity 0), a part's size is not: one
    # replaced record moves it by one. Converting the add/remove declaration
    # (doubling it) would preview twice what the site charges.
    release, _ = _planned("record_count", ADD_REMOVE, PARTS[1])
    charged = charged_at_site(release, REPLACE, DIM, NUM_RECORDS)
    # 1 plus the grid's rounding (2^-32 steps), never 2.
    assert charged.sensitivities[0] == pytest.approx(1.0, rel=1e-6)
    assert charged.adjacency == REPLACE
    assert release.mechanism.in_adjacency(REPLACE).sensitivities[0] >= 2.0
    every_record, _ = _planned("record_count", ADD_REMOVE, RecordPart.ALL)
    assert charged_at_site(every_record, REPLACE, DIM, NUM_RECORDS).sensitivities[0] < 1e-6
