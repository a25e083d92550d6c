"""Target-only baselines: noisy projected gradient descent and noisy minibatch SGD.

Estimators over ``server/algorithms/noisy_gd.py`` and ``noisy_sgd.py`` (the
derivations and the accounting are there). Both fit a linear model on the
federation's private records only; a public source, if given, only tells them
the number of features d.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from privadapt.common.federation import Federation
from privadapt.server.algorithms.noisy_gd import IterationRecord, noisy_gd
from privadapt.server.algorithms.noisy_sgd import noisy_sgd
from privadapt.server.estimators.base import (
    CALIBRATION,
    DELTA,
    EPSILON,
    ITERATIONS,
    POSITIVE,
    Constraints,
    Interval,
    Options,
    PrivateEstimator,
    PublicSource,
    feature_dim,
)
from privadapt.server.estimators.linear_model import LinearModelMixin

LOSS = [Options("logistic", "squared")]


class _ProjectedDescent(LinearModelMixin, PrivateEstimator):
    """The fit both share; subclasses name their solver call in ``_solve``."""

    loss: str

    def _prediction_loss(self) -> str:
        return self.loss

    def _solve(self, federation: Federation, **options: Any) -> Any:
        raise NotImplementedError

    def fit(
        self,
        federation: Federation,
        public_source: PublicSource | None = None,
        *,
        initial_weights: np.ndarray | None = None,
        progress: Callable[[IterationRecord], None] | None = None,
        progress_every: int = 10,
        checkpoint: Callable[[int, np.ndarray], None] | None = None,
    ) -> _ProjectedDescent:
        """Fit on the federation's private records (one job of the federation).
        ``progress`` gets an ``IterationRecord`` every ``progress_every``
        iterations; ``checkpoint`` gets (iteration, weights) after each."""
        self._validate_params()
        dim = feature_dim(federation, public_source, type(self).__name__)
        result = self._solve(federation, dim=dim, initial_weights=initial_weights,
                             progress=progress, progress_every=progress_every,
                             checkpoint=checkpoint)
        self.coef_ = result.weights
        self.average_coef_ = result.average_weights
        self.noise_multiplier_ = result.noise_multiplier
        self.history_ = result.history
        self.privacy_ = result.privacy
        self.n_features_in_ = dim
        return self

    def model_arrays(self) -> dict[str, np.ndarray]:
        """weights, average_weights, and noise_multiplier when there was noise."""
        self._check_is_fitted()
        model = {"weights": self.coef_, "average_weights": self.average_coef_}
        if math.isfinite(self.noise_multiplier_):  # inf without noise (epsilon = inf)
            model["noise_multiplier"] = np.asarray(self.noise_multiplier_)
        return model


class NoisyGD(_ProjectedDescent):
    """Noisy projected full-batch gradient descent (Bassily et al. 2014, Alg. 1),
    replace-one adjacency, noise calibrated to (epsilon, delta) over all
    ``iterations`` (``calibration="paper"``: their closed form instead).

    Fitted: ``coef_`` (last iterate), ``average_coef_``, ``noise_multiplier_``
    (inf without noise), ``history_``, ``privacy_`` (each site's ledger)."""

    _parameter_constraints: ClassVar[dict[str, Constraints]] = {
        "loss": LOSS, "epsilon": EPSILON, "delta": DELTA, "iterations": ITERATIONS,
        "learning_rate": POSITIVE, "radius": POSITIVE, "clip_norm": POSITIVE,
        "calibration": CALIBRATION,
    }

    def __init__(
        self,
        *,
        loss: str,
        epsilon: float,
        delta: float,
        iterations: int,
        learning_rate: float,
        radius: float,
        clip_norm: float,
        calibration: str = "accountant",
    ) -> None:
        self.loss = loss
        self.epsilon = epsilon
        self.delta = delta
        self.iterations = iterations
        self.learning_rate = learning_rate
        self.radius = radius
        self.clip_norm = clip_norm
        self.calibration = calibration

    def _solve(self, federation: Federation, **options: Any) -> Any:
        # The hyperparameters are the solver's keyword arguments, name for name.
        return noisy_gd(federation, **self.get_params(), **options)


class NoisySGD(_ProjectedDescent):
    """Noisy projected minibatch SGD with Poisson batches of expected size
    ``expected_batch_size`` drawn by the sites (Bassily et al. 2019, Alg. 1);
    add/remove adjacency, so the sites need ``add_remove_one`` policies. Without
    ``num_records`` it spends ``count_budget_fraction`` of epsilon on a noisy n.

    Fitted: as :class:`NoisyGD`, plus ``sampling_rate_`` (q) and
    ``num_records_`` (the n the steps were scaled with)."""

    _parameter_constraints: ClassVar[dict[str, Constraints]] = {
        "loss": LOSS, "epsilon": EPSILON, "delta": DELTA, "iterations": ITERATIONS,
        "expected_batch_size": POSITIVE, "learning_rate": POSITIVE, "radius": POSITIVE,
        "clip_norm": POSITIVE, "num_records": [Interval(float, 1, math.inf, closed="left"), None],
        "count_budget_fraction": [Interval(float, 0, 1, closed="neither")],
    }

    def __init__(
        self,
        *,
        loss: str,
        epsilon: float,
        delta: float,
        iterations: int,
        expected_batch_size: float,
        learning_rate: float,
        radius: float,
        clip_norm: float,
        num_records: float | None = None,
        count_budget_fraction: float = 0.05,
    ) -> None:
        self.loss = loss
        self.epsilon = epsilon
        self.delta = delta
        self.iterations = iterations
        self.expected_batch_size = expected_batch_size
        self.learning_rate = learning_rate
        self.radius = radius
        self.clip_norm = clip_norm
        self.num_records = num_records
        self.count_budget_fraction = count_budget_fraction

    def _solve(self, federation: Federation, **options: Any) -> Any:
        result = noisy_sgd(federation, **self.get_params(), **options)
        self.sampling_rate_ = result.sampling_rate
        self.num_records_ = result.num_records
        return result

    def model_arrays(self) -> dict[str, np.ndarray]:
        return {**super().model_arrays(), "sampling_rate": np.asarray(self.sampling_rate_),
                "num_records": np.asarray(self.num_records_)}
