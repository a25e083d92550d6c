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

NoisyGD's ``center``: the ball the iterates are projected on is
||w - w_0|| <= ``radius`` around a public model w_0, and the descent starts
there (noisy_gd.py's docstring: the privacy is plain noisy GD's). "zero":
w_0 = 0, today's ball. "source_only": w_0 = the source-only model, the
ball-constrained ERM on the public source (``fit_linear`` in the ball
``source_radius``, None: ``radius``), fitted in ``fit`` for free, so fit
needs the public source. A fixed public model (an array): a caller that has
fitted source-only already (a selection's candidates); it is not a job
field. ``average="tail"`` delivers the mean of the last ceil(T/2) iterates as
``coef_`` (GAIN_STUDY.md 4.2: the ball candidates' measured form).
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
    InstanceOf,
    Interval,
    InvalidParameterError,
    Options,
    PrivateEstimator,
    PublicSource,
    feature_dim,
    fit_context,
    hyperparameter,
    require_public_arrays,
)
from privadapt.server.algorithms.gradient_descent.noisy_gd import IterationRecord, noisy_gd
from privadapt.server.algorithms.gradient_descent.noisy_sgd import noisy_sgd
from privadapt.server.algorithms.linear_model import LinearModelMixin
from privadapt.server.algorithms.model_selection.auto_radius import AUTO, RADIUS, AutoRadiusMixin
from privadapt.server.algorithms.model_selection.auto_radius import NORM_SEARCH as AUTO_RADIUS
from privadapt.server.algorithms.public_erm import fit_linear

LOSS = [Options("logistic", "squared")]
# The hyperparameters of radius="auto" (module docstring); the solvers never see them.
NORM_SEARCH = (*AUTO_RADIUS, "feature_bound", "label_bound")
ZERO, SOURCE_ONLY = "zero", "source_only"
# NoisyGD's hyperparameters the estimator resolves before the solver runs.
_CENTERING = ("center", "source_radius", "average")


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

    def _solver_params(self, *resolved: str) -> dict[str, Any]:
        """The hyperparameters the solver takes: all but the norm search's
        and the ``resolved`` ones (the estimator turns them into solver
        arguments itself)."""
        return {name: value for name, value in self.get_params().items()
                if name not in NORM_SEARCH and name not in resolved}

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

    def _solve(self, federation: Federation, public_source: PublicSource | None,
               **options: Any) -> Any:
        raise NotImplementedError

    def _delivered(self, result: Any) -> np.ndarray:
        """The fitted model ``coef_``: the last iterate (a subclass may choose)."""
        return result.weights

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
        result = self._solve(federation, public_source, dim=dim,
                             initial_weights=initial_weights, progress=progress,
                             progress_every=progress_every, checkpoint=checkpoint)
        self.coef_ = self._delivered(result)
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

    ``center`` ("zero", "source_only" or a public model as an array),
    ``source_radius`` and ``average`` ("none" or "tail"): the ball around a
    public model and the delivered average (module docstring); they change
    no release, so the ledgers are charged exactly as without them.

    Fitted: ``coef_`` (last iterate, or with ``average="tail"`` the mean of
    the last ceil(T/2)), ``average_coef_`` (the mean of all T),
    ``tail_average_coef_``, ``center_`` (w_0), ``noise_multiplier_`` (inf
    without noise), ``history_``, ``privacy_`` (each site's ledger); with
    ``radius="auto"`` the chosen clone's, plus ``radius_`` (the chosen
    bound, 0.0 for the zero model) and ``norm_search_`` (the fitted
    :class:`PrivateGridSearch`)."""

    calibration: str = CALIBRATION_PARAMETER
    center: str | np.ndarray = hyperparameter([Options(ZERO, SOURCE_ONLY),
                                               InstanceOf(np.ndarray)], default=ZERO)
    source_radius: float | None = hyperparameter([*POSITIVE, None], default=None)
    average: str = hyperparameter([Options("none", "tail")], default="none")

    def _check_together(self) -> None:
        super()._check_together()
        if self.radius == AUTO and not _is_zero(self.center):
            raise InvalidParameterError(
                f"{type(self).__name__}: radius='auto' searches balls around the origin (its "
                "candidate 0 is the zero or source-only model); with a center give the "
                "ball's radius as a number")

    def needs_public_source(self) -> bool:
        return isinstance(self.center, str) and self.center == SOURCE_ONLY

    def _center(self, public_source: PublicSource | None, dim: int) -> np.ndarray | None:
        """w_0 (None: the origin, the plain loop), from public data only."""
        name = type(self).__name__
        if _is_zero(self.center):
            return None
        if isinstance(self.center, np.ndarray):
            center = np.asarray(self.center, dtype=float)
            if center.shape != (dim,) or not np.all(np.isfinite(center)):
                raise InvalidParameterError(
                    f"{name}: parameter 'center' must be a finite model of shape ({dim},) "
                    f"(one weight per feature); got shape {center.shape}")
            return center
        if public_source is None:
            raise InvalidParameterError(
                f"{name}: center='source_only' fits the source-only model on the public "
                "source: pass public_source to fit")
        features, labels = require_public_arrays(public_source, name)
        radius = self.radius if self.source_radius is None else self.source_radius
        return fit_linear(features, labels, self.loss, radius)

    def _solve(self, federation: Federation, public_source: PublicSource | None,
               **options: Any) -> Any:
        center = self._center(public_source, options["dim"])
        self.center_ = np.zeros(options["dim"]) if center is None else center
        # The other hyperparameters are the solver's keyword arguments, name for name.
        return noisy_gd(federation, **self._solver_params(*_CENTERING), center=center,
                        **options)

    def _delivered(self, result: Any) -> np.ndarray:
        self.tail_average_coef_ = result.tail_average_weights
        return result.tail_average_weights if self.average == "tail" else result.weights

    def model_arrays(self) -> dict[str, np.ndarray]:
        """As :class:`_ProjectedDescent`'s, plus center (w_0) when it is not the origin."""
        model = super().model_arrays()
        if not _is_zero(self.center):
            model["center"] = self.center_
        return model


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

    def _solve(self, federation: Federation, public_source: PublicSource | None,
               **options: Any) -> Any:
        result = noisy_sgd(federation, **self._solver_params(), **options)
        self.sampling_rate_ = result.sampling_rate
        self.num_records_ = result.num_records
        return result

    def model_arrays(self) -> dict[str, np.ndarray]:
        return {**super().model_arrays(), "sampling_rate": np.asarray(self.sampling_rate_),
                "num_records": np.asarray(self.num_records_)}


def _is_zero(center: Any) -> bool:
    return isinstance(center, str) and center == ZERO
