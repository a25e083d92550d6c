"""ConfidenceBoosting's per-site learner as ball GD around the source-only
model: each site's model stays in its ball, the sites' ledgers are charged
exactly what noisy GD from zero charges them, and on a small heavy-tailed
target (GAIN_STUDY.md's heavy-tail row, 600 records over 3 sites) the
delivered model is never worse than source-only at epsilon 10, while the
per-site models stay near it where noisy GD from zero is several times worse."""

import numpy as np
import pytest

from privadapt import Dataset, LocalFederation
from privadapt.server.algorithms.model_selection.confidence_boosting import (
    SITE_RADIUS_FACTOR,
    ConfidenceBoosting,
)
from privadapt.server.algorithms.public_erm import fit_linear

DIM = 6
NAMES = tuple(f"x{i}" for i in range(DIM))
SLOPE = np.linspace(1.0, -1.0, DIM - 1) + 0.5


def heavy_tailed(n, seed, source=False):
    """Source: x ~ N(0, I), y = w* . x + 0.5 N(0, 1). Target: 88% of records
    x ~ N(0, 0.35^2 I) with slope 0.35 w*, 12% x ~ N(0, 2.5^2 I) with slope
    w* + 0.8 (e_1 - e_5), noise 0.3 Student-t(3); scaled to ||x|| <= 1,
    |y| <= 1, with an intercept column."""
    rng = np.random.default_rng(seed)
    if source:
        x = rng.normal(size=(n, DIM - 1))
        y = x @ SLOPE + 0.5 * rng.normal(size=n)
    else:
        tail = rng.random(n) < 0.12
        x = np.where(tail[:, None], 2.5, 0.35) * rng.normal(size=(n, DIM - 1))
        shift = 0.8 * np.array([1.0, 0.0, 0.0, 0.0, -1.0])
        y = np.sum(x * np.where(tail[:, None], SLOPE + shift, 0.35 * SLOPE), axis=1)
        y += 0.3 * rng.standard_t(3, n)
    x = x / np.maximum(1.0, np.linalg.norm(x, axis=1) / 8.0)[:, None] / 8.0
    return np.hstack([x, np.ones((n, 1))]) / np.sqrt(2.0), np.clip(y, -10.0, 10.0) / 10.0


PUBLIC = heavy_tailed(1000, 0, source=True)
TEST = heavy_tailed(4000, 1)
SOURCE_ONLY = fit_linear(*PUBLIC, "squared", 5.0)


def mse(weights):
    return float(np.mean((TEST[0] @ weights - TEST[1]) ** 2))


def fit(seed=0, records=200, sizes=None, **changes):
    sites = [Dataset(*heavy_tailed(n, 10 * seed + k), NAMES)
             for k, n in enumerate(sizes or (records,) * 3)]
    federation = LocalFederation.from_datasets(sites, noise_seed=seed, epsilon_cap=20.0,
                                               delta_cap=1e-3)
    settings = {"loss": "squared", "radius": 5.0, "epsilon": 10.0, "delta": 1e-5,
                "clip_norm": 2.0, "learning_rate": 1.0, "iterations": 40}
    model = ConfidenceBoosting(**{**settings, **changes}).fit(federation, PUBLIC)
    return model, federation.privacy_spent(1e-5)


def test_each_sites_model_stays_in_its_ball_around_source_only():
    model, _ = fit()
    np.testing.assert_allclose(model.candidates_[0], SOURCE_ONLY)
    radius = SITE_RADIUS_FACTOR * np.linalg.norm(SOURCE_ONLY)
    for learner in model.learners_.values():
        assert learner.average == "tail" and learner.radius == pytest.approx(radius)
        np.testing.assert_array_equal(learner.center_, model.candidates_[0])
        assert np.linalg.norm(learner.coef_ - SOURCE_ONLY) <= radius * (1 + 1e-12)


def test_the_ball_charges_each_site_what_noisy_gd_from_zero_charges():
    # Among the per-site models both ways: the average of ball GD models
    # has one entry more (its shrunk copy) in the selection release.
    _, ball = fit(combine="select")
    _, plain = fit(radius_factor=None, combine="select")
    assert ball.keys() == plain.keys()
    for site, spent in ball.items():
        assert spent.mechanisms == plain[site].mechanisms
        assert spent.job.epsilon == plain[site].job.epsilon


@pytest.mark.parametrize("seed", range(4))
def test_never_below_source_only_on_a_heavy_tailed_target_at_epsilon_10(seed):
    # 600 records a site, 450 validating: the selection certifies a gain on
    # the validation records against its noise; on 150 (200 a site) their own
    # sampling error on this heavy tail let a model 8% worse on the test
    # records through (seed 0), which no privacy noise bound can cover.
    model, _ = fit(seed, records=600)
    assert mse(model.coef_) <= mse(SOURCE_ONLY)


def test_the_ball_keeps_each_sites_model_near_source_only_where_zero_does_not():
    model, _ = fit(radius_factor=0.25)
    ball = [mse(m.coef_) / mse(SOURCE_ONLY) for m in model.learners_.values()]
    plain, _ = fit(radius_factor=None)
    from_zero = [mse(m.coef_) / mse(SOURCE_ONLY) for m in plain.learners_.values()]
    assert max(ball) < 1.25 < 2.0 < min(from_zero), (ball, from_zero)
