"""Record parts through real site daemons (in-process coordinator and sites,
threads, mutual-TLS gRPC on 127.0.0.1): a job asking for the validation part
of three sites gets the aggregate the in-process federation gets."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privadapt.client.local_federation import LocalFederation
from privadapt.common.data.record_parts import RecordPart
from privadapt.common.mechanisms import NoNoise
from tests.network_harness import (
    ThreadSites,
    direct_federation,
    in_process_coordinator,
    make_pki,
    write_coordinator_config,
    write_site,
)
from tests.synthetic_data import synthetic_dataset

SITES = ("site-a", "site-b", "site-c")
DIM = 4
SCORES = {"candidates": np.array([[1.0, -1.0, 0.5, 0.0], [0.0, 0.0, 0.0, 0.0],
                                  [3.0, 3.0, 3.0, 3.0]]),
          "loss": "logistic", "loss_bound": 4.0}
VALIDATION = RecordPart("validation", 0.25, "selection-job-salt")


@pytest.fixture
def network(tmp_path):
    """Yields (coordinator, datasets) with the three sites running (simulation
    sites: exact sums allowed)."""
    pki = make_pki(tmp_path / "pki", SITES)
    datasets = [synthetic_dataset(60 + 10 * k, DIM, seed=k) for k in range(len(SITES))]
    sites = ThreadSites()
    with in_process_coordinator(write_coordinator_config(tmp_path, pki)) as coordinator:
        try:
            for name, data in zip(SITES, datasets, strict=True):
                sites.start(write_site(tmp_path, pki, name, data, coordinator.port,
                                       epsilon_cap=math.inf))
            yield coordinator, datasets
        finally:
            sites.stop()


def test_the_validation_part_over_the_network_equals_the_in_process_one(network):
    coordinator, datasets = network
    federation = direct_federation(coordinator, "parts", SITES)
    federation.wait_for_sites()
    validation = federation.restricted_to(VALIDATION)
    mechanism = NoNoise((math.sqrt(3) * 4.0,))
    networked = validation.query("validation_loss", SCORES, mechanism)
    everything = federation.query("validation_loss", SCORES, mechanism)
    with LocalFederation.from_datasets(datasets, names=SITES, epsilon_cap=math.inf,
                                       delta_cap=1e-5, allow_non_private=True) as local:
        expected = local.restricted_to(VALIDATION).query("validation_loss", SCORES, mechanism)
    np.testing.assert_allclose(networked.value, expected.value, rtol=0, atol=1e-9)
    assert networked.value.sum() < 0.5 * everything.value.sum()  # a quarter of the records
    assert validation.site_sizes == {name: round(0.25 * d.num_records)
                                     for name, d in zip(SITES, datasets, strict=True)}
    # Both steps were charged as the rounds they were, one query id each.
    for name, privacy in federation.privacy_spent().items():
        assert len(privacy.mechanisms) == 2, name
