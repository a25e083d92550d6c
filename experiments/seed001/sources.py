"""The free centres each row of seed 001's cost tables gives AkM: one function
per method, from one run's private release (or none), so that one release
serves every k of that run (each k's choice is still as private as the
release; the k columns of a run share its noise).

A method is called as ``method(data, federation, privacy, coreset, seed)``
and returns the stand-in source S' (an (m, d) array, possibly empty) or None
(ClusterT: no source). ``privacy`` is ``"eps=3"`` (pure epsilon-DP, Laplace)
or ``"rho=3"`` (rho-zCDP, Gaussian); ``coreset`` says whether the sites answer
for the C-coreset of T (C = 0.05) or for all of T, and matters for NNA and NAS
only (the other rows never send T to a site).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from experiments.seed001.datasets import SourceTarget
from privadapt.common.federation import Federation
from privadapt.common.mechanisms import Adjacency
from privadapt.server.algorithms.source_target_clustering import target_coreset
from privadapt.server.algorithms.source_target_clustering.nas import nas_sanitize
from privadapt.server.algorithms.source_target_clustering.nna import nna_sanitize
from privadapt.server.algorithms.source_target_clustering.private_kmeans import PrivateLloydKMeans
from privadapt.server.algorithms.source_target_clustering.private_mixture_sampler import (
    PrivateGaussianMixtureSampler,
)

EPSILON = 3.0
RHO = 3.0
# The sanitisers' remaining settings, the estimators' defaults.
SETTINGS = {"calibration": "accountant", "adjacency": Adjacency.ADD_REMOVE_ONE}
NNA_SETTINGS = {"gamma": 0.05, **SETTINGS}
PRIVACY = ("eps=3", "rho=3")
#: NAS's t (the paper's 150).
NAS_T = 150
CORESET_DIAMETER = 0.05

Method = Callable[[SourceTarget, Federation, str, bool, int], "np.ndarray | None"]


def budget(privacy: str) -> dict[str, float]:
    """The estimator keyword of one privacy setting."""
    return {"epsilon": EPSILON} if privacy == "eps=3" else {"rho": RHO}


def sent_targets(data: SourceTarget, coreset: bool) -> np.ndarray:
    """What NNA and NAS send the sites: the coreset of T, or all of T."""
    if not coreset:
        return data.target
    return data.target[target_coreset(data.target, CORESET_DIAMETER).indices]


def nna(data: SourceTarget, federation: Federation, privacy: str, coreset: bool,
        seed: int) -> np.ndarray:
    """NNA (Alg. 2): Laplace at epsilon = 3, or Gaussian at rho = 3."""
    if privacy == "eps=3":
        result = nna_sanitize(federation, sent_targets(data, coreset), noise="laplace",
                              epsilon=EPSILON, rho=None, **NNA_SETTINGS)
    else:
        result = nna_sanitize(federation, sent_targets(data, coreset), noise="gaussian",
                              rho=RHO, **NNA_SETTINGS)
    return result.points


def nas(data: SourceTarget, federation: Federation, privacy: str, coreset: bool,
        seed: int) -> np.ndarray:
    """NAS (Alg. 1): the pure-epsilon Laplace variant (Theorem 5.9) or the
    rho-zCDP Gaussian one (Theorem 5.11), t = 150 (at most |S|; the tables
    run NAS on one site, the paper's single curator)."""
    t = min(NAS_T, len(data.source))
    if privacy == "eps=3":
        result, _ = nas_sanitize(federation, sent_targets(data, coreset), t=t,
                                 variant="laplace", epsilon=EPSILON, rho=None, **SETTINGS)
    else:
        result, _ = nas_sanitize(federation, sent_targets(data, coreset), t=t,
                                 variant="gaussian", rho=RHO, **SETTINGS)
    return result.points


def cluster_t(data: SourceTarget, federation: Federation, privacy: str, coreset: bool,
              seed: int) -> None:
    """ClusterT: AkM on T ignoring S."""
    return None


def private_kmeans(data: SourceTarget, federation: Federation, privacy: str, coreset: bool,
                   seed: int) -> np.ndarray:
    """PrivateKmeans as built: DP Lloyd to 100 centres (5 rounds)."""
    return PrivateLloydKMeans(n_clusters=100, iterations=5, seed=seed,
                              **budget(privacy)).fit(federation).centres_


def dp_mixture(data: SourceTarget, federation: Federation, privacy: str, coreset: bool,
               seed: int) -> np.ndarray:
    """The DP-GAN stand-in: 100 samples of a DP diagonal Gaussian mixture."""
    return PrivateGaussianMixtureSampler(n_components=20, iterations=5, n_samples=100,
                                         seed=seed, **budget(privacy)).fit(federation).samples_


def non_private(data: SourceTarget, federation: Federation, privacy: str, coreset: bool,
                seed: int) -> np.ndarray:
    """Non-private STC: AkM with the true S (a reference, experiments only)."""
    return data.source


#: name -> (method, private?, uses the coreset?)
METHODS: dict[str, tuple[Method, bool, bool]] = {
    "NNA": (nna, True, True),
    "NAS": (nas, True, True),
    "ClusterT": (cluster_t, False, False),
    "PrivateKmeans (DP Lloyd)": (private_kmeans, True, False),
    "DP mixture (for DP-GAN)": (dp_mixture, True, False),
    "STC (non-private)": (non_private, False, False),
}
