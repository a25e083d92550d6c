"""``fit`` on a LocalFederation refuses, before its first release, what a
networked launch refuses: a job over a site's remaining budget, a delta that
protects no one, and a second job under one federation's job id."""

from __future__ import annotations

import pytest

import privadapt as pa
from tests.synthetic_data import synthetic_dataset

SETTINGS = {"loss": "logistic", "iterations": 20, "learning_rate": 1.0, "radius": 5.0,
            "clip_norm": 1.0}


@pytest.fixture
def federation():
    data = [synthetic_dataset(200, 4, seed=k) for k in range(2)]
    with pa.LocalFederation.from_datasets(data, epsilon_cap=5.0, delta_cap=1e-5,
                                          noise_seed=1) as sites:
        yield sites


def _releases(federation) -> int:
    return sum(len(p.mechanisms) for p in federation.privacy_spent().values())


def test_a_job_over_the_remaining_budget_is_refused_before_any_release(federation):
    with pytest.raises(pa.PrivadaptError, match=r"would exceed the remaining privacy budget "
                       r"of 2 site\(s\): site 'site-1' has spent 0 of its cap 5 at delta "
                       r"1e-05, and with this job it would reach 7\.\d+"):
        pa.NoisyGD(epsilon=8.0, delta=1e-6, **SETTINGS).fit(federation)
    assert _releases(federation) == 0
    assert all(p.total.epsilon == 0 for p in federation.privacy_spent().values())


def test_what_is_left_is_the_ledgers_composition_not_the_sum_of_the_jobs(federation):
    pa.NoisyGD(epsilon=2.9, delta=1e-6, **SETTINGS).fit(federation)
    spent = federation.privacy_spent()["site-1"].total.epsilon
    second = federation.new_job()
    # The sum of the two jobs' spends exceeds the cap; their composition does not.
    pa.NoisyGD(epsilon=2.9, delta=1e-6, **SETTINGS).fit(second)
    assert 2 * spent > 5.0 > second.privacy_spent()["site-1"].total.epsilon
    third = federation.new_job()
    with pytest.raises(pa.PrivadaptError, match="would exceed the remaining privacy budget"):
        pa.NoisyGD(epsilon=4.0, delta=1e-6, **SETTINGS).fit(third)
    assert _releases(third) == 0


@pytest.mark.parametrize(("delta", "message"), [
    (0.5, r"delta = 0.5 is 0.001 or more"),
    (2e-3, r"delta = 0.002 is 0.001 or more"),
])
def test_a_delta_that_protects_no_one_is_refused_before_any_release(federation, delta, message):
    with pytest.raises(pa.PrivadaptError, match=message):
        pa.NoisyGD(epsilon=1.0, delta=delta, **SETTINGS).fit(federation)
    assert _releases(federation) == 0


def test_a_delta_not_below_one_over_n_is_refused_unless_the_sites_mean_large_deltas():
    data = [synthetic_dataset(1500, 4, seed=k) for k in range(2)]
    with (pa.LocalFederation.from_datasets(data, epsilon_cap=50.0, delta_cap=1e-5) as sites,
          pytest.raises(pa.PrivadaptError, match=r"not below 1/n = 0.000667 of site 'site-1'")):
        pa.NoisyGD(epsilon=1.0, delta=9e-4, **SETTINGS).fit(sites)
    with pa.LocalFederation.from_datasets(data, epsilon_cap=50.0, delta_cap=0.05) as sites:
        pa.NoisyGD(epsilon=1.0, delta=0.01, **SETTINGS).fit(sites)  # the sites mean it
        assert _releases(sites) == 2 * SETTINGS["iterations"]


def test_a_second_fit_on_one_federation_is_refused_and_new_job_starts_one(federation):
    first = pa.NoisyGD(epsilon=1.0, delta=1e-6, **SETTINGS).fit(federation)
    charged = _releases(federation)
    with pytest.raises(pa.PrivadaptError, match=r"already charged .* federation.new_job\(\)"):
        pa.NoisyGD(epsilon=1.0, delta=1e-6, **SETTINGS).fit(federation)
    assert _releases(federation) == charged  # nothing more was released under the job
    second = federation.new_job()
    pa.NoisyGD(epsilon=1.0, delta=1e-6, **SETTINGS).fit(second)
    assert second.job_id != federation.job_id and _releases(second) == charged
    assert first.coef_.shape == (4,)
