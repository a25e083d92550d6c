"""The error score (server/algorithms/model_selection/error_selection.py).

* ``error_scored`` is public post-processing: norm 1e6 whatever the
  candidate's norm (1e-200 to 1e200: the radius and learning rates are
  unbounded hyperparameters), the same predictions, and through the site's
  validation_loss kernel at L = 1 each record's score is in [0, 1] whatever it
  holds (norm 1e300 features, labels off +-1), so a neighbour moves each
  candidate's sum by at most L and nothing refuses on the data.
* One release of the error counts is all a selection charges, and without
  noise a learned model of fewer errors than both free ones is delivered.
* A zero free model is refused: the release cannot count its errors.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from privadapt import LocalFederation
from privadapt.common.data.dataset import Dataset
from privadapt.common.kernels import get_kernel
from privadapt.server.algorithms.base import InvalidParameterError
from privadapt.server.algorithms.model_selection.certified_choice import free_certifying_t
from privadapt.server.algorithms.model_selection.error_selection import (
    ERROR_SCALE,
    check_error_score,
    counts_errors,
    error_resolution,
    error_scored,
    error_scored_constant,
    error_selection,
    resolve_score,
)


def test_error_scored_candidates_keep_their_predictions_at_norm_1e6():
    rng = np.random.default_rng(1)
    candidates = np.vstack([rng.normal(size=(5, 4)) * 10.0 ** rng.integers(-200, 200, (5, 1)),
                            np.zeros((1, 4))])
    scored = error_scored(candidates)
    norms = np.linalg.norm(scored, axis=1)
    np.testing.assert_allclose(norms[:5], ERROR_SCALE, rtol=1e-12)
    assert norms[5] == 0.0
    x = rng.normal(size=(50, 4))
    assert np.array_equal(np.sign(x @ candidates[:5].T), np.sign(x @ scored[:5].T))


def test_each_record_scores_within_the_clip_through_the_kernel():
    kernel = get_kernel("validation_loss")
    rng = np.random.default_rng(2)
    scored = error_scored(rng.normal(size=(6, 3)))
    params = kernel.Params.from_wire({"candidates": scored, "loss": "logistic",
                                      "loss_bound": 1.0}, 3)
    base = Dataset(rng.normal(size=(30, 3)), np.sign(rng.normal(size=30)), ("a", "b", "c"))
    base_sums = kernel.compute(base, params, {})[0]
    extremes = [(np.full(3, 1e300), 1.0), (np.full(3, -1e300), 1.0), (np.zeros(3), -1.0),
                (np.array([1e-300, 0.0, 0.0]), 1.0), (np.full(3, 1e300), 7.0),
                (np.full(3, 1.0), -1e300)]
    for features, label in extremes:
        added = Dataset(np.vstack([base.features, features]), np.append(base.labels, label),
                        base.feature_names)
        moved = kernel.compute(added, params, {})[0] - base_sums
        assert np.all(np.isfinite(moved)) and np.all((moved >= -1e-9) & (moved <= 1.0 + 1e-9))


def test_the_error_score_is_refused_for_a_regression_naming_its_owner():
    check_error_score("Search", "error", "logistic")
    check_error_score("Search", "paired", "squared")
    with pytest.raises(InvalidParameterError, match=r"Search: selection_score 'error' scores "
                       r"classifiers .*got 'squared'"):
        check_error_score("Search", "error", "squared")


def test_auto_is_the_error_score_for_classifiers_and_the_paired_score_for_regressions():
    assert resolve_score("auto", "logistic") == "error"
    assert resolve_score("auto", "squared") == "paired"
    assert resolve_score("loss", "logistic") == "loss"


# --- the release -------------------------------------------------------------------------


def classes(seed: int, n: int = 600) -> list[Dataset]:
    rng = np.random.default_rng(seed)
    features = np.column_stack([rng.normal(size=(n, 2)), np.ones(n)])
    labels = np.where(features[:, 0] + 1.0 + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)
    return [Dataset(features[rows], labels[rows], ("a", "b", "one"))
            for rows in np.array_split(np.arange(n), 2)]


def test_one_release_of_the_error_counts_is_all_a_selection_charges():
    candidates = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 1.0]])
    with LocalFederation.from_datasets(classes(0), epsilon_cap=5.0, delta_cap=1e-4,
                                       noise_seed=0) as federation:
        result = error_selection(federation, candidates=candidates, num_free=2, epsilon=1.0,
                                 delta=1e-5, baseline_confidence=0.1)
        ledgers = federation.privacy_spent(1e-5)
    assert all(len(spent.mechanisms) == 1 for spent in ledgers.values())
    assert result.estimates is not None and len(result.estimates) == 3
    assert result.margin == free_certifying_t(1, 2, 0.1) * math.sqrt(2) * result.noise_std


def test_without_noise_the_learned_model_of_fewest_errors_beats_both_free_ones():
    # The first free model guesses from the noise feature, the second says +1
    # everywhere; the learned one follows the label's feature.
    candidates = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 1.0],
                           [-1.0, 0.0, 0.0]])
    with LocalFederation.from_datasets(classes(1), epsilon_cap=math.inf, delta_cap=0.5,
                                       allow_non_private=True) as federation:
        result = error_selection(federation, candidates=candidates, num_free=2,
                                 epsilon=math.inf, delta=0.0, baseline_confidence=0.1)
    assert result.best_index == 2


def test_the_resolution_shrinks_with_epsilon_and_the_number_of_records():
    coarse = error_resolution(4, 2, 750, 0.25, 1e-5, 0.1)
    assert error_resolution(4, 2, 750, 1.0, 1e-5, 0.1) < coarse
    assert error_resolution(4, 2, 3000, 0.25, 1e-5, 0.1) == coarse / 4
    assert error_resolution(4, 2, 750, math.inf, 0.0, 0.1) == 0.0


def test_a_zero_free_model_is_refused_before_any_release():
    # The zero model predicts +1 on every record (a tie counts as +1), but
    # every record scores log 2 in the release whatever its label: on 90%
    # positive labels its errors are about 10% and its score 69%, so a
    # learned model at about 44% errors would be "certified" better than it.
    rng = np.random.default_rng(3)
    features = np.column_stack([rng.normal(size=(400, 2)), np.ones(400)])
    labels = np.where(rng.random(400) < 0.9, 1.0, -1.0)
    datasets = [Dataset(features[rows], labels[rows], ("a", "b", "one"))
                for rows in np.array_split(np.arange(400), 2)]
    candidates = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.3]])
    with LocalFederation.from_datasets(datasets, epsilon_cap=5.0, delta_cap=1e-4,
                                       noise_seed=0) as federation:
        with pytest.raises(ValueError, match="cannot count"):
            error_selection(federation, candidates=candidates, num_free=1, epsilon=1.0,
                            delta=1e-5, baseline_confidence=0.1)
        assert not any(spent.mechanisms for spent in federation.privacy_spent(1e-5).values())
    assert counts_errors(candidates[1]) and not counts_errors(candidates[0])


def test_the_error_score_keeps_a_constant_it_can_count_and_refuses_a_zero_source_only():
    source_only, constant = np.array([1.0, -0.5, 0.2]), np.array([0.0, 0.0, 0.7])
    assert error_scored_constant("Job", source_only, constant) is constant
    assert error_scored_constant("Job", source_only, np.zeros(3)) is None  # no majority label
    assert error_scored_constant("Job", source_only, None) is None
    with pytest.raises(InvalidParameterError, match="Job: the source-only model is 0 here"):
        error_scored_constant("Job", np.zeros(3), constant)
