"""A job's releases, found before launch by running its own algorithm on a
:class:`~privadapt.server.federation.planning.PlanningFederation` (that
module says why a dry run rather than a planner per algorithm)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from privadapt.common.data.dataset import Dataset
from privadapt.common.proto import federation_pb2 as pb
from privadapt.server.algorithms.base import PrivateEstimator, clone
from privadapt.server.federation.planning import PlannedRelease, PlanningFederation
from privadapt.server.jobs.catalog import JobContext, run_job


def plan_releases(spec: pb.JobSpec, hyperparameters: Mapping[str, Any],
                  sizes: Mapping[str, int | None], dim: int,
                  public_source: Dataset | None,
                  public_sources: tuple[Dataset, ...] = (),
                  estimator: PrivateEstimator | None = None) -> Sequence[PlannedRelease]:
    """Every release the job's algorithm makes, in order, from running it as
    a job runs (``run_job``, with the coordinator's public sample and
    sources) on a :class:`PlanningFederation`; raises what the algorithm
    raises (a refusal it would meet at run time, a bad value).
    ``estimator``: the job's, as its launch built and validated it; a clone
    is fitted, so the dry run's fitted state never becomes the job's."""
    federation = PlanningFederation("dry-run", sizes, dim)
    seed = spec.seed if spec.HasField("seed") else 0
    run_job(JobContext(federation, spec, hyperparameters, seed, lambda step, model: None,
                       public_source, public_sources,
                       None if estimator is None else clone(estimator)))
    return federation.releases
