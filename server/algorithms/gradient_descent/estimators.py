"""Target-only baselines: noisy projected gradient descent and noisy minibatch SGD.

Estimators over ``server/algorithms/gradient_descent/noisy_gd.py`` and ``noisy_sgd.py`` (the
derivations and the accounting are there). Both fit a linear model on the
federation's private records only; a public source, if given, only tells them
the number of features d.

``radius="auto"`` chooses the norm bound privately within the learner's own
(epsilon, delta) (``server/algorithms/model_selection/auto_radius.py``: seed 004's grid
search over ``num_guesses`` guesses on the federation's train and validation
record parts: offsets around the source-only model with the free models as
candidates when the fit has a public source, else 2^1..2^K with the zero
model). Its loss bounds Delta(B) need
public bounds on ||x|| and |y| (``feature_bound``, ``label_bound``):

* logistic loss: labels are +-1, so Y = 1 by default; r defaults to
  ``clip_norm``. A record's logistic gradient is -y s(-y w.x) x with
  s < 1, of norm below ||x||, so ``clip_norm`` is the feature scale the
  learner already trains at: a record with ||x|| <= C is never clipped, one
  beyond is clipped in training as in the selection. The choice only affects
  accuracy: the selection clips every validation loss at Delta(B), so its
  sensitivity holds whatever the records.
* squared loss: the gradient (w.x - y) x mixes both scales and ``clip_norm``
  bounds neither, so both bounds must be given (refused otherwise).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from privadapt.common.federation import Federation
from privadapt.server.algorithms.base import (
    CALIBRATION_PARAMETER,
    DELTA,
    EPSILON,
    ITERATIONS,
    POSITIVE,
    Interval,
    InvalidParameterError,
    Options,
    PrivateEstimator,
    PublicSource,
    feature_dim,
    fit_context,
    hyperparameter,
)
from privadapt.server.algorithms.gradient_descent.noisy_gd import IterationRecord, noisy_gd
from privadapt.server.algorithms.gradient_descent.noisy_sgd import noisy_sgd
from privadapt.server.algorithms.linear_model import LinearModelMixin
from privadapt.server.algorithms.model_selection.auto_radius import AUTO, RADIUS, AutoRadiusMixin
from privadapt.server.algorithms.model_selection.auto_radius import NORM_SEARCH as AUTO_RADIUS

LOSS = [Options("logistic", "squared")]
# The hyperparameters of radius="auto" (module docstring); the solvers never see them.
NORM_SEARCH = (*AUTO_RADIUS, "feature_bound", "label_bound")


class _ProjectedDescent(AutoRadiusMixin, LinearModelMixin, PrivateEstimator):
    """The hyperparameters and the fit both share; subclasses name their
    solver call in ``_solve``."""

    loss: str = hyperparameter(LOSS)
    epsilon: float = hyperparameter(EPSILON)
    delta: float = hyperparameter(DELTA)
    iterations: int = hyperparameter(ITERATIONS)
    learning_rate: float = hyperparameter(POSITIVE)
    radius: float | str = hyperparameter(RADIUS)
    clip_norm: float = hyperparameter(POSITIVE)
    feature_bound: float | None = hyperparameter([*POSITIVE, None], default=None)
    label_bound: float | None = hyperparameter([*POSITIVE, None], default=None)

    def _prediction_loss(self) -> str:
        return self.loss

    def _solver_params(self) -> dict[str, Any]:
        """The hyperparameters the solver takes: all but the norm search's."""
        return {name: value for name, value in self.get_params().items()
                if name not in NORM_SEARCH}

    def _norm_search_bounds(self) -> tuple[str, float, float]:
        """(loss, r, Y) for radius="auto" (module docstring)."""
        if self.loss == "logistic":
            return (self.loss, self.clip_norm if self.feature_bound is None
                    else self.feature_bound,
                    1.0 if self.label_bound is None else self.label_bound)
        if self.feature_bound is None or self.label_bound is None:
            raise InvalidParameterError(
                f"{type(self).__name__}: radius='auto' with the squared loss needs "
                "feature_bound and label_bound (public bounds on ||x|| and |y| for the "
                "selection's loss bounds; clip_norm bounds neither)")
        return self.loss, self.feature_bound, self.label_bound

    def _solve(self, federation: Federation, **options: Any) -> Any:
        raise NotImplementedError

    @fit_context(prefer_skip_nested_validation=True)
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
        iterations; ``checkpoint`` gets (iteration, weights) after each
        (not with radius="auto": the search's K runs would overwrite each
        other's steps, and none of their iterates is the delivered model)."""
        if self.radius == AUTO:  # no checkpoints: the K candidates' iterates are not the model
            return self._fit_auto_radius(federation, public_source, {
                "initial_weights": initial_weights, "progress": progress,
                "progress_every": progress_every})
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
        """weights, average_weights, noise_multiplier when there was noise, and
        radius (the chosen norm bound) with radius="auto"."""
        self._check_is_fitted()
        model = {"weights": self.coef_, "average_weights": self.average_coef_}
        if math.isfinite(self.noise_multiplier_):  # inf without noise (epsilon = inf)
            model["noise_multiplier"] = np.asarray(self.noise_multiplier_)
        if self.radius == AUTO:
            model["radius"] = np.asarray(self.radius_)
        return model


class NoisyGD(_ProjectedDescent):
    """Noisy projected full-batch gradient descent (Bassily et al. 2014, Alg. 1),
    replace-one adjacency, noise calibrated to (epsilon, delta) over all
    ``iterations`` (``calibration="paper"``: their closed form instead).
    ``radius="auto"``: the norm bound chosen privately (module docstring;
    ``num_guesses``, ``feature_bound``, ``label_bound``,
    ``validation_fraction`` serve it only).

    Fitted: ``coef_`` (last iterate), ``average_coef_``, ``noise_multiplier_``
    (inf without noise), ``history_``, ``privacy_`` (each site's ledger);
    with ``radius="auto"`` the chosen clone's, plus ``radius_`` (the chosen
    bound, 0.0 for the zero model) and ``norm_search_`` (the fitted
    :class:`PrivateGridSearch`)."""

    calibration: str = CALIBRATION_PARAMETER

    def _solve(self, federation: Federation, **options: Any) -> Any:
        # The hyperparameters are the solver's keyword arguments, name for name.
        return noisy_gd(federation, **self._solver_params(), **options)


class NoisySGD(_ProjectedDescent):
    """Noisy projected minibatch SGD with Poisson batches of expected size
    ``expected_batch_size`` drawn by the sites (Bassily et al. 2019, Alg. 1);
    add/remove adjacency, so the sites need ``add_remove_one`` policies. Without
    ``num_records`` it spends ``count_budget_fraction`` of epsilon on a noisy n.

    ``radius="auto"`` as :class:`NoisyGD`.

    Fitted: as :class:`NoisyGD`, plus ``sampling_rate_`` (q) and
    ``num_records_`` (the n the steps were scaled with)."""

    expected_batch_size: float = hyperparameter(POSITIVE)
    num_records: float | None = hyperparameter(
        [Interval(float, 1, math.inf, closed="left"), None], default=None)
    count_budget_fraction: float = hyperparameter(
        [Interval(float, 0, 1, closed="neither")], default=0.05)

    def _public_num_records(self) -> float | None:
        """radius="auto" needs a public n: add/remove sites keep theirs private."""
        if self.num_records is None:
            raise InvalidParameterError(
                f"{type(self).__name__}: radius='auto' needs num_records (a public n: the "
                "selection's penalties and the zero model's score use the validation part's "
                "size, which add/remove sites keep private)")
        return self.num_records

    def _solve(self, federation: Federation, **options: Any) -> Any:
        result = noisy_sgd(federation, **self._solver_params(), **options)
        self.sampling_rate_ = result.sampling_rate
        self.num_records_ = result.num_records
        return result

    def model_arrays(self) -> dict[str, np.ndarray]:
        return {**super().model_arrays(), "sampling_rate": np.asarray(self.sampling_rate_),
                "num_records": np.asarray(self.num_records_)}
