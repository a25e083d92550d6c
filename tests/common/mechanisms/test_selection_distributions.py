"""Selection mechanisms draw what their definitions say, and leak no more than
they claim: the output distribution on tiny instances is computed exactly
(closed form for the exponential mechanisms, numerical integration for
Laplace report-noisy-min) and compared with seeded draws of ``select``; then
the exact distributions on adversarially shifted neighbouring score vectors
give the largest privacy loss over outputs, which must not exceed the claimed
epsilon (and comes close to it in the worst case)."""

import itertools
import math

import numpy as np
import pytest
from scipy import integrate, special, stats

from privadapt.common.mechanisms import (
    Adjacency,
    ExponentialMechanism,
    GeneralizedExponentialMechanism,
    ReportNoisyMin,
)
from privadapt.common.noise.floating import SeededRandomBits, gumbel_noise

ADD_REMOVE = Adjacency.ADD_REMOVE_ONE
DRAWS = 40_000
# Seeded, so each test is deterministic; a p-value this small would flag a
# real mismatch at these sample sizes and never a fair draw.
P_THRESHOLD = 1e-6


def draw_counts(mechanism, scores, seed):
    source = SeededRandomBits(seed)
    picks = [mechanism.select(scores, source) for _ in range(DRAWS)]
    return np.bincount(picks, minlength=len(scores))


def chi_square_p(counts, probabilities):
    expected = DRAWS * np.asarray(probabilities)
    return stats.chisquare(counts, expected).pvalue


# --- exact output distributions -------------------------------------------------------


def exponential_probabilities(mechanism: ExponentialMechanism, scores) -> np.ndarray:
    """P(k) proportional to exp(epsilon u_k / (2 Delta)), or exp(epsilon u_k / Delta)
    for monotone scores (Dwork and Roth 2014, Thm. 3.10), u = -scores for arg-min."""
    utilities = -np.asarray(scores) if mechanism.minimize else np.asarray(scores)
    factor = 1.0 if mechanism.monotone else 2.0
    return special.softmax(mechanism.epsilon * utilities / (factor * mechanism.sensitivity))


def gem_probabilities(mechanism: GeneralizedExponentialMechanism, scores) -> np.ndarray:
    """Raskhodnikova and Smith's GEM written out from its definition, loop by loop."""
    losses = list(scores) if mechanism.minimize else [-s for s in scores]
    count = len(losses)
    deltas = list(mechanism.sensitivities) * (count if len(mechanism.sensitivities) == 1 else 1)
    t = 2 * math.log(count / mechanism.beta) / mechanism.epsilon
    normalized = []
    for i in range(count):
        terms = []
        for j in range(count):
            gap = (losses[i] + t * deltas[i]) - (losses[j] + t * deltas[j])
            width = deltas[i] + deltas[j]
            terms.append(gap / width if width > 0 else (math.inf if gap > 0 else
                                                        -math.inf if gap < 0 else 0.0))
        normalized.append(max(terms))
    return special.softmax(-mechanism.epsilon * np.array(normalized) / 2)


def report_noisy_min_probabilities(mechanism: ReportNoisyMin, scores) -> np.ndarray:
    """P(candidate i wins) = int f(x) prod_{j != i} P(Z_j beats s_i + x - s_j) dx
    for i.i.d. Laplace(b) noise, integrated numerically (kinks as breakpoints)."""
    b = mechanism.scale
    utilities = -np.asarray(scores) if mechanism.minimize else np.asarray(scores)
    laplace = stats.laplace(scale=b)
    out = []
    for i, own in enumerate(utilities):
        others = np.delete(utilities, i)

        def density(x, own=own, others=others):
            return laplace.pdf(x) * np.prod(laplace.cdf(own + x - others))

        kinks = sorted({0.0, *(others - own)})
        value, _ = integrate.quad(density, -np.inf, kinks[0], epsabs=0, epsrel=1e-11)
        for low, high in itertools.pairwise([*kinks, np.inf]):
            value += integrate.quad(density, low, high, epsabs=0, epsrel=1e-11)[0]
        out.append(value)
    return np.array(out)


@pytest.mark.parametrize("minimize", [True, False])
@pytest.mark.parametrize("monotone", [False, True])
def test_exponential_mechanism_draws_its_softmax(minimize, monotone):
    mechanism = ExponentialMechanism(0.5, 1.2, minimize, monotone, ADD_REMOVE)
    scores = [0.3, 1.0, -0.5, 0.2]
    probabilities = exponential_probabilities(mechanism, scores)
    assert chi_square_p(draw_counts(mechanism, scores, 11), probabilities) > P_THRESHOLD


@pytest.mark.parametrize("minimize", [True, False])
def test_generalized_exponential_mechanism_draws_its_definition(minimize):
    mechanism = GeneralizedExponentialMechanism((0.0, 0.2, 0.5, 1.0), 2.0, 0.5, minimize)
    scores = [1.0, 0.6, 0.3, -0.4]
    probabilities = gem_probabilities(mechanism, scores)
    assert min(probabilities) > 0.01  # every candidate is exercised
    assert chi_square_p(draw_counts(mechanism, scores, 12), probabilities) > P_THRESHOLD


def test_generalized_exponential_normalized_scores_match_the_definition():
    mechanism = GeneralizedExponentialMechanism((0.0, 0.0, 0.3, 2.0), 1.0, 0.1)
    losses = np.array([0.5, 0.7, 0.2, -3.0])
    with np.errstate(divide="ignore"):  # probability 0: s = inf
        expected = -2 * np.log(gem_probabilities(mechanism, losses)) / mechanism.epsilon
    got = mechanism.normalized_scores(losses)
    finite = np.isfinite(got)
    assert got.min() == 0.0  # the minimiser of q + t Delta has s = 0
    np.testing.assert_allclose(got[finite] - got[finite].min(),
                               expected[finite] - expected[finite].min(), atol=1e-9)
    assert got[1] == math.inf  # dominated by a data-independent candidate: never drawn


@pytest.mark.parametrize("minimize", [True, False])
def test_report_noisy_min_draws_its_integrated_probabilities(minimize):
    mechanism = ReportNoisyMin(1.0, 0.7, minimize)
    scores = [0.0, 0.4, 1.1]
    probabilities = report_noisy_min_probabilities(mechanism, scores)
    assert probabilities.sum() == pytest.approx(1.0, abs=1e-9)
    assert chi_square_p(draw_counts(mechanism, scores, 13), probabilities) > P_THRESHOLD


def test_gumbel_sampler_matches_the_standard_gumbel():
    samples = gumbel_noise(200_000, SeededRandomBits(5))
    assert stats.kstest(samples, stats.gumbel_r.cdf).pvalue > P_THRESHOLD


# --- empirical audit on neighbouring score vectors --------------------------------------


def max_privacy_loss(probabilities, neighbour_probabilities) -> float:
    return float(np.max(np.abs(np.log(probabilities) - np.log(neighbour_probabilities))))


def shifts(sensitivities, monotone):
    """Every extreme neighbour: each score moved by +-Delta_k (or, monotone, all
    by 0 or +Delta_k: adding a record moves every score the same way)."""
    options = [(0.0, d) if monotone else (-d, d) for d in sensitivities]
    return [np.array(pattern) for pattern in itertools.product(*options)]


@pytest.mark.parametrize("monotone", [False, True])
def test_exponential_mechanism_loses_at_most_epsilon_and_is_bounded_range(monotone):
    mechanism = ExponentialMechanism(0.5, 1.0, False, monotone, ADD_REMOVE)
    scores = np.array([0.0, -30.0, 0.4, 0.1])  # candidate 1 nearly never wins: the worst case
    base = exponential_probabilities(mechanism, scores)
    worst = 0.0
    for shift in shifts([0.5] * 4, monotone):
        neighbour = exponential_probabilities(mechanism, scores + shift)
        losses = np.log(base) - np.log(neighbour)
        assert losses.max() - losses.min() <= mechanism.epsilon + 1e-12  # bounded range
        worst = max(worst, max_privacy_loss(base, neighbour))
    assert worst <= mechanism.pure_epsilon + 1e-12
    assert worst >= 0.95 * mechanism.pure_epsilon


def test_generalized_exponential_mechanism_loses_at_most_epsilon():
    mechanism = GeneralizedExponentialMechanism((0.0, 0.2, 0.5, 1.0), 1.0, 0.2)
    worst = 0.0
    for scores in ([1.0, 0.6, 0.3, -0.4], [0.5, 0.5, 0.5, 0.5], [2.0, -5.0, 0.0, 9.0]):
        scores = np.array(scores)
        base = gem_probabilities(mechanism, scores)
        for shift in shifts(mechanism.sensitivities, False):
            neighbour = gem_probabilities(mechanism, scores + shift)
            losses = np.log(base) - np.log(neighbour)
            assert losses.max() - losses.min() <= mechanism.epsilon + 1e-12
            worst = max(worst, max_privacy_loss(base, neighbour))
    assert 0.5 * mechanism.epsilon <= worst <= mechanism.pure_epsilon + 1e-12


def log_win_probability(gap_over_scale: float) -> float:
    """log P(Z_0 - Z_1 < g) for i.i.d. Laplace(1): the difference has
    P(D > x) = (2 + x) e^-x / 4 for x >= 0, kept in log space for the tail."""
    if gap_over_scale >= 0:
        return math.log1p(-(2 + gap_over_scale) * math.exp(-gap_over_scale) / 4)
    return math.log((2 - gap_over_scale) / 4) - (-gap_over_scale)


@pytest.mark.parametrize("monotone", [False, True])
def test_report_noisy_min_loses_at_most_its_epsilon(monotone):
    delta, scale = 1.0, 1.0
    mechanism = ReportNoisyMin(delta, scale, True, monotone, ADD_REMOVE)
    # Two candidates, arg-min: candidate 0 wins iff Z_0 - Z_1 < s_1 - s_0.
    worst = 0.0
    for gap in np.linspace(-300.0, 300.0, 601):
        for shift in shifts([delta, delta], monotone):
            moved = gap + (shift[1] - shift[0])
            for own, other in ((gap, moved), (-gap, -moved)):  # output 0, output 1
                worst = max(worst, abs(log_win_probability(own / scale)
                                       - log_win_probability(other / scale)))
    assert worst <= mechanism.pure_epsilon + 1e-12
    assert worst >= 0.98 * mechanism.pure_epsilon


def test_report_noisy_min_integrated_audit_on_three_candidates():
    mechanism = ReportNoisyMin(0.5, 1.0)
    scores = np.array([0.0, 3.0, 6.0])
    base = report_noisy_min_probabilities(mechanism, scores)
    worst = max(max_privacy_loss(base, report_noisy_min_probabilities(mechanism, scores + s))
                for s in shifts([0.5] * 3, False))
    assert worst <= mechanism.pure_epsilon + 1e-9
