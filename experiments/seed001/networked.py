"""NNA through real site daemons (``cost_tables --networked``), on one small
configuration: the private source split over 3 ``privadapt-site`` daemons on
127.0.0.1 (mutual TLS, secure aggregation; experiments/seed000/federation.py),
the coreset of the public target sent as the query.

Two checks, because a networked run's noise comes from the daemons' own
CSPRNG and cannot be replayed in process:

* noise-free (simulation sites, ``allow_non_private``): the daemons' per-target
  counts and averages must equal the in-process federation's on the same
  split, entry for entry (both round onto the same fixed-point grid and the
  secure sum is exact on it), so the wire and the secure aggregation change
  nothing;
* private (epsilon = 3, Laplace): one real release through the daemons and
  the cost of AkM's choice from it at the smallest k, for the record.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from experiments.seed000.federation import Federations
from experiments.seed001.datasets import SourceTarget
from experiments.seed001.sources import EPSILON, NNA_SETTINGS, sent_targets
from privadapt.common.mechanisms import Adjacency
from privadapt.server.algorithms.source_target_clustering import (
    accelerated_k_medoids,
    stc_cost,
)
from privadapt.server.algorithms.source_target_clustering.nna import nna_sanitize

SITES = 3
NNA_LAPLACE = {"noise": "laplace", "rho": None, **NNA_SETTINGS}
#: The small configuration: at most this many private source points (a seeded
#: random subset; the cost is measured against that subset).
MAX_SOURCE = 600
HEADER = ("dataset", "source_points", "targets_sent", "sites", "noise_free_equal",
          "max_abs_difference", "private_k", "private_cost")


def nna_through_daemons(data: SourceTarget, workdir: Path, k: int, seed: int = 0
                        ) -> tuple[object, ...]:
    """One CSV row: the noise-free comparison and one private release."""
    rng = np.random.default_rng(seed)
    source = data.source[np.sort(rng.permutation(len(data.source))[:MAX_SOURCE])]
    labels = np.zeros(len(source))
    targets = sent_targets(data, coreset=True)
    results = []
    for networked in (False, True):
        with Federations(workdir / ("network" if networked else "local"),
                         networked=networked) as federations:
            federation = federations.make(source, labels, private=False, num_sites=SITES,
                                          tag="nna-free", adjacency=Adjacency.ADD_REMOVE_ONE)
            results.append(nna_sanitize(federation, targets, epsilon=math.inf, **NNA_LAPLACE))
            if networked:
                private = federations.make(source, labels, private=True, num_sites=SITES,
                                           tag="nna-eps", adjacency=Adjacency.ADD_REMOVE_ONE)
                released = nna_sanitize(private, targets, epsilon=EPSILON, **NNA_LAPLACE)
    local, remote = results
    equal = (np.array_equal(local.noisy_counts, remote.noisy_counts)
             and np.array_equal(local.points, remote.points))
    difference = (float(np.max(np.abs(local.points - remote.points)))
                  if local.points.shape == remote.points.shape and local.points.size else
                  (0.0 if local.points.shape == remote.points.shape else math.inf))
    chosen = accelerated_k_medoids(data.target, k, source=released.points if len(
        released.points) else None, seed=seed)
    cost = stc_cost(data.target, source, data.target[chosen])
    return (data.name, len(source), len(targets), SITES, equal, difference, k, cost)
