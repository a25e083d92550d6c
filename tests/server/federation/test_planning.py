"""The dry-run planner (server/federation/planning.py) restricted to a record
part: every planned release says which part it runs on, and the view reports
the public size estimates a job on that part normalises with."""

from __future__ import annotations

import numpy as np

from privadapt.common.data.record_parts import RecordPart
from privadapt.common.federation import ReleaseForm
from privadapt.common.mechanisms import NoNoise
from privadapt.server.federation.planning import PlanningFederation

GRADIENT = {"weights": np.zeros(3), "loss": "logistic", "clip_norm": 1.0}


def test_a_planned_release_on_a_part_records_the_part():
    planner = PlanningFederation("dry-run", {"a": 400, "b": 101}, 3)
    train = RecordPart("train", 0.25, "s")
    view = planner.restricted_to(train)
    answer = view.query("linear_gradient", GRADIENT, NoNoise((2.0,)))
    planner.query("linear_gradient", GRADIENT, NoNoise((2.0,)))
    assert answer.value.shape == (3,)
    assert [r.records for r in planner.releases] == [train, RecordPart.ALL]
    assert [r.form for r in planner.releases] == [ReleaseForm.SECURE_SUM] * 2
    assert view.site_sizes == {"a": 300, "b": 76}
