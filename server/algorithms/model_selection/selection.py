"""PrivateSelection: choose among candidate models by one private release of
their clipped validation losses, with the free source-only model a candidate.

An estimator over ``server/algorithms/model_selection/private_selection.py`` (the derivation
of the guarantee and of the utility bound is there; in short: one Gaussian
release of K clipped loss sums calibrated to exactly (epsilon, delta), the
argmin is post-processing, and with probability 1 - beta the chosen model's
true clipped mean validation loss is within 2 sigma sqrt(2 log(K/beta)) / n of
the source-only model's; with ``baseline_confidence = beta`` it is no larger
at all).

The source-only model (``include_source_only``) is the ball-constrained ERM on
the public source (``server/algorithms/public_erm.py``), fitted at the
coordinator without noise: it never touches private records, so it costs no
privacy. It is candidate 0, the baseline; the given ``candidates`` follow in
order.

Which records are scored: every record of the federation handed to ``fit``
(the kernel's docstring says why). Hand it a federation over the sites'
validation records, not the ones the private candidates were trained on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from privadapt.common.federation import Federation
from privadapt.common.losses import SOFTMAX_CROSS_ENTROPY
from privadapt.server.algorithms.base import (
    DELTA,
    EPSILON,
    FLAG,
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
from privadapt.server.algorithms.linear_model import LinearModelMixin
from privadapt.server.algorithms.model_selection.private_selection import METHODS, private_selection
from privadapt.server.algorithms.public_erm import fit_linear

Candidate = Any  # a fitted estimator (with ``coef_``) or an array of coefficients


class PrivateSelection(LinearModelMixin, PrivateEstimator):
    """Private model selection (seed 004, Alg. 1, federated form).

    Hyperparameters: ``candidates`` (a list or tuple of fitted estimators or
    raw coefficient arrays, each (d,) or (d, C) for the softmax
    cross-entropy), ``epsilon``, ``delta`` (the selection's own budget;
    ``epsilon = inf``: the non-private oracle selection, simulation sites
    only), ``loss_bound`` L (each record's loss is clipped to [0, L]),
    ``loss``, ``include_source_only`` (fit the free public-only model on
    ``public_source`` as candidate 0; needs ``radius``, its ball), and
    ``baseline_confidence`` (None: the plain argmin; beta in (0, 1): keep
    candidate 0 unless another beats it by the margin of
    ``server/algorithms/model_selection/private_selection.py``), and ``method``: ``"auto"``
    (default: the exponential mechanism at the site when the federation has
    a single site and no margin is asked for, a tighter, pure epsilon-DP
    choice; else the secure sum), ``"secure_sum"`` or ``"exponential"``.

    Fitted: ``best_index_`` (into ``candidates_``: with the source-only model,
    0 is it and k >= 1 is ``candidates[k - 1]``), ``best_`` (the chosen
    candidate as given; the source-only coefficients for index 0),
    ``coef_`` (its coefficients; ``predict`` / ``score`` use them, as the
    chosen linear model's would), ``candidates_`` (all K stacked),
    ``noisy_losses_`` (the noisy mean clipped losses, sums / n; None when
    the site selected itself), ``noise_std_`` (sigma on each sum),
    ``margin_``, ``num_records_`` (n), ``method_`` (the method used),
    ``privacy_`` (each site's ledger)."""

    candidates: Sequence[Candidate] = hyperparameter([InstanceOf(list, tuple)])
    epsilon: float = hyperparameter(EPSILON)
    delta: float = hyperparameter(DELTA)
    loss_bound: float = hyperparameter(POSITIVE)
    loss: str = hyperparameter([Options("logistic", "squared", SOFTMAX_CROSS_ENTROPY)])
    include_source_only: bool = hyperparameter(FLAG, default=True)
    radius: float | None = hyperparameter([*POSITIVE, None], default=None)
    baseline_confidence: float | None = hyperparameter(
        [Interval(float, 0, 1, closed="neither"), None], default=None)
    method: str = hyperparameter([Options(*METHODS)], default="auto")

    def _prediction_loss(self) -> str:
        return self.loss

    def _coefficients(self, dim: int) -> list[np.ndarray]:
        """Each given candidate as an array of the loss's shape, or InvalidParameterError."""
        name = type(self).__name__
        if not self.candidates:
            raise InvalidParameterError(f"{name}: parameter 'candidates' needs at least one "
                                        "candidate model")
        arrays = []
        for k, candidate in enumerate(self.candidates):
            coef = getattr(candidate, "coef_", candidate)
            try:
                array = np.asarray(coef, dtype=float)
            except (TypeError, ValueError):
                array = np.empty(0)
            ndim = 2 if self.loss == SOFTMAX_CROSS_ENTROPY else 1
            if array.ndim != ndim or array.shape[0] != dim or not np.all(np.isfinite(array)):
                raise InvalidParameterError(
                    f"{name}: candidate {k} must be a fitted estimator or finite coefficients "
                    f"of shape ({dim},{' C' if ndim == 2 else ''}) for loss {self.loss!r}; "
                    f"got {type(candidate).__name__} of shape {array.shape}")
            arrays.append(array)
        if len({a.shape for a in arrays}) != 1:
            raise InvalidParameterError(f"{name}: the candidates have different shapes "
                                        f"{[a.shape for a in arrays]}")
        return arrays

    def _source_only(self, public_source: PublicSource | None, shape: tuple[int, ...]
                     ) -> np.ndarray:
        name = type(self).__name__
        if self.radius is None:
            raise InvalidParameterError(f"{name}: include_source_only needs parameter 'radius' "
                                        "(the ball the source-only model is fitted in)")
        features, labels = require_public_arrays(public_source, name)
        num_classes = shape[1] if self.loss == SOFTMAX_CROSS_ENTROPY else None
        return fit_linear(features, labels, self.loss, self.radius, num_classes)

    @fit_context(prefer_skip_nested_validation=True)
    def fit(self, federation: Federation, public_source: PublicSource | None = None
            ) -> PrivateSelection:
        """Score the candidates on the federation's records (one job) and keep
        the privately chosen one; ``public_source`` is needed for
        ``include_source_only``."""
        dim = feature_dim(federation, public_source, type(self).__name__)
        given = self._coefficients(dim)
        models: list[Candidate] = list(self.candidates)
        if self.include_source_only:
            source_only = self._source_only(public_source, given[0].shape)
            given, models = [source_only, *given], [source_only, *models]
        result = private_selection(
            federation, candidates=np.stack(given), loss=self.loss, loss_bound=self.loss_bound,
            epsilon=self.epsilon, delta=self.delta, baseline_confidence=self.baseline_confidence,
            method=self.method)
        self.candidates_ = np.stack(given)
        self.best_index_ = result.best_index
        self.best_ = models[result.best_index]
        self.coef_ = given[result.best_index]
        self.noisy_losses_ = (None if result.noisy_loss_sums is None
                              else result.noisy_loss_sums / result.num_records)
        self.noise_std_ = result.noise_std
        self.margin_ = result.margin
        self.num_records_ = result.num_records
        self.method_ = result.method
        self.privacy_ = result.privacy
        self.n_features_in_ = dim
        return self

    def model_arrays(self) -> dict[str, np.ndarray]:
        """weights (the chosen model), candidates, best_index, noisy_losses."""
        self._check_is_fitted()
        model = {"weights": self.coef_, "candidates": self.candidates_,
                 "best_index": np.asarray(self.best_index_)}
        if self.noisy_losses_ is not None:  # none leave a site that selects itself
            model["noisy_losses"] = self.noisy_losses_
            if math.isfinite(self.epsilon):
                model["noise_std"] = np.asarray(self.noise_std_)
        return model
