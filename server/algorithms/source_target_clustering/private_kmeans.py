"""Seed 001's PrivateKmeans baseline as built here: DP Lloyd k-means as an estimator.

Over ``private_lloyd.py`` beside this file (what it is, how it differs from
the paper's Balcan et al. 2017, and the accounting are there). The fitted
``centres_`` are a private stand-in for the private source S: the experiment
hands them to AkM as free centres.

As a job (``dp_lloyd_kmeans``; ``dp_mixture`` for the mixture sampler) the
budget is the job's ``epsilon``, spent as pure epsilon-DP with Laplace noise:
a job always passes epsilon (and its delta, which these estimators do not
take), and pure epsilon-DP implies (epsilon, delta)-DP for every delta, so
the job meets what its spec states, with delta 0 to spare. A zCDP budget
(``rho``) is for library use; a job that also sets ``rho`` is refused
(exactly one budget).
"""

from __future__ import annotations

import math

import numpy as np

from privadapt.common.federation import Federation
from privadapt.server.algorithms.base import (
    EPSILON,
    ITERATIONS,
    NON_NEGATIVE,
    POSITIVE,
    Interval,
    InvalidParameterError,
    Options,
    PrivateEstimator,
    fit_context,
    hyperparameter,
)
from privadapt.server.algorithms.source_target_clustering.private_lloyd import private_lloyd

RHO = [Interval(float, 0, math.inf, closed="right")]  # inf: the noise-free version
SHARE = [Interval(float, 0, 1, closed="neither")]
COUNT = [Interval(int, 1, math.inf, closed="left")]
SEED = [Interval(int, 0, math.inf, closed="left"), None]


class _ClusteringBaseline(PrivateEstimator):
    """The hyperparameters seed 001's private stand-ins for S share (DP Lloyd
    here, the mixture sampler beside it): ``iterations`` releases at exactly
    one budget, ``epsilon`` (pure DP, Laplace) or ``rho`` (zCDP, Gaussian),
    on records clipped to ``clip_norm``; ``min_count`` and ``seed``."""

    iterations: int = hyperparameter(ITERATIONS, default=5)
    epsilon: float | None = hyperparameter([*EPSILON, None], default=None)
    rho: float | None = hyperparameter([*RHO, None], default=None)
    clip_norm: float = hyperparameter(POSITIVE, default=0.5)
    min_count: float | None = hyperparameter([*NON_NEGATIVE, None], default=None)
    seed: int | None = hyperparameter(SEED, default=None)

    def _check_together(self) -> None:
        """InvalidParameterError unless exactly one of ``epsilon`` and ``rho``
        is given."""
        super()._check_together()
        if (self.epsilon is None) == (self.rho is None):
            raise InvalidParameterError(
                f"{type(self).__name__}: give exactly one of 'epsilon' (pure epsilon-DP, "
                f"Laplace noise) and 'rho' (rho-zCDP, Gaussian noise); got "
                f"epsilon={self.epsilon!r}, rho={self.rho!r} (a job always gives epsilon: "
                "leave 'rho' out of its hyperparameters)")


class PrivateLloydKMeans(_ClusteringBaseline):
    """DP Lloyd k-means (Su et al. 2016) on the federation's records, clipped to
    ||x|| <= ``clip_norm``: ``iterations`` secure-sum releases of per-centre
    counts and sums, at ``epsilon`` / ``iterations`` each (Laplace, pure DP)
    or ``rho`` / ``iterations`` (Gaussian, zCDP), add/remove adjacency.
    ``noise="discrete"`` spends an ``epsilon`` budget with the exact discrete
    Laplace on the federation's fixed-point grid instead of the float Laplace,
    and a ``rho`` budget with the distributed discrete Gaussian (exact integer
    shares from every site) instead of the float Gaussian.
    ``count_share`` of each release's budget goes to the counts; centres whose
    last noisy count is at most ``min_count`` (None: twice a count's noise
    standard deviation) are dropped from ``centres_``.

    Fitted: ``centres_`` (the kept centres, at most ``n_clusters``),
    ``all_centres_``, ``counts_`` (last noisy counts), ``threshold_``,
    ``history_``, ``mechanisms_`` (one per release, as planned), ``privacy_``."""

    n_clusters: int = hyperparameter(COUNT, default=100)
    count_share: float = hyperparameter(SHARE, default=0.5)
    noise: str = hyperparameter([Options("continuous", "discrete")], default="continuous")

    @fit_context(prefer_skip_nested_validation=True)
    def fit(self, federation: Federation, public_source: object = None, *,
            initial_centres: np.ndarray | None = None) -> PrivateLloydKMeans:
        """Cluster the federation's records; ``initial_centres`` (public,
        (n_clusters, d), inside the clip ball) or uniform ones from ``seed``.
        ``public_source`` is ignored (the baseline does not look at T)."""
        result = private_lloyd(federation, **self.get_params(), initial_centres=initial_centres)
        self.centres_ = result.centres
        self.all_centres_ = result.all_centres
        self.counts_ = result.counts
        self.threshold_ = result.threshold
        self.history_ = result.history
        self.mechanisms_ = result.mechanisms
        self.privacy_ = result.privacy
        return self

    def model_arrays(self) -> dict[str, np.ndarray]:
        """The kept centres and every centre's last noisy count."""
        self._check_is_fitted("centres_")
        return {"centres": self.centres_, "all_centres": self.all_centres_,
                "counts": self.counts_}
