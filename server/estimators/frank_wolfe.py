"""Private Frank-Wolfe on the l1 ball and private transfer from public sources
(seed 002): estimators over ``server/algorithms/dp_frank_wolfe.py`` and
``dp_fw_transfer.py`` (the derivations and the accounting are there)."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import numpy as np

from privadapt.common.federation import Federation
from privadapt.server.algorithms.dp_frank_wolfe import ROUTES, dp_frank_wolfe
from privadapt.server.estimators.base import (
    CALIBRATION,
    DELTA,
    EPSILON,
    ITERATIONS,
    POSITIVE,
    Constraints,
    Options,
    PrivateEstimator,
    PublicSource,
    feature_dim,
)
from privadapt.server.estimators.linear_model import LinearModelMixin

LOSS = [Options("squared", "logistic")]
ROUTE = [Options(*ROUTES)]
Checkpoint = Callable[[int, np.ndarray], None]


class DPFrankWolfe(LinearModelMixin, PrivateEstimator):
    """Noisy Frank-Wolfe over the l1 ball of radius ``radius`` (Talwar,
    Thakurta and Zhang 2015, Alg. 2; seed 002's Algorithm 2), per-record
    gradients clipped to infinity norm ``clip_norm``, replace-one adjacency.
    ``route``: ``"selection"`` (one data holder releases only the index),
    ``"secure_sum"`` (a noisy gradient sum), ``"auto"`` by the number of sites.

    Fitted: ``coef_`` (theta_T), ``selected_`` (vertex index per step: j is
    +h e_j, d + j is -h e_j), ``route_``, ``noise_scale_`` (Laplace scale or
    Gaussian sigma per entry, sum units; 0 without noise), ``privacy_``."""

    _parameter_constraints: ClassVar[dict[str, Constraints]] = {
        "radius": POSITIVE, "clip_norm": POSITIVE, "epsilon": EPSILON, "delta": DELTA,
        "iterations": ITERATIONS, "loss": LOSS, "calibration": CALIBRATION, "route": ROUTE,
    }

    def __init__(
        self,
        *,
        radius: float,
        clip_norm: float,
        epsilon: float,
        delta: float,
        iterations: int,
        loss: str = "squared",
        calibration: str = "accountant",
        route: str = "auto",
    ) -> None:
        self.radius = radius
        self.clip_norm = clip_norm
        self.epsilon = epsilon
        self.delta = delta
        self.iterations = iterations
        self.loss = loss
        self.calibration = calibration
        self.route = route

    def _prediction_loss(self) -> str:
        return self.loss

    def fit(
        self,
        federation: Federation,
        public_source: PublicSource | None = None,
        *,
        checkpoint: Checkpoint | None = None,
    ) -> DPFrankWolfe:
        """Fit on the federation's private records; ``checkpoint`` gets
        (iteration, theta) after every step."""
        self._validate_params()
        dim = feature_dim(federation, public_source, type(self).__name__)
        result = dp_frank_wolfe(federation, dim=dim, progress=checkpoint, **self.get_params())
        self.coef_ = result.weights
        self.selected_ = result.selected
        self.route_ = result.plan.route
        self.noise_scale_ = result.plan.noise_scale
        self.privacy_ = result.privacy
        self.n_features_in_ = dim
        return self

    def model_arrays(self) -> dict[str, np.ndarray]:
        """weights, selected vertices, and the noise scale when there was noise."""
        self._check_is_fitted()
        model = {"weights": self.coef_, "selected": np.asarray(self.selected_, dtype=np.int64)}
        if self.noise_scale_ > 0:
            model["noise_scale"] = np.asarray(self.noise_scale_)
        return model

