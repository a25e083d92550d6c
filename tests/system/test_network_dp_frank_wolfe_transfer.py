"""Seed 002's transfer as a networked job: four public source files named in
the coordinator's ``[coordinator] public_sources``, the private target at one
site daemon (the selection route: only the index leaves the site) or split
over three (the secure-sum route), real mutual-TLS gRPC on 127.0.0.1, driven
by the operator commands (``privadapt launch --dry-run | launch --follow |
result``). Noise off, beta-hat and the informative set equal the in-process
fit; at a finite epsilon every site's ledger holds exactly the releases the
dry-run plan names (the site's own charged sensitivity, the planned noise).

One exception, by design: the main run's ball is ``radius`` around w_A when
some source is informative and ``pilot_radius`` around 0 when none is, and
which one is decided by the pilot's (private) answers. The dry run answers
with stand-ins, so on the selection route (whose score sensitivity 2hC
depends on the radius) its main-run releases may name the other radius: the
same epsilon per release (the noise is calibrated as a multiple of the
sensitivity), another scale. There the ledger is compared with the
estimator's own plan for the ball actually used."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from privadapt.cli import main as cli
from privadapt.client.daemon.config import SiteConfig
from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.local_federation import LocalFederation
from privadapt.common.data.dataset import Dataset
from privadapt.common.kernels import get_kernel
from privadapt.common.mechanisms import Adjacency
from privadapt.common.numerics.fixed_point import DEFAULT_FRACTIONAL_BITS
from privadapt.common.proto import federation_pb2 as pb
from privadapt.server.algorithms.frank_wolfe.dp_frank_wolfe import plan_queries
from privadapt.server.algorithms.frank_wolfe.estimators import DPFrankWolfeTransfer
from privadapt.server.jobs.dry_run import plan_releases
from privadapt.server.jobs.result_files import METADATA_ARRAYS
from privadapt.simulation.local_deployment import LocalDeployment
from tests.network_harness import (
    ThreadSites,
    in_process_coordinator,
    make_pki,
    operator_stub,
    wait_for_sites,
    write_site,
)

DIM = 8
NAMES = tuple(f"x{i}" for i in range(DIM))
BETA = np.array([1.0, -1.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0])
INFORMATIVE = [0, 2]  # sources 0 and 2 are near beta, 1 and 3 far from it
HYPER = {"radius": 0.5, "pilot_radius": 3.0, "informative_threshold": 2.0, "norm": "l2",
         "clip_norm": 2.0, "iterations": 12, "pilot_iterations": 15}
DELTA = 1e-6
JOB = "fw-transfer"


def _sample(n: int, weights: np.ndarray, rng: np.random.Generator) -> Dataset:
    features = rng.uniform(-1, 1, size=(n, DIM))
    return Dataset(features, features @ weights + 0.1 * rng.normal(size=n), NAMES)


def _sources() -> list[Dataset]:
    rng = np.random.default_rng(7)
    shifts = [np.r_[np.zeros(3), 0.05, np.zeros(4)], np.r_[np.zeros(3), np.full(5, 2.0)],
              np.r_[np.zeros(4), -0.05, np.zeros(3)], np.r_[np.zeros(3), np.full(5, -2.0)]]
    return [_sample(200, BETA + shift, rng) for shift in shifts]


SOURCES = _sources()
TARGET = _sample(600, BETA, np.random.default_rng(8))


def _targets(num_sites: int) -> list[Dataset]:
    return [Dataset(TARGET.features[rows], TARGET.labels[rows], NAMES)
            for rows in np.array_split(np.arange(len(TARGET.labels)), num_sites)]


def _job_file(tmp_path: Path, sites: list[str], epsilon: float) -> str:
    hyper = "\n".join(f"{key} = {json.dumps(value)}" for key, value in HYPER.items())
    path = tmp_path / "job.toml"
    path.write_text(
        f'[job]\nid = "{JOB}"\nalgorithm = "dp_frank_wolfe_transfer"\n'
        f"epsilon = {'inf' if math.isinf(epsilon) else epsilon}\ndelta = {DELTA}\n"
        f"sites = {json.dumps(sites)}\nseed = 5\n[hyperparameters]\n{hyper}\n")
    return str(path)


def _run_networked(tmp_path: Path, epsilon: float, num_sites: int, capsys) -> dict:
    """The dry-run plan text, the model, the privacy report and the site
    configs of one networked job launched with the operator commands."""
    names = [f"site-{k}" for k in range(num_sites)]
    pki = make_pki(tmp_path / "pki", tuple(names))
    files = []
    for k, source in enumerate(SOURCES):
        files.append(f"source-{k}.npz")
        np.savez(tmp_path / files[-1], features=source.features, labels=source.labels)
    config = LocalDeployment(tmp_path, pki).write_coordinator(
        "127.0.0.1:0", public_sources=tuple(tmp_path / f for f in files), round_timeout_s=20.0,
        site_wait_timeout_s=20.0)
    sites = ThreadSites()
    with in_process_coordinator(config) as coordinator:
        try:
            configs = [write_site(tmp_path, pki, name, data, coordinator.port,
                                  epsilon_cap=math.inf if math.isinf(epsilon) else 10.0)
                       for name, data in zip(names, _targets(num_sites), strict=True)]
            for path in configs:
                sites.start(path)
            operator = tmp_path / "operator.toml"
            operator.write_text(
                f'[operator]\ncoordinator = "127.0.0.1:{coordinator.port}"\n[tls]\n'
                'cert = "pki/operator.crt"\nkey = "pki/operator.key"\nca = "pki/ca.crt"\n')
            options = ["--config", str(operator)]
            job = _job_file(tmp_path, names, epsilon)
            wait_for_sites(operator_stub(pki, coordinator.port), names)
            capsys.readouterr()
            assert cli.main(["launch", job, "--dry-run", *options]) == 0
            plan = capsys.readouterr().out
            assert cli.main(["launch", job, "--follow", *options]) == 0
            assert "succeeded" in capsys.readouterr().out
            out = tmp_path / "result"
            assert cli.main(["result", JOB, "--out", str(out), *options]) == 0
        finally:
            sites.stop()
    return {"plan": plan, "model": dict(np.load(out / "model.npz")),
            "report": json.loads((out / "privacy_report.json").read_text()),
            "sites": [SiteConfig.from_toml(p) for p in configs], "names": names}


@pytest.mark.parametrize("num_sites", [1, 3])
def test_noise_off_networked_equals_in_process(tmp_path, capsys, num_sites):
    run = _run_networked(tmp_path, math.inf, num_sites, capsys)
    local = LocalFederation.from_datasets(_targets(num_sites), names=run["names"],
                                          epsilon_cap=math.inf, delta_cap=1e-5,
                                          allow_non_private=True)
    expected = DPFrankWolfeTransfer(epsilon=math.inf, delta=DELTA, **HYPER).fit(
        local, public_sources=SOURCES)
    assert expected.informative_set_ == INFORMATIVE
    np.testing.assert_array_equal(run["model"]["informative_set"], INFORMATIVE)
    np.testing.assert_allclose(run["model"]["weights"], expected.coef_, rtol=0, atol=1e-9)
    np.testing.assert_allclose(run["model"]["center"], expected.center_, rtol=0, atol=1e-9)
    np.testing.assert_allclose(run["model"]["pilot_weights"], expected.pilot_coef_, rtol=0,
                               atol=1e-9)
    # The offset really moved (beta-hat is not just w_A).
    assert np.max(np.abs(expected.coef_ - expected.center_)) > 1e-3


@pytest.mark.parametrize(("num_sites", "kernel", "form"),
                         [(1, "l1_vertex_scores", "selection"), (3, "linf_gradient", None)])
def test_each_sites_ledger_holds_exactly_the_dry_run_plan(tmp_path, capsys, num_sites, kernel,
                                                          form):
    epsilon = 1.0
    run = _run_networked(tmp_path, epsilon, num_sites, capsys)
    iterations = HYPER["pilot_iterations"] + HYPER["iterations"]
    spec = pb.JobSpec(algorithm="dp_frank_wolfe_transfer", epsilon=epsilon, delta=DELTA,
                      sites=run["names"], seed=5)
    sizes = {name: len(data.labels) for name, data in zip(run["names"], _targets(num_sites),
                                                          strict=True)}
    planned = plan_releases(spec, HYPER, sizes, DIM, None, tuple(SOURCES))
    # The dry run printed that plan (not "no plan": it saw the public sources).
    assert f"privacy plan: {iterations} release(s)" in run["plan"]
    assert f"kernel {kernel}" in run["plan"]
    assert len(planned) == iterations and {r.kernel for r in planned} == {kernel}
    # privadapt result: beta-hat, the informative set and the privacy report.
    model = run["model"]
    # The estimator's arrays, and the model file's metadata (server/jobs/result_files.py).
    assert set(model) == {"weights", "informative_set", "pilot_weights", "center",
                          *METADATA_ARRAYS}
    assert model["weights"].shape == (DIM,)
    np.testing.assert_array_equal(model["informative_set"], INFORMATIVE)
    assert math.fsum(np.abs(model["weights"] - model["center"])) <= HYPER["radius"] * (1 + 1e-9)
    assert sorted(run["report"]["sites"]) == run["names"]
    for name, site, data in zip(run["names"], run["sites"], _targets(num_sites), strict=True):
        with PrivacyLedger.open_readonly(site.database) as ledger:
            charges = ledger.charges(JOB)
            spent = ledger.spent_by_job(JOB, DELTA)
        assert len(charges) == iterations
        expected = [_charged_at(release, len(data.labels), form) for release in planned]
        if form == "selection":
            pilot = HYPER["pilot_iterations"]
            main = _main_run_as_estimated(planned[:pilot], len(data.labels))
            # The dry run's main releases cost what the used ball's cost.
            for stand_in in expected[pilot:]:
                assert stand_in.pure_epsilon == pytest.approx(main.pure_epsilon, rel=1e-5)
            expected[pilot:] = [main] * HYPER["iterations"]
        assert [charge.mechanism for charge in charges] == expected
        # Pilot and main run calibrated together to (epsilon, delta); the
        # report says what the ledger holds.
        assert spent.epsilon <= epsilon
        assert spent.epsilon == pytest.approx(epsilon, rel=5e-3)
        assert run["report"]["sites"][name]["releases"] == iterations
        assert run["report"]["sites"][name]["job_epsilon"] == pytest.approx(spent.epsilon,
                                                                            rel=1e-9)


def _main_run_as_estimated(pilot_releases, num_records: int):
    """The estimator's plan of the main run in the ball of ``radius`` around
    w_A (the pilot's releases composed first), as the site charges it."""
    plan = plan_queries(route="selection", dim=DIM, radius=HYPER["radius"],
                        clip_norm=HYPER["clip_norm"], epsilon=1.0, delta=DELTA,
                        iterations=HYPER["iterations"], calibration="accountant",
                        num_records=num_records,
                        already_spent=tuple(r.mechanism for r in pilot_releases))
    params = {**pilot_releases[0].params, "radius": HYPER["radius"], "offset": np.zeros(DIM)}
    release = type(pilot_releases[0])("l1_vertex_scores", params, plan.mechanism,
                                      pilot_releases[0].form)
    return _charged_at(release, num_records, "selection")


def _charged_at(release, num_records: int, form: str | None):
    """The planned release as a site of ``num_records`` records on the job's
    grid charges it: the same noise, against the sensitivity the kernel's
    clipping and its float error at the site's public n give (the plan sized
    that error for the coarsest grid)."""
    kernel = get_kernel(release.kernel)
    params = kernel.Params.from_wire(release.params, DIM)
    if form == "selection":
        own = kernel.charged_score_sensitivities(params, Adjacency.REPLACE_ONE, DIM,
                                                 DEFAULT_FRACTIONAL_BITS, num_records)
        return release.mechanism.with_score_sensitivities((max(own),), Adjacency.REPLACE_ONE)
    own = kernel.charged_sensitivities(params, Adjacency.REPLACE_ONE, "l2", DIM,
                                       DEFAULT_FRACTIONAL_BITS, num_records)
    return release.mechanism.with_sensitivities(own, Adjacency.REPLACE_ONE)
