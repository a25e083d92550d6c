"""End to end with separate processes on 127.0.0.1: a coordinator process (or
one in this process), three site daemon processes, mutual TLS, secure
aggregation; faults are real kills."""

from __future__ import annotations

import json
import math
import signal

import numpy as np
import pytest
from scipy import stats

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.local_federation import LocalFederation
from privadapt.client.policy import SitePolicy
from privadapt.client.site import Site
from privadapt.common.kernels import get_kernel
from privadapt.common.mechanisms import Adjacency, GaussianMechanism
from privadapt.common.numerics.fixed_point import FixedPointCodec
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.wire.messages import param_from_proto, params_to_proto
from privadapt.server.algorithms.gradient_descent.noisy_gd import noisy_gd
from privadapt.simulation.local_deployment import free_port
from tests.network_harness import (
    direct_federation,
    in_process_coordinator,
    make_pki,
    operator_stub,
    start_coordinator_process,
    start_site_processes,
    stop_process,
    watch_until_done,
    write_coordinator_config,
    write_site,
)
from tests.synthetic_data import synthetic_dataset

pytestmark = pytest.mark.slow

SITES = ("site-a", "site-b", "site-c")
DIM = 5
TIMEOUT = 60


def _datasets():
    return [synthetic_dataset(80 + 20 * k, DIM, seed=10 + k) for k in range(len(SITES))]


def _spec(epsilon: float, iterations: int, min_participants: int = 3) -> pb.JobSpec:
    spec = pb.JobSpec(algorithm="noisy_gd", epsilon=epsilon, delta=1e-6, sites=SITES,
                      min_participants=min_participants)
    params_to_proto(_hyper(iterations), spec.hyperparameters)
    return spec


def _hyper(iterations: int) -> dict:
    return {"loss": "logistic", "iterations": iterations, "learning_rate": 1.0, "radius": 5.0,
            "clip_norm": 1.0}


def _local_weights(tmp_path, iterations: int) -> np.ndarray:
    sites = []
    for name, data in zip(SITES, _datasets(), strict=True):
        policy = SitePolicy(name, math.inf, 1e-5, allow_non_private=True)
        ledger = PrivacyLedger(tmp_path / f"local-{name}.db", policy, create=True)
        sites.append(Site(data, policy, ledger))
    result = noisy_gd(LocalFederation(sites), dim=DIM, epsilon=math.inf, delta=1e-6,
                      calibration="accountant", **_hyper(iterations))
    return result.weights


class Federation:
    """Processes of one test, stopped at teardown whatever happens."""

    def __init__(self, tmp_path, epsilon_cap: float = math.inf, min_participants: int = 1):
        self.tmp_path = tmp_path
        self.pki = make_pki(tmp_path / "pki", SITES)
        self.logs = tmp_path / "logs"
        self.logs.mkdir()
        self.port = free_port()
        self.coordinator_config = write_coordinator_config(
            tmp_path, self.pki, round_timeout_s=10, site_wait_timeout_s=30,
            listen=f"127.0.0.1:{self.port}")
        self.site_configs = [
            write_site(tmp_path, self.pki, name, data, self.port, epsilon_cap=epsilon_cap,
                       min_participants=min_participants)
            for name, data in zip(SITES, _datasets(), strict=True)
        ]
        self.coordinator = None
        self.sites = []

    def start_coordinator(self) -> None:
        self.coordinator, port = start_coordinator_process(self.coordinator_config,
                                                           self.logs / "coordinator.log")
        assert port == self.port

    def start_sites(self) -> None:
        self.sites = start_site_processes(self.site_configs, self.logs)

    def operator(self):
        return operator_stub(self.pki, self.port)

    def stop(self) -> None:
        for process in [*self.sites, self.coordinator]:
            if process is not None:
                stop_process(process)


@pytest.fixture
def federation(tmp_path):
    created = []

    def make(**kwargs) -> Federation:
        created.append(Federation(tmp_path, **kwargs))
        return created[-1]

    yield make
    for fed in created:
        fed.stop()


def _weights(stub, job_id):
    return param_from_proto(stub.Result(pb.ResultRequest(job_id=job_id), timeout=TIMEOUT)
                            .model["weights"])


def _rounds_done(stub, job_id, at_least: int) -> None:
    """Block on the Watch stream until ``at_least`` rounds have finished."""
    for status in stub.Watch(pb.StatusRequest(job_id=job_id), timeout=TIMEOUT):
        if sum(not r.aborted for r in status.rounds) >= at_least:
            return
    raise AssertionError("the job ended before the expected rounds")


def test_processes_noise_off_equal_local_federation(federation, tmp_path):
    fed = federation()
    fed.start_coordinator()
    fed.start_sites()
    stub = fed.operator()
    job_id = stub.Launch(pb.LaunchRequest(spec=_spec(math.inf, 12)), timeout=TIMEOUT).job_id
    status = watch_until_done(stub, job_id)
    assert status.state == pb.JOB_STATE_SUCCEEDED, status.message
    np.testing.assert_allclose(_weights(stub, job_id), _local_weights(tmp_path, 12), rtol=0,
                               atol=1e-9)


@pytest.mark.slow
def test_coordinator_killed_mid_job_resumes_and_loses_no_round(federation, tmp_path):
    fed = federation()
    fed.start_coordinator()
    fed.start_sites()
    iterations = 150
    job_id = fed.operator().Launch(pb.LaunchRequest(spec=_spec(math.inf, iterations),
                                                    job_id="resumable"), timeout=TIMEOUT).job_id
    _rounds_done(fed.operator(), job_id, 20)
    fed.coordinator.send_signal(signal.SIGKILL)
    fed.coordinator.wait()
    fed.start_coordinator()  # same port, same database
    stub = fed.operator()
    status = watch_until_done(stub, job_id)
    assert status.state == pb.JOB_STATE_SUCCEEDED, status.message
    finished = [r for r in status.rounds if not r.aborted]
    assert len(finished) == iterations  # every step answered exactly once
    rounds = [r.round for r in status.rounds]
    assert rounds == sorted(rounds) and len(set(rounds)) == len(rounds)
    # Replay reproduced the same states: the result is the uninterrupted one.
    np.testing.assert_allclose(_weights(stub, job_id), _local_weights(tmp_path, iterations),
                               rtol=0, atol=1e-9)
    log = (fed.logs / "coordinator.log").read_text()
    assert "resumed 1 unfinished job(s): resumable" in log


def test_site_killed_mid_job_the_job_completes_with_the_rest(federation):
    fed = federation(epsilon_cap=20.0)
    fed.start_coordinator()
    fed.start_sites()
    stub = fed.operator()
    job_id = stub.Launch(pb.LaunchRequest(spec=_spec(1.0, 200, min_participants=2)),
                         timeout=TIMEOUT).job_id
    _rounds_done(stub, job_id, 10)
    fed.sites[2].send_signal(signal.SIGKILL)
    status = watch_until_done(stub, job_id)
    assert status.state == pb.JOB_STATE_SUCCEEDED, status.message
    finished = [r for r in status.rounds if not r.aborted]
    assert len(finished) == 200
    assert sorted(finished[0].participants) == list(SITES)
    assert sorted(finished[-1].participants) == ["site-a", "site-b"]
    report = json.loads(stub.Result(pb.ResultRequest(job_id=job_id),
                                    timeout=TIMEOUT).privacy_report_json)
    assert report["sites_not_reporting"] == ["site-c"]
    assert sorted(report["sites"]) == ["site-a", "site-b"]


@pytest.mark.slow
def test_site_restarting_mid_job_rejoins(federation):
    fed = federation(epsilon_cap=20.0)
    fed.start_coordinator()
    fed.start_sites()
    stub = fed.operator()
    job_id = stub.Launch(pb.LaunchRequest(spec=_spec(1.0, 400, min_participants=2)),
                         timeout=TIMEOUT).job_id
    _rounds_done(stub, job_id, 10)
    stop_process(fed.sites[1])  # SIGTERM: a clean shutdown
    _rounds_done(stub, job_id, 30)
    fed.sites[1:2] = start_site_processes(fed.site_configs[1:2], fed.logs)
    status = watch_until_done(stub, job_id)
    assert status.state == pb.JOB_STATE_SUCCEEDED, status.message
    sizes = [len(r.participants) for r in status.rounds if not r.aborted]
    first_without = sizes.index(2)
    assert 3 in sizes[first_without:], "site-b never rejoined"
    assert "stopped" in (fed.logs / "site-b.log").read_text()


def test_aggregate_noise_has_the_calibrated_variance(tmp_path):
    pki = make_pki(tmp_path / "pki", SITES)
    (tmp_path / "logs").mkdir()
    datasets = _datasets()
    noise_multiplier, sensitivity = 20.0, 2.0
    sigma = noise_multiplier * sensitivity
    with in_process_coordinator(write_coordinator_config(tmp_path, pki)) as coordinator:
        configs = [write_site(tmp_path, pki, name, data, coordinator.port, epsilon_cap=50.0)
                   for name, data in zip(SITES, datasets, strict=True)]
        processes = start_site_processes(configs, tmp_path / "logs")
        try:
            federation = direct_federation(coordinator, "noise", SITES)
            federation.wait_for_sites()
            mechanism = GaussianMechanism.single(sensitivity, noise_multiplier,
                                                 Adjacency.REPLACE_ONE)
            samples = []
            codec = FixedPointCodec()
            kernel = get_kernel("linear_gradient")
            for step in range(60):
                params = {"weights": np.full(DIM, 0.1 * step), "loss": "logistic",
                          "clip_norm": 1.0}
                typed = kernel.Params.from_wire(params, DIM)
                exact = sum(codec.decode(codec.encode(kernel.compute(d, typed, {})[0]))
                            for d in datasets)
                answer = federation.query("linear_gradient", params, mechanism).value
                samples.append(answer - exact)
        finally:
            for process in processes:
                stop_process(process)
    noise = np.concatenate(samples) / sigma
    # Three shares of variance sigma^2/3 each sum to N(0, sigma^2).
    assert stats.kstest(noise, "norm").pvalue > 1e-3
    low, high = stats.chi2.ppf([5e-4, 1 - 5e-4], noise.size) / noise.size
    assert low < np.mean(noise**2) < high
