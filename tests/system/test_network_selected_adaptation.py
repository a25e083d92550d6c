"""SelectedAdaptation as a networked job: candidates trained on the sites'
"train" record part, chosen on their "validation" part, through a real
coordinator and three site daemons (threads, mutual-TLS gRPC on 127.0.0.1).
The dry run plans it; the job succeeds; every site's ledger holds as many
charges as the in-process job's and between 0.97 and 1 times the job's
epsilon (the joint calibration); the result
names the chosen candidate."""

from __future__ import annotations

import json

import numpy as np

from privadapt.client.daemon.config import SiteConfig
from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.local_federation import LocalFederation
from privadapt.common.data.dataset import Dataset
from privadapt.common.proto import federation_pb2 as pb
from privadapt.common.wire.messages import param_from_proto, params_to_proto
from privadapt.server.algorithms.model_selection.candidates import CANDIDATE_IDS, candidate_names
from privadapt.server.algorithms.model_selection.selected_adaptation import SelectedAdaptation
from privadapt.server.jobs.catalog import ALGORITHMS
from tests.network_harness import run_job

SITES = ("site-a", "site-b", "site-c")
DIM = 4
NAMES = tuple(f"x{i}" for i in range(DIM))
EPSILON, DELTA = 2.0, 1e-6
HYPER = {"loss": "logistic", "radius": 8.0, "iterations": 6, "learning_rate": 2.0,
         "candidates": "noisy_gd,pncnvx_adap_smooth", "adapter_iterations": 4,
         "loss_bound": 2.0}


def _logistic(n: int, weights: np.ndarray, seed: int) -> Dataset:
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(n, DIM)) / np.sqrt(DIM)
    labels = np.where(features @ weights >= 0, 1.0, -1.0)
    return Dataset(features, labels, NAMES)


TARGETS = [_logistic(400, np.array([1.0, -2.0, 0.5, 1.0]), seed) for seed in range(3)]
PUBLIC = _logistic(500, np.array([-1.0, 2.0, 0.5, 1.0]), 9)


def test_selected_adaptation_runs_as_a_job_on_the_sites_record_parts(tmp_path):
    assert ALGORITHMS["selected_adaptation"] is SelectedAdaptation
    np.savez(tmp_path / "public.npz", features=PUBLIC.features, labels=PUBLIC.labels)
    spec = pb.JobSpec(algorithm="selected_adaptation", epsilon=EPSILON, delta=DELTA,
                      sites=SITES, seed=5)
    params_to_proto(HYPER, spec.hyperparameters)
    plan, result, configs = run_job(tmp_path, spec, "sel", SITES, TARGETS,
                                    public_source=tmp_path / "public.npz")
    assert "site-a" in plan
    model = {name: param_from_proto(value) for name, value in result.model.items()}
    names = candidate_names(model["candidate_ids"])
    assert names[0] == CANDIDATE_IDS[0] and len(names) == 3
    assert candidate_names([int(model["chosen_id"])])[0] in names
    report = json.loads(result.privacy_report_json)
    assert sorted(report["sites"]) == list(SITES)

    # The same job in-process (its own record parts under its own job id):
    # every site is charged as many releases.
    with LocalFederation.from_datasets(TARGETS, names=SITES, epsilon_cap=10.0,
                                       delta_cap=1e-5, noise_seed=1) as local:
        expected = SelectedAdaptation(epsilon=EPSILON, delta=DELTA, seed=5, **HYPER).fit(
            local, public_source=(PUBLIC.features, PUBLIC.labels))
        charges_in_process = len(local.privacy_spent()["site-a"].mechanisms)
    assert expected.candidate_names_ == names
    for path in configs:
        with PrivacyLedger.open_readonly(SiteConfig.from_toml(path).database) as ledger:
            assert len(ledger.charges("sel")) == charges_in_process
            # Jointly calibrated (composition "pld"): the whole budget, never more.
            assert 0.97 * EPSILON <= ledger.spent_by_job("sel", DELTA).epsilon <= EPSILON
