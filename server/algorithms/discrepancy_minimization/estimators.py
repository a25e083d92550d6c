"""Private adaptation from a public labeled source to a private unlabeled target
by (smoothed) discrepancy minimisation, seed 003, as an estimator.

``route="federated"`` (default, any number of sites; ``unlabeled_adaptation.py``
beside this file): one release of M_0, everything else post-processing.
``method`` picks the algorithm run on the released M_0:
``"two_stage_fw"`` (Sec. 6, Frank-Wolfe then q-weighted ridge),
``"two_stage_md"`` (Sec. 6, p-norm mirror descent then ridge) or
``"single_stage_fw"`` (Sec. 5, Alg. 1).

``route="single_holder"`` (one site holds the whole target;
``server/algorithms/discrepancy_minimization/noisy_minimization.py``): the paper's
per-iteration noisy Frank-Wolfe (Alg. 2, ``two_stage_fw``) or noisy mirror
descent (Alg. 3, ``two_stage_md``), then the same ridge stage two;
``calibration`` chooses the accountant's noise or the paper's sigmas.
Single-stage FW per iteration is not built (module docstring of
``single_stage_frank_wolfe``: its gap estimate needs the site's noise).
"""

from __future__ import annotations

import math

import numpy as np

from privadapt.common.federation import Federation
from privadapt.common.numerics.geometry import clip_rows_to_norm
from privadapt.server.algorithms.base import (
    CALIBRATION_PARAMETER,
    DELTA,
    EPSILON,
    ITERATIONS,
    NON_NEGATIVE,
    POSITIVE,
    Options,
    PrivateEstimator,
    PublicSource,
    fit_context,
    hyperparameter,
    require_public_arrays,
)
from privadapt.server.algorithms.discrepancy_minimization.noisy_minimization import (
    noisy_frank_wolfe,
    noisy_mirror_descent,
)
from privadapt.server.algorithms.discrepancy_minimization.unlabeled_adaptation import (
    METHODS,
    federated_adaptation,
    weighted_ridge,
)
from privadapt.server.algorithms.linear_model import LinearModelMixin

ROUTES = ("federated", "single_holder")
_PER_ITERATION = {"two_stage_fw": noisy_frank_wolfe, "two_stage_md": noisy_mirror_descent}


class PrivateDiscrepancyMinimization(LinearModelMixin, PrivateEstimator):
    """q-hat and w-hat for the squared loss, ||w|| <= ``radius`` (Lambda), target
    records clipped to ||x|| <= ``feature_norm`` (r; the public source is clipped
    the same way), smoothing ``mu``, l2 weight ``regularization`` (lambda) on q,
    ``ridge`` on w in stage two, ``iterations`` K.

    Fitted: ``weights_`` (q-hat over the public source), ``coef_`` (w-hat),
    ``target_moment_`` (the released M_0; None on the single-holder route),
    ``noise_std_`` (per entry of M_0, or the per-iteration noise on the gradient),
    ``privacy_`` (each site's ledger)."""

    requires_public_source = True
    epsilon: float = hyperparameter(EPSILON)
    delta: float | None = hyperparameter([*DELTA, None], default=None)
    feature_norm: float = hyperparameter(POSITIVE)
    method: str = hyperparameter([Options(*METHODS)], default="two_stage_fw")
    mu: float = hyperparameter(POSITIVE, default=10.0)
    regularization: float = hyperparameter(NON_NEGATIVE, default=1e-3)
    radius: float = hyperparameter(POSITIVE, default=1.0)
    ridge: float = hyperparameter(NON_NEGATIVE, default=1e-3)
    iterations: int = hyperparameter(ITERATIONS, default=1000)
    route: str = hyperparameter([Options(*ROUTES)], default="federated")
    calibration: str = CALIBRATION_PARAMETER

    @fit_context(prefer_skip_nested_validation=True)
    def fit(self, federation: Federation, public_source: PublicSource | None = None
            ) -> PrivateDiscrepancyMinimization:
        """One release of the sites' M_0, then the chosen method on the public
        source (required) as post-processing."""
        features, labels = require_public_arrays(public_source, type(self).__name__)
        if math.isfinite(self.epsilon) and self.delta is None:
            raise ValueError(f"{type(self).__name__}: the Gaussian release of M_0 needs "
                             "delta, e.g. 1e-6")
        features = clip_rows_to_norm(np.asarray(features, dtype=float), self.feature_norm)
        if self.route == "single_holder":
            return self._fit_single_holder(federation, features, np.asarray(labels, float))
        result = federated_adaptation(
            federation, features, labels, epsilon=self.epsilon, delta=self.delta,
            feature_norm=self.feature_norm, method=self.method, mu=self.mu,
            regularization=self.regularization, radius=self.radius, ridge=self.ridge,
            iterations=self.iterations)
        self.weights_ = result.weights
        self.coef_ = result.coef
        self.target_moment_ = result.target_moment.matrix
        self.noise_std_ = result.target_moment.noise_std
        self.privacy_ = result.privacy
        return self

    def _fit_single_holder(self, federation: Federation, features: np.ndarray,
                           labels: np.ndarray) -> PrivateDiscrepancyMinimization:
        if self.method not in _PER_ITERATION:
            raise ValueError(f"{type(self).__name__}: route 'single_holder' runs "
                             f"{sorted(_PER_ITERATION)}, not {self.method!r}")
        result = _PER_ITERATION[self.method](
            federation, features, epsilon=self.epsilon, delta=self.delta,
            feature_norm=self.feature_norm, mu=self.mu, regularization=self.regularization,
            iterations=self.iterations, calibration=self.calibration)
        self.weights_ = result.weights
        self.coef_ = weighted_ridge(features, labels, result.weights, self.ridge)
        self.target_moment_ = None  # M_0 never leaves the site on this route
        self.noise_std_ = result.noise_scale
        self.privacy_ = result.privacy
        return self

    def _prediction_loss(self) -> str:
        return "squared"

    def model_arrays(self) -> dict[str, np.ndarray]:
        """weights (w-hat, as every linear job) and source_weights (q-hat)."""
        self._check_is_fitted()
        return {"weights": self.coef_, "source_weights": self.weights_}
