"""PCnvxAdap and PNCnvxAdap (seed 000, Alg. 1 and 2): the public source
reweighted against the private target.

Estimators over ``server/algorithms/reweighting/cnvx_adap.py`` and ``ncnvx_adap.py`` (the
derivations, the deviations from the paper and the accounting are there). The
flat hyperparameters here are what the solvers take grouped: ``alpha``, the
penalties (k1, k2, kinf for F; l1, l2, linf for J), ``mu`` and ``discrepancy``
form ``ReweightingHyperparameters``; ``feature_norm``, ``label_bound``,
``radius`` (and ``num_classes``) form ``DataBounds``. ``epsilon = inf`` runs
the noise-free CnvxAdap / NCnvxAdap (simulation sites only).

The default iteration plan (measured lever by lever in
experiments/adapter_study.py) is built from public quantities only, so it is
free in privacy and every release and ledger charge stays the kernel's:

* ``warm_start=True``: start at the public source's own fit (``fit_linear``),
  computed by the coordinator from public data;
* ``iterations="auto"``: T ~ epsilon n / sqrt(d log(1/delta)) in [10, 200]
  (``noise_aware_plan.auto_iterations``; n is public under replace-one);
* ``step_sizes="auto"``: Alg. 1 line 4's noise-aware w step with D = Lambda
  / 4 from the warm start (``step_distance`` overrides D), capping the
  curvature step, ``"noise_aware"``; where epsilon n / sqrt(d log(1/delta))
  reaches the iteration cap (the noise is small) the same cap without the
  Lipschitz G^2 term, ``"noise_aware_smooth"``, which the smooth objectives
  here allow (``noise_aware_plan.auto_step_rule`` says why, measured in
  experiments/step_rule_study.py; it reads n, epsilon, delta and d only, so
  it is free in privacy like the iteration rule); the curvature steps
  without noise. ``step_rule_`` is the rule it ran;
* ``clip_radius="auto"``: the sites clip to the bounds of the least radius
  whose gradient bound covers every public gradient at the start (squared
  loss; the logistic and softmax G do not depend on it); ``None``: ``radius``;
* ``weight_noise=False``: the u's never leave their site, and every released
  block keeps its sensitivity for any value of the changed record's u_j (the
  kernel's docstring; ``test_reweighted_gradient_kernel`` checks it), so
  (epsilon, delta) holds without the u-noise of Alg. 1 line 10, which the
  paper needs only because it publishes u; dropping it removes a block from
  the release, so the same epsilon buys less noise on the w-gradient, and the
  u's stop random-walking;
* ``return_average=True`` (PNCnvxAdap): the average iterate (post-processing),
  not Alg. 2's single random one, whose noise is never averaged out.

``chain`` names the sites' per-record weights u of this descent within its
job (common/kernels/reweighted_chains.py): "" (default) is the job's one
descent as before; two adapters in one job (a selection's candidates) need
distinct chains. ``radius="auto"`` chooses Lambda privately within the
adapter's own (epsilon, delta) (server/algorithms/model_selection/auto_radius.py), each
norm guess on its own chain, with the source-only model as candidate 0;
``num_guesses`` and ``validation_fraction`` serve it only, and its loss
bounds use ``feature_norm`` and ``label_bound`` as r and Y.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from privadapt.common.federation import Federation
from privadapt.common.kernels.reweighted_chains import MAX_CHAIN_NAME, check_chain
from privadapt.common.losses import SOFTMAX_CROSS_ENTROPY as SOFTMAX
from privadapt.server.algorithms.base import (
    CALIBRATION_PARAMETER,
    DELTA,
    EPSILON,
    FLAG,
    ITERATIONS,
    NON_NEGATIVE,
    POSITIVE,
    Constraint,
    InstanceOf,
    Interval,
    InvalidParameterError,
    Options,
    PrivateEstimator,
    PublicSource,
    fit_context,
    hyperparameter,
    require_public_arrays,
)
from privadapt.server.algorithms.linear_model import LinearModelMixin
from privadapt.server.algorithms.model_selection.auto_radius import AUTO, RADIUS, AutoRadiusMixin
from privadapt.server.algorithms.model_selection.private_grid_search import GRID_LOSSES
from privadapt.server.algorithms.public_erm import fit_linear
from privadapt.server.algorithms.reweighting.cnvx_adap import pcnvx_adap
from privadapt.server.algorithms.reweighting.descent import (
    AdaptationResult,
    DataBounds,
    IterationRecord,
    StepSizes,
)
from privadapt.server.algorithms.reweighting.ncnvx_adap import pncnvx_adap
from privadapt.server.algorithms.reweighting.noise_aware_plan import (
    auto_clip_radius,
    auto_iterations,
    auto_step_rule,
)
from privadapt.server.algorithms.reweighting.objectives import ReweightingHyperparameters


class ChainName(Constraint):
    """A site-side chain name (common/kernels/reweighted_chains.py)."""

    def is_satisfied_by(self, value: Any) -> bool:
        try:
            check_chain(value)
        except ValueError:
            return False
        return True

    @property
    def wire_types(self) -> tuple[type, ...]:
        return (str,)

    def __str__(self) -> str:
        return f"a chain name: at most {MAX_CHAIN_NAME} characters of [a-z0-9_-]"


class _Reweighting(AutoRadiusMixin, LinearModelMixin, PrivateEstimator):
    """The hyperparameters and the fit both share; each class adds its own
    and names its solver call in ``_solve``."""

    requires_public_source = True

    alpha: float = hyperparameter([Interval(float, 0, 1, closed="neither")])
    epsilon: float = hyperparameter(EPSILON)
    delta: float = hyperparameter(DELTA)
    feature_norm: float = hyperparameter(POSITIVE)
    label_bound: float = hyperparameter(POSITIVE)
    radius: float | str = hyperparameter(RADIUS)
    iterations: int | str = hyperparameter([*ITERATIONS, Options("auto")], default="auto")
    clip_radius: float | str | None = hyperparameter([*POSITIVE, Options("auto"), None],
                                                     default="auto")
    discrepancy: float = hyperparameter(NON_NEGATIVE, default=0.0)
    step_sizes: str | StepSizes = hyperparameter(
        [Options("auto", "noise_aware", "noise_aware_smooth", "curvature", "paper"),
         InstanceOf(StepSizes)], default="auto")
    step_scale: float = hyperparameter(POSITIVE, default=1.0)
    step_distance: float | None = hyperparameter([*POSITIVE, None], default=None)
    calibration: str = CALIBRATION_PARAMETER
    aggregate_noise_ratio: float = hyperparameter(POSITIVE, default=3.0)
    weight_noise: bool = hyperparameter(FLAG, default=False)
    warm_start: bool = hyperparameter(FLAG, default=True)
    chain: str = hyperparameter([ChainName()], default="")

    def _solve(self, federation: Federation, features: np.ndarray, labels: np.ndarray,
               **common: Any) -> AdaptationResult:
        raise NotImplementedError

    def _penalties(self) -> dict[str, float]:
        raise NotImplementedError

    def _num_classes(self) -> int:
        return 2

    def _norm_search_bounds(self) -> tuple[str, float, float]:
        """(loss, r, Y) for radius="auto": the clip bounds the sites enforce."""
        loss = self._prediction_loss()
        if loss not in GRID_LOSSES:
            raise InvalidParameterError(
                f"{type(self).__name__}: radius='auto' scores the guesses with the {loss} "
                f"loss, which the selection cannot bound; it takes {GRID_LOSSES}: give a "
                "numeric radius")
        return loss, self.feature_norm, self.label_bound

    @fit_context(prefer_skip_nested_validation=True)
    def fit(
        self,
        federation: Federation,
        public_source: PublicSource | None = None,
        *,
        initial_weights: np.ndarray | None = None,
        progress: Callable[[IterationRecord], None] | None = None,
        progress_every: int = 10,
    ) -> _Reweighting:
        """Fit on ``public_source`` (a Dataset or (features, labels); required)
        and the federation's private records (one job of the federation).
        ``initial_weights`` is a warm start w_0 (default, with ``warm_start``:
        the public source's own fit, free in privacy); ``progress`` gets an
        ``IterationRecord`` every ``progress_every`` iterations."""
        features, labels = require_public_arrays(public_source, type(self).__name__)
        if self.radius == AUTO:
            return self._fit_auto_radius(federation, public_source, {
                "initial_weights": initial_weights, "progress": progress,
                "progress_every": progress_every})
        hyper = ReweightingHyperparameters(alpha=self.alpha, mu=self.mu,
                                           discrepancy=self.discrepancy, **self._penalties())
        bounds = DataBounds(feature_norm=self.feature_norm, label_bound=self.label_bound,
                            radius=self.radius, num_classes=self._num_classes())
        loss = self._prediction_loss()
        if initial_weights is None and self.warm_start:
            initial_weights = fit_linear(features, labels, loss, self.radius,
                                         self._num_classes() if loss == SOFTMAX else None)
        clip_radius = self.clip_radius
        if clip_radius == "auto":
            start = np.zeros(bounds.model_size(loss, features.shape[1])) \
                if initial_weights is None else np.asarray(initial_weights, float)
            clip_radius = auto_clip_radius(loss, bounds, features, labels, start)
        bounds = replace(bounds, clip_radius=clip_radius)
        num_private = sum(federation.site_sizes.values())
        model_size = bounds.model_size(loss, features.shape[1])
        iterations = self.iterations
        if iterations == "auto":
            iterations = auto_iterations(self.epsilon, self.delta, num_private, model_size)
        step_sizes = self.step_sizes
        if isinstance(step_sizes, str) and step_sizes == "auto":
            step_sizes = auto_step_rule(self.epsilon, self.delta, num_private, model_size)
        result = self._solve(
            federation, features, labels, hyper=hyper, bounds=bounds, epsilon=self.epsilon,
            delta=self.delta, iterations=iterations, step_sizes=step_sizes,
            step_scale=self.step_scale, step_distance=self.step_distance,
            calibration=self.calibration,
            aggregate_noise_ratio=self.aggregate_noise_ratio, weight_noise=self.weight_noise,
            initial_weights=initial_weights, progress=progress, progress_every=progress_every,
            chain=self.chain)
        self.coef_ = result.weights
        self.iterations_ = iterations
        self.clip_radius_ = bounds.kernel_radius
        self.public_weights_ = result.public_weights
        self.average_coef_ = result.average_weights
        self.last_coef_ = result.last_weights
        self.output_iteration_ = result.output_iteration
        self.noise_multiplier_ = result.noise_plan.noise_multiplier
        self.step_sizes_ = result.step_sizes
        self.step_rule_ = step_sizes if isinstance(step_sizes, str) else "given"
        self.history_ = result.history
        self.privacy_ = result.privacy
        self.n_features_in_ = features.shape[1]
        return self

    def model_arrays(self) -> dict[str, np.ndarray]:
        """weights (the output iterate), public_weights (its u^Pub),
        average_weights and last_weights; radius (the chosen norm bound) with
        radius="auto"."""
        self._check_is_fitted()
        model = {"weights": self.coef_, "public_weights": self.public_weights_,
                 "average_weights": self.average_coef_, "last_weights": self.last_coef_}
        if self.radius == AUTO:
            model["radius"] = np.asarray(self.radius_)
        return model


class PCnvxAdap(_Reweighting):
    """PCnvxAdap (Alg. 1): noisy projected descent on the convex F, squared
    loss; ``coef_`` is the average iterate. The plan defaults are the module
    docstring's. ``mu`` (inf: F's exact max term)
    must be finite when ``kinf > 0`` (the federated F smooths its max term).

    Fitted: ``coef_``, ``iterations_`` (T run), ``clip_radius_``,
    ``public_weights_`` (u^Pub), ``average_coef_``,
    ``last_coef_``, ``noise_multiplier_``, ``step_sizes_``, ``step_rule_`` (the
    step rule run: ``step_sizes`` resolved, "given" for explicit sizes), ``history_``,
    ``privacy_``; with ``radius="auto"`` also ``radius_`` (the chosen 2^j,
    0.0 when candidate 0, the source-only model, wins) and ``norm_search_``."""

    k1: float = hyperparameter(NON_NEGATIVE, default=0.0)
    k2: float = hyperparameter(NON_NEGATIVE, default=0.0)
    kinf: float = hyperparameter(NON_NEGATIVE, default=0.0)
    mu: float = hyperparameter([Interval(float, 0, math.inf, closed="right")],
                               default=math.inf)

    def _prediction_loss(self) -> str:
        return "squared"

    def _penalties(self) -> dict[str, float]:
        return {"k1": self.k1, "k2": self.k2, "kinf": self.kinf}

    def _solve(self, federation: Federation, features: np.ndarray, labels: np.ndarray,
               **common: Any) -> AdaptationResult:
        return pcnvx_adap(federation, features, labels, **common)


class PNCnvxAdap(_Reweighting):
    """PNCnvxAdap (Alg. 2): noisy projected descent on the smooth J with the
    ``loss`` "logistic" (labels in {-1, +1}), "squared" or
    "softmax_cross_entropy" (labels 0..num_classes-1, ``coef_`` of shape
    (d, num_classes)); ``coef_`` is the average iterate (default), or with
    ``return_average=False`` Alg. 2's iterate t* drawn from ``seed`` (the
    coordinator's randomness, not privacy noise).

    Fitted: as :class:`PCnvxAdap`, plus ``output_iteration_`` (t*)."""

    loss: str = hyperparameter([Options("logistic", "squared", "softmax_cross_entropy")],
                               default="logistic")
    num_classes: int = hyperparameter([Interval(int, 2, math.inf, closed="left")], default=2)
    l1: float = hyperparameter(NON_NEGATIVE, default=0.0)
    l2: float = hyperparameter(NON_NEGATIVE, default=0.0)
    linf: float = hyperparameter(NON_NEGATIVE, default=0.0)
    mu: float = hyperparameter(POSITIVE, default=100.0)
    return_average: bool = hyperparameter(FLAG, default=True)
    seed: int | None = hyperparameter([Interval(int, 0, math.inf, closed="left"), None],
                                      default=None)

    def _prediction_loss(self) -> str:
        return self.loss

    def _penalties(self) -> dict[str, float]:
        # J's l1, l2, linf play the roles of F's k1, k2, kinf in the shared type.
        return {"k1": self.l1, "k2": self.l2, "kinf": self.linf}

    def _num_classes(self) -> int:
        return self.num_classes

    def _solve(self, federation: Federation, features: np.ndarray, labels: np.ndarray,
               **common: Any) -> AdaptationResult:
        return pncnvx_adap(federation, features, labels, loss=self.loss, seed=self.seed,
                           return_average=self.return_average, **common)
