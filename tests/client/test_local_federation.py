"""LocalFederation: the fixed-point aggregate of the sites' shares."""

import gc

import numpy as np
import pytest
from scipy import stats

from privadapt.client.local_federation import LocalFederation
from privadapt.common.errors import DataError
from privadapt.common.kernels import get_kernel
from privadapt.common.mechanisms import Adjacency, GaussianMechanism, NoNoise
from tests.synthetic_data import synthetic_dataset

DIM = 5
PARAMS = {"weights": np.linspace(-1, 1, DIM), "loss": "logistic", "clip_norm": 1.0}


def pooled_sum(sites, params=PARAMS):
    kernel = get_kernel("linear_gradient")
    typed = kernel.Params.from_wire(params, DIM)
    return sum(kernel.compute(s._data, typed, {})[0] for s in sites)


def simulation_sites(make_site, count=3, **fields):
    return [
        make_site(f"site-{k}", seed=k, epsilon_cap=float("inf"), **fields) for k in range(count)
    ]


def test_noise_free_aggregate_equals_pooled_sum_to_codec_resolution(make_site):
    sites = simulation_sites(make_site)
    answer = LocalFederation(sites).query("linear_gradient", PARAMS, NoNoise((2.0,)))
    np.testing.assert_allclose(answer.value, pooled_sum(sites), rtol=0, atol=3 * 2.0**-32)
    assert answer.participants == ("site-0", "site-1", "site-2")


def test_aggregate_is_the_exact_fixed_point_sum_of_shares(make_site):
    sites = simulation_sites(make_site)
    federation = LocalFederation(sites)
    answer = federation.query("linear_gradient", PARAMS, NoNoise((2.0,)))
    codec = federation.codec
    per_site = [kernel.compute(s._data, kernel.Params.from_wire(PARAMS, DIM), {})[0]
                for kernel in [get_kernel("linear_gradient")] for s in sites]
    expected = codec.decode(codec.add(codec.encode(v) for v in per_site))
    np.testing.assert_array_equal(answer.value, expected)


@pytest.mark.parametrize("tolerance", [0, 1])
def test_aggregate_noise_has_at_least_the_intended_variance(make_site, tolerance):
    sigma = 3.0
    sites = [
        make_site(f"site-{k}", seed=k, noise_seed=100 + k, epsilon_cap=float("inf"))
        for k in range(3)
    ]
    federation = LocalFederation(sites, collusion_tolerance=tolerance)
    mechanism = GaussianMechanism.single(2.0, sigma / 2.0)
    exact = pooled_sum(sites)
    noise = np.concatenate([
        federation.query("linear_gradient", PARAMS, mechanism).value - exact for _ in range(400)
    ])
    # K shares of variance sigma^2/(K-t): total K sigma^2 / (K - t).
    expected_variance = 3 * sigma**2 / (3 - tolerance)
    assert stats.kstest(noise, stats.norm(scale=np.sqrt(expected_variance)).cdf).pvalue > 1e-3


def test_site_sizes_and_participant_count_are_public(make_site):
    sites = [make_site(f"s{k}", num_records=50 + k, seed=k) for k in range(4)]
    federation = LocalFederation(sites)
    assert federation.num_sites == 4
    assert federation.site_sizes == {"s0": 50, "s1": 51, "s2": 52, "s3": 53}


def test_each_query_gets_a_fresh_id_and_every_site_is_charged(make_site):
    sites = [make_site(f"s{k}", seed=k) for k in range(2)]
    federation = LocalFederation(sites, job_id="job-x")
    mechanism = GaussianMechanism.single(2.0, 20.0)
    ids = {federation.query("linear_gradient", PARAMS, mechanism).query_id for _ in range(3)}
    assert len(ids) == 3
    spent = federation.privacy_spent()
    assert set(spent) == {"s0", "s1"}
    assert all(len(p.mechanisms) == 3 and p.job.epsilon > 0 for p in spent.values())


def test_duplicate_site_names_are_refused(make_site):
    site = make_site("same")
    with pytest.raises(ValueError, match="unique"):
        LocalFederation([site, site])


def test_sizes_of_add_remove_sites_are_not_public(make_site):
    from privadapt.common.errors import QueryRefusedError
    from privadapt.common.mechanisms import Adjacency

    federation = LocalFederation([make_site(adjacency=Adjacency.ADD_REMOVE_ONE)])
    with pytest.raises(QueryRefusedError, match="record_count"):
        _ = federation.site_sizes


def test_parameters_that_cannot_cross_the_wire_fail_in_process_too(make_site):
    from privadapt.common.wire.messages import WireError

    federation = LocalFederation([make_site(epsilon_cap=float("inf"))])
    params = {**PARAMS, "weights": list(PARAMS["weights"])}  # a list, not an array
    with pytest.raises(WireError):
        federation.query("linear_gradient", params, NoNoise((2.0,)))


# LocalFederation.from_datasets: the sites, policies and ledgers from datasets.

MECHANISM = GaussianMechanism.single(2.0, 5.0)


def datasets(count=3, dim=DIM):
    from tests.synthetic_data import synthetic_dataset

    return [synthetic_dataset(40 + k, dim, seed=k) for k in range(count)]


def test_from_datasets_builds_one_site_policy_and_ledger_each(tmp_path):
    federation = LocalFederation.from_datasets(
        datasets(), epsilon_cap=4.0, delta_cap=1e-6, ledger_dir=tmp_path,
        min_noise_multiplier=0.5, adjacency="add_remove_one", job_id="j1")
    assert [s.name for s in federation.sites] == ["site-1", "site-2", "site-3"]
    assert federation.job_id == "j1" and federation.dim == DIM
    for site in federation.sites:
        assert site.policy.site_name == site.name
        assert (site.policy.epsilon_cap, site.policy.delta_cap) == (4.0, 1e-6)
        assert site.policy.min_noise_multiplier == 0.5
        assert site.policy.adjacency == Adjacency.ADD_REMOVE_ONE
        assert site.ledger.policy is site.policy
        assert (tmp_path / f"{site.name}.ledger.db").exists()
    assert len({id(s.policy) for s in federation.sites}) == 3


def test_from_datasets_takes_names_and_refuses_a_mismatch(tmp_path):
    federation = LocalFederation.from_datasets(datasets(2), names=["st-mary", "st-john"],
                                               epsilon_cap=1.0, delta_cap=1e-5,
                                               ledger_dir=tmp_path)
    assert list(federation.site_sizes) == ["st-mary", "st-john"]
    with pytest.raises(ValueError, match="1 names for 2 datasets"):
        LocalFederation.from_datasets(datasets(2), names=["a"], epsilon_cap=1.0,
                                      delta_cap=1e-5, ledger_dir=tmp_path)


def test_a_noise_seed_makes_the_noise_reproducible_and_distinct_per_site(tmp_path):
    def answer(name, seed):
        federation = LocalFederation.from_datasets(datasets(), epsilon_cap=10.0, delta_cap=1e-5,
                                                   ledger_dir=tmp_path / name, noise_seed=seed)
        shares = [s.answer(q, 3) for q in [_query(federation)] for s in federation.sites]
        return [share.blocks[0] for share in shares]

    first, again, other = answer("a", 3), answer("b", 3), answer("c", 4)
    for one, two in zip(first, again, strict=True):
        np.testing.assert_array_equal(one, two)
    assert not np.array_equal(first[0], other[0])
    assert not np.array_equal(first[0] - first[1], np.zeros(DIM))  # own stream per site


def _query(federation):
    from privadapt.common.federation import Query

    return Query(federation.job_id, "q1", "linear_gradient", PARAMS, MECHANISM)


def test_without_a_noise_seed_the_sites_draw_from_the_csprng(tmp_path):
    federation = LocalFederation.from_datasets(datasets(1), epsilon_cap=10.0, delta_cap=1e-5,
                                               ledger_dir=tmp_path)
    assert federation.sites[0]._noise_source is None  # Site's default: SecureRandomBits


def test_new_job_shares_sites_and_ledgers_under_a_new_job_id(tmp_path):
    federation = LocalFederation.from_datasets(datasets(), epsilon_cap=10.0, delta_cap=1e-5,
                                               ledger_dir=tmp_path, job_id="first")
    federation.query("linear_gradient", PARAMS, MECHANISM)
    second = federation.new_job("second")
    assert second.sites == federation.sites and second.job_id == "second"
    second.query("linear_gradient", PARAMS, MECHANISM)
    spent = second.privacy_spent()["site-1"]
    assert spent.job.epsilon < spent.total.epsilon  # both jobs composed in one ledger
    assert federation.sites[0].ledger.jobs() == ["first", "second"]


def test_releases_charged_counts_each_sites_releases_of_its_own_job_only(tmp_path):
    federation = LocalFederation.from_datasets(datasets(2), epsilon_cap=10.0, delta_cap=1e-5,
                                               ledger_dir=tmp_path, job_id="first")
    assert federation.releases_charged() == {"site-1": 0, "site-2": 0}
    federation.query("linear_gradient", PARAMS, MECHANISM)
    federation.query_per_site("linear_gradient", PARAMS, MECHANISM, sites=["site-2"])
    assert federation.releases_charged() == {"site-1": 1, "site-2": 2}
    assert federation.new_job("second").releases_charged() == {"site-1": 0, "site-2": 0}


def test_a_temporary_ledger_directory_goes_with_the_federation():
    federation = LocalFederation.from_datasets(datasets(2), epsilon_cap=1.0, delta_cap=1e-5)
    directory = federation.sites[0].ledger.path.parent
    assert directory.exists()
    with federation.new_job():
        pass  # closing any view closes the sites they share
    assert not directory.exists()

    federation = LocalFederation.from_datasets(datasets(2), epsilon_cap=1.0, delta_cap=1e-5)
    directory = federation.sites[0].ledger.path.parent
    del federation
    gc.collect()
    assert not directory.exists()


def test_close_leaves_a_given_ledger_directory_and_caller_owned_sites(tmp_path, make_site):
    with LocalFederation.from_datasets(datasets(1), epsilon_cap=1.0, delta_cap=1e-5,
                                       ledger_dir=tmp_path):
        pass
    assert (tmp_path / "site-1.ledger.db").exists()
    site = make_site()
    with LocalFederation([site]):
        pass
    assert site.ledger.spent().epsilon == 0  # still open


def test_sites_of_different_dimensions_have_no_common_dim(tmp_path):
    federation = LocalFederation.from_datasets([*datasets(1), *datasets(1, dim=DIM + 1)],
                                               epsilon_cap=1.0, delta_cap=1e-5,
                                               ledger_dir=tmp_path)
    with pytest.raises(DataError, match="different dimensions"):
        _ = federation.dim


def test_an_unknown_backend_or_actors_without_ray_is_refused_before_any_site_is_built():
    data = [synthetic_dataset(20, DIM, seed=0)]
    with pytest.raises(ValueError, match="backend must be one of"):
        LocalFederation.from_datasets(data, epsilon_cap=1.0, delta_cap=1e-5, backend="dask")
    with pytest.raises(ValueError, match="needs backend='ray'"):
        LocalFederation.from_datasets(data, epsilon_cap=1.0, delta_cap=1e-5, actors=2)
