"""OutputPerturbation: regularised ERM solved at each site, released once with
noise (seed 004's output-perturbation learner, single data holder or per
site). An estimator over ``server/algorithms/output_perturbation/perturbed_erm.py`` (the
plan and the delivered model are derived there; the sensitivity and the
solver's certified tolerance in ``common/kernels/regularized_erm.py``)."""

from __future__ import annotations

import math

import numpy as np

from privadapt.common.federation import Federation
from privadapt.server.algorithms.base import (
    DELTA,
    EPSILON,
    ITERATIONS,
    POSITIVE,
    Interval,
    Options,
    PrivateEstimator,
    PublicSource,
    feature_dim,
    fit_context,
    hyperparameter,
)
from privadapt.server.algorithms.linear_model import LinearModelMixin
from privadapt.server.algorithms.output_perturbation.perturbed_erm import output_perturbation

# The share of G / lambda the solver's convergence term may add (iterations_for).
TOLERANCE_SHARE = [Interval(float, 1e-9, 0.25, closed="both")]


class OutputPerturbation(LinearModelMixin, PrivateEstimator):
    """min over ||w|| <= ``radius`` of sum_i l(w; x_i, y_i) + (``regularization``
    / 2) ||w||^2 (``"auto"``: the public rule of the algorithm's docstring,
    from n, d, epsilon and the clip region) at each site on records clipped
    to ||x|| <= ``clip_norm``, |y| <= ``label_bound``, released once with
    Gaussian noise calibrated to (``epsilon``, ``delta``) (epsilon = inf: no
    noise, simulation sites). ``iterations``: the site's solver steps (None:
    enough for ``tolerance_share``, sized on the public record counts).

    Fitted: ``coef_`` (the site's model, or the size-weighted average of the
    sites'), ``regularization_`` (the lambda used), ``site_coefs_`` (site ->
    its noisy model), ``noise_multiplier_`` (inf without noise),
    ``noise_std_``, ``iterations_``, ``tolerance_`` (the
    certified ||w_T - w*|| the charge includes twice) and ``privacy_``."""

    loss: str = hyperparameter([Options("logistic", "squared")])
    radius: float = hyperparameter(POSITIVE)
    epsilon: float = hyperparameter(EPSILON)
    delta: float = hyperparameter(DELTA)
    regularization: float | str = hyperparameter([*POSITIVE, Options("auto")], default="auto")
    clip_norm: float = hyperparameter(POSITIVE, default=1.0)
    label_bound: float = hyperparameter(POSITIVE, default=1.0)
    iterations: int | None = hyperparameter([*ITERATIONS, None], default=None)
    tolerance_share: float = hyperparameter(TOLERANCE_SHARE, default=1e-3)

    def _prediction_loss(self) -> str:
        return self.loss

    @fit_context(prefer_skip_nested_validation=True)
    def fit(self, federation: Federation, public_source: PublicSource | None = None
            ) -> OutputPerturbation:
        """One release per site (``public_source``, if given, only says d)."""
        dim = feature_dim(federation, public_source, type(self).__name__)
        result = output_perturbation(
            federation, dim=dim, loss=self.loss, regularization=self.regularization,
            radius=self.radius, clip_norm=self.clip_norm, label_bound=self.label_bound,
            epsilon=self.epsilon, delta=self.delta, iterations=self.iterations,
            tolerance_share=self.tolerance_share)
        self.coef_ = result.weights
        self.site_coefs_ = result.site_weights
        self.noise_multiplier_ = result.noise_multiplier
        self.noise_std_ = result.noise_std
        self.regularization_ = result.regularization
        self.iterations_ = result.iterations
        self.tolerance_ = result.tolerance
        self.privacy_ = result.privacy
        self.n_features_in_ = dim
        return self

    def model_arrays(self) -> dict[str, np.ndarray]:
        """weights, site_weights (one row per site), iterations, noise_std."""
        self._check_is_fitted()
        model = {"weights": self.coef_,
                 "site_weights": np.stack(list(self.site_coefs_.values())),
                 "iterations": np.asarray(self.iterations_, dtype=np.int64)}
        if math.isfinite(self.noise_multiplier_):
            model["noise_std"] = np.asarray(self.noise_std_)
        return model
