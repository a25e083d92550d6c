"""radius="auto" as a networked noisy_gd job: through a real coordinator and
two site daemons (threads, mutual-TLS gRPC on 127.0.0.1) the dry run plans
it, the job succeeds on the sites' train and validation record parts, the
result carries the chosen radius, and every site's ledger holds as many
charges as the in-process job's and at most the job's epsilon."""

from __future__ import annotations

import numpy as np

from privadapt.client.daemon.config import SiteConfig
from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.local_federation import LocalFederation
from privadapt.common.data.dataset import Dataset
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.wire.messages import param_from_proto, params_to_proto
from privadapt.server.algorithms.gradient_descent.estimators import NoisyGD
from tests.network_harness import run_job

SITES = ("site-a", "site-b")
DIM = 4
NAMES = tuple(f"x{i}" for i in range(DIM))
EPSILON, DELTA = 3.0, 1e-6
HYPER = {"loss": "logistic", "radius": "auto", "iterations": 5, "learning_rate": 2.0,
         "clip_norm": 1.0, "num_guesses": 3}


def _logistic(n: int, seed: int) -> Dataset:
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(n, DIM)) / np.sqrt(DIM)
    labels = np.where(features @ np.array([1.0, -2.0, 0.5, 1.0]) >= 0, 1.0, -1.0)
    return Dataset(features, labels, NAMES)


TARGETS = [_logistic(300, seed) for seed in range(2)]


def test_noisy_gd_with_an_auto_radius_runs_as_a_job_on_the_sites_record_parts(tmp_path):
    spec = pb.JobSpec(algorithm="noisy_gd", epsilon=EPSILON, delta=DELTA, sites=SITES, seed=5)
    params_to_proto(HYPER, spec.hyperparameters)
    plan, result, configs = run_job(tmp_path, spec, "auto", SITES, TARGETS)
    assert "site-a" in plan
    model = {name: param_from_proto(value) for name, value in result.model.items()}
    assert float(model["radius"]) in (0.0, 2.0, 4.0, 8.0)
    assert np.linalg.norm(model["weights"]) <= float(model["radius"]) + 1e-9

    with LocalFederation.from_datasets(TARGETS, names=SITES, epsilon_cap=10.0,
                                       delta_cap=1e-5, noise_seed=1) as local:
        NoisyGD(epsilon=EPSILON, delta=DELTA, **HYPER).fit(local)
        charges_in_process = len(local.privacy_spent()["site-a"].mechanisms)
    # K trainings of T steps, then one release of every guess's paired score
    # against the zero model (no public source: its clips are public)
    assert charges_in_process == 3 * 5 + 1
    for path in configs:
        with PrivacyLedger.open_readonly(SiteConfig.from_toml(path).database) as ledger:
            assert len(ledger.charges("auto")) == charges_in_process
            assert ledger.spent_by_job("auto", DELTA).epsilon <= EPSILON
