"""The networked federation end to end, coordinator and site daemons in this
process (threads) over real mutual-TLS gRPC on 127.0.0.1."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.local_federation import LocalFederation
from privadapt.client.policy import SitePolicy
from privadapt.client.site import Site
from privadapt.common.mechanisms import Adjacency, GaussianMechanism
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.wire.messages import param_from_proto, params_to_proto
from privadapt.server.algorithms.gradient_descent.noisy_gd import noisy_gd
from privadapt.server.federation.network import NetworkFederation, NetworkJob
from privadapt.server.jobs.privacy_report import privacy_report_json
from tests.network_harness import (
    ThreadSites,
    direct_federation,
    in_process_coordinator,
    make_pki,
    operator_stub,
    watch_until_done,
    write_coordinator_config,
    write_site,
)
from tests.synthetic_data import synthetic_dataset

SITES = ("site-a", "site-b", "site-c")
DIM = 4
HYPER = {"loss": "logistic", "iterations": 6, "learning_rate": 2.0, "radius": 5.0,
         "clip_norm": 1.0}


def _spec(epsilon: float, **fields) -> pb.JobSpec:
    spec = pb.JobSpec(algorithm="noisy_gd", epsilon=epsilon, delta=1e-6, sites=SITES, **fields)
    params_to_proto(HYPER, spec.hyperparameters)
    return spec


@pytest.fixture
def federation(tmp_path):
    """Yields (coordinator, operator stub, pki, datasets, start_sites)."""
    pki = make_pki(tmp_path / "pki", SITES)
    datasets = [synthetic_dataset(50 + 10 * k, DIM, seed=k) for k in range(len(SITES))]
    sites = ThreadSites()
    with in_process_coordinator(write_coordinator_config(tmp_path, pki)) as coordinator:
        def start_sites(epsilon_cap: float = 10.0, **kwargs) -> None:
            for name, data in zip(SITES, datasets, strict=True):
                config = write_site(tmp_path, pki, name, data, coordinator.port,
                                    epsilon_cap=epsilon_cap, **kwargs)
                sites.start(config)

        try:
            yield coordinator, operator_stub(pki, coordinator.port), pki, datasets, start_sites
        finally:
            sites.stop()


def _weights(stub, job_id: str) -> np.ndarray:
    result = stub.Result(pb.ResultRequest(job_id=job_id), timeout=10)
    return param_from_proto(result.model["weights"])


def test_noise_off_network_result_equals_local_federation(federation, tmp_path):
    _, stub, _, datasets, start_sites = federation
    start_sites(epsilon_cap=math.inf)
    job_id = stub.Launch(pb.LaunchRequest(spec=_spec(math.inf), job_id="exact"),
                         timeout=10).job_id
    status = watch_until_done(stub, job_id)
    assert pb.JobState.Name(status.state) == "JOB_STATE_SUCCEEDED", status.message
    networked = _weights(stub, job_id)

    local_sites = []
    for name, data in zip(SITES, datasets, strict=True):
        policy = SitePolicy(name, math.inf, 1e-5, allow_non_private=True)
        ledger = PrivacyLedger(tmp_path / f"local-{name}.db", policy, create=True)
        local_sites.append(Site(data, policy, ledger))
    local = noisy_gd(LocalFederation(local_sites), dim=DIM, epsilon=math.inf, delta=1e-6,
                     calibration="accountant", **HYPER)
    np.testing.assert_allclose(networked, local.weights, rtol=0, atol=1e-9)
    assert len(status.rounds) == HYPER["iterations"]
    assert all(sorted(r.participants) == list(SITES) for r in status.rounds)


def test_private_job_reports_each_sites_ledger(federation):
    _, stub, _, _, start_sites = federation
    start_sites()
    job_id = stub.Launch(pb.LaunchRequest(spec=_spec(1.0)), timeout=10).job_id
    status = watch_until_done(stub, job_id)
    assert pb.JobState.Name(status.state) == "JOB_STATE_SUCCEEDED", status.message
    result = stub.Result(pb.ResultRequest(job_id=job_id), timeout=10)
    report = json.loads(result.privacy_report_json)
    assert sorted(report["sites"]) == list(SITES)
    for site in report["sites"].values():
        # Calibrated by the accountant to (1, 1e-6) for the planned rounds, to
        # its 0.1% tolerance and never above (grid rounding included).
        assert 0.99 <= site["job_epsilon"] <= 1.0
        assert site["releases"] == HYPER["iterations"]
    assert status.rounds[-1].epsilon_so_far > 0


def test_pncnvx_adap_noise_off_networked_equals_in_process(tmp_path):
    from privadapt.server.algorithms.public_erm import fit_linear
    from privadapt.server.algorithms.reweighting.descent import DataBounds
    from privadapt.server.algorithms.reweighting.estimators import PNCnvxAdap
    from privadapt.server.algorithms.reweighting.ncnvx_adap import pncnvx_adap
    from privadapt.server.algorithms.reweighting.objectives import ReweightingHyperparameters

    pki = make_pki(tmp_path / "pki", SITES)
    public = synthetic_dataset(120, DIM, seed=99)
    np.savez(tmp_path / "public.npz", features=public.features, labels=public.labels)
    datasets = [synthetic_dataset(40 + 5 * k, DIM, seed=k) for k in range(len(SITES))]
    hyper = {"alpha": 0.5, "iterations": 8, "feature_norm": 1.0, "label_bound": 1.0,
             "radius": 5.0, "l1": 0.01, "l2": 0.01, "linf": 0.01, "mu": 100.0,
             "discrepancy": 0.05, "step_scale": 100.0}
    spec = pb.JobSpec(algorithm="pncnvx_adap", epsilon=math.inf, delta=1e-6, sites=SITES,
                      seed=5)
    params_to_proto(hyper, spec.hyperparameters)
    sites = ThreadSites()
    config = write_coordinator_config(tmp_path, pki, public_source=tmp_path / "public.npz")
    with in_process_coordinator(config) as coordinator:
        try:
            for name, data in zip(SITES, datasets, strict=True):
                sites.start(write_site(tmp_path, pki, name, data, coordinator.port,
                                       epsilon_cap=math.inf))
            stub = operator_stub(pki, coordinator.port)
            job_id = stub.Launch(pb.LaunchRequest(spec=spec), timeout=10).job_id
            status = watch_until_done(stub, job_id)
            assert status.state == pb.JOB_STATE_SUCCEEDED, status.message
            networked = _weights(stub, job_id)
        finally:
            sites.stop()
    local_sites = []
    for name, data in zip(SITES, datasets, strict=True):
        policy = SitePolicy(name, math.inf, 1e-5, allow_non_private=True)
        ledger = PrivacyLedger(tmp_path / f"l-{name}.db", policy, create=True)
        local_sites.append(Site(data, policy, ledger))
    # The job runs the estimator's default plan (warm start, average iterate):
    # the same estimator in process, and the solver function it calls.
    local = PNCnvxAdap(epsilon=math.inf, delta=1e-6, seed=5, **hyper).fit(
        LocalFederation(local_sites), public)
    np.testing.assert_allclose(networked, local.coef_, rtol=0, atol=1e-9)
    function = pncnvx_adap(
        LocalFederation([Site(d, SitePolicy(n, math.inf, 1e-5, allow_non_private=True),
                              PrivacyLedger(tmp_path / f"f-{n}.db", SitePolicy(
                                  n, math.inf, 1e-5, allow_non_private=True), create=True))
                         for n, d in zip(SITES, datasets, strict=True)]),
        public.features, public.labels,
        hyper=ReweightingHyperparameters(alpha=0.5, k1=0.01, k2=0.01, kinf=0.01, mu=100.0,
                                         discrepancy=0.05),
        bounds=DataBounds(feature_norm=1.0, label_bound=1.0, radius=5.0), epsilon=math.inf,
        delta=1e-6, iterations=8, loss="logistic", seed=5, step_scale=100.0,
        step_distance=None, calibration="accountant", aggregate_noise_ratio=3.0, chain="",
        return_average=True, weight_noise=False, step_sizes="noise_aware",
        initial_weights=fit_linear(public.features, public.labels, "logistic", 5.0))
    np.testing.assert_allclose(networked, function.weights, rtol=0, atol=1e-9)
    assert np.linalg.norm(networked) > 1e-3  # the model moved


class _CoordinatorDied(BaseException):
    """Stands for a kill: no handler of the coordinator's runs after it."""


def test_round_in_flight_when_the_coordinator_dies_is_reported_as_interrupted(federation):
    coordinator, _, _, _, start_sites = federation
    start_sites()
    first = direct_federation(coordinator, "crashy", SITES)
    first.wait_for_sites()
    # Replace-one: a clipped gradient sum moves by up to 2 * clip_norm.
    mechanism = GaussianMechanism.single(2.0, 5.0, Adjacency.REPLACE_ONE)
    params = {"weights": np.zeros(DIM), "loss": "logistic", "clip_norm": 1.0}
    first.query("linear_gradient", params, mechanism)
    run_round = coordinator.hub.run_round

    def answered_then_killed(*args, **kwargs):
        run_round(*args, **kwargs)  # every site answers, so every ledger charges it
        raise _CoordinatorDied

    coordinator.hub.run_round = answered_then_killed
    with pytest.raises(_CoordinatorDied):
        first.query("linear_gradient", params, mechanism)
    coordinator.hub.run_round = run_round
    assert [r.round for r in coordinator.store.rounds("crashy")] == [1]  # 2 is in flight

    resumed = NetworkFederation(NetworkJob("crashy", SITES), coordinator.registry,
                                coordinator.hub, coordinator.store, coordinator.reports)
    rounds = coordinator.store.rounds("crashy")
    assert [(r.round, r.state) for r in rounds] == [(1, "answered"), (2, "interrupted")]
    resumed.query("linear_gradient", params, mechanism)  # step 1, from the store
    resumed.query("linear_gradient", params, mechanism)  # step 2 again, in a new round
    rounds = coordinator.store.rounds("crashy")
    assert [(r.round, r.step, r.state) for r in rounds] == [
        (1, 1, "answered"), (2, 2, "interrupted"), (3, 2, "answered")]
    report = json.loads(privacy_report_json("crashy", _spec(1.0), {}, rounds))
    assert [a["round"] for a in report["aborted_rounds"]] == [2]
    assert "interrupted" in report["aborted_rounds"][0]["reason"]
    for name in SITES:  # what the sites' ledgers say they were charged for
        assert resumed.privacy_spent()[name].job.epsilon > 0
