"""Site.answer for kernels with local blocks: the site noises them at the full
sigma, applies them to the job's state, releases only the other blocks, charges
the whole mechanism, and keeps its state unchanged when it refuses."""

import dataclasses
import math
from collections.abc import MutableMapping
from typing import Any

import numpy as np
import pytest

from privadapt.common.errors import BudgetExceededError, QueryRefusedError
from privadapt.common.federation import Query
from privadapt.common.kernels import Kernel, NoParams, register
from privadapt.common.kernels.reweighted_gradient import ReweightedGradient
from privadapt.common.mechanisms import (
    Adjacency,
    GaussianBlock,
    GaussianMechanism,
    LaplaceMechanism,
    NoNoise,
)
from privadapt.common.numerics.fixed_point import FixedPointCodec

CODEC = FixedPointCodec()
LOCAL_SENSITIVITY = 3.0


@register
class LocalNoiseProbe(Kernel):
    """Test kernel: its local block is all zeros, so what the site applies is pure
    noise; it releases the root mean square of the last applied block and how many
    updates it has applied (neither depends on the data: sensitivity 0)."""

    name = "test_local_noise_probe"
    Params = NoParams
    per_record_state = True

    def output_shapes(self, params: NoParams, dim: int) -> tuple[tuple[int, ...], ...]:
        return ((2,),)

    def l2_sensitivities(self, params, adjacency) -> tuple[float, ...]:
        return (0.0,)

    def max_abs_sum(self, params: NoParams, num_records: int) -> float:
        return 1e6

    def computation_errors(self, params: NoParams, dim: int, max_records: int) -> tuple[float]:
        # Its release reads no record (the default bounds a sum of records), so
        # its float error cannot differ between neighbours: charged nothing.
        return (0.0,)

    def local_block_shapes(self, params, num_records) -> tuple[tuple[int, ...], ...]:
        return ((num_records,),)

    def local_l2_sensitivities(self, params, adjacency) -> tuple[float, ...]:
        return (LOCAL_SENSITIVITY,)

    def compute_local(self, data, params, state: MutableMapping[str, Any]):
        return (np.zeros(data.num_records),)

    def apply_local(self, data, params, state, noised_blocks) -> None:
        own = state.setdefault(self.name, {"applied": 0})
        own["applied"] += 1
        own["rms"] = float(np.sqrt(np.mean(noised_blocks[0] ** 2)))

    def compute(self, data, params, state):
        own = state[self.name]
        return (np.array([own["rms"], own["applied"]]),)


def probe_query(query_id="q1", local_sigma=2.0, job="job-1", t=0):
    mechanism = GaussianMechanism((GaussianBlock(0.0, 1e-6),),
                                  local_blocks=(GaussianBlock(LOCAL_SENSITIVITY, local_sigma),))
    return Query(job, query_id, LocalNoiseProbe.name, {}, mechanism, collusion_tolerance=t)


def released(share) -> np.ndarray:
    return CODEC.decode(share.blocks[0])


@pytest.mark.parametrize("participants", [1, 4])
def test_local_blocks_are_noised_at_the_full_sigma_not_a_share(make_site, participants):
    site = make_site(num_records=2000, noise_seed=3)
    rms, _ = released(site.answer(probe_query(local_sigma=2.0), participants))
    assert rms == pytest.approx(2.0, rel=0.05)  # sigma, whatever K is (a share: sigma/2)


def test_only_the_released_blocks_leave_the_site(make_site):
    share = make_site().answer(probe_query(), 1)
    assert len(share.blocks) == 1 and share.blocks[0].shape == (2,)


def test_the_ledger_charges_every_block_including_the_local_one(make_site):
    site = make_site()
    site.answer(probe_query(local_sigma=6.0), 1)
    (charge,) = site.ledger.charges("job-1")
    (released_block,), (local_block,) = charge.mechanism.blocks, charge.mechanism.local_blocks
    # The local block is never rounded onto the grid: its own sensitivity, exactly.
    assert local_block == GaussianBlock(LOCAL_SENSITIVITY, 6.0)
    assert released_block.sensitivity == 0.0
    assert charge.mechanism.noise_multiplier == pytest.approx(2.0)


def test_a_refused_charge_leaves_the_job_state_unchanged(make_site):
    site = make_site(epsilon_cap=1.0)
    assert released(site.answer(probe_query("q1", local_sigma=30.0), 1))[1] == pytest.approx(1)
    with pytest.raises(BudgetExceededError):
        site.answer(probe_query("q2", local_sigma=0.5), 1)
    # The refused query's update was never kept: this is the second application.
    assert released(site.answer(probe_query("q3", local_sigma=30.0), 1))[1] == pytest.approx(2)


def test_a_mechanism_without_the_local_blocks_is_refused(make_site):
    query = Query("job-1", "q1", LocalNoiseProbe.name, {},
                  GaussianMechanism((GaussianBlock(0.0, 1.0),)))
    with pytest.raises(QueryRefusedError, match="2"):
        make_site().answer(query, 1)


def test_a_local_block_declared_below_the_kernels_sensitivity_is_refused(make_site):
    mechanism = GaussianMechanism((GaussianBlock(0.0, 1e-6), GaussianBlock(1.0, 5.0)))
    with pytest.raises(QueryRefusedError, match="block 1"):
        make_site().answer(Query("job-1", "q1", LocalNoiseProbe.name, {}, mechanism), 1)


def test_laplace_noise_is_refused_for_a_kernel_with_local_blocks(make_site):
    query = Query("job-1", "q1", LocalNoiseProbe.name, {}, LaplaceMechanism(1.0, 1.0))
    with pytest.raises(QueryRefusedError, match="Gaussian"):
        make_site().answer(query, 1)


def reweighted_query(query_id, step, job="job-1"):
    params = {
        "weights": np.full(5, 0.2), "step": step, "objective": "convex", "loss": "squared",
        "alpha": 0.5, "total_private_records": 200, "feature_norm": 1.0, "label_bound": 1.0,
        "radius": 1.0, "k1": 0.1, "k2": 0.1, "kinf": 0.1, "mu": 100.0,
        "inverse_square_sum": 0.005, "log_partition": 5.0, "step_size": 1e7,
    }
    typed = ReweightedGradient.Params.from_wire(params, 5)
    sensitivities = (ReweightedGradient().l2_sensitivities(typed, Adjacency.REPLACE_ONE)
                     + ReweightedGradient().local_l2_sensitivities(typed, Adjacency.REPLACE_ONE))
    return Query(job, query_id, "reweighted_gradient", params, NoNoise(sensitivities))


def test_a_step_retried_under_a_new_query_id_is_applied_once(make_site):
    retried = make_site("retried", epsilon_cap=math.inf)
    plain = make_site("plain", epsilon_cap=math.inf)
    retried.answer(reweighted_query("q1", 0), 2)
    retried.answer(reweighted_query("q2", 0), 2)  # round 0 retried after a dropout
    plain.answer(reweighted_query("q1", 0), 2)
    again = retried.answer(reweighted_query("q3", 1), 2)
    once = plain.answer(reweighted_query("q2", 1), 2)
    for a, b in zip(again.blocks, once.blocks, strict=True):
        np.testing.assert_array_equal(a, b)
    # The aggregates moved: the update of step 1 did something.
    first = plain.answer(reweighted_query("q3", 2), 2)
    assert not np.array_equal(first.blocks[1], once.blocks[1])


def test_a_step_out_of_order_is_refused(make_site):
    site = make_site(epsilon_cap=math.inf)
    site.answer(reweighted_query("q1", 0), 1)
    with pytest.raises(QueryRefusedError, match="out of order"):
        site.answer(reweighted_query("q2", 2), 1)
    with pytest.raises(QueryRefusedError, match="no weights"):
        site.answer(reweighted_query("q1", 3, job="job-2"), 1)


def test_local_noise_coarser_than_the_grid_is_accepted_because_it_is_never_gridded(make_site):
    # 1e5 would be refused on a released block at 32 fractional bits (2^20 / 100).
    rms, _ = released(make_site().answer(probe_query(local_sigma=1e5), 1))
    assert rms == pytest.approx(1e5, rel=0.3)


def test_a_restarted_site_resumes_the_job_state_its_ledger_paid_for(make_site, tmp_path):
    from privadapt.client.ledger.privacy_ledger import PrivacyLedger
    from privadapt.client.site import Site

    restarted = make_site("restarted", epsilon_cap=math.inf)
    steady = make_site("steady", epsilon_cap=math.inf)
    for step in range(2):
        restarted.answer(reweighted_query(f"q{step}", step), 2)
        steady.answer(reweighted_query(f"q{step}", step), 2)
    restarted.ledger.close()
    # A new process: same data, policy and database, nothing in memory.
    reopened = Site(restarted._data, restarted.policy,
                    PrivacyLedger(tmp_path / "restarted.db", restarted.policy, create=True))
    after_restart = reopened.answer(reweighted_query("q2", 2), 2)
    uninterrupted = steady.answer(reweighted_query("q2", 2), 2)
    for a, b in zip(after_restart.blocks, uninterrupted.blocks, strict=True):
        np.testing.assert_array_equal(a, b)


def test_job_state_round_trips_without_pickle():
    from privadapt.client.job_state import decode_state, encode_state

    state = {"kernel": {"u": np.arange(5.0), "step": 3, "pending": {"g": np.ones((2, 2))}},
             "flag": True}
    back = decode_state(encode_state(state))
    np.testing.assert_array_equal(back["kernel"]["u"], state["kernel"]["u"])
    assert back["kernel"]["step"] == 3 and back["flag"] is True
    np.testing.assert_array_equal(back["kernel"]["pending"]["g"], np.ones((2, 2)))
    with pytest.raises(ValueError, match="cannot be stored"):
        encode_state({"bad": object()})


def test_a_mechanism_with_the_local_block_last_among_released_ones_is_answered_alike(make_site):
    """The older form (local blocks trailing in ``blocks``) noises and charges
    exactly as the explicit groups do."""
    explicit = probe_query(local_sigma=3.0)
    blocks = explicit.mechanism.all_blocks
    trailing = dataclasses.replace(explicit, mechanism=GaussianMechanism(blocks))
    answers, charges = [], []
    for name, query in (("a", explicit), ("b", trailing)):
        site = make_site(name=f"site-{name}", noise_seed=7)
        answers.append(released(site.answer(query, 1)))
        charges.append(site.ledger.charges("job-1")[0].mechanism.noise_multiplier)
    np.testing.assert_array_equal(answers[0], answers[1])
    assert charges[0] == charges[1]



@register
class StatelessLocalProbe(LocalNoiseProbe):
    """The probe's local block without per-record state: local blocks alone
    must already rule out Poisson sampling (they are computed over every record)."""

    name = "test_stateless_local_probe"
    per_record_state = False


def test_a_sampled_query_on_a_kernel_with_local_blocks_is_refused(make_site):
    site = make_site(adjacency="add_remove_one")
    local = GaussianBlock(LOCAL_SENSITIVITY, 2.0)
    # The local block rides in the released group: a sampled Gaussian has no local group.
    carrying = GaussianMechanism((GaussianBlock(1.0, 1.0), local), "add_remove_one", 0.5)
    query = Query("job-1", "q1", StatelessLocalProbe.name, {}, carrying)
    with pytest.raises(QueryRefusedError, match="cannot be Poisson-sampled"):
        site.answer(query, 1)
    assert site.ledger.charges("job-1") == []
