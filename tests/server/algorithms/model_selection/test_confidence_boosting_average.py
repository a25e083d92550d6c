"""ConfidenceBoosting's default candidates: the sites' models averaged with
weights n_k / n and that average's copy shrunk to a quarter of the ball,
post-processing that charges the sites what selecting among their models
charges; on a small heavy-tailed target the average is better than the
median per-site model of the big ball (its training noise is 1/sqrt(3) of
each's)."""

import numpy as np
import pytest

from privadapt.server.algorithms.model_selection.confidence_boosting import (
    AVERAGE,
    AVERAGE_SHRINK,
    AVERAGE_SHRUNK,
    SOURCE_ONLY,
)
from tests.server.algorithms.model_selection.test_confidence_boosting_ball import (
    SOURCE_ONLY as SOURCE_MODEL,
)
from tests.server.algorithms.model_selection.test_confidence_boosting_ball import fit, mse


def test_the_candidates_are_source_only_the_size_weighted_average_and_its_shrunk_copy():
    model, _ = fit(sizes=(100, 200, 300))
    assert model.candidate_names_ == [SOURCE_ONLY, AVERAGE, AVERAGE_SHRUNK]
    sites = np.stack([m.coef_ for m in model.learners_.values()])
    average = np.array([100, 200, 300]) @ sites / 600
    np.testing.assert_allclose(model.candidates_[1], average, rtol=1e-12)
    offset = model.candidates_[2] - SOURCE_MODEL
    radius = AVERAGE_SHRINK * np.linalg.norm(SOURCE_MODEL)
    assert np.linalg.norm(offset) == pytest.approx(min(radius, np.linalg.norm(
        average - SOURCE_MODEL)))
    # The copy is the average's offset scaled down, not another direction.
    np.testing.assert_allclose(offset * np.linalg.norm(average - SOURCE_MODEL),
                               (average - SOURCE_MODEL) * np.linalg.norm(offset), atol=1e-12)


def test_averaging_charges_the_sites_exactly_what_selecting_among_their_models_charges():
    # Two entries instead of three in the selection release: the histogram's
    # and the paired release's sensitivities are per entry over sqrt(K'),
    # normalised, so the mechanisms are the same.
    _, averaged = fit()
    _, selected = fit(combine="select")
    assert averaged.keys() == selected.keys()
    for site, spent in averaged.items():
        assert spent.job.epsilon == pytest.approx(selected[site].job.epsilon, rel=1e-9)
        assert len(spent.mechanisms) == len(selected[site].mechanisms)


def test_on_a_heavy_tail_the_average_beats_the_median_site_model_of_the_big_ball():
    # Each site's model carries its own training noise; the average carries
    # 1/sqrt(3) of it (module docstring, "Averaged"). Below the median, not
    # only below the mean (which convexity gives on every record); the
    # sites' noise is drawn afresh each run, so most seeds, not all.
    wins = 0
    for seed in range(6):
        model, _ = fit(seed, records=400)
        sites = [mse(m.coef_) for m in model.learners_.values()]
        wins += mse(model.candidates_[1]) < np.median(sites)
    assert wins >= 5
