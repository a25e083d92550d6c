"""Seed 004's confidence boosting as a networked job: each site trains its
own model in rounds of itself alone (per-site releases asked of one site),
then one selection over every site's validation part (among source-only
and the sites' models averaged, the default), through a real
coordinator and three site daemons (threads, mutual-TLS gRPC on 127.0.0.1).
The dry run plans it with each site's own model charged to it alone; the job
succeeds; every site's ledger holds exactly its own T releases plus the
selection, at most the job's epsilon."""

from __future__ import annotations

import numpy as np

from privadapt.client.daemon.config import SiteConfig
from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.common.data.dataset import Dataset
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.wire.messages import param_from_proto, params_to_proto
from tests.network_harness import run_job

SITES = ("site-a", "site-b", "site-c")
DIM = 4
NAMES = tuple(f"x{i}" for i in range(DIM))
EPSILON, DELTA = 2.0, 1e-6
ITERATIONS = 5
HYPER = {"loss": "logistic", "radius": 8.0, "iterations": ITERATIONS, "learning_rate": 2.0,
         "loss_bound": 2.0}


def _logistic(n: int, weights: np.ndarray, seed: int) -> Dataset:
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(n, DIM)) / np.sqrt(DIM)
    labels = np.where(features @ weights >= 0, 1.0, -1.0)
    return Dataset(features, labels, NAMES)


TARGETS = [_logistic(300, np.array([1.0, -2.0, 0.5, 1.0]), seed) for seed in range(3)]
PUBLIC = _logistic(500, np.array([-1.0, 2.0, 0.5, 1.0]), 9)


def test_confidence_boosting_runs_as_a_job_charging_each_site_its_own_model(tmp_path):
    np.savez(tmp_path / "public.npz", features=PUBLIC.features, labels=PUBLIC.labels)
    spec = pb.JobSpec(algorithm="confidence_boosting", epsilon=EPSILON, delta=DELTA,
                      sites=SITES, seed=5)
    params_to_proto(HYPER, spec.hyperparameters)
    plan, result, configs = run_job(tmp_path, spec, "boost", SITES, TARGETS,
                                    public_source=tmp_path / "public.npz")
    assert "(only site-b)" in plan
    model = {name: param_from_proto(value) for name, value in result.model.items()}
    # Source-only, the sites' models averaged and the average's shrunk copy
    # (no public constant: the public source has no intercept column).
    assert np.asarray(model["candidates"]).shape == (3, DIM)
    for path in configs:
        with PrivacyLedger.open_readonly(SiteConfig.from_toml(path).database) as ledger:
            # Its own T steps, then the classifier's selection: one release
            # of the candidates' validation error counts.
            assert len(ledger.charges("boost")) == ITERATIONS + 1
            assert ledger.spent_by_job("boost", DELTA).epsilon <= EPSILON
