"""Several reweighting descents in one job (common/kernels/reweighted_chains.py)
through the real Site.answer: each chain keeps its own u and step order,
chains interleave without touching each other, a chain out of order and a
chain beyond the per-job bound are refused before any charge or any record is
read, the chains survive a restart, malformed names are refusals that leave
the site answering, all chains share the job's record part, and the default
chain's wire encoding and query digest are those of a query without a chain."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.client.site import Site
from privadapt.common.data import record_parts
from privadapt.common.data.dataset import Dataset
from privadapt.common.data.record_parts import RecordPart, RecordSplitter
from privadapt.common.errors import QueryRefusedError
from privadapt.common.federation import Query
from privadapt.common.kernels import get_kernel
from privadapt.common.kernels.reweighted_chains import MAX_CHAINS, chain_names
from privadapt.common.kernels.reweighted_gradient import ReweightedGradient
from privadapt.common.mechanisms import Adjacency, NoNoise
from privadapt.common.numerics.fixed_point import FixedPointCodec
from privadapt.common.secure.query_digest import query_digest
from tests.synthetic_data import synthetic_dataset

DIM = 5
KERNEL = ReweightedGradient()
BASE = {"objective": "convex", "loss": "squared", "alpha": 0.5,
        "total_private_records": 200, "feature_norm": 1.0, "label_bound": 1.0,
        "radius": 1.0, "k1": 0.1, "k2": 0.1, "kinf": 0.1, "mu": 100.0,
        "inverse_square_sum": 0.005, "log_partition": 5.0, "step_size": 1e7}
# Each chain descends from its own w, so mixed-up states would show.
START = {"": 0.2, "a": -0.3, "guess-2": 0.5}


def wire(step: int, chain: str = "", **changes) -> dict:
    params = {**BASE, "weights": np.full(DIM, START.get(chain, 0.1)), "step": step, **changes}
    if chain:
        params["chain"] = chain
    return params


def exact_query(query_id: str, step: int, chain: str = "", job: str = "job-1",
                records: RecordPart = RecordPart.ALL) -> Query:
    """A noiseless query (an epsilon = inf site): answers compare exactly."""
    typed = KERNEL.Params.from_wire(wire(step, chain), DIM)
    sensitivities = (KERNEL.l2_sensitivities(typed, Adjacency.REPLACE_ONE)
                     + KERNEL.local_l2_sensitivities(typed, Adjacency.REPLACE_ONE))
    return Query(job, query_id, "reweighted_gradient", wire(step, chain),
                 NoNoise(sensitivities), records=records)


def private_query(query_id: str, step: int, chain: str = "", **changes) -> Query:
    params = wire(step, chain, **changes)
    mechanism = KERNEL.mechanism(KERNEL.Params.from_wire(wire(step, chain), DIM), 20.0,
                                 Adjacency.REPLACE_ONE, dim=DIM)
    return Query("job-1", query_id, "reweighted_gradient", params, mechanism)


def same(first, second) -> None:
    for a, b in zip(first.blocks, second.blocks, strict=True):
        np.testing.assert_array_equal(a, b)


def touching_data_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("private data was read before the refusal")

    monkeypatch.setattr(RecordSplitter, "records", fail)
    monkeypatch.setattr(record_parts, "record_hashes", fail)
    monkeypatch.setattr(ReweightedGradient, "compute", fail)
    monkeypatch.setattr(ReweightedGradient, "compute_local", fail)


def test_two_interleaved_chains_answer_as_two_jobs_would(make_site):
    """Chains "" and "a" interleaved in one job give exactly the answers of
    the same steps run as two separate jobs (each on its default chain)."""
    shared = make_site("shared", epsilon_cap=math.inf)
    apart = make_site("apart", epsilon_cap=math.inf)
    for step in range(3):
        for chain in ("", "a"):
            together = shared.answer(exact_query(f"{chain}-{step}", step, chain), 1)
            alone = apart.answer(Query(f"job-{chain or 'default'}", f"q{step}",
                                       "reweighted_gradient",
                                       {k: v for k, v in wire(step, chain).items()
                                        if k != "chain"},
                                       exact_query("x", step, chain).mechanism), 1)
            same(together, alone)
    assert chain_names(shared._job_states["job-1"]) == ["", "a"]
    # A retried step restarts its own chain only.
    shared.answer(exact_query("a-2-retry", 2, "a"), 1)
    nxt = shared.answer(exact_query("-3", 3), 1)
    same(nxt, apart.answer(Query("job-default", "q3", "reweighted_gradient", wire(3),
                                 exact_query("x", 3).mechanism), 1))


def test_each_chain_keeps_its_own_step_order(make_site):
    site = make_site(epsilon_cap=math.inf)
    site.answer(exact_query("q0", 0), 1)
    site.answer(exact_query("q1", 1), 1)
    with pytest.raises(QueryRefusedError, match="no weights for chain 'a' yet"):
        site.answer(exact_query("a1", 1, "a"), 1)  # a new chain starts at step 0
    site.answer(exact_query("a0", 0, "a"), 1)
    with pytest.raises(QueryRefusedError, match="step 2 out of order"):
        site.answer(exact_query("a2", 2, "a"), 1)
    site.answer(exact_query("q2", 2), 1)  # the default chain moved on alone


def test_a_chain_out_of_order_is_refused_before_any_charge_or_record(make_site, monkeypatch):
    site = make_site(epsilon_cap=50.0)
    site.answer(private_query("a0", 0, "a"), 1)
    site.answer(private_query("b0", 0, "b"), 1)
    charges = len(site.ledger.charges())
    spent = site.ledger.spent().epsilon
    touching_data_fails(monkeypatch)
    with pytest.raises(QueryRefusedError, match="step 2 out of order"):
        site.answer(private_query("a2", 2, "a"), 1)
    with pytest.raises(QueryRefusedError, match="no weights for chain 'c'"):
        site.answer(private_query("c3", 3, "c"), 1)
    assert len(site.ledger.charges()) == charges and site.ledger.spent().epsilon == spent


def test_a_chain_beyond_the_bound_is_refused_before_any_charge_or_record(make_site, monkeypatch):
    site = make_site(epsilon_cap=math.inf)
    site.answer(exact_query("q0", 0), 1)  # the default chain counts too
    for k in range(1, MAX_CHAINS):
        site.answer(exact_query(f"c{k}", 0, f"c{k}"), 1)
    assert len(chain_names(site._job_states["job-1"])) == MAX_CHAINS
    charges = len(site.ledger.charges())
    touching_data_fails(monkeypatch)
    with pytest.raises(QueryRefusedError, match=f"already runs {MAX_CHAINS}"):
        site.answer(exact_query("extra", 0, "one-too-many"), 1)
    assert len(site.ledger.charges()) == charges
    monkeypatch.undo()
    site.answer(exact_query("c1-1", 1, "c1"), 1)  # the existing chains go on
    site.answer(exact_query("other", 0, "one-too-many", job="job-2"), 1)  # per job


def test_the_chains_survive_a_restart(make_site, tmp_path):
    restarted = make_site("restarted", epsilon_cap=math.inf)
    steady = make_site("steady", epsilon_cap=math.inf)
    for step in range(2):
        for chain in ("a", "", "guess-2"):
            restarted.answer(exact_query(f"{chain}{step}", step, chain), 1)
            steady.answer(exact_query(f"{chain}{step}", step, chain), 1)
    restarted.ledger.close()
    reopened = Site(restarted._data, restarted.policy,
                    PrivacyLedger(tmp_path / "restarted.db", restarted.policy, create=True))
    for chain in ("guess-2", "a", ""):
        same(reopened.answer(exact_query(f"{chain}2", 2, chain), 1),
             steady.answer(exact_query(f"{chain}2", 2, chain), 1))
    with pytest.raises(QueryRefusedError, match="out of order"):
        reopened.answer(exact_query("a-late", 0, "a"), 1)


def test_all_chains_of_a_job_share_its_record_part(make_site):
    """One binding per job (reweighted_chains docstring): a chain started
    later on another part than the job's state is refused."""
    train = RecordPart("train", 0.25, "salt")
    validation = RecordPart("validation", 0.25, "salt")
    site = make_site(epsilon_cap=math.inf)
    site.answer(exact_query("a0", 0, "a", records=train), 1)
    site.answer(exact_query("b0", 0, "b", records=train), 1)
    with pytest.raises(QueryRefusedError, match="another part"):
        site.answer(exact_query("c0", 0, "c", records=validation), 1)
    with pytest.raises(QueryRefusedError, match="another part"):
        site.answer(exact_query("d0", 0, "d"), 1)  # every record is another part too


MALFORMED = st.one_of(
    st.text(min_size=1).filter(lambda s: not all(c in "abcdefghijklmnopqrstuvwxyz0123456789_-"
                                                 for c in s) or len(s) > 32),
    st.text(alphabet="abc-_19", min_size=33, max_size=60),
    st.integers(), st.floats(), st.booleans(), st.none(), st.binary(),
    st.lists(st.text(max_size=3), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=MALFORMED)
def test_a_malformed_chain_name_is_a_refusal_and_the_site_goes_on(make_site, name):
    """One site for every example, as a daemon would see them one after another."""
    site = _FUZZED.get(make_site) or _FUZZED.setdefault(make_site, make_site(
        epsilon_cap=math.inf))
    before = len(site.ledger.charges())
    query = Query("job-1", f"bad-{before}", "reweighted_gradient",
                  {**wire(0), "chain": name}, exact_query("x", 0).mechanism)
    with pytest.raises(QueryRefusedError, match="chain"):
        site.answer(query, 1)
    assert len(site.ledger.charges()) == before
    site.answer(exact_query(f"good-{before}", 0, job=f"job-{before}"), 1)


_FUZZED: dict = {}


# The digest of the default chain's step-0 query below, computed with the kernel
# as it was before chains existed (the same bytes), pinned.
_PINNED_DEFAULT_DIGEST = "f3626c11cbde6d21d4a8a00c7fe03fc616206ef578b15bc3fb80ec7d76e23744"
# What to_wire sent before chains existed: the required keys and weight_noise.
_WIRE_BEFORE_CHAINS = ("weights", "step", "objective", "loss", "alpha",
                       "total_private_records", "feature_norm", "label_bound", "radius", "k1",
                       "k2", "kinf", "mu", "inverse_square_sum", "log_partition", "step_size",
                       "weight_noise")


def test_the_default_chain_keeps_the_wire_and_the_digest():
    typed = KERNEL.Params.from_wire(wire(0), DIM)
    assert typed.chain == ""
    before = {key: getattr(typed, key) for key in _WIRE_BEFORE_CHAINS}
    assert list(typed.to_wire()) == list(before)
    assert all(np.array_equal(typed.to_wire()[k], before[k]) for k in before)
    explicit = KERNEL.Params.from_wire({**wire(0), "chain": ""}, DIM)
    assert explicit.to_wire().keys() == typed.to_wire().keys()
    query = Query("job-1", "q0", "reweighted_gradient", typed.to_wire(),
                  exact_query("x", 0).mechanism)
    assert hashlib.sha256(query_digest(query, 1)).hexdigest() == _PINNED_DEFAULT_DIGEST
    named = KERNEL.Params.from_wire(wire(0, "a"), DIM)
    assert named.to_wire()["chain"] == "a"
    assert query_digest(Query("job-1", "q0", "reweighted_gradient", named.to_wire(),
                              query.mechanism), 1) != query_digest(query, 1)


def test_the_kernel_registered_is_the_one_with_chains():
    assert isinstance(get_kernel("reweighted_gradient"), ReweightedGradient)


_NEIGHBOURS: list[int] = []


def _site_over(tmp_path, data: Dataset) -> Site:
    _NEIGHBOURS.append(len(_NEIGHBOURS))
    policy = SitePolicy(site_name=f"n{len(_NEIGHBOURS)}", epsilon_cap=math.inf,
                        delta_cap=1e-5, allow_non_private=True)
    return Site(data, policy, PrivacyLedger(tmp_path / f"n{len(_NEIGHBOURS)}.db", policy,
                                            create=True))


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(norm=st.sampled_from([0.0, 1.0, 1e3, 1e300]), label=st.sampled_from([-1e300, -1.0, 0.0,
                                                                              7.0, 1e300]),
       direction=st.integers(0, DIM - 1), order=st.permutations(["", "a", "guess-2"]))
def test_interleaved_chains_on_neighbours_differ_by_at_most_the_charge(
        tmp_path, norm, label, direction, order):
    """Replace-one neighbours (record 0 swapped for an adversarial one) answer
    the same interleaved steps of three chains through Site.answer without
    noise: every release differs by at most what the site charges (its
    sensitivity plus the grid's rounding), whatever the chains' hidden u."""
    base = synthetic_dataset(40, DIM, seed=3)
    features, labels = base.features.copy(), base.labels.copy()
    features[0] = 0.0
    features[0, direction] = norm
    labels[0] = label
    sites = [_site_over(tmp_path, base),
             _site_over(tmp_path, Dataset(features, labels, base.feature_names))]
    codec = FixedPointCodec()
    largest = 0.0
    for step in range(3):
        for chain in order:
            query = exact_query(f"{chain}-{step}", step, chain)
            typed = KERNEL.Params.from_wire(query.params, DIM)
            charged = KERNEL.l2_sensitivities(typed, Adjacency.REPLACE_ONE)
            one, other = ([codec.decode(b) for b in site.answer(query, 1).blocks]
                          for site in sites)
            for a, b, bound in zip(one, other, charged, strict=True):
                rounding = math.sqrt(a.size) * 2.0**-codec.fractional_bits
                assert np.linalg.norm(a - b) <= bound + rounding, (step, chain)
                largest = max(largest, float(np.linalg.norm(a - b)))
    assert largest > 0  # the neighbours were told apart: the bound was tested
    for site in sites:
        site.ledger.close()
