"""A site answers a query on one part of its records (client/site.py,
common/data/record_parts.py): the kernel sees exactly the hashed subset, Poisson
sampling samples within it, and a kernel with per-record state keeps to the
part its state was created on."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.site import Site
from privadapt.common.data.record_parts import RecordPart, record_hashes
from privadapt.common.errors import QueryRefusedError
from privadapt.common.federation import Query, ReleaseForm
from privadapt.common.kernels import Kernel, NoParams, get_kernel, register
from privadapt.common.kernels.reweighted_gradient import ReweightedGradient
from privadapt.common.mechanisms import Adjacency, GaussianMechanism, NoNoise, ReportNoisyMin
from privadapt.common.numerics.fixed_point import FixedPointCodec
from privadapt.common.wire.messages import query_from_proto, query_to_proto

DIM = 5
VALIDATION = RecordPart("validation", 0.25, "job-salt")
TRAIN = RecordPart("train", 0.25, "job-salt")
GRADIENT = {"weights": np.full(DIM, 0.1), "loss": "logistic", "clip_norm": 1.0}


def exact_query(query_id: str, records: RecordPart, kernel: str = "linear_gradient",
                params: dict | None = None) -> Query:
    params = GRADIENT if params is None else params
    found = get_kernel(kernel)
    mechanism = found.mechanism(found.Params.from_wire(params, DIM), math.inf,
                                Adjacency.REPLACE_ONE, dim=DIM, records=records)
    query = Query("job-1", query_id, kernel, params, mechanism, records=records)
    return query_from_proto(query_to_proto(query, 1))[0]  # as a daemon receives it


def decoded(share) -> np.ndarray:
    return FixedPointCodec().decode(share.blocks[0])


@pytest.mark.parametrize("records", [VALIDATION, TRAIN])
def test_a_query_on_a_part_is_the_kernel_on_exactly_the_hashed_subset(make_site, records):
    site = make_site(epsilon_cap=math.inf)
    data = site._data
    chosen = records.membership(record_hashes(data, records.salt))
    assert 0 < chosen.sum() < data.num_records
    kernel = get_kernel("linear_gradient")
    subset = dataclasses.replace(data, features=data.features[chosen],
                                 labels=data.labels[chosen])
    (expected,) = kernel.compute(subset, kernel.Params.from_wire(GRADIENT, DIM), {})
    got = decoded(site.answer(exact_query("q1", records), 1))
    np.testing.assert_allclose(got, expected, rtol=0, atol=2**-31)
    everything = decoded(site.answer(exact_query("q2", RecordPart.ALL), 1))
    assert not np.allclose(got, everything)


def test_train_and_validation_add_up_to_every_record(make_site):
    site = make_site(epsilon_cap=math.inf)
    parts = [decoded(site.answer(exact_query(f"q{k}", r), 1))
             for k, r in enumerate((TRAIN, VALIDATION, RecordPart.ALL))]
    np.testing.assert_allclose(parts[0] + parts[1], parts[2], rtol=0, atol=2**-30)


def test_poisson_sampling_samples_within_the_part(make_site, monkeypatch):
    site = make_site(num_records=400, adjacency=Adjacency.ADD_REMOVE_ONE)
    kernel = get_kernel("linear_gradient")
    seen = []
    original = type(kernel).compute

    def spy(self, data, params, state):
        seen.append(data)
        return original(self, data, params, state)

    monkeypatch.setattr(type(kernel), "compute", spy)
    typed = kernel.Params.from_wire(GRADIENT, DIM)
    mechanism = kernel.mechanism(typed, 3.0, Adjacency.ADD_REMOVE_ONE, dim=DIM,
                                 sampling_rate=0.5, records=VALIDATION)
    site.answer(Query("job-1", "q1", "linear_gradient", GRADIENT, mechanism,
                      records=VALIDATION), 1)
    (sample,) = seen
    part = site._splitter.records(VALIDATION)
    in_part = {row.tobytes() for row in part.features}
    assert all(row.tobytes() in in_part for row in sample.features)
    assert 0.3 * part.num_records < sample.num_records < 0.7 * part.num_records


def reweighted_query(query_id: str, step: int, records: RecordPart) -> Query:
    params = {
        "weights": np.full(DIM, 0.2), "step": step, "objective": "convex", "loss": "squared",
        "alpha": 0.5, "total_private_records": 200, "feature_norm": 1.0, "label_bound": 1.0,
        "radius": 1.0, "k1": 0.1, "k2": 0.1, "kinf": 0.1, "mu": 100.0,
        "inverse_square_sum": 0.005, "log_partition": 5.0, "step_size": 1e7,
    }
    kernel = ReweightedGradient()
    mechanism = kernel.mechanism(kernel.Params.from_wire(params, DIM), math.inf,
                                 Adjacency.REPLACE_ONE, dim=DIM, records=records)
    return Query("job-1", query_id, "reweighted_gradient", params, mechanism, records=records)


def test_per_record_state_runs_on_the_part_it_was_created_on(make_site):
    site = make_site(epsilon_cap=math.inf)
    site.answer(reweighted_query("q1", 0, TRAIN), 1)
    (weights,) = [v for k, v in site._job_states["job-1"]["reweighted_gradient"].items()
                  if k == "u"]
    assert len(weights) == site._splitter.records(TRAIN).num_records < site.num_records
    site.answer(reweighted_query("q2", 1, TRAIN), 1)


@pytest.mark.parametrize("first, then", [
    (TRAIN, VALIDATION), (TRAIN, RecordPart.ALL), (RecordPart.ALL, TRAIN),
    (TRAIN, RecordPart("train", 0.25, "another-salt")), (TRAIN, RecordPart("train", 0.5, "s")),
])
def test_per_record_state_refuses_another_part_before_charging(make_site, first, then):
    site = make_site(epsilon_cap=math.inf)
    site.answer(reweighted_query("q1", 0, first), 1)
    charges = len(site.ledger.charges())
    with pytest.raises(QueryRefusedError, match="per-record state was created on another part"):
        site.answer(reweighted_query("q2", 1, then), 1)
    assert len(site.ledger.charges()) == charges
    site.answer(reweighted_query("q3", 1, first), 1)  # the job goes on on its own part


def test_the_part_of_a_jobs_state_survives_a_restart(make_site, tmp_path):
    site = make_site("restarted", epsilon_cap=math.inf)
    site.answer(reweighted_query("q1", 0, TRAIN), 1)
    site.ledger.close()
    reopened = Site(site._data, site.policy,
                    PrivacyLedger(tmp_path / "restarted.db", site.policy, create=True))
    with pytest.raises(QueryRefusedError, match="another part"):
        reopened.answer(reweighted_query("q2", 1, VALIDATION), 1)
    reopened.answer(reweighted_query("q3", 1, TRAIN), 1)


def test_a_selection_scores_only_the_parts_records(make_site):
    site = make_site(num_records=300, epsilon_cap=math.inf)
    candidates = np.array([[1.0, -1.0, 0.5, 0.0, 0.0], [0.0] * DIM, [3.0] * DIM])
    params = {"candidates": candidates, "loss": "logistic", "loss_bound": 4.0}
    kernel = get_kernel("validation_loss")
    typed = kernel.Params.from_wire(params, DIM)
    part = site._splitter.records(VALIDATION)
    (scores,) = kernel.compute(part, typed, {})
    assert np.sort(scores)[1] - np.min(scores) > 5  # no Laplace(0.2) draw bridges it
    (sensitivity, *_) = kernel.charged_score_sensitivities(typed, Adjacency.REPLACE_ONE, DIM)
    mechanism = ReportNoisyMin(sensitivity, 0.2)  # scores differ by far more
    query = Query("job-1", "q1", "validation_loss", params, mechanism,
                  form=ReleaseForm.PER_SITE, records=VALIDATION)
    share = site.answer(query, 1)
    assert int(share.blocks[0][0]) == int(np.argmin(scores))


def test_a_noiseless_query_declaring_only_replace_one_on_a_part_is_refused(make_site):
    """record_count: n is public under replace-one (sensitivity 0), a part's
    size is not (sensitivity 1 as a record moves in or out of the part)."""
    site = make_site(epsilon_cap=math.inf)
    query = Query("job-1", "q1", "record_count", {}, NoNoise((0.0,), Adjacency.REPLACE_ONE),
                  records=VALIDATION)
    with pytest.raises(QueryRefusedError, match="declares l2 sensitivity 0"):
        site.answer(query, 1)
    assert site.answer(dataclasses.replace(query, records=RecordPart.ALL), 1)


def test_a_gaussian_query_on_a_part_is_charged_the_worse_adjacency(make_site):
    site = make_site()
    mechanism = GaussianMechanism.single(1.0 + 1e-6, 4.0, Adjacency.REPLACE_ONE)
    query = Query("job-1", "q1", "record_count", {}, mechanism, records=VALIDATION)
    site.answer(query, 1)
    (charge,) = site.ledger.charges()
    assert charge.mechanism.adjacency == Adjacency.REPLACE_ONE
    assert charge.mechanism.sensitivities[0] >= 1.0


@register
class ReplaceOnlyMean(Kernel):
    """Test kernel: the mean label, whose sensitivity is defined (1/n with n
    public) under replace-one only, as a kernel normalised by the site's n
    would be; under add/remove it has none."""

    name = "test_replace_only_mean"
    Params = NoParams

    def output_shapes(self, params, dim):
        return ((1,),)

    def l2_sensitivities(self, params, adjacency):
        if adjacency != Adjacency.REPLACE_ONE:
            raise ValueError("the mean over a private n has no add/remove sensitivity")
        return (1.0,)

    def max_abs_sum(self, params, num_records):
        return 1e6

    def compute(self, data, params, state):
        return (np.array([float(np.mean(data.labels))]),)


def test_a_kernel_without_an_add_remove_sensitivity_is_refused_on_a_part(make_site):
    site = make_site(epsilon_cap=math.inf)
    query = Query("job-1", "q1", "test_replace_only_mean", {}, NoNoise((1.0,)),
                  records=VALIDATION)
    with pytest.raises(QueryRefusedError, match=r"add_remove_one sensitivity too .* does not "
                       r"define .* ask on every record instead"):
        site.answer(query, 1)
    assert site.ledger.charges() == []
    site.answer(dataclasses.replace(query, records=RecordPart.ALL), 1)
