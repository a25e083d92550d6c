"""Source-target clustering (seed 001): the non-private solvers, the target
coreset, and the private sanitisers NNA (Alg. 2) and NAS (Alg. 1).

The roles of seed 001: the source S is private and lives at the sites, the
target T is public and lives at the coordinator; the job picks k target
points T_k (to be labelled) so that Cost(T, S, T_k) is small without leaking S.
"""

from privadapt.server.algorithms.source_target_clustering.coreset import (
    Coreset,
    target_coreset,
)
from privadapt.server.algorithms.source_target_clustering.distances import stc_cost
from privadapt.server.algorithms.source_target_clustering.k_medoids import (
    accelerated_k_medoids,
    exhaustive_k_medoids,
    pam_k_medoids,
)

__all__ = [
    "Coreset",
    "accelerated_k_medoids",
    "exhaustive_k_medoids",
    "pam_k_medoids",
    "stc_cost",
    "target_coreset",
]
