"""The choice after a selection's release
(server/algorithms/model_selection/certified_choice.py): with one free
model (the paired score's exact reference) it is kept unless a candidate is
certified better, and then the least estimate wins; with several, a learned
candidate is delivered only when certified better than every free model,
else the free model of least estimate; each promise holds at least 1 - beta
of the time."""

import math

import numpy as np

from privadapt.server.algorithms.model_selection.certified_choice import (
    certifying_t,
    free_certifying_t,
    safe_argmin,
)

# --- one free model: the paired score's reference --------------------------------------


def test_the_reference_is_kept_unless_some_upper_bound_is_below_zero():
    assert safe_argmin([0.0, -1.0, -2.0], [0.0, 1.0, 2.0], t=1.0) == 0  # uppers 0, 0
    assert safe_argmin([0.0, 0.5, 3.0], [0.0, 0.0, 0.0], t=0.0) == 0  # none below 0


def test_among_certified_candidates_the_least_estimate_wins_not_the_least_upper_bound():
    # Uppers -3 and -2: both certified; the second has the lower estimate.
    assert safe_argmin([0.0, -5.0, -8.0], [0.0, 1.0, 3.0], t=2.0) == 2


def test_an_uncertified_candidate_is_not_taken_however_low_its_estimate():
    assert safe_argmin([0.0, -1.0, -10.0], [0.0, 0.1, 6.0], t=2.0) == 1


def test_without_a_confidence_the_least_negative_estimate_wins():
    assert certifying_t(3, None) == 0.0
    assert safe_argmin([0.0, -0.1, -0.3, 0.2], [0.0, 5.0, 5.0, 5.0], t=0.0) == 2


def test_candidates_no_better_than_the_reference_are_taken_at_most_beta_of_the_time():
    # The guarantee: when every true difference is >= 0, a candidate is
    # delivered only if some noise falls below -t std: probability <= beta.
    rng = np.random.default_rng(0)
    beta, stds = 0.1, np.array([0.0, 1.0, 2.0, 0.5])
    t = certifying_t(3, beta)
    truth = np.array([0.0, 0.0, 0.3, 0.0])
    taken = [safe_argmin(truth + stds * rng.normal(size=4), stds, t) != 0
             for _ in range(4000)]
    assert np.mean(taken) <= beta


# --- the choice against every free model ------------------------------------------------


def test_a_learned_candidate_certified_against_source_only_but_not_the_constant_is_not_delivered():
    # Free: source-only (0.40 errors), the constant (0.10); the learned one
    # (0.12) is far below source-only and above the constant.
    estimates, stds = [0.40, 0.10, 0.12], [0.01, 0.01, 0.01]
    assert safe_argmin(estimates, stds, t=2.0, num_free=2) == 1


def test_a_learned_candidate_certified_against_both_free_models_is_delivered():
    estimates, stds = [0.40, 0.10, 0.02], [0.01, 0.01, 0.01]
    assert safe_argmin(estimates, stds, t=2.0, num_free=2) == 2


def test_without_a_certified_candidate_the_free_model_of_fewer_noisy_errors_is_delivered():
    assert safe_argmin([0.30, 0.35, 0.33], [0.01] * 3, t=2.0, num_free=2) == 0
    assert safe_argmin([0.35, 0.30, 0.33], [0.01] * 3, t=2.0, num_free=2) == 1


def test_a_pair_is_certified_on_the_std_of_the_difference_of_its_two_noises():
    # gap -0.13 against t sqrt(0.05^2 + 0.05^2) = 0.1414 at t = 2: not
    # certified; against t 0.05 (one noise only) it would be.
    assert safe_argmin([0.40, 0.27], [0.05, 0.05], t=2.0, num_free=1) == 0
    assert safe_argmin([0.40, 0.25], [0.05, 0.05], t=2.0, num_free=1) == 1


def test_the_union_bound_counts_every_learned_free_pair_and_both_free_orders():
    # 2 learned, 2 free: 2 x 2 + 2 x 1 = 6 pairs; one free: the paired rule's K'.
    assert free_certifying_t(2, 2, 0.1) == math.sqrt(2 * math.log(6 / 0.1))
    assert free_certifying_t(3, 1, 0.1) == math.sqrt(2 * math.log(3 / 0.1))


def test_the_promise_holds_at_least_one_minus_beta_of_the_time():
    # True error rates: source-only 0.30, the constant 0.10 (the better free
    # model), two learned ones 0.10 and 0.11 (none truly better). Broken
    # promise: a learned one delivered, or a free one worse than 0.10 by
    # more than the resolution t sqrt(2) s.
    rng = np.random.default_rng(0)
    beta, std = 0.1, 0.02
    truth = np.array([0.30, 0.10, 0.10, 0.11])
    t = free_certifying_t(2, 2, beta)
    broken = 0
    for _ in range(4000):
        chosen = safe_argmin(truth + std * rng.normal(size=4), np.full(4, std), t, 2)
        broken += chosen >= 2 or truth[chosen] - 0.10 > t * math.sqrt(2) * std
    assert broken / 4000 <= beta
