"""LocalFederation: the fixed-point aggregate of the sites' shares."""

import numpy as np
import pytest
from scipy import stats

from privadapt.client.local_federation import LocalFederation
from privadapt.common.kernels import get_kernel
from privadapt.common.mechanisms import GaussianMechanism, NoNoise

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
    from privadapt.common.wire import WireError

    federation = LocalFederation([make_site(epsilon_cap=float("inf"))])
    params = {**PARAMS, "weights": list(PARAMS["weights"])}  # a list, not an array
    with pytest.raises(WireError):
        federation.query("linear_gradient", params, NoNoise((2.0,)))
