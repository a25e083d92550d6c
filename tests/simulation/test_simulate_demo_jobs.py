"""The jobs ``make demo`` launches are valid job files: each parses, its
hyperparameters pass the launch checks, its estimator builds, and every
kernel it uses is allowed by the demo sites' policy (``make demo`` itself
runs them end to end)."""

from __future__ import annotations

import numpy as np

from privadapt.common.data.datasets.adult import DEMO_SPLIT, load_adult_domains
from privadapt.common.proto import federation_pb2 as pb
from privadapt.server.jobs.catalog import ALGORITHMS, estimator_for, validate_hyperparameters
from privadapt.server.jobs.spec import hyperparameters, job_spec_from_toml
from privadapt.simulation.simulate import (
    DEMO_JOBS,
    DEMO_KERNELS,
    JobOutcome,
    overridden_epsilon,
    report,
    write_demo_jobs,
    write_own_files_job,
)


def test_every_demo_job_file_passes_the_launch_checks(tmp_path):
    paths = write_demo_jobs(tmp_path, ["site-1", "site-2", "site-3"])
    assert len(paths) == 2 * len(DEMO_JOBS)
    algorithms = set()
    for path in paths:
        spec, _ = job_spec_from_toml(path)
        values = hyperparameters(spec)
        validate_hyperparameters(spec.algorithm, values)
        assert isinstance(estimator_for(spec, values, seed=0), ALGORITHMS[spec.algorithm])
        algorithms.add(spec.algorithm)
    # The demo shows the privately selected adapter beside the rest
    assert "selected_adaptation" in algorithms


def test_the_default_jobs_are_named_after_the_epsilon_set_runs_them_at(tmp_path):
    assert overridden_epsilon(["iterations=5"]) is None
    epsilon = overridden_epsilon(["epsilon=3", "iterations=5"])
    assert epsilon == 3.0
    [path] = write_own_files_job(tmp_path, ["site-1", "site-2"], epsilon)
    spec, job_id = job_spec_from_toml(path, ["epsilon=3"])
    assert path.name == "selected-eps3.toml"
    assert job_id.startswith("selected-eps3-") and spec.epsilon == 3.0


def test_the_demo_policy_allows_the_selection_kernels():
    assert {"validation_loss", "loss_difference_histogram"} <= DEMO_KERNELS


def test_the_demo_table_names_the_chosen_candidate_with_its_settings(capsys):
    """The selection's result carries numbers; the table maps its best index
    back through the job's candidates to the setting it chose."""
    domains = load_adult_domains(num_sites=1, seed=0, split=DEMO_SPLIT,
                                 max_records_per_site=10)
    dim = domains.source.dim
    # source_only, public_constant, then the default candidate's trained model
    # and its free shrunk copy (both ball_gd)
    ids = np.array([0, 6, 7, 7])
    model = {"weights": np.zeros(dim), "candidates": np.zeros((4, dim)),
             "candidate_ids": ids, "best_index": np.array(3),
             "noisy_losses": np.array([0.34, 0.48, 0.21, 0.25])}
    outcome = JobOutcome("selected-eps1-x", "selected_adaptation", 1.0,
                         pb.JOB_STATE_SUCCEEDED, "", model, {}, 1.0, [], {})
    report(domains, [outcome], {})
    out = capsys.readouterr().out
    assert "private selection: ball_gd:radius_factor=1:shrink=0.25" in out
    assert "public_constant 0.480" in out
    # A classifier's default score: its validation errors.
    assert "noisy mean validation error" in out


def test_a_selection_that_released_nothing_says_so_and_names_source_only(capsys):
    domains = load_adult_domains(num_sites=1, seed=0, split=DEMO_SPLIT,
                                 max_records_per_site=10)
    dim = domains.source.dim
    model = {"weights": np.zeros(dim), "candidates": np.zeros((2, dim)),
             "candidate_ids": np.array([0, 6]), "best_index": np.array(0),
             "selection_resolution": np.array(0.287)}
    outcome = JobOutcome("selected-eps1-x", "selected_adaptation", 1.0,
                         pb.JOB_STATE_SUCCEEDED, "", model, {}, 1.0, [], {})
    report(domains, [outcome], {})
    out = capsys.readouterr().out
    assert "private selection: source_only" in out
    assert "selected-eps1-x released nothing and delivered source-only" in out
    assert "0.287 clips per record" in out
