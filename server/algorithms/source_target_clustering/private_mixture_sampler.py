"""Seed 001's stand-in for its DP-GAN baseline: samples from a DP diagonal
Gaussian mixture of the private source, as an estimator.

Over ``server/algorithms/source_target_clustering/private_mixture.py`` (why not DP-GAN, what is
released, the accounting). The fitted ``samples_`` are a private stand-in for
the private source S: the experiment hands them to AkM as free centres.
"""

from __future__ import annotations

import numpy as np

from privadapt.common.federation import Federation
from privadapt.server.algorithms.base import (
    POSITIVE,
    fit_context,
    hyperparameter,
)
from privadapt.server.algorithms.source_target_clustering.private_kmeans import (
    COUNT,
    SHARE,
    _ClusteringBaseline,
)
from privadapt.server.algorithms.source_target_clustering.private_mixture import (
    private_gaussian_mixture,
)


class PrivateGaussianMixtureSampler(_ClusteringBaseline):
    """A diagonal Gaussian mixture of ``n_components`` fitted to the
    federation's records (clipped to ``clip_norm``) by hard-assignment DP EM
    in ``iterations`` releases (``epsilon`` / ``iterations`` each, Laplace,
    or ``rho`` / ``iterations``, Gaussian; add/remove adjacency), then
    ``n_samples`` draws from it (post-processing, seeded by ``seed``).

    Fitted: ``samples_`` (n_samples, d; empty when no component's noisy count
    passed ``min_count``), ``weights_``, ``means_``, ``variances_`` of the
    kept components, ``threshold_``, ``history_``, ``mechanisms_``,
    ``privacy_``."""

    n_components: int = hyperparameter(COUNT, default=20)
    count_share: float = hyperparameter(SHARE, default=0.4)
    n_samples: int = hyperparameter(COUNT, default=100)
    variance_floor: float = hyperparameter(POSITIVE, default=1e-4)

    @fit_context(prefer_skip_nested_validation=True)
    def fit(self, federation: Federation, public_source: object = None, *,
            initial_centres: np.ndarray | None = None) -> PrivateGaussianMixtureSampler:
        """Fit the mixture on the federation's records and sample it;
        ``initial_centres`` (public) or uniform ones from ``seed``.
        ``public_source`` is ignored (the baseline does not look at T)."""
        result = private_gaussian_mixture(federation, **self.get_params(),
                                          initial_centres=initial_centres)
        self.samples_ = result.samples
        self.weights_ = result.weights
        self.means_ = result.means
        self.variances_ = result.variances
        self.threshold_ = result.threshold
        self.history_ = result.history
        self.mechanisms_ = result.mechanisms
        self.privacy_ = result.privacy
        return self

    def model_arrays(self) -> dict[str, np.ndarray]:
        """The samples and the mixture they were drawn from."""
        self._check_is_fitted("samples_")
        return {"samples": self.samples_, "weights": self.weights_, "means": self.means_,
                "variances": self.variances_}
