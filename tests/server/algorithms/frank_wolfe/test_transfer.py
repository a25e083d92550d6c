"""Private transfer from public sources (seed 002): the informative set is the
truly informative sources on a synthetic case with a clear gap, beta-hat is
w_A plus an offset in the ball, both private runs are charged to one job, and
the networked job runs through the table with the sources split by a column."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privadapt import Dataset, LocalFederation
from privadapt.common.proto import federation_pb2 as pb
from privadapt.server.algorithms.frank_wolfe.estimators import DPFrankWolfeTransfer
from privadapt.server.algorithms.frank_wolfe.transfer import informative_set, least_squares
from privadapt.server.jobs.catalog import JobContext, run_job

DIM = 8
BETA = np.array([1.0, -1.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0])
NAMES = tuple(f"x{i}" for i in range(DIM))
INFORMATIVE = (0, 2, 4)  # sources 0, 2, 4 are near beta; 1, 3, 5 far from it


def sample(n: int, weights: np.ndarray, rng) -> tuple[np.ndarray, np.ndarray]:
    features = rng.uniform(-1, 1, size=(n, DIM))
    return features, features @ weights + 0.1 * rng.normal(size=n)


def sources(seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    made = []
    for k in range(6):
        shift = np.zeros(DIM)
        if k in INFORMATIVE:
            shift[3 + k % 3] = 0.05  # ||delta^(k)||_1 = 0.05
        else:
            shift[3:] = 2.0  # ||delta^(k)||_1 = 10
        made.append(sample(300, BETA + shift, rng))
    return made


def target(seed: int, n: int = 1500, epsilon_cap: float = 10.0) -> LocalFederation:
    features, labels = sample(n, BETA, np.random.default_rng(100 + seed))
    options = {"allow_non_private": True} if math.isinf(epsilon_cap) else {}
    return LocalFederation.from_datasets([Dataset(features, labels, NAMES)],
                                         epsilon_cap=epsilon_cap, delta_cap=1e-4,
                                         noise_seed=seed, **options)


def transfer(**params) -> DPFrankWolfeTransfer:
    settings = {"radius": 0.5, "pilot_radius": 3.0, "informative_threshold": 4.0,
                "clip_norm": 2.0, "epsilon": 2.0, "delta": 1e-6, "iterations": 30,
                "pilot_iterations": 40}
    return DPFrankWolfeTransfer(**{**settings, **params})


def test_the_informative_set_is_the_sources_within_the_threshold():
    weights = np.array([[0.0, 0.0], [1.0, 1.0], [0.3, -0.3]])
    assert informative_set(weights, np.zeros(2), 0.6, "l1") == [0, 2]
    assert informative_set(weights, np.zeros(2), 0.5, "l2") == [0, 2]
    assert informative_set(weights, np.zeros(2), 0.4, "l1") == [0]


def test_the_truly_informative_sources_are_recovered_with_a_clear_gap():
    recovered = []
    for seed in range(5):
        with target(seed) as sites:
            fitted = transfer().fit(sites, public_sources=sources(seed))
        recovered.append(fitted.informative_set_ == list(INFORMATIVE))
        np.testing.assert_allclose(fitted.center_, least_squares(
            [sources(seed)[k] for k in fitted.informative_set_], DIM))
        assert math.fsum(np.abs(fitted.coef_ - fitted.center_)) <= 0.5 * (1 + 1e-12)
    assert all(recovered)


def test_transfer_beats_target_only_frank_wolfe_at_the_same_budget():
    from privadapt.server.algorithms.frank_wolfe.estimators import DPFrankWolfe
    transfer_errors, target_errors = [], []
    for seed in range(4):
        with target(seed, n=500) as sites:
            fitted = transfer(epsilon=1.0).fit(sites, public_sources=sources(seed))
        transfer_errors.append(np.sum((fitted.coef_ - BETA) ** 2))
        with target(seed, n=500) as sites:
            alone = DPFrankWolfe(radius=3.0, clip_norm=2.0, epsilon=1.0, delta=1e-6,
                                 iterations=70).fit(sites)
        target_errors.append(np.sum((alone.coef_ - BETA) ** 2))
    assert np.mean(transfer_errors) < np.mean(target_errors)


def test_both_private_runs_are_charged_to_the_one_job_within_its_budget():
    with target(0) as sites:
        fitted = transfer(epsilon=1.5, pilot_iterations=20, iterations=25).fit(
            sites, public_sources=sources(0))
    (spent,) = fitted.privacy_.values()
    assert len(spent.mechanisms) == 20 + 25
    assert spent.job.epsilon <= 1.5
    assert spent.job.epsilon == pytest.approx(1.5, rel=5e-3)  # pilot and main calibrated together


def test_without_an_informative_source_it_is_target_only_frank_wolfe():
    far = [(features, labels + 50.0) for features, labels in sources(0)]
    with target(0, epsilon_cap=math.inf) as sites:
        fitted = transfer(epsilon=math.inf, delta=0.0).fit(sites, public_sources=far)
    assert fitted.informative_set_ == []
    np.testing.assert_array_equal(fitted.center_, np.zeros(DIM))


def test_a_job_splits_the_public_source_by_its_source_column():
    parts = sources(0)
    features = np.vstack([np.c_[f, np.full(len(f), 10.0 * k)] for k, (f, _) in enumerate(parts)])
    labels = np.concatenate([labels for _, labels in parts])
    public = Dataset(features, labels, (*NAMES, "source"))
    spec = pb.JobSpec(algorithm="dp_frank_wolfe_transfer", epsilon=2.0, delta=1e-6)
    hyper = {"radius": 0.5, "pilot_radius": 3.0, "informative_threshold": 4.0,
             "clip_norm": 2.0, "iterations": 10, "pilot_iterations": 30}
    with target(0) as sites:
        model = run_job(JobContext(sites, spec, hyper, seed=0, checkpoint=lambda *_: None,
                                   public_source=public))
    assert set(model) == {"weights", "informative_set", "pilot_weights", "center"}
    np.testing.assert_array_equal(model["informative_set"], [0.0, 20.0, 40.0])
    assert model["weights"].shape == (DIM,)


def test_a_public_source_without_the_column_is_refused_naming_it():
    with target(0) as sites, pytest.raises(ValueError, match="no column 'source'"):
        transfer().fit(sites, Dataset(*sources(0)[0], NAMES))


def test_a_job_takes_the_coordinators_several_public_sources():
    spec = pb.JobSpec(algorithm="dp_frank_wolfe_transfer", epsilon=2.0, delta=1e-6)
    hyper = {"radius": 0.5, "pilot_radius": 3.0, "informative_threshold": 4.0,
             "clip_norm": 2.0, "iterations": 10, "pilot_iterations": 30}
    files = tuple(Dataset(features, labels, NAMES) for features, labels in sources(0))
    with target(0) as sites:
        model = run_job(JobContext(sites, spec, hyper, seed=0, checkpoint=lambda *_: None,
                                   public_sources=files))
    np.testing.assert_array_equal(model["informative_set"], [0.0, 2.0, 4.0])


def test_a_job_without_public_sources_fails_naming_the_setting():
    spec = pb.JobSpec(algorithm="dp_frank_wolfe_transfer", epsilon=2.0, delta=1e-6)
    hyper = {"radius": 0.5, "pilot_radius": 3.0, "informative_threshold": 4.0,
             "clip_norm": 2.0, "iterations": 10}
    with target(0) as sites, pytest.raises(ValueError, match=r"\[coordinator\] public_sources"):
        run_job(JobContext(sites, spec, hyper, seed=0, checkpoint=lambda *_: None))


def test_the_coordinator_reads_public_sources_relative_to_its_config(tmp_path):
    from privadapt.common.errors import ConfigError
    from privadapt.server.coordinator.main import CoordinatorConfig

    base = ('[coordinator]\nlisten = "127.0.0.1:0"\ndatabase = "c.db"\n{extra}\n'
            '[tls]\ncert = "c.crt"\nkey = "c.key"\nca = "ca.crt"\n')
    path = tmp_path / "coordinator.toml"
    path.write_text(base.format(extra='public_sources = ["a.npz", "more/b.npz"]'))
    config = CoordinatorConfig.from_toml(path)
    assert config.public_sources == (tmp_path / "a.npz", tmp_path / "more" / "b.npz")
    path.write_text(base.format(extra="public_sources = []"))
    with pytest.raises(ConfigError, match="public_sources must be a non-empty list"):
        CoordinatorConfig.from_toml(path)
