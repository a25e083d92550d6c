"""``radius="auto"``: a learner's norm bound chosen privately inside its own
(epsilon, delta), by seed 004's private grid search.

A learner whose ``radius`` (the ball Lambda its model is projected on: noisy
GD, noisy SGD, PCnvxAdap, PNCnvxAdap) is ``"auto"`` fits a
:class:`~privadapt.server.algorithms.model_selection.grid_search.PrivateGridSearch` with
itself cloned at each guess 2^1..2^K (``num_guesses``), on the "train" and
"validation" record parts of the one federation it is given (each site splits
its own records at ``validation_fraction`` by a content hash salted with the
job id, :func:`~privadapt.server.algorithms.base.record_parts`), and adopts
the chosen clone's fitted state.

The free baseline. When the fit is given a public source, the free models
(the source-only model, fitted for free on the public source, and the public
constant where the source has an intercept column) lead the candidates and
the guesses are offsets around the source-only model, one trained in the
largest ball and the others its free projections (PrivateGridSearch's
``include_source_only``, private_grid_search.py); without one, seed 004's
grid with the zero model.

Budget. The search gets the learner's own (epsilon, delta): the training at
(epsilon / 2, delta / 2) (the one offset model, or K clones at (epsilon / 2K,
delta / 2K) each), the selection on the validation part at (epsilon / 2,
delta / 2), both scaled by the joint calibration's factor so that the
sites' accountant composes the job to the learner's epsilon (where the sites'
sizes are public; a learner with a public n, on add/remove sites, keeps the
split as planned). Guesses whose release the federation's grid cannot carry
are dropped before the first release. The whole job thus costs at most the
learner's (epsilon, delta), the same total a numeric radius costs, and every
release is on the job's ledger. A numeric radius runs the learner exactly as
before; epsilon = inf runs the search without noise (simulation sites).

Loss bounds Delta(B) of the selection need public bounds r on ||x|| and Y on
|y|; records outside them cost no privacy (their validation losses are
clipped at Delta(B)), only accuracy. Each learner says where they come from
(``_norm_search_bounds``).

PCnvxAdap / PNCnvxAdap: their sites keep per-record state u for the job
(``reweighted_gradient``), one state per chain
(common/kernels/reweighted_chains.py): each clone descends on its own chain,
"g<j>" (or "<chain>-g<j>" for an adapter on a named chain), so the K descents
share the job, its record part and its ledger, never their weights. Their
loss must be one the selection scores ("squared" or "logistic"; the softmax
cross-entropy is refused).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from privadapt.common.data.record_parts import VALIDATION, RecordPart
from privadapt.common.federation import Federation
from privadapt.server.algorithms.base import (
    POSITIVE,
    VALIDATION_FRACTION_PARAMETER,
    InvalidParameterError,
    Options,
    PrivateEstimator,
    PublicSource,
    clone,
    hyperparameter,
    record_parts,
)
from privadapt.server.algorithms.model_selection.grid_search import (
    NUM_GUESSES,
    PrivateGridSearch,
)
from privadapt.server.algorithms.step_privacy import report_delta

AUTO = "auto"
# A norm bound, or "auto": chosen privately (module docstring).
RADIUS = [*POSITIVE, Options(AUTO)]
# The hyperparameters that serve radius="auto" only (the solvers never see them).
NORM_SEARCH = ("num_guesses", "validation_fraction")
# Attributes that hold the delivered model (replaced by candidate 0 when it wins).
_MODEL_ATTRIBUTES = ("coef_", "average_coef_", "last_coef_")


class AutoRadiusMixin:
    """``fit`` with ``radius="auto"`` (module docstring): declares the
    hyperparameters ``num_guesses`` and ``validation_fraction``; the class
    provides ``_norm_search_bounds``; candidate 0 is the zero model, or the
    source-only model when the fit has a public source."""

    radius: float | str
    epsilon: float
    delta: float
    num_guesses: int = hyperparameter(NUM_GUESSES, default=5)
    validation_fraction: float = VALIDATION_FRACTION_PARAMETER

    def _norm_search_bounds(self) -> tuple[str, float, float]:
        """(loss, feature bound r, label bound Y) of the selection's Delta(B)."""
        raise NotImplementedError

    def _public_num_records(self) -> float | None:
        """A public n of the whole federation where its sites' sizes are
        private (add/remove); None: read the sites' public sizes."""
        return None

    def _fit_auto_radius(self, federation: Federation, public_source: PublicSource | None,
                         fit_options: dict[str, Any]) -> Any:
        """The grid search over the federation's record parts; the chosen
        clone's fitted state becomes this learner's, plus ``radius_`` (the
        chosen 2^j, 0.0 for the zero model), ``norm_search_``
        (the fitted search) and ``privacy_`` (the whole job's ledger)."""
        name = type(self).__name__
        if math.isfinite(self.epsilon) and not self.delta > 0:
            raise InvalidParameterError(
                f"{name}: radius='auto' chooses the norm bound privately, which with a finite "
                f"epsilon needs delta > 0 (got epsilon={self.epsilon}, delta={self.delta})")
        loss, feature_bound, label_bound = self._norm_search_bounds()
        train, validation = record_parts(federation, self.validation_fraction, name)
        public_n = self._public_num_records()
        validation_n = None if public_n is None else max(1, RecordPart(
            VALIDATION, self.validation_fraction, federation.job_id).public_size(round(public_n)))
        assert isinstance(self, PrivateEstimator)
        search = PrivateGridSearch(
            learner=clone(self), num_guesses=self.num_guesses, epsilon=self.epsilon,
            delta=self.delta, loss=loss, label_bound=label_bound, feature_bound=feature_bound,
            num_validation_records=validation_n,
            # The paired score reads the sites' public sizes; a public n means
            # they are private (add/remove), where the paper's score runs.
            selection_score="paired" if validation_n is None else "penalised",
            include_source_only=public_source is not None)
        search.fit(train, validation, public_source, **fit_options)
        # The state of the clone the delivered model came from (the one trained
        # offset model, or the chosen guess's clone; guess 1's for a free
        # model), with the delivered model as every model attribute when it
        # is not that clone's own (a free model, or a projection of it).
        chosen = search.chosen_learner_ or search.learners_[0]
        for attribute, value in vars(chosen).items():
            if attribute.endswith("_") and not attribute.startswith("_"):
                setattr(self, attribute, value)
        if not np.array_equal(search.coef_, chosen.coef_):
            for attribute in _MODEL_ATTRIBUTES:
                if hasattr(self, attribute):
                    setattr(self, attribute, search.coef_.copy())
            if search.chosen_learner_ is None:
                self.history_ = []
        self.radius_ = search.radius_
        self.norm_search_ = search
        self.privacy_ = federation.privacy_spent(report_delta(self.delta))
        return self
