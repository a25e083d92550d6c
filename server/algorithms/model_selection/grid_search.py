"""PrivateGridSearch: a learner's norm bound chosen privately by seed 004's
Algorithm 1 (guesses 2^1..2^K, one DP model each, selected by the generalized
exponential mechanism on penalised validation losses).

An estimator over ``server/algorithms/model_selection/private_grid_search.py`` (the algorithm,
its guarantee and the OCR reconstructions are there).

Which records train and which validate: the paper splits the private sample
into S1 (training) and S2 (validation). The coordinator never holds the
records and so cannot split them; ``fit`` therefore takes two federations over
disjoint records, ``train_federation`` (S1) and ``validation_federation``
(S2), e.g. each site's records split once at random by the site. A single
federation is refused: training and validating on the same records would keep
the privacy (the costs compose) but void the accuracy guarantee, whose
Bernstein step needs S2 independent of the models.

The free models (``include_source_only``, default): with a public source the
candidates are the source-only model, the public constant (where the source
has an intercept column) and the guesses as offsets around the source-only
model (private_grid_search.py); without one, or with
``include_source_only=False``, seed 004's grid with the zero model.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from privadapt.common.federation import Federation
from privadapt.common.kernels.reweighted_chains import MAX_CHAINS, check_chain
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
    fit_context,
    hyperparameter,
    require_public_arrays,
)
from privadapt.server.algorithms.linear_model import LinearModelMixin
from privadapt.server.algorithms.model_selection.error_selection import (
    check_error_score,
    counts_errors,
    resolve_score,
)
from privadapt.server.algorithms.model_selection.grid_selection import SCORES
from privadapt.server.algorithms.model_selection.private_grid_search import (
    GRID_LOSSES,
    private_grid_search,
)
from privadapt.server.algorithms.model_selection.private_selection import METHODS
from privadapt.server.algorithms.public_erm import fit_linear, public_constant_model

NUM_GUESSES = [Interval(int, 1, 30, closed="both")]  # K: guesses 2^1..2^K


class PrivateGridSearch(LinearModelMixin, PrivateEstimator):
    """Seed 004, Algorithm 1: the norm bound of ``learner`` chosen privately.

    Hyperparameters: ``learner`` (an unfitted estimator with ``radius``,
    ``epsilon`` and ``delta``, e.g. :class:`NoisyGD`; cloned per guess with
    radius 2^j at epsilon / 2K, delta / 2K), ``num_guesses`` K, ``epsilon``,
    ``delta`` (the whole search's budget; epsilon = inf runs it without
    noise, on simulation sites), ``loss`` ("squared" or
    "logistic"), ``label_bound`` Y and ``feature_bound`` r (the public record
    bounds the loss bounds Delta(2^j) are computed from; losses are clipped to
    them, so records outside cost no privacy, only accuracy), ``beta`` (the
    confidence), ``include_source_only`` (default; with a ``public_source``
    the free models lead the candidates and the guesses are offsets around
    the source-only model, module docstring; the zero model leads only
    without them), ``composition`` ("pld" default, "rdp": the training and
    selection budgets scaled jointly so that the sites' accountant composes
    the search to epsilon; "basic": the paper's split), ``selection_score``
    ("auto", default: "error" for the logistic loss, "paired" for the
    squared one and for a classifier whose only free model is the zero
    model; "error": validation errors, a guess delivered only when
    certified better than every free model, none of them 0 (the release
    cannot count a zero model's errors: error_selection.counts_errors; a
    zero public constant is dropped, and "error" is refused where the zero
    model is the only free one); "paired": each candidate's
    clipped loss difference to candidate 0, the delivered model certified
    no worse than it; "penalised": the paper's GEM on penalised clipped
    losses, the one for sites whose sizes are private; grid_selection.py)
    and ``method`` (as
    :class:`PrivateSelection`: ``"auto"`` runs GEM at a single site, the
    secure sum across several), ``num_validation_records`` (a public size
    of S2 where the sites keep theirs private, add/remove adjacency).
    A learner with a ``chain`` hyperparameter (PCnvxAdap, PNCnvxAdap: per-job
    state at the sites) trains guess j on its own chain ``guess_chain(chain,
    j)``, so the K descents share the job without sharing weights.

    Fitted: ``selection_score_`` (what the release scored, "auto"
    resolved), ``coef_`` (the chosen model), ``best_index_`` (into
    ``candidates_``: the free models first, named in ``candidate_names_``,
    then the guesses the grid carries), ``radius_`` (the chosen guess's
    radius, 2^j or rho_j around the source-only model; 0.0 for a free
    model), ``radii_`` (all K), ``dropped_`` (guess numbers j left out
    because the federation's grid could not carry their release),
    ``chosen_learner_`` (the fitted clone the delivered model
    came from, None for a free model), ``budget_scale_`` (the joint
    calibration's factor, 1 under "basic"),
    ``loss_bounds_``, ``penalties_``, ``learners_`` (the fitted clones: K,
    or the one trained offset model),
    ``method_``, ``noisy_sums_`` and ``noise_stds_`` (secure sum only), ``train_privacy_`` and
    ``privacy_`` (each site's ledgers for S1 and S2)."""

    learner: PrivateEstimator = hyperparameter([InstanceOf(PrivateEstimator)])
    num_guesses: int = hyperparameter(NUM_GUESSES)
    epsilon: float = hyperparameter(EPSILON)
    delta: float = hyperparameter(DELTA)
    loss: str = hyperparameter([Options(*GRID_LOSSES)])
    label_bound: float = hyperparameter(POSITIVE)
    feature_bound: float = hyperparameter(POSITIVE)
    beta: float = hyperparameter([Interval(float, 0, 1, closed="neither")], default=0.1)
    include_source_only: bool = hyperparameter(FLAG, default=True)
    composition: str = hyperparameter([Options("pld", "rdp", "basic")], default="pld")
    selection_score: str = hyperparameter([Options(*SCORES)], default="auto")
    method: str = hyperparameter([Options(*METHODS)], default="auto")
    num_validation_records: int | None = hyperparameter(
        [Interval(int, 1, math.inf, closed="left"), None], default=None)

    def _prediction_loss(self) -> str:
        return self.loss

    def _check_learner(self) -> None:
        names = set(self.learner.get_params())
        missing = {"radius", "epsilon", "delta"} - names
        if missing:
            raise InvalidParameterError(
                f"{type(self).__name__}: parameter 'learner' must take radius, epsilon and "
                f"delta; {type(self.learner).__name__} lacks {sorted(missing)}")

    def _guess_params(self) -> list[dict[str, Any]] | None:
        """Each guess's own chain for a learner with a ``chain`` (class docstring)."""
        params = self.learner.get_params()
        if "chain" not in params:
            return None
        if self.num_guesses > MAX_CHAINS:  # the site would refuse guess 17 mid-job
            raise InvalidParameterError(
                f"{type(self).__name__}: {type(self.learner).__name__} keeps one chain of "
                f"weights per guess at the sites, which hold at most {MAX_CHAINS} per job; "
                f"got num_guesses={self.num_guesses}")
        try:
            return [{"chain": guess_chain(params["chain"], j)}
                    for j in range(1, self.num_guesses + 1)]
        except ValueError as err:
            raise InvalidParameterError(
                f"{type(self).__name__}: the learner's chain {params['chain']!r} leaves no "
                f"room for the guesses' chains: {err}") from None

    # The learner is the caller's: its clones validate their own parameters.
    @fit_context(prefer_skip_nested_validation=False)
    def fit(
        self,
        train_federation: Federation,
        validation_federation: Federation | None = None,
        public_source: PublicSource | None = None,
        **fit_options: Any,
    ) -> PrivateGridSearch:
        """Train the K guesses on ``train_federation`` (S1) and select on
        ``validation_federation`` (S2, required: module docstring);
        ``public_source`` (when given) and ``fit_options`` go to every
        learner's ``fit`` (the adapters need the source; noisy GD reads d)."""
        self._check_learner()
        name = type(self).__name__
        if validation_federation is None:
            raise InvalidParameterError(
                f"{name}: fit needs a validation_federation over records disjoint from the "
                "train_federation's (the paper's S2; the coordinator cannot split the sites' "
                "records itself)")
        score = resolve_score(self.selection_score, self.loss)
        check_error_score(name, score, self.loss)
        guess_params = self._guess_params()
        source = constant = arrays = None
        if public_source is not None:
            arrays = require_public_arrays(public_source, name)
        if self.include_source_only and arrays is not None:
            features, labels = arrays
            source = fit_linear(features, labels, self.loss, 2.0**self.num_guesses, None)
            constant = public_constant_model(features, labels, self.loss,
                                             2.0**self.num_guesses,
                                             getattr(public_source, "feature_names", None))
        if score == "error":
            # The release cannot count a zero model's errors (counts_errors):
            # a zero constant (no majority label) is no candidate, and the
            # zero model (no public free model) is certified against in log
            # loss, the paired score, or refused when "error" was asked for.
            constant = constant if constant is not None and counts_errors(constant) else None
            if source is None or not counts_errors(source):
                if self.selection_score != "auto":
                    raise InvalidParameterError(
                        f"{name}: selection_score 'error' certifies against the free models, "
                        "and the only one here is 0 (no public source, include_source_only "
                        "off, or a source-only fit of 0), whose errors the release cannot "
                        "count: use selection_score='paired'")
                score = "paired"
        if score in ("paired", "error") and self.num_validation_records is not None:
            raise InvalidParameterError(
                f"{name}: selection_score={score!r} reads the sites' public sizes, and "
                "num_validation_records says they are private (add/remove sites): use "
                "selection_score='penalised'")
        result = private_grid_search(
            train_federation, validation_federation, num_guesses=self.num_guesses,
            learner=self.learner, loss=self.loss, label_bound=self.label_bound,
            feature_bound=self.feature_bound, epsilon=self.epsilon, delta=self.delta,
            beta=self.beta, source_model=source, constant_model=constant,
            offsets=source is not None, composition=self.composition, score=score,
            public_arrays=arrays, method=self.method,
            num_validation_records=self.num_validation_records, guess_params=guess_params,
            fit_options=fit_options if public_source is None
            else {"public_source": public_source, **fit_options}, name=name)
        self.selection_score_ = score
        self.coef_ = result.weights
        self.best_index_ = result.best_index
        self.candidate_names_ = result.names
        self.radii_ = result.radii
        guess = result.best_index - result.num_free
        self.radius_ = float(result.radii[result.guesses[guess] - 1]) if guess >= 0 else 0.0
        # The fitted clone the delivered model came from (the offset grid's one
        # trained model for any guess), None for a free model.
        self.chosen_learner_ = (result.learners[min(guess, len(result.learners) - 1)]
                                if guess >= 0 else None)
        self.dropped_ = result.dropped
        self.budget_scale_ = result.budget_scale
        self.candidates_ = result.candidates
        self.loss_bounds_ = result.loss_bounds
        self.penalties_ = result.penalties
        self.learners_ = result.learners
        self.method_ = result.method
        self.noisy_sums_ = result.noisy_sums
        self.noise_stds_ = result.noise_stds
        self.train_privacy_ = result.train_privacy
        self.privacy_ = result.validation_privacy
        self.n_features_in_ = result.candidates.shape[1]
        return self

    def model_arrays(self) -> dict[str, np.ndarray]:
        """weights (the chosen model), candidates, radii, best_index."""
        self._check_is_fitted()
        return {"weights": self.coef_, "candidates": self.candidates_, "radii": self.radii_,
                "best_index": np.asarray(self.best_index_)}


def guess_chain(chain: str, guess: int) -> str:
    """The site-side chain of guess ``guess`` (1..K) of a learner on ``chain``:
    "g<j>" under the default chain, "<chain>-g<j>" under a named one;
    ``ValueError`` when that is no valid chain name (too long)."""
    return check_chain(f"{chain}-g{guess}" if chain else f"g{guess}")
