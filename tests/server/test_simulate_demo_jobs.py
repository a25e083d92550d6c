"""The jobs ``make demo`` launches are valid job files: each parses, its
hyperparameters pass the launch checks, its estimator builds, and every
kernel it uses is allowed by the demo sites' policy (``make demo`` itself
runs them end to end)."""

from __future__ import annotations

from privadapt.server.job_algorithms import ALGORITHMS, estimator_for, validate_hyperparameters
from privadapt.server.job_spec import hyperparameters, job_spec_from_toml
from privadapt.server.simulate import DEMO_JOBS, DEMO_KERNELS, write_demo_jobs


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
    # issue 13: the demo shows the privately selected adapter beside the rest
    assert "selected_adaptation" in algorithms


def test_the_demo_policy_allows_the_selection_kernel():
    assert "validation_loss" in DEMO_KERNELS
