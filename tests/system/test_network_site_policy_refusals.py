"""Against real site daemons: a job one site's policy would refuse every round
of is refused at launch, naming the site, and no site is charged; a
refusal during a round names the refusing site."""

from __future__ import annotations

import grpc
import pytest

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.wire.messages import params_to_proto
from tests.network_harness import (
    ThreadSites,
    in_process_coordinator,
    make_pki,
    operator_stub,
    write_coordinator_config,
    write_site,
)
from tests.synthetic_data import synthetic_dataset

SITES = ("site-a", "site-b", "site-c")
HYPER = {"loss": "logistic", "iterations": 2, "learning_rate": 1.0, "radius": 5.0,
         "clip_norm": 1.0}


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("policies")
    pki = make_pki(tmp_path / "pki", SITES)
    sites = ThreadSites()
    options = {"site-a": {"peers": frozenset({"site-b"}), "collusion_tolerance": 1},
               "site-b": {"min_participants": 2},
               "site-c": {"allowed_kernels": frozenset({"second_moments"})}}
    with in_process_coordinator(write_coordinator_config(tmp_path, pki)) as coordinator:
        for k, name in enumerate(SITES):
            sites.start(write_site(tmp_path, pki, name, synthetic_dataset(60, 3, seed=k),
                                   coordinator.port, **options[name]))
        try:
            assert coordinator.registry.wait_until(
                lambda: coordinator.registry.connected_names() == set(SITES), 20)
            yield operator_stub(pki, coordinator.port), tmp_path
        finally:
            sites.stop()


def _refusal(stub, sites, dry_run=False) -> str:
    spec = pb.JobSpec(algorithm="noisy_gd", epsilon=1.0, delta=1e-6, sites=sites, seed=1)
    params_to_proto(HYPER, spec.hyperparameters)
    with pytest.raises(grpc.RpcError) as refused:
        stub.Launch(pb.LaunchRequest(spec=spec, job_id="refused", dry_run=dry_run), timeout=30)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    return refused.value.details()


def _charges(tmp_path, name: str) -> int:
    with PrivacyLedger.open_readonly(tmp_path / name / "site.db") as ledger:
        return len(ledger.charges())


def test_a_peers_list_leaving_out_a_job_site_is_refused_at_launch(running):
    stub, tmp_path = running
    message = _refusal(stub, ["site-a", "site-b", "site-c"])
    assert "site 'site-a' masks only with its peers (site-b) and would refuse every round " \
           "with 'site-c'" in message
    assert "site 'site-c' allows only ['second_moments']" not in message  # first things first
    assert "masks only with its peers" in _refusal(stub, ["site-a", "site-c"], dry_run=True)
    assert all(_charges(tmp_path, name) == 0 for name in SITES)


def test_a_kernel_a_site_does_not_allow_is_refused_at_launch(running):
    stub, tmp_path = running
    message = _refusal(stub, ["site-b", "site-c"])
    assert "site 'site-c' allows only ['second_moments'], and the job queries " \
           "['linear_gradient']" in message
    assert all(_charges(tmp_path, name) == 0 for name in SITES)


def test_a_collusion_tolerance_below_a_sites_is_refused_at_launch_and_dry_run(running):
    stub, tmp_path = running
    for dry_run in (False, True):
        assert ("site 'site-a' answers only secure sums that tolerate at least 1 colluding "
                "site(s) (its policy's collusion_tolerance) and the job's collusion_tolerance "
                "is 0") in _refusal(stub, ["site-a", "site-b"], dry_run=dry_run)
    assert all(_charges(tmp_path, name) == 0 for name in SITES)


def test_a_minimum_above_the_jobs_sites_is_refused_at_launch(running):
    stub, _ = running
    assert "site 'site-b' answers only rounds of at least 2 sites" in _refusal(stub, ["site-b"])


def test_a_job_naming_an_unknown_site_is_refused_as_unknown(running):
    stub, tmp_path = running
    for dry_run in (False, True):
        message = _refusal(stub, ["site-a", "site-b", "site-bb"], dry_run=dry_run)
        assert "unknown site(s) 'site-bb' (did you mean 'site-b'?)" in message
        assert "registered: site-a, site-b, site-c" in message
        assert "masks only with its peers" not in message
    assert all(_charges(tmp_path, name) == 0 for name in SITES)
