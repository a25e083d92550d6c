"""A site's CPU is a budget (client/compute_budget.py): a query, a job and
the unpaid queries of every job are bounded in the kernels' work units, the
bounds hold against a coordinator that asks for the most work at the least
price, and every refusal reads the same on neighbouring datasets."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import (
    DEFAULT_MAX_JOB_WORK,
    DEFAULT_MAX_QUERY_WORK,
    DEFAULT_MAX_UNPAID_WORK,
    SitePolicy,
)
from privadapt.client.site import Site
from privadapt.common.data.dataset import Dataset
from privadapt.common.errors import ConfigError, QueryRefusedError
from privadapt.common.federation import Query
from privadapt.common.kernels import get_kernel
from privadapt.common.kernels.regularized_erm import RegularizedERM, RegularizedERMParams
from privadapt.common.mechanisms import Adjacency
from tests.synthetic_data import synthetic_dataset

DIM, NUM = 3, 40
GRADIENT = get_kernel("linear_gradient")
ERM = get_kernel("regularized_erm")
# linear_gradient: one pass, n (d + d) multiply-adds.
WORK = NUM * (DIM + DIM)
# A Gaussian release at this noise multiplier costs epsilon about 1e-4 at
# delta 1e-5: below the floor of 1e-3, so unpaid (a larger one is refused by
# the fixed-point grid before any of this).
WORTHLESS = 1e4


def gradient_query(job: str, query_id: str, noise_multiplier: float,
                   adjacency: Adjacency = Adjacency.REPLACE_ONE) -> Query:
    wire = {"weights": np.zeros(DIM), "loss": "logistic", "clip_norm": 1.0}
    typed = GRADIENT.Params.from_wire(wire, DIM)
    # A coarse grid, on which a noise of 10^4 is still resolved.
    return Query(job, query_id, GRADIENT.name, wire,
                 GRADIENT.mechanism(typed, noise_multiplier, adjacency, dim=DIM),
                 fractional_bits=16)


def site_over(tmp_path, tag: str, dataset: Dataset, **policy_fields) -> Site:
    policy_fields.setdefault("epsilon_cap", 1e3)
    policy = SitePolicy("s", delta_cap=1e-5, **policy_fields)
    return Site(dataset, policy, PrivacyLedger(tmp_path / f"{tag}.db", policy, create=True))


def outcome(site: Site, query: Query, num_participants: int = 1) -> str:
    try:
        site.answer(query, num_participants)
    except QueryRefusedError as err:
        return f"refused: {err}"
    return "answered"


def test_the_long_erm_query_at_noise_multiplier_a_million_is_refused_by_default(
        tmp_path, monkeypatch):
    # n = 43,000, d = 16, T = 99,882: 6.87e10 multiply-adds (about 220 s of
    # CPU), under the kernel's own cap, at a noise that charges about nothing.
    def fail(*args, **kwargs):
        raise AssertionError("the kernel ran")

    monkeypatch.setattr(RegularizedERM, "compute", fail)
    rng = np.random.default_rng(0)
    dataset = Dataset(rng.normal(size=(43_000, 16)) * 0.1, np.sign(rng.normal(size=43_000)),
                      tuple(f"x{i}" for i in range(16)))
    wire = RegularizedERMParams("logistic", 2.0, 3.0, 1.0, 1.0, 99_882).to_wire()
    typed = ERM.Params.from_wire(wire, 16)
    query = Query("job", "q", ERM.name, wire, ERM.mechanism(typed, 1e6, Adjacency.REPLACE_ONE,
                                                            dim=16, max_records=43_000))
    # A deployed site's policy that sets no compute bound of its own.
    site = site_over(tmp_path, "erm", dataset, allowed_kernels=frozenset({ERM.name}),
                     simulation=False, min_participants=2)
    text = outcome(site, query, 2)
    assert "6.87e+10 multiply-adds" in text and "max_query_work" in text
    assert f"{DEFAULT_MAX_QUERY_WORK:.3g}" in text
    assert not site.ledger.charges()


def test_a_jobs_queries_are_refused_once_their_work_would_pass_the_job_budget(tmp_path):
    site = site_over(tmp_path, "job", synthetic_dataset(NUM, DIM, 0),
                     max_query_work=WORK, max_job_work=2.5 * WORK)
    results = [outcome(site, gradient_query("job-1", f"q{i}", 2.0)) for i in range(3)]
    assert results[:2] == ["answered", "answered"]
    assert "max_job_work" in results[2] and f"{3 * WORK:.3g} multiply-adds" in results[2]
    assert len(site.ledger.charges("job-1")) == 2  # the refused one charged nothing
    assert site.compute.job_spent("job-1") == 2 * WORK
    assert outcome(site, gradient_query("job-2", "q0", 2.0)) == "answered"


def test_worthless_queries_draw_on_one_pool_over_every_job(tmp_path):
    # A new job is free: without the pool, job after job of queries at a
    # noise multiplier of 10^4 or more would buy unbounded work at epsilon about 0.
    site = site_over(tmp_path, "unpaid", synthetic_dataset(NUM, DIM, 0),
                     max_query_work=WORK, min_query_epsilon=1e-3, max_unpaid_work=2.5 * WORK)
    worthless = [outcome(site, gradient_query(f"job-{i}", "q", WORTHLESS)) for i in range(3)]
    assert worthless[:2] == ["answered", "answered"]
    assert "unpaid" in worthless[2] and "max_unpaid_work" in worthless[2]
    assert site.compute.unpaid_spent == 2 * WORK
    # A paid query (noise multiplier 2, epsilon about 2) still gets its work.
    assert outcome(site, gradient_query("job-3", "q", 2.0)) == "answered"
    assert site.compute.unpaid_spent == 2 * WORK


def test_an_unpaid_query_is_a_warning_where_the_pool_is_bounded_and_debug_where_not(
        tmp_path, caplog):
    # A simulation site with no pool (often at a large delta_cap, where every
    # release costs epsilon 0) logged a warning for each of its queries.
    caplog.set_level(logging.DEBUG, logger="privadapt.client.site")
    for tag, bound in (("bounded", 10 * WORK), ("unbounded", None)):
        caplog.clear()
        site = site_over(tmp_path, tag, synthetic_dataset(NUM, DIM, 0), max_unpaid_work=bound,
                         max_query_work=WORK)
        assert outcome(site, gradient_query("job", "q", WORTHLESS)) == "answered"
        [record] = [r for r in caplog.records if "unpaid query" in r.getMessage()]
        assert record.levelno == (logging.WARNING if bound else logging.DEBUG)


def test_a_work_refusal_reads_no_record(tmp_path, monkeypatch):
    site = site_over(tmp_path, "read", synthetic_dataset(NUM, DIM, 0),
                     max_query_work=WORK, max_job_work=WORK)
    assert outcome(site, gradient_query("job", "q0", 2.0)) == "answered"

    def fail(*args, **kwargs):
        raise AssertionError("private data was read before the refusal")

    monkeypatch.setattr(site._splitter, "records", fail)
    assert "max_job_work" in outcome(site, gradient_query("job", "q1", 2.0))


def _neighbours() -> tuple[Dataset, Dataset]:
    base = synthetic_dataset(NUM, DIM, 0)
    features, labels = base.features.copy(), base.labels.copy()
    features[0], labels[0] = -features[0] * 0.5, -labels[0]
    return base, Dataset(features, labels, base.feature_names)


def _added(base: Dataset) -> Dataset:
    return Dataset(np.vstack([base.features, np.full(DIM, 0.2)]), np.append(base.labels, 1.0),
                   base.feature_names)


@pytest.mark.parametrize("adjacency", [Adjacency.REPLACE_ONE, Adjacency.ADD_REMOVE_ONE])
def test_the_compute_refusals_read_the_same_on_neighbouring_datasets(tmp_path, adjacency):
    base, replaced = _neighbours()
    other = replaced if adjacency == Adjacency.REPLACE_ONE else _added(base)
    # Under add/remove the estimate uses the policy's public bound on n.
    limits = dict(max_query_work=100 * (DIM + DIM), max_job_work=250 * (DIM + DIM),
                  min_query_epsilon=1e-3, max_unpaid_work=150 * (DIM + DIM),
                  adjacency=adjacency, max_records=100)
    if adjacency == Adjacency.REPLACE_ONE:
        limits = {key: value * NUM / 100 if key.startswith("max_") and key != "max_records"
                  else value for key, value in limits.items()}
    sequence = [("job-1", "q0", 2.0), ("job-1", "q1", WORTHLESS), ("job-1", "q2", 2.0),
                ("job-2", "q0", WORTHLESS), ("job-3", "q0", WORTHLESS), ("job-3", "q1", 2.0)]
    texts = []
    for tag, dataset in (("a", base), ("b", other)):
        site = site_over(tmp_path, tag, dataset, **limits)
        texts.append([outcome(site, gradient_query(job, query_id, z, adjacency))
                      for job, query_id, z in sequence])
    assert texts[0] == texts[1]
    kinds = ["max_job_work" if "max_job_work" in text else
             "max_unpaid_work" if "max_unpaid_work" in text else text for text in texts[0]]
    assert kinds == ["answered", "answered", "max_job_work", "max_unpaid_work",
                     "max_unpaid_work", "answered"]


def test_a_deployed_policy_is_bounded_by_default_and_a_simulation_only_if_it_says():
    deployed = SitePolicy("s", 1.0, 1e-5, simulation=False, min_participants=2)
    assert (deployed.max_query_work, deployed.max_job_work, deployed.max_unpaid_work) == (
        DEFAULT_MAX_QUERY_WORK, DEFAULT_MAX_JOB_WORK, DEFAULT_MAX_UNPAID_WORK)
    simulated = SitePolicy("s", 1.0, 1e-5)
    assert (simulated.max_query_work, simulated.max_job_work, simulated.max_unpaid_work) == (
        None, None, None)


@pytest.mark.parametrize("key, value", [("max_job_work", 0), ("max_unpaid_work", float("inf")),
                                        ("min_query_epsilon", -1.0),
                                        ("max_sampler_table_bytes", 1024),
                                        ("max_job_work", 10.0)])
def test_a_bad_compute_or_memory_bound_is_refused_when_the_policy_is_loaded(key, value):
    with pytest.raises(ConfigError, match=key):
        SitePolicy.from_dict({"site": {"name": "s", "simulation": True},
                              "privacy": {"epsilon_cap": 1.0, "delta_cap": 1e-5},
                              "queries": {"max_query_work": 100.0, key: value}})


def test_the_policy_keys_round_trip_through_its_file(tmp_path):
    policy = SitePolicy("s", 1.0, 1e-5, max_query_work=1e8, max_job_work=1e9,
                        min_query_epsilon=0.01, max_unpaid_work=5e8,
                        max_sampler_table_bytes=64 * 2**20)
    path = tmp_path / "policy.toml"
    path.write_text(policy.to_toml())
    assert SitePolicy.from_toml(path) == policy
