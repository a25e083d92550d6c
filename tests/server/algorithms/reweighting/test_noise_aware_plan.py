"""The noise-aware w step: the Lipschitz form of Alg. 1
line 4 and its smooth form, which tends to the curvature step as the noise
vanishes (the Lipschitz form does not, so it cannot improve with epsilon)."""

import math

import pytest

from privadapt.server.algorithms.reweighting.descent import DataBounds, StepSizes
from privadapt.server.algorithms.reweighting.noise_aware_plan import noise_aware_step_sizes
from privadapt.server.algorithms.reweighting.objectives import ReweightingHyperparameters

CURVATURE = StepSizes(100.0, 2.0, 3.0)
HYPER = ReweightingHyperparameters(alpha=0.5)
BOUNDS = DataBounds(feature_norm=1.0, label_bound=1.0, radius=20.0)
N, DIM, T, D = 3000, 105, 100, 5.0


def step(z: float, smooth: bool) -> StepSizes:
    return noise_aware_step_sizes(CURVATURE, "logistic", HYPER, BOUNDS, N, DIM, T, z, D,
                                  smooth=smooth)


@pytest.mark.parametrize("z", [5.0, 17.09, 46.75])
def test_the_caps_are_their_formulas(z):
    g = 1.0  # the logistic G = r Y
    sigma = z * 2 * (1 - HYPER.alpha) * g / N
    assert step(z, False).weights == pytest.approx(D / math.sqrt(T * (g**2 + DIM * sigma**2)))
    assert step(z, True).weights == pytest.approx(D / math.sqrt(T * DIM * sigma**2))
    assert step(z, True).weights > step(z, False).weights
    # only the w step is capped
    smooth = step(z, True)
    assert (smooth.public_weights, smooth.private_weights) == (2.0, 3.0)


def test_only_the_smooth_cap_tends_to_the_curvature_step_as_the_noise_vanishes():
    assert step(1e-3, True) == CURVATURE
    assert step(math.inf, True) == step(math.inf, False) == CURVATURE
    # the Lipschitz cap stays at D / (G sqrt(T)) = 0.5 however small the noise
    assert step(1e-3, False).weights == pytest.approx(D / math.sqrt(T), rel=1e-6)
    for small, large in [(46.75, 17.09), (17.09, 5.0)]:  # less noise, larger smooth step
        assert step(large, True).weights > step(small, True).weights
