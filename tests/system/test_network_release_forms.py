"""Per-site releases and selections through real site daemons:
in-process coordinator and sites (threads) over mutual-TLS gRPC on 127.0.0.1."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from privadapt.client.local_federation import LocalFederation
from privadapt.common.errors import QueryRefusedError
from privadapt.common.mechanisms import NoNoise, ReportNoisyMin
from privadapt.common.proto import federation_pb2 as pb
from privadapt.server.jobs.privacy_report import privacy_report_json
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


@pytest.fixture
def network(tmp_path):
    """Yields (coordinator, datasets, start_sites)."""
    pki = make_pki(tmp_path / "pki", SITES)
    datasets = [synthetic_dataset(60 + 10 * k, DIM, seed=k) for k in range(len(SITES))]
    sites = ThreadSites()
    with in_process_coordinator(write_coordinator_config(tmp_path, pki)) as coordinator:
        def start_sites(names=SITES, **policy) -> None:
            for name, data in zip(SITES, datasets, strict=True):
                if name in names:
                    sites.start(write_site(tmp_path, pki, name, data, coordinator.port,
                                           **policy))

        try:
            yield coordinator, datasets, start_sites
        finally:
            sites.stop()


def test_per_site_answers_over_the_network_equal_the_in_process_ones(network):
    coordinator, datasets, start_sites = network
    start_sites(epsilon_cap=math.inf)
    federation = direct_federation(coordinator, "per-site", SITES)
    federation.wait_for_sites()
    mechanism = NoNoise((math.sqrt(3) * 4.0,))
    networked = federation.query_per_site("validation_loss", SCORES, mechanism)
    with LocalFederation.from_datasets(datasets, names=SITES, epsilon_cap=math.inf,
                                       delta_cap=1e-5, allow_non_private=True) as local:
        expected = local.query_per_site("validation_loss", SCORES, mechanism)
    assert sorted(networked.answers) == list(SITES)
    for name in SITES:
        np.testing.assert_allclose(networked.answers[name][0], expected.answers[name][0],
                                   rtol=0, atol=1e-9)
    # The sum is not what each site sent: the answers really are per site.
    assert not np.allclose(networked.answers["site-a"][0], networked.answers["site-b"][0])
    # The job's report says the coordinator saw each site's own release.
    report = json.loads(privacy_report_json(
        "per-site", pb.JobSpec(algorithm="test", sites=SITES),
        federation.privacy_spent(), coordinator.store.rounds("per-site")))
    assert report["rounds_with_per_site_releases"] == [1]
    assert "saw each participating site's own" in report["release_note"]
    assert {s["releases_seen_by_coordinator"] for s in report["sites"].values()} == {1}


def test_a_policy_that_forbids_per_site_releases_refuses_them_over_the_network(network):
    coordinator, _, start_sites = network
    start_sites(epsilon_cap=1e6, allow_per_site_releases=False)
    federation = direct_federation(coordinator, "forbidden", SITES)
    federation.wait_for_sites()
    with pytest.raises(QueryRefusedError, match="allow_per_site_releases") as refused:
        federation.query_per_site("validation_loss", SCORES, NoNoise((math.sqrt(3) * 4.0,)))
    # The operator's message names the site whose policy refused.
    assert str(refused.value).startswith("site 'site-") and "refused the round (policy)" in \
        str(refused.value)


def test_a_single_site_selects_over_the_network_and_its_ledger_is_charged(network):
    coordinator, datasets, start_sites = network
    start_sites(names=("site-a",), epsilon_cap=1e6)
    federation = direct_federation(coordinator, "select", ("site-a",))
    federation.wait_for_sites()
    mechanism = ReportNoisyMin(4.0, 0.5)
    networked = federation.select("validation_loss", SCORES, mechanism)
    with LocalFederation.from_datasets(datasets[:1], names=("site-a",), epsilon_cap=1e6,
                                       delta_cap=1e-5) as local:
        expected = local.select("validation_loss", SCORES, mechanism)
    assert networked.site_name == "site-a"
    assert networked.index == expected.index  # the score gaps dwarf the noise
    (charged,) = federation.privacy_spent()["site-a"].mechanisms
    assert charged.kind == mechanism.kind


def test_a_selection_among_several_sites_is_refused_over_the_network(network):
    coordinator, _, start_sites = network
    start_sites(epsilon_cap=1e6)
    federation = direct_federation(coordinator, "select-3", SITES)
    federation.wait_for_sites()
    with pytest.raises(QueryRefusedError, match="secure-sum form"):
        federation.select("validation_loss", SCORES, ReportNoisyMin(4.0, 1.0))


def test_a_selection_is_refused_for_a_job_of_several_sites_even_if_one_is_left(network):
    # With only site-a connected, its roster would hold one site, but the job
    # names three: an index chosen on a third of the data is refused.
    coordinator, _, start_sites = network
    start_sites(names=("site-a",), epsilon_cap=1e6)
    federation = direct_federation(coordinator, "select-partial", SITES)
    with pytest.raises(QueryRefusedError, match="this job has 3 sites"):
        federation.select("validation_loss", SCORES, ReportNoisyMin(4.0, 1.0))
