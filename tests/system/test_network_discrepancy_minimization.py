"""Seed 003's federated route as a networked job: the public labeled source at
the coordinator, the private unlabeled target over three site daemons (threads,
real mutual-TLS gRPC on 127.0.0.1). Noise off, q-hat and w-hat equal the
in-process fit; at a finite epsilon every site's ledger holds exactly the
release the job's dry-run plan names."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from privadapt.client.daemon.config import SiteConfig
from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.local_federation import LocalFederation
from privadapt.common.accounting.accountant import PrivacyAccountant
from privadapt.common.data.dataset import Dataset
from privadapt.common.kernels import get_kernel
from privadapt.common.mechanisms import Adjacency
from privadapt.common.numerics.fixed_point import DEFAULT_FRACTIONAL_BITS
from privadapt.common.numerics.geometry import clip_rows_to_norm
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.wire.messages import param_from_proto, params_to_proto
from privadapt.server.algorithms.discrepancy_minimization.estimators import (
    PrivateDiscrepancyMinimization,
)
from privadapt.server.jobs.dry_run import plan_releases
from privadapt.server.jobs.privacy_plan import charged_at_site
from tests.network_harness import (
    ThreadSites,
    in_process_coordinator,
    make_pki,
    operator_stub,
    watch_until_done,
    write_coordinator_config,
    write_site,
)

SITES = ("site-a", "site-b", "site-c")
DIM = 3
NAMES = tuple(f"x{i}" for i in range(DIM))
HYPER = {"feature_norm": 1.5, "mu": 20.0, "regularization": 1e-3, "iterations": 60}
DELTA = 1e-6


def _sample(num: int, centre: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return clip_rows_to_norm(centre + 0.3 * rng.normal(size=(num, DIM)), 1.5)


SOURCE_X = np.vstack([_sample(15, -0.4, 1), _sample(30, 0.4, 2)])
PUBLIC = Dataset(SOURCE_X, SOURCE_X.sum(axis=1) / math.sqrt(DIM), NAMES)
TARGETS = [Dataset(part, np.zeros(len(part)), NAMES)
           for part in np.array_split(_sample(150, -0.4, 3), len(SITES))]


def _run_networked(tmp_path, epsilon: float, method: str) -> tuple[dict, dict, list[SiteConfig]]:
    """(model arrays, privacy report, site configs) of one networked job."""
    pki = make_pki(tmp_path / "pki", SITES)
    np.savez(tmp_path / "public.npz", features=PUBLIC.features, labels=PUBLIC.labels)
    spec = pb.JobSpec(algorithm="discrepancy_minimization", epsilon=epsilon, delta=DELTA,
                      sites=SITES, seed=3)
    params_to_proto({**HYPER, "method": method}, spec.hyperparameters)
    sites = ThreadSites()
    config = write_coordinator_config(tmp_path, pki, public_source=tmp_path / "public.npz")
    with in_process_coordinator(config) as coordinator:
        try:
            configs = [write_site(tmp_path, pki, name, data, coordinator.port,
                                  epsilon_cap=math.inf if math.isinf(epsilon) else 10.0)
                       for name, data in zip(SITES, TARGETS, strict=True)]
            for path in configs:
                sites.start(path)
            stub = operator_stub(pki, coordinator.port)
            job_id = stub.Launch(pb.LaunchRequest(spec=spec, job_id="dm"), timeout=30).job_id
            status = watch_until_done(stub, job_id)
            assert status.state == pb.JOB_STATE_SUCCEEDED, status.message
            result = stub.Result(pb.ResultRequest(job_id=job_id), timeout=10)
        finally:
            sites.stop()
    model = {name: param_from_proto(value) for name, value in result.model.items()}
    return model, json.loads(result.privacy_report_json), [SiteConfig.from_toml(p)
                                                           for p in configs]


@pytest.mark.parametrize("method", ["two_stage_fw", "single_stage_fw"])
def test_noise_off_networked_equals_in_process(tmp_path, method):
    model, _, _ = _run_networked(tmp_path, math.inf, method)
    local = LocalFederation.from_datasets(TARGETS, names=SITES, epsilon_cap=math.inf,
                                          delta_cap=1e-5, allow_non_private=True)
    expected = PrivateDiscrepancyMinimization(
        epsilon=math.inf, delta=DELTA, method=method, **HYPER).fit(
        local, public_source=(PUBLIC.features, PUBLIC.labels))
    np.testing.assert_allclose(model["source_weights"], expected.weights_, rtol=0, atol=1e-9)
    np.testing.assert_allclose(model["weights"], expected.coef_, rtol=0, atol=1e-9)
    # The source was really reweighted (not the uniform start).
    assert np.max(np.abs(expected.weights_ - 1 / len(SOURCE_X))) > 1e-3


def test_each_sites_ledger_holds_exactly_the_planned_release(tmp_path):
    epsilon = 1.0
    _, report, configs = _run_networked(tmp_path, epsilon, "two_stage_fw")
    spec = pb.JobSpec(algorithm="discrepancy_minimization", epsilon=epsilon, delta=DELTA,
                      sites=SITES, seed=3)
    (planned,) = plan_releases(spec, {**HYPER, "method": "two_stage_fw"},
                               {name: len(d.labels) for name, d in zip(SITES, TARGETS,
                                                                       strict=True)},
                               DIM, PUBLIC)
    planned_cost = _epsilon(charged_at_site(planned, Adjacency.REPLACE_ONE, DIM))
    assert planned.kernel == "second_moments"
    assert sorted(report["sites"]) == list(SITES)
    kernel = get_kernel(planned.kernel)
    params = kernel.Params.from_wire(planned.params, DIM)
    for name, config, data in zip(SITES, configs, TARGETS, strict=True):
        with PrivacyLedger.open_readonly(config.database) as ledger:
            (charge,) = ledger.charges("dm")
            spent = ledger.spent_by_job("dm", DELTA)
        # The planned noise, against the sensitivity the site itself charges:
        # the kernel's clipping plus its float error at the site's public n
        # on the job's grid (the plan sized that error for 2^20 records).
        own = kernel.charged_sensitivities(params, Adjacency.REPLACE_ONE, "l2", DIM,
                                           DEFAULT_FRACTIONAL_BITS, len(data.labels))
        expected = planned.mechanism.with_sensitivities(own, Adjacency.REPLACE_ONE)
        assert charge.mechanism.adjacency == Adjacency.REPLACE_ONE
        np.testing.assert_allclose(charge.mechanism.noise_scales, expected.noise_scales,
                                   rtol=1e-12)
        np.testing.assert_allclose(charge.mechanism.sensitivities, expected.sensitivities,
                                   rtol=1e-12)
        assert spent.epsilon == pytest.approx(_epsilon(expected), rel=1e-9)
        # The one Gaussian release is calibrated to (epsilon, delta); a site
        # charges at most what the plan previewed.
        assert spent.epsilon <= planned_cost <= epsilon
        assert spent.epsilon == pytest.approx(epsilon, rel=2e-3)
        assert report["sites"][name]["releases"] == 1


def _epsilon(mechanism) -> float:
    accountant = PrivacyAccountant(Adjacency.REPLACE_ONE)
    accountant.compose(mechanism)
    return accountant.get_epsilon(DELTA)
