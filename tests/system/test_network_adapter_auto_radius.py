"""radius="auto" as a networked pncnvx_adap job: through a real coordinator
and two site daemons (threads, mutual-TLS gRPC on 127.0.0.1) the dry run
plans it, the job succeeds with each norm guess on its own chain of the one
job at every site, the result carries the chosen radius, and every site's
ledger holds as many charges as the in-process job's and at most the job's
epsilon."""

from __future__ import annotations

import numpy as np

from privadapt.client.daemon.config import SiteConfig
from privadapt.client.job_state import decode_state
from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.local_federation import LocalFederation
from privadapt.common.data.dataset import Dataset
from privadapt.common.kernels.reweighted_chains import chain_names
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.wire.messages import param_from_proto, params_to_proto
from privadapt.server.algorithms.reweighting.estimators import PNCnvxAdap
from tests.network_harness import run_job

SITES = ("site-a", "site-b")
DIM = 4
NAMES = tuple(f"x{i}" for i in range(DIM))
EPSILON, DELTA = 3.0, 1e-6
HYPER = {"loss": "logistic", "radius": "auto", "iterations": 4, "alpha": 0.2,
         "feature_norm": 1.0, "label_bound": 1.0, "num_guesses": 3}


def _logistic(n: int, weights: np.ndarray, seed: int) -> Dataset:
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(n, DIM)) / np.sqrt(DIM)
    labels = np.where(features @ weights >= 0, 1.0, -1.0)
    return Dataset(features, labels, NAMES)


TARGETS = [_logistic(300, np.array([1.0, -2.0, 0.5, 1.0]), seed) for seed in range(2)]
PUBLIC = _logistic(300, np.array([1.0, -1.0, 1.5, 1.0]), 9)


def test_pncnvx_adap_with_an_auto_radius_runs_as_a_job_on_its_trained_guess_chain(tmp_path):
    np.savez(tmp_path / "public.npz", features=PUBLIC.features, labels=PUBLIC.labels)
    spec = pb.JobSpec(algorithm="pncnvx_adap", epsilon=EPSILON, delta=DELTA, sites=SITES,
                      seed=5)
    params_to_proto(HYPER, spec.hyperparameters)
    plan, result, configs = run_job(tmp_path, spec, "auto-adapter", SITES, TARGETS,
                                    public_source=tmp_path / "public.npz")
    assert "site-a" in plan
    model = {name: param_from_proto(value) for name, value in result.model.items()}
    assert float(model["radius"]) in (0.0, 2.0, 4.0, 8.0)

    with LocalFederation.from_datasets(TARGETS, names=SITES, epsilon_cap=10.0,
                                       delta_cap=1e-5, noise_seed=1) as local:
        PNCnvxAdap(epsilon=EPSILON, delta=DELTA, **HYPER).fit(local, PUBLIC)
        charges_in_process = len(local.privacy_spent()["site-a"].mechanisms)
    # With a public source one model of T steps in the largest ball around
    # source-only (the other guesses its free projections), then the paired
    # selection: the histogram that chooses the clips and the differences.
    assert charges_in_process == 4 + 2
    for path in configs:
        with PrivacyLedger.open_readonly(SiteConfig.from_toml(path).database) as ledger:
            assert len(ledger.charges("auto-adapter")) == charges_in_process
            assert ledger.spent_by_job("auto-adapter", DELTA).epsilon <= EPSILON
            state = decode_state(ledger.job_state("auto-adapter"))
            # One chain, the trained guess's (the largest ball): the others
            # are its projections and reweight nothing.
            assert chain_names(state) == ["g3"]
