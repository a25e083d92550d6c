"""Site.answer: policy checks, the site's own sensitivity, charge before release."""

import numpy as np
import pytest

from privadapt.common.errors import BudgetExceededError, QueryRefusedError, ReplayError
from privadapt.common.federation import Query
from privadapt.common.kernels import get_kernel
from privadapt.common.mechanisms import (
    Adjacency,
    GaussianMechanism,
    LaplaceMechanism,
    NoNoise,
    PureDpEvent,
)
from privadapt.common.numerics.fixed_point import FixedPointCodec

DIM = 5
CODEC = FixedPointCodec()


def decoded(share, block=0):
    return CODEC.decode(share.blocks[block])


def gradient_query(query_id="q1", mechanism=None, clip_norm=1.0, job="job-1", t=0, **params):
    params = {"weights": np.full(DIM, 0.1), "loss": "logistic", "clip_norm": clip_norm, **params}
    mechanism = mechanism or GaussianMechanism.single(2 * clip_norm, 5.0)
    return Query(job, query_id, "linear_gradient", params, mechanism, collusion_tolerance=t)


def exact_sum(site, query):
    kernel = get_kernel(query.kernel)
    return kernel.compute(site._data, kernel.Params.from_wire(query.params, site.dim), {})[0]


def test_answer_is_kernel_sum_plus_gaussian_share(make_site):
    site = make_site(noise_seed=None)
    query = gradient_query()
    share = site.answer(query, num_participants=1)
    noise = decoded(share) - exact_sum(site, query)
    assert 0 < np.linalg.norm(noise) < 10 * 10.0 * np.sqrt(DIM)
    assert share.site_name == "site-a" and share.query_id == "q1"


def test_noise_free_answer_on_simulation_site_is_the_exact_sum(make_site):
    site = make_site(epsilon_cap=float("inf"))
    query = gradient_query(mechanism=NoNoise((2.0,)))
    share = site.answer(query, 1)
    np.testing.assert_array_equal(share.blocks[0], CODEC.encode(exact_sum(site, query)))


def test_answer_is_charged_in_the_ledger_before_it_returns(make_site):
    site = make_site()
    site.answer(gradient_query(), 1)
    (charge,) = site.ledger.charges("job-1")
    assert charge.query_id == "q1" and charge.epsilon_after > 0


def test_non_private_release_is_refused_by_a_capped_site(make_site):
    with pytest.raises(QueryRefusedError, match="not private"):
        make_site().answer(gradient_query(mechanism=NoNoise((2.0,))), 1)


def test_count_without_noise_is_free_under_replace_one(make_site):
    site = make_site()
    share = site.answer(Query("job-1", "q1", "record_count", {}, NoNoise((0.0,))), 1)
    assert decoded(share)[0] == 200
    assert site.ledger.spent().epsilon == 0


def test_kernel_outside_policy_is_refused(make_site):
    site = make_site(allowed_kernels=frozenset({"record_count"}))
    with pytest.raises(QueryRefusedError, match="allows only"):
        site.answer(gradient_query(), 1)


def test_under_declared_sensitivity_is_refused(make_site):
    site = make_site()
    mechanism = GaussianMechanism.single(1.0, 5.0)  # clipping guarantees 2C = 2
    with pytest.raises(QueryRefusedError, match="sensitivity"):
        site.answer(gradient_query(mechanism=mechanism), 1)
    assert site.ledger.charges() == []


def test_site_charges_its_own_adjacency(make_site):
    # An add/remove mechanism declares C; a replace-one site accounts 2C.
    site = make_site()
    mechanism = GaussianMechanism.single(1.0, 8.0, Adjacency.ADD_REMOVE_ONE)
    site.answer(gradient_query(mechanism=mechanism), 1)
    (charge,) = site.ledger.charges()
    assert charge.mechanism.adjacency == Adjacency.REPLACE_ONE
    assert charge.mechanism.noise_multiplier == pytest.approx(4.0)


def test_noise_below_policy_minimum_is_refused(make_site):
    site = make_site(min_noise_multiplier=3.0)
    with pytest.raises(QueryRefusedError, match="minimum"):
        site.answer(gradient_query(mechanism=GaussianMechanism.single(2.0, 2.0)), 1)


def test_too_few_participants_is_refused(make_site):
    with pytest.raises(QueryRefusedError, match="participants"):
        make_site(min_participants=3).answer(gradient_query(), 2)


def test_job_tolerating_fewer_colluders_than_policy_is_refused(make_site):
    with pytest.raises(QueryRefusedError, match="requires t"):
        make_site(collusion_tolerance=1).answer(gradient_query(t=0), 3)


def test_clip_bound_above_policy_limit_is_refused(make_site):
    with pytest.raises(QueryRefusedError, match="clip_norm"):
        make_site(max_clip_norm=0.5).answer(gradient_query(), 1)


def test_malformed_params_are_refused_with_the_reason(make_site):
    with pytest.raises(QueryRefusedError, match="shape"):
        make_site().answer(gradient_query(weights=np.ones(DIM + 1)), 1)


def test_pure_dp_event_is_not_a_noise_mechanism(make_site):
    with pytest.raises(QueryRefusedError, match="adds no noise"):
        make_site().answer(gradient_query(mechanism=PureDpEvent(1.0)), 1)


def test_laplace_release_is_charged_with_l1_sensitivity(make_site):
    site = make_site()
    l1 = 2.0 * np.sqrt(DIM)
    site.answer(gradient_query(mechanism=LaplaceMechanism(l1, 10.0)), 1)
    (charge,) = site.ledger.charges()
    assert charge.mechanism.epsilon == pytest.approx(l1 / 10.0)


def test_replayed_query_is_refused(make_site):
    site = make_site()
    site.answer(gradient_query(), 1)
    with pytest.raises(ReplayError):
        site.answer(gradient_query(), 1)


def test_budget_exhaustion_names_site_and_cap(make_site):
    site = make_site(epsilon_cap=1.0)
    with pytest.raises(BudgetExceededError, match="site-a") as refused:
        for i in range(100):
            site.answer(gradient_query(f"q{i}", GaussianMechanism.single(2.0, 2.0)), 1)
    assert "1" in str(refused.value)
    assert site.ledger.spent().epsilon <= 1.0


def test_share_leaves_on_the_fixed_point_grid(make_site):
    share = make_site().answer(gradient_query(), 1)
    assert share.blocks[0].dtype == np.uint64


def test_charge_includes_the_grid_rounding(make_site):
    site = make_site()
    query = gradient_query(mechanism=GaussianMechanism.single(2.0, 5.0))
    site.answer(query, 1)
    (charge,) = site.ledger.charges()
    # The kernel's own float rounding is charged with the grid's, at
    # the site's public bound on n (or at n = 1 where admission passes none).
    kernel = get_kernel("linear_gradient")
    params = kernel.Params.from_wire(query.params, DIM)
    expected = {2.0 + np.sqrt(DIM) * (2.0**-32 + 2 * kernel.computation_errors(params, DIM, n)[0])
                for n in (1, site.policy.range_records(site.num_records))}
    assert charge.mechanism.blocks[0].sensitivity in expected


def test_query_whose_aggregate_could_wrap_is_refused(make_site):
    site = make_site(max_clip_norm=None)
    query = gradient_query(clip_norm=1e8, mechanism=GaussianMechanism.single(2e8, 1e-5))
    with pytest.raises(QueryRefusedError, match="wraps"):
        site.answer(query, 1)


def test_noise_too_coarse_for_the_grid_is_refused(make_site):
    query = gradient_query(mechanism=GaussianMechanism.single(2.0, 1e6))
    with pytest.raises(QueryRefusedError, match="fewer fractional bits"):
        make_site().answer(query, 1)


@pytest.mark.parametrize("participants,tolerance", [(2.5, 0), (True, 0), (3, 1.5), (3, 3)])
def test_participant_count_and_tolerance_must_be_sane_integers(make_site, participants,
                                                                 tolerance):
    with pytest.raises(QueryRefusedError):
        make_site().answer(gradient_query(t=tolerance), participants)


def test_params_are_snapshotted_before_any_check(make_site):
    class Shifty(dict):
        reads = 0

        def __getitem__(self, key):
            Shifty.reads += 1
            value = super().__getitem__(key)
            return 1e6 if key == "clip_norm" and Shifty.reads > 4 else value

        def get(self, key, default=None):
            return self[key] if key in self else default  # noqa: SIM401 (must go through __getitem__)

    site = make_site(max_clip_norm=1.0)
    params = Shifty(weights=np.full(DIM, 0.1), loss="logistic", clip_norm=1.0)
    query = Query("job-1", "q1", "linear_gradient", params, GaussianMechanism.single(2.0, 5.0))
    share = decoded(site.answer(query, 1))
    honest = {"weights": np.full(DIM, 0.1), "loss": "logistic", "clip_norm": 1.0}
    kernel = get_kernel("linear_gradient")
    exact = kernel.compute(site._data, kernel.Params.from_wire(honest, DIM), {})[0]
    assert np.linalg.norm(share - exact) < 10 * 10.0 * np.sqrt(DIM)


def test_site_opens_from_a_data_file_and_a_ledger_path(tmp_path):
    from privadapt.client.policy import SitePolicy
    from privadapt.client.site import Site

    rng = np.random.default_rng(4)
    np.savez(tmp_path / "records.npz", features=rng.normal(size=(20, DIM)),
             labels=np.sign(rng.normal(size=20)))
    site = Site.open(tmp_path / "records.npz", SitePolicy("st-mary", 2.0, 1e-5),
                     tmp_path / "ledger.db", create_ledger=True)
    assert (site.name, site.num_records, site.dim) == ("st-mary", 20, DIM)
    site.answer(gradient_query(), 1)
    assert len(site.ledger.charges("job-1")) == 1
