"""The selection on paired differences to a reference: the private clips'
histogram and the paired release together spend exactly one Gaussian
release's epsilon on every ledger, the
releases are the same mechanisms whatever the data (a planning federation
answering zeros plans exactly what the sites are charged), and without noise
the estimates are the clipped mean differences."""

import math

import numpy as np
import pytest

from privadapt import Dataset, LocalFederation
from privadapt.common.accounting.calibration import ReleasePlan, noise_multiplier
from privadapt.common.losses import loss_values
from privadapt.common.mechanisms import Adjacency
from privadapt.server.algorithms.joint_calibration import stand_in
from privadapt.server.algorithms.model_selection.private_selection import (
    EDGE_FACTORS,
    clips_from_histogram,
    paired_multipliers,
    paired_resolution,
    private_selection,
    public_difference_clips,
)
from privadapt.server.federation.planning import charged_at_site

DIM = 4
TRUE_WEIGHTS = np.array([1.0, -2.0, 0.5, 1.5])
REFERENCE = np.array([0.5, -1.0, 0.0, 1.0])  # the public model: right direction, too small
DELTA = 1e-6


def regression(n, seed, weights=TRUE_WEIGHTS):
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(n, DIM)) / 2
    return features, features @ weights + 0.3 * rng.standard_t(3, size=n)


PUBLIC = regression(2000, 99, REFERENCE * 1.6)
CANDIDATES = np.stack([TRUE_WEIGHTS, np.zeros(DIM), TRUE_WEIGHTS * 0.8])


def federation(n=1500, seed=0, num_sites=3, **options):
    features, labels = regression(n, seed)
    names = tuple(f"x{i}" for i in range(DIM))
    parts = [Dataset(features[rows], labels[rows], names)
             for rows in np.array_split(np.arange(n), num_sites)]
    options = {"epsilon_cap": 10.0, "delta_cap": 1e-4, "noise_seed": seed, **options}
    return LocalFederation.from_datasets(parts, **options)


def select(sites, epsilon=1.0, **options):
    settings = {"candidates": CANDIDATES, "loss": "squared", "epsilon": epsilon,
                "delta": DELTA, "baseline_confidence": 0.1, "method": "auto",
                "reference": REFERENCE, "public_source": PUBLIC, **options}
    return private_selection(sites, **settings)


# --- the clips --------------------------------------------------------------------------


def test_the_clip_is_the_smallest_edge_whose_noisy_tail_is_small_enough():
    edges = np.array([[1.0, 2.0, 4.0]])
    # Bins [0,1), [1,2), [2,4), [4,inf): tails of |d| >= 1, 2, 4: 60, 25, 5.
    counts = np.array([[40.0, 35.0, 20.0, 5.0]])
    assert clips_from_histogram(counts, edges, 0.0, allowed=10.0)[0] == 4.0
    assert clips_from_histogram(counts, edges, 0.0, allowed=30.0)[0] == 2.0
    assert clips_from_histogram(counts, edges, 0.0, allowed=60.0)[0] == 1.0
    # One noise standard deviation of slack per tail count: 25 <= 20 + 4 sqrt(2).
    assert clips_from_histogram(counts, edges, 4.0, allowed=20.0)[0] == 2.0
    # No tail small enough: the largest edge.
    assert clips_from_histogram(counts, edges, 0.0, allowed=1.0)[0] == 4.0


def test_public_clips_are_a_quantile_of_the_public_differences():
    clips = public_difference_clips("squared", CANDIDATES, REFERENCE, *PUBLIC)
    diff = np.abs(loss_values("squared", PUBLIC[0] @ CANDIDATES.T, PUBLIC[1][:, None])
                  - loss_values("squared", PUBLIC[0] @ REFERENCE, PUBLIC[1])[:, None])
    np.testing.assert_allclose(clips, np.quantile(diff, 0.95, axis=0))
    same = public_difference_clips("squared", REFERENCE[None], REFERENCE, *PUBLIC)
    assert same[0] > 0  # a candidate equal to the reference: the floor, never 0
    # Differences that overflow on the public records: a clip a kernel still accepts.
    huge = public_difference_clips("squared", np.full((1, DIM), 1e200), REFERENCE, *PUBLIC)
    assert huge[0] == 2.0**190


# --- the releases -----------------------------------------------------------------------


@pytest.mark.parametrize("share", [0.1, 0.3, 0.5])
def test_the_two_multipliers_compose_to_the_one_of_a_single_release(share):
    # Gaussian DP: 1 / z^2 = 1 / z_histogram^2 + 1 / z_paired^2, exactly.
    histogram, paired = paired_multipliers(1.0, DELTA, "private", share)
    single = noise_multiplier(1.0, DELTA, ReleasePlan(1))
    assert histogram ** -2 + paired ** -2 == pytest.approx(single ** -2, rel=1e-12)
    assert paired_multipliers(1.0, DELTA, "public", share) == (math.inf, single)


@pytest.mark.parametrize("clips", ["private", "public"])
@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_every_ledger_spends_exactly_one_gaussian_releases_epsilon(clips, epsilon):
    with federation() as sites:
        result = select(sites, epsilon=epsilon, clips=clips)
    for spent in result.privacy.values():
        assert len(spent.mechanisms) == (2 if clips == "private" else 1)
        assert spent.job.epsilon <= epsilon
        assert spent.job.epsilon == pytest.approx(epsilon, rel=5e-3)


def test_the_release_sequence_is_the_same_whatever_the_answers():
    """Stand-ins answering zeros plan what the sites are charged, release for
    release (joint_calibration.py needs it): the histogram's answer sets
    only the clips, which change no mechanism of the paired release."""
    with federation(seed=1) as sites:
        recorder, view = stand_in(sites)
        select(view, epsilon=1.0)
        planned = [charged_at_site(r, Adjacency.REPLACE_ONE, DIM) for r in recorder.releases]
        result = select(sites, epsilon=1.0)
    with federation(seed=2, n=900) as others:  # other records, other sizes per site
        other = select(others, epsilon=1.0)
    (spent, *_) = result.privacy.values()
    assert [r.kernel for r in recorder.releases] == ["loss_difference_histogram",
                                                     "validation_loss"]
    for charged, plan in zip(spent.mechanisms, planned, strict=True):
        assert charged.kind == plan.kind == "gaussian"
        for (sensitivity, sigma), (declared, planned_sigma) in zip(
                charged.to_dict()["blocks"], plan.to_dict()["blocks"], strict=True):
            assert sigma == planned_sigma
            assert declared * (1 - 1e-4) <= sensitivity <= declared
    assert not np.array_equal(result.clips, other.clips)  # the data did change the clips
    (other_spent, *_) = other.privacy.values()
    # The same noise (each site recomputes its sensitivity from its own size
    # bound, the last ulps of the charge).
    assert [[sigma for _, sigma in m.to_dict()["blocks"]] for m in other_spent.mechanisms] \
        == [[sigma for _, sigma in m.to_dict()["blocks"]] for m in spent.mechanisms]


def test_without_noise_the_estimates_are_the_clipped_mean_differences():
    features, labels = regression(1500, 0)
    wide = np.full(3, 1e6)  # clips that never bite: the unclipped mean differences
    with federation(epsilon_cap=math.inf, allow_non_private=True) as sites:
        result = select(sites, epsilon=math.inf, clips=wide)
    diff = (loss_values("squared", features @ CANDIDATES.T, labels[:, None])
            - loss_values("squared", features @ REFERENCE, labels)[:, None])
    # Up to the fixed-point grid of the normalised sums (2^-32 of a clip of 1e6).
    np.testing.assert_allclose(result.estimates[1:], diff.mean(axis=0), atol=1e-6)
    assert result.estimates[0] == 0.0 and result.clips[0] == 0.0
    np.testing.assert_array_equal(result.upper, result.estimates)
    assert result.best_index == 1 + int(np.argmin(diff.mean(axis=0)))  # the true weights


def test_private_clips_without_noise_are_the_histograms_exact_rule():
    features, labels = regression(1500, 0)
    with federation(epsilon_cap=math.inf, allow_non_private=True) as sites:
        result = select(sites, epsilon=math.inf)
    diff = np.abs(loss_values("squared", features @ CANDIDATES.T, labels[:, None])
                  - loss_values("squared", features @ REFERENCE, labels)[:, None])
    public = public_difference_clips("squared", CANDIDATES, REFERENCE, *PUBLIC)
    for k in range(3):
        edges = public[k] * EDGE_FACTORS
        tails = [np.sum(diff[:, k] >= edge) for edge in edges]
        expected = next((e for e, tail in zip(edges, tails, strict=True)
                         if tail <= 0.02 * 1500), edges[-1])
        assert result.clips[k + 1] == expected


def test_margins_read_the_larger_noise_that_colluder_proof_shares_add_up_to():
    """With t of K sites allowed to collude, each site's share carries
    1 / (K - t) of the variance, so the sum's std is sqrt(K / (K - t))
    times the calibrated one: a certificate that read the calibrated one
    would claim more confidence than it has."""
    clips = np.array([2.0, 2.0, 2.0])
    margins = {}
    for tolerance in (0, 1):
        with federation(collusion_tolerance=tolerance) as sites:
            result = select(sites, clips=clips)
        margins[tolerance] = result.upper - result.estimates
    assert margins[0][0] == margins[1][0] == 0.0  # the reference carries no noise
    np.testing.assert_allclose(margins[1][1:], margins[0][1:] * math.sqrt(3 / 2))


def test_the_resolution_is_what_the_release_can_certify():
    # rho = t 2 sqrt(K') z_paired / n: inversely proportional to n.
    one = paired_resolution(3, 1000, 1.0, DELTA)
    assert paired_resolution(3, 2000, 1.0, DELTA) == pytest.approx(one / 2)
    assert paired_resolution(3, 1000, math.inf, DELTA) == 0.0
    assert paired_resolution(3, 1000, 1.0, DELTA, confidence=None) == 0.0


# --- one data holder --------------------------------------------------------------------


def test_one_site_selects_by_the_exponential_mechanism_on_public_clips():
    with federation(num_sites=1) as sites:
        result = select(sites, epsilon=0.7, clips="public", baseline_confidence=None)
    assert result.method == "exponential" and result.estimates is None
    assert 0 <= result.best_index <= 3
    (spent,) = result.privacy.values()
    (charged,) = spent.mechanisms
    assert charged.kind == "exponential" and charged.epsilon == 0.7
    assert spent.job.epsilon <= 0.7 + 1e-9


def test_private_clips_keep_the_secure_sum_at_one_site_and_refuse_the_exponential():
    with federation(num_sites=1) as sites:
        assert select(sites, baseline_confidence=None).method == "secure_sum"
        with pytest.raises(ValueError, match="public clips"):
            select(sites, method="exponential", baseline_confidence=None)


@pytest.mark.parametrize("options, message", [
    ({"clips": "median"}, "clips must be one of"),
    ({"clips": np.array([1.0, -1.0, 1.0])}, "positive finite"),
    ({"histogram_share": 1.0}, "histogram_share"),
    ({"public_source": None}, "public source"),
])
def test_bad_paired_options_are_refused_before_any_release(options, message):
    with federation() as sites:
        with pytest.raises(ValueError, match=message):
            select(sites, **options)
        assert not sites.privacy_spent()["site-1"].mechanisms
