"""Private source-target clustering of seed 001 as estimators: NNA (Alg. 2)
and NAS (Alg. 1) sanitise the sites' private source into S', then AkM
(:func:`~privadapt.server.algorithms.source_target_clustering.accelerated_k_medoids`)
chooses k points of the public target T with S' as free centres.

``fit(federation, target)`` takes T as an (n, d) array (or, as a networked
job does, ``public_source=``: its features are T). With ``coreset=True`` the
sites answer for a C-coreset of T only (:mod:`.coreset`, C =
``coreset_diameter``, seed 001's 0.05), AkM still runs on the whole of T.

Fitted: ``indices_`` (the k chosen rows of T), ``sanitized_source_`` (S'),
``sent_targets_`` (what the sites answered for), ``coreset_indices_`` (None
without a coreset), ``mechanism_``, ``epsilon_`` (planned pure epsilon, inf
for Gaussian noise), ``rho_`` (planned zCDP rho, inf for Laplace),
``privacy_`` (each site's ledger), ``result_`` (the full
:class:`~privadapt.server.algorithms.source_target_clustering.privacy.SanitizedSource`).
"""

from __future__ import annotations

import math

import numpy as np

from privadapt.common.federation import Federation
from privadapt.common.kernels.nearest_source_averages import MAX_NEIGHBOURS
from privadapt.common.mechanisms import Adjacency
from privadapt.server.algorithms.base import (
    CALIBRATION_PARAMETER,
    DELTA,
    EPSILON,
    FLAG,
    NON_NEGATIVE,
    InstanceOf,
    Interval,
    InvalidParameterError,
    Options,
    PrivateEstimator,
    PublicSource,
    fit_context,
    hyperparameter,
    public_arrays,
)
from privadapt.server.algorithms.source_target_clustering import (
    accelerated_k_medoids,
    target_coreset,
)
from privadapt.server.algorithms.source_target_clustering.distances import as_points
from privadapt.server.algorithms.source_target_clustering.nas import VARIANTS, nas_sanitize
from privadapt.server.algorithms.source_target_clustering.nna import nna_sanitize
from privadapt.server.algorithms.source_target_clustering.privacy import (
    SanitizedSource,
    rho_for,
    zcdp_epsilon,
)


class _SourceTargetClustering(PrivateEstimator):
    """The hyperparameters and fit / model_arrays NNA and NAS share; each
    class adds its own and sanitises."""

    requires_public_source = True

    k: int = hyperparameter([Interval(int, 1, math.inf, closed="left")])
    epsilon: float = hyperparameter(EPSILON, default=3.0)
    delta: float | None = hyperparameter([*DELTA, None], default=1e-6)
    rho: float | None = hyperparameter([Interval(float, 0, math.inf, closed="right"), None],
                                       default=None)
    coreset: bool = hyperparameter(FLAG, default=True)
    coreset_diameter: float = hyperparameter(NON_NEGATIVE, default=0.05)
    calibration: str = CALIBRATION_PARAMETER
    adjacency: str = hyperparameter([Options(*(str(a) for a in Adjacency))],
                                    default=str(Adjacency.ADD_REMOVE_ONE))
    seed: int | None = hyperparameter([InstanceOf(int), None], default=0)

    @fit_context(prefer_skip_nested_validation=True)
    def fit(self, federation: Federation, target: np.ndarray | None = None, *,
            public_source: PublicSource | None = None) -> _SourceTargetClustering:
        """Sanitise the sites' source for ``target`` (or the public source's
        features) in one release (per site for NAS), then choose k targets."""
        points = self._target(target, public_source)
        if self.k > len(points):
            raise InvalidParameterError(f"{type(self).__name__}: k = {self.k} exceeds the "
                                        f"{len(points)} target points")
        coreset = target_coreset(points, self.coreset_diameter) if self.coreset else None
        sent = points if coreset is None else points[coreset.indices]
        result = self._sanitize(federation, sent)
        source = result.points if len(result.points) else None
        self.indices_ = accelerated_k_medoids(points, self.k, source=source, seed=self.seed)
        self.sanitized_source_ = result.points
        self.sent_targets_ = sent
        self.coreset_indices_ = None if coreset is None else coreset.indices
        self.mechanism_ = result.mechanism
        self.epsilon_ = result.pure_epsilon
        self.rho_ = result.rho
        self.privacy_ = result.privacy
        self.result_ = result
        return self

    def _target(self, target: np.ndarray | None, public_source: PublicSource | None
                ) -> np.ndarray:
        if (target is None) == (public_source is None):
            raise ValueError(f"{type(self).__name__}.fit takes the public target once: "
                             "target=(n, d) array or public_source=Dataset")
        if target is None:
            arrays = public_arrays(public_source, type(self).__name__)
            assert arrays is not None  # public_source was given
            target = arrays[0]
        return as_points(target, "target")

    def _budget(self, gaussian: bool) -> tuple[float, float | None]:
        """(epsilon, rho) to sanitise with: for Gaussian noise without rho,
        the rho whose zCDP guarantee is (epsilon, delta)-DP."""
        if not gaussian:
            return self.epsilon, None
        if self.rho is not None:
            return self.epsilon, self.rho
        if self.delta is None:
            raise InvalidParameterError(f"{type(self).__name__}: Gaussian noise needs rho, or "
                                        "delta to convert epsilon into rho")
        return self.epsilon, rho_for(self.epsilon, self.delta)

    def _sanitize(self, federation: Federation, targets: np.ndarray) -> SanitizedSource:
        raise NotImplementedError

    def privacy_guarantee(self) -> tuple[float, float]:
        """(epsilon, delta) the fitted release meets as planned: the pure
        epsilon (delta 0) of a Laplace release, (epsilon, ``delta``) for
        NAS's approximate variant, and a Gaussian release's rho-zCDP
        converted at ``delta`` (Bun and Steinke 2016, Prop. 1.3). The sites'
        own ledgers (``privacy_``) are the authority; this is the plan."""
        self._check_is_fitted("indices_")
        if math.isfinite(self.epsilon_) and getattr(self, "releases_", 1) == 1:
            return self.epsilon_, 0.0
        if math.isfinite(self.rho_):
            if self.delta is None:
                return math.inf, 0.0
            return zcdp_epsilon(self.rho_, self.delta), self.delta
        return self.epsilon, float(self.delta)  # advanced composition (NAS, Theorem 5.3)

    def model_arrays(self) -> dict[str, np.ndarray]:
        """indices (the k chosen target rows), sanitized_source, and the
        planned guarantee: epsilon and delta (:meth:`privacy_guarantee`),
        planned_epsilon (pure; inf for Gaussian noise) and planned_rho (inf for
        Laplace noise)."""
        epsilon, delta = self.privacy_guarantee()
        return {"indices": np.asarray(self.indices_, dtype=np.int64),
                "sanitized_source": np.asarray(self.sanitized_source_),
                "epsilon": np.asarray(epsilon), "delta": np.asarray(delta),
                "planned_epsilon": np.asarray(self.epsilon_),
                "planned_rho": np.asarray(self.rho_)}


class NeighborNoisyAverages(_SourceTargetClustering):
    """NNA (seed 001, Alg. 2; :mod:`...source_target_clustering.nna`): one
    secure sum of per-target counts and sums, Laplace (``noise="laplace"``,
    pure ``epsilon``-DP, Theorem 5.10) or Gaussian (``rho``-zCDP, Theorem 5.12;
    without ``rho``, the rho that is (``epsilon``, ``delta``)-DP); averages
    kept where the noisy count passes the threshold at confidence ``gamma``.
    Fitted (besides the module's list): ``threshold_``, ``noisy_counts_``."""

    noise: str = hyperparameter([Options("laplace", "gaussian")], default="laplace")
    gamma: float = hyperparameter([Interval(float, 0, 1, closed="neither")], default=0.05)

    def _sanitize(self, federation: Federation, targets: np.ndarray) -> SanitizedSource:
        epsilon, rho = self._budget(self.noise == "gaussian")
        result = nna_sanitize(federation, targets, noise=self.noise, epsilon=epsilon, rho=rho,
                              gamma=self.gamma, calibration=self.calibration,
                              adjacency=Adjacency(self.adjacency))
        self.threshold_ = result.threshold
        self.noisy_counts_ = result.noisy_counts
        return result


class NoisyAverageSet(_SourceTargetClustering):
    """NAS (seed 001, Alg. 1; :mod:`...source_target_clustering.nas`): every
    site releases, per target point, the noisy average of its own ``t``
    nearest private points (a per-site release: parallel composition across
    sites, a documented deviation from the paper's single curator), and S' is
    their union. ``variant``: ``"laplace"`` (pure ``epsilon``-DP, Theorem
    5.9), ``"laplace_approximate"`` ((``epsilon``, ``delta``)-DP, Theorem 5.3
    with theta fixed by advanced composition; one release per target point)
    or ``"gaussian"`` (``rho``-zCDP, Theorem 5.11; without ``rho``, the rho
    that is (``epsilon``, ``delta``)-DP). Fitted (besides the module's list):
    ``theta_`` (Theorem 5.3's theta; NaN for the other variants),
    ``releases_`` (per site). For the approximate variant ``epsilon_`` is the
    pure bound of basic composition; the guarantee is (epsilon, delta)."""

    t: int = hyperparameter([Interval(int, 1, MAX_NEIGHBOURS, closed="both")], default=150)
    variant: str = hyperparameter([Options(*VARIANTS)], default="laplace")

    def _sanitize(self, federation: Federation, targets: np.ndarray) -> SanitizedSource:
        epsilon, rho = self._budget(self.variant == "gaussian")
        result, plan = nas_sanitize(federation, targets, t=self.t, variant=self.variant,
                                    epsilon=epsilon, delta=self.delta, rho=rho,
                                    calibration=self.calibration,
                                    adjacency=Adjacency(self.adjacency))
        self.theta_ = plan.theta
        self.releases_ = plan.releases
        return result
