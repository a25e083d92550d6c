"""The private grid search's plan, made before its first release: which
guesses the federation's fixed-point grid can carry, and the budget scale
that the sites' accountant composes to the whole epsilon
(private_grid_search.py's module docstring says why and when).

Both run the search itself on stand-ins (:func:`~privadapt.server.algorithms.
joint_calibration.stand_in`: the job's public sizes and dimension, zeros for
answers), as ``launch --dry-run`` does, so no second description of the
releases can drift from the code that makes them. Nothing is charged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from privadapt.common.accounting.accountant import AccountingMethod
from privadapt.common.errors import QueryRefusedError
from privadapt.common.federation import Federation
from privadapt.server.algorithms.joint_calibration import (
    JointCalibration,
    calibrate_scale,
    stand_in,
)
from privadapt.server.federation.noise_grid import GridExcess, releases_over_grid
from privadapt.server.federation.planning import JOB_GRID, PlannedRelease

# composition -> the accountant the joint calibration composes with.
COMPOSITIONS = {"pld": AccountingMethod.PLD, "rdp": AccountingMethod.RDP}


@dataclass(frozen=True)
class GuessGrid:
    """The K guesses and which of them run (``kept``: 0-based, increasing;
    the re-plan drops the largest). ``center`` None: seed 004's balls
    ||w|| <= 2^j; else the offsets ||w - center|| <= rho_j around the public
    model, rho_j = 2^(j - K) ||center||."""

    radii: np.ndarray  # (K,)
    kept: tuple[int, ...]
    center: np.ndarray | None = None

    @classmethod
    def doubling(cls, num_guesses: int, center: np.ndarray | None) -> GuessGrid:
        powers = 2.0 ** np.arange(1, num_guesses + 1)
        radii = powers if center is None else (
            powers / 2.0**num_guesses * float(np.linalg.norm(center)))
        return cls(radii, tuple(range(num_guesses)), center)

    def without_largest(self) -> GuessGrid:
        return GuessGrid(self.radii, self.kept[:-1], self.center)

    def norm_bounds(self) -> np.ndarray:
        """Each kept guess's norm bound: its ball's radius around 0, or
        ||center|| + rho_j for the ball around the center."""
        radii = self.radii[list(self.kept)]
        return radii if self.center is None else radii + float(np.linalg.norm(self.center))


#: run(train, validation, grid, scale): the search at the budget scaled by ``scale``.
SearchRun = Callable[[Federation, Federation, GuessGrid, float], object]


def planned_releases(run: SearchRun, train: Federation, validation: Federation,
                     grid: GuessGrid, scale: float
                     ) -> tuple[list[PlannedRelease], list[PlannedRelease]]:
    """(training releases, selection releases) of the search on stand-ins."""
    train_recorder, train_view = stand_in(train)
    validation_recorder, validation_view = stand_in(validation)
    run(train_view, validation_view, grid, scale)
    return train_recorder.releases, validation_recorder.releases


def grid_bits(federation: Federation) -> int:
    """The fractional bits of the federation's fixed-point codec (every
    federation that rounds has one; a job's default grid otherwise)."""
    return getattr(federation, "codec", JOB_GRID).fractional_bits


def fit_grid(run: SearchRun, train: Federation, validation: Federation, grid: GuessGrid,
             name: str) -> GuessGrid:
    """``grid`` without the largest guesses whose selection release the
    validation federation's grid cannot carry; ``QueryRefusedError`` (before
    any charge) when a training release cannot be carried, or no guess is
    left, naming the release."""
    dim = train.dim
    while True:
        training, selection = planned_releases(run, train, validation, grid, 1.0)
        too_coarse = releases_over_grid(training, grid_bits(train), dim)
        if too_coarse:
            raise _refusal(name, "training", too_coarse, "a larger epsilon or a smaller "
                           "clip_norm for the learner, or a coarser grid")
        too_coarse = releases_over_grid(selection, grid_bits(validation), dim)
        if not too_coarse:
            return grid
        if len(grid.kept) == 1:
            raise _refusal(name, "selection", too_coarse, "a larger epsilon, smaller "
                           "feature_bound or label_bound, or a coarser grid")
        grid = grid.without_largest()


def _refusal(name: str, step: str, excess: Sequence[GridExcess], remedy: str
             ) -> QueryRefusedError:
    return QueryRefusedError(
        f"{name}: planned refusal, nothing was charged: the sites would refuse the "
        f"{step} {excess[0].describe()}; give {remedy}")


def calibrate(run: SearchRun, train: Federation, validation: Federation, grid: GuessGrid,
              epsilon: float, delta: float, composition: str) -> JointCalibration:
    """The joint calibration of the search's training and selection budgets
    (joint_calibration.py) over its runs on stand-ins."""
    def releases_at(scale: float) -> list[PlannedRelease]:
        training, selection = planned_releases(run, train, validation, grid, scale)
        return [*training, *selection]

    return calibrate_scale(releases_at, epsilon=epsilon, delta=delta, dim=train.dim,
                           method=COMPOSITIONS[composition])
