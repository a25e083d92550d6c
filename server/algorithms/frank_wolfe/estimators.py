"""Private Frank-Wolfe on the l1 ball and private transfer from public sources
(seed 002): estimators over ``server/algorithms/frank_wolfe/dp_frank_wolfe.py`` and
``dp_fw_transfer.py`` (the derivations and the accounting are there)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from privadapt.common.data.dataset import Dataset
from privadapt.common.federation import Federation
from privadapt.server.algorithms.base import (
    CALIBRATION_PARAMETER,
    DELTA,
    EPSILON,
    ITERATIONS,
    POSITIVE,
    InstanceOf,
    Interval,
    Options,
    PrivateEstimator,
    PublicSource,
    feature_dim,
    fit_context,
    hyperparameter,
    require_public_arrays,
)
from privadapt.server.algorithms.frank_wolfe.dp_frank_wolfe import ROUTES, dp_frank_wolfe
from privadapt.server.algorithms.frank_wolfe.transfer import dp_fw_transfer
from privadapt.server.algorithms.linear_model import LinearModelMixin

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

    radius: float = hyperparameter(POSITIVE)
    clip_norm: float = hyperparameter(POSITIVE)
    epsilon: float = hyperparameter(EPSILON)
    delta: float = hyperparameter(DELTA)
    iterations: int = hyperparameter(ITERATIONS)
    loss: str = hyperparameter(LOSS, default="squared")
    calibration: str = CALIBRATION_PARAMETER
    route: str = hyperparameter(ROUTE, default="auto")

    def _prediction_loss(self) -> str:
        return self.loss

    @fit_context(prefer_skip_nested_validation=True)
    def fit(
        self,
        federation: Federation,
        public_source: PublicSource | None = None,
        *,
        checkpoint: Checkpoint | None = None,
    ) -> DPFrankWolfe:
        """Fit on the federation's private records; ``checkpoint`` gets
        (iteration, theta) after every step."""
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



def sources_by_column(
    public_source: PublicSource, column: str, who: str
) -> tuple[list[tuple[np.ndarray, np.ndarray]], list[float]]:
    """One public sample split into sources by the values of its feature
    ``column`` (dropped from the features), in increasing order of the value:
    how a coordinator, which has one public source file, names several."""
    if not isinstance(public_source, Dataset):
        raise ValueError(f"{who}: splitting by source_column {column!r} needs a Dataset "
                         "with feature names; pass public_sources=[...] instead")
    if column not in public_source.feature_names:
        raise ValueError(f"{who}: the public source has no column {column!r} naming the "
                         f"source of each record; its columns: {list(public_source.feature_names)}")
    position = public_source.feature_names.index(column)
    groups = public_source.features[:, position]
    features = np.delete(public_source.features, position, axis=1)
    values = sorted(set(groups.tolist()))
    return ([(features[groups == v], public_source.labels[groups == v]) for v in values],
            values)


class DPFrankWolfeTransfer(LinearModelMixin, PrivateEstimator):
    """Transfer regression from public auxiliary sources with a private target
    (seed 002; Trans-Lasso in spirit): a DP Frank-Wolfe pilot on the target
    (``pilot_fraction`` of the budget), the informative sources
    A_q = {k : ||w_k - pilot||_q <= ``informative_threshold``}, w_A fitted on
    them, then DP Frank-Wolfe for the offset in the l1 ball of ``radius``
    around w_A. The sources are ``fit(..., public_sources=[...])`` (a networked
    job: the coordinator's ``[coordinator] public_sources`` files), or the
    ``public_source`` sample split by its column ``source_column`` (in-process
    only: a networked job's public sample must have the sites' schema).

    Fitted: ``coef_`` (beta-hat), ``informative_set_`` (source indices, or the
    column's values when split by it), ``pilot_coef_``, ``source_coefs_``,
    ``center_`` (w_A), ``route_``, ``privacy_`` (both runs, one job)."""

    # The sources come from public_sources or from the public sample split by
    # its column (fit says which is missing), so neither alone is required.
    requires_public_source: ClassVar[bool] = False
    radius: float = hyperparameter(POSITIVE)
    pilot_radius: float = hyperparameter(POSITIVE)
    informative_threshold: float = hyperparameter(POSITIVE)
    clip_norm: float = hyperparameter(POSITIVE)
    epsilon: float = hyperparameter(EPSILON)
    delta: float = hyperparameter(DELTA)
    iterations: int = hyperparameter(ITERATIONS)
    pilot_iterations: int = hyperparameter(ITERATIONS, default=50)
    pilot_fraction: float = hyperparameter([Interval(float, 0, 1, closed="neither")],
                                           default=0.3)
    norm: str = hyperparameter([Options("l1", "l2")], default="l1")
    calibration: str = CALIBRATION_PARAMETER
    route: str = hyperparameter(ROUTE, default="auto")
    source_column: str = hyperparameter([InstanceOf(str)], default="source")

    def _prediction_loss(self) -> str:
        return "squared"

    @fit_context(prefer_skip_nested_validation=True)
    def fit(
        self,
        federation: Federation,
        public_source: PublicSource | None = None,
        *,
        public_sources: Sequence[PublicSource] | None = None,
        checkpoint: Checkpoint | None = None,
    ) -> DPFrankWolfeTransfer:
        """Fit on the federation's private target and the public sources."""
        who = type(self).__name__
        if public_sources:
            sources = [require_public_arrays(source, who) for source in public_sources]
            labels: list[Any] = list(range(len(sources)))
        elif public_source is not None:
            sources, labels = sources_by_column(public_source, self.source_column, who)
        else:
            raise ValueError(f"{who} needs public sources: fit(federation, public_sources=[...]) "
                             f"or a public_source with a {self.source_column!r} column; a "
                             "networked job reads them from [coordinator] public_sources")
        params = self.get_params()
        del params["source_column"]
        result = dp_fw_transfer(federation, sources=sources, dim=federation.dim,
                                progress=checkpoint, **params)
        self.coef_ = result.weights
        self.informative_set_ = [labels[k] for k in result.informative_set]
        self.pilot_coef_ = result.pilot
        self.source_coefs_ = result.source_weights
        self.center_ = result.center
        self.route_ = result.route
        self.privacy_ = result.privacy
        self.n_features_in_ = federation.dim
        return self

    def model_arrays(self) -> dict[str, np.ndarray]:
        """weights (beta-hat), informative_set, pilot_weights, center (w_A)."""
        self._check_is_fitted()
        return {"weights": self.coef_,
                "informative_set": np.asarray(self.informative_set_, dtype=np.float64),
                "pilot_weights": self.pilot_coef_, "center": self.center_}
