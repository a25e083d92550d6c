"""Which planned releases the fixed-point grid cannot carry: a noisy sum's
released noise against max_grid_safe_noise of the grid, never a selection
(it releases an index) nor a release without noise."""

import math

import numpy as np

from privadapt.common.kernels.validation_loss import ValidationLoss, ValidationLossParams
from privadapt.common.mechanisms import Adjacency, ExponentialMechanism
from privadapt.common.noise.floating import max_grid_safe_noise
from privadapt.server.federation.noise_grid import releases_over_grid
from privadapt.server.federation.planning import PlanningFederation

KERNEL = ValidationLoss()
DIM = 3


def planned(multiplier, select=False):
    federation = PlanningFederation("job", {"a": 100}, DIM)
    params = ValidationLossParams(np.ones((2, DIM)), "squared", 4.0)
    if select:
        federation.select(KERNEL.name, params.to_wire(), ExponentialMechanism(4.0, 1.0))
    else:
        mechanism = KERNEL.mechanism(params, multiplier, Adjacency.REPLACE_ONE, dim=DIM)
        federation.query(KERNEL.name, params.to_wire(), mechanism)
    return federation.releases


def test_a_sum_noisier_than_the_grid_carries_is_named_with_its_scale():
    releases = planned(1.0)
    scale = releases[0].mechanism.noise_scales[0]
    bits = next(b for b in range(32, 53) if max_grid_safe_noise(b) < scale)
    (excess,) = releases_over_grid(releases, bits, DIM)
    assert excess.index == 0 and excess.scale == scale
    assert "release 1 (validation_loss, secure_sum)" in excess.describe()
    assert releases_over_grid(releases, bits - 1, DIM) == []  # one bit coarser carries it


def test_selections_and_noise_free_releases_are_never_over_the_grid():
    assert releases_over_grid(planned(1.0, select=True), 52, DIM) == []
    assert releases_over_grid(planned(math.inf), 52, DIM) == []
