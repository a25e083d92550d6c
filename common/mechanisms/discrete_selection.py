"""The exponential mechanism on the fixed-point grid, drawn with work that does
not depend on the scores.

Why: :class:`~privadapt.common.mechanisms.selection.ExponentialMechanism`
draws through float Gumbel noise, whose samples are bounded, so a candidate
far behind has probability exactly 0 on one dataset and not on its neighbour:
(epsilon, ~1e-37)-DP rather than pure (selection.py, module docstring). Here
the site's scores, already rounded onto its grid 2^-f, are read as integers
of grid steps, and the index is drawn with probability within a factor
exp(+-2^-53.9) of exp(-c g_k) / sum_j exp(-c g_j) (g_k clamped at 128 / c),
g_k the integer gap of candidate k's utility below the best,
c = epsilon / (2 Delta) (epsilon / Delta for monotone scores) a rational, by
:func:`~privadapt.common.mechanisms.fixed_work_exponential.fixed_work_exponential_index`:
integer weights from exactly rounded constants, one draw of a fixed number
of CSPRNG words. Every candidate keeps a positive probability, and the
release is pure (epsilon + 2^-50)-DP and (epsilon + 2^-50)-bounded-range,
which is what the site charges (:attr:`pure_epsilon`; the derivation is in
that module's docstring).

Sensitivity in steps. The site charges a float score sensitivity S that holds
the rounding onto the grid and the float errors
(:func:`~privadapt.common.kernels.grid_rounding.score_rounding_charged`); the
scores' integer steps then move by at most S 2^f between neighbours, so by at
most Delta = ceil(S 2^f (1 + 2^-50)) (:func:`.discrete_laplace.grid_steps`).
The guarantee is then the exponential mechanism's on integer utilities of
sensitivity Delta, plus the sampler's 2^-50, accounted as
:class:`ExponentialMechanism` is (same derivation; its docstring). The grid
is the mechanism's field ``fractional_bits`` and a site refuses it unless it
is the query's: read on a coarser grid, the scores would be rounded once
more, by a step nobody charged.

Timing. The sampler this replaced
proposed candidates until one was kept, a number geometric in the scores'
spread (K = 20,000: 5 ms with all scores tied, 626 ms with one clear
winner), so a coordinator timing the answer learned about the scores. The
work is now fixed by K and c: the random words, the vector products and the
big-integer weights are counted and the counts compared on extreme score
vectors (tests/common/mechanisms/test_fixed_work_exponential.py). Memory access
patterns and the duration of single big-integer operations are not
addressed (that module's docstring).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np

from privadapt.common.mechanisms.base import Adjacency
from privadapt.common.mechanisms.discrete_laplace import check_grid_bits, grid_steps
from privadapt.common.mechanisms.fixed_work_exponential import (
    CLAMP,
    charged_epsilon,
    fixed_work_exponential_index,
    integer_weights,
)
from privadapt.common.mechanisms.selection import OneBoundSelection
from privadapt.common.noise.discrete import uniform_index
from privadapt.common.noise.floating import RandomBits
from privadapt.common.validation import check_positive_finite, frozen_value


@frozen_value
class DiscreteExponentialMechanism(OneBoundSelection):
    """The exponential mechanism at ``epsilon`` on scores of charged
    sensitivity ``sensitivity`` read in integer steps of the grid
    2^-``fractional_bits``, drawn with score-independent work and charged
    epsilon + 2^-50 (module docstring)."""

    sensitivity: float
    epsilon: float
    fractional_bits: int
    minimize: bool = True
    monotone: bool = False
    adjacency: Adjacency = Adjacency.REPLACE_ONE

    kind: ClassVar[str] = "discrete_exponential"

    def __post_init__(self) -> None:
        self._check_sensitivity()
        self.epsilon = check_positive_finite("DiscreteExponentialMechanism.epsilon", self.epsilon)
        self.fractional_bits = check_grid_bits("DiscreteExponentialMechanism.fractional_bits",
                                               self.fractional_bits)
        self._check_direction()

    @property
    def accounted_as(self) -> str:
        return "bounded_range"

    @property
    def grid_sensitivity(self) -> int:
        """Delta: the scores' sensitivity in grid steps."""
        return grid_steps(self.sensitivity, self.fractional_bits)

    @property
    def coefficient(self) -> Fraction | None:
        """c = epsilon / (2 Delta) (or / Delta, monotone), exactly, per grid
        step of utility; None when the scores do not depend on the data."""
        if self.is_free:
            return None
        return Fraction(self.epsilon) / ((1 if self.monotone else 2) * self.grid_sensitivity)

    @property
    def noise_grid_bits(self) -> int:
        return self.fractional_bits

    @property
    def pure_epsilon(self) -> float:
        # epsilon plus the sampler's distance from the exact law, rounded up:
        # the one figure the ledger's pure, PLD and bounded-range RDP paths read.
        return 0.0 if self.is_free else charged_epsilon(self.epsilon)

    @property
    def summary(self) -> str:
        return (f"discrete exponential {self._direction} eps={self.epsilon:.3g}"
                f"{self._monotone_note} (Delta={self.grid_sensitivity} steps of "
                f"2^-{self.fractional_bits})")

    def _replace_one_changes(self) -> dict[str, object]:
        return {"epsilon": 2 * self.epsilon}  # as ExponentialMechanism reads it

    def utility_steps(self, scores: np.ndarray) -> np.ndarray:
        """The utilities in integer grid steps (:func:`grid_utilities`)."""
        return grid_utilities(scores, self.fractional_bits, self.minimize)

    def select(self, scores: np.ndarray, source: RandomBits | None = None) -> int:
        utilities = self.utility_steps(self._checked_scores(scores))
        coefficient = self.coefficient
        if coefficient is None:  # data-independent scores: any maximiser, uniformly
            winners = np.flatnonzero(utilities == utilities.max())
            return int(winners[uniform_index(winners.size, source)])
        return fixed_work_exponential_index(utilities, coefficient, source)

    def _fields(self) -> dict[str, Any]:
        return {"sensitivity": self.sensitivity, "epsilon": self.epsilon,
                "fractional_bits": self.fractional_bits, "minimize": self.minimize,
                "monotone": self.monotone}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DiscreteExponentialMechanism:
        return cls(data["sensitivity"], data["epsilon"], data["fractional_bits"],
                   data["minimize"], data["monotone"], Adjacency(data["adjacency"]))


def grid_utilities(scores: np.ndarray, fractional_bits: int, minimize: bool) -> np.ndarray:
    """Scores read as int64 steps of the grid 2^-``fractional_bits``, negated
    for ``minimize``: the utilities the grid selections draw on."""
    steps = np.rint(np.ldexp(np.asarray(scores, dtype=np.float64), fractional_bits))
    if not np.all(np.abs(steps) < 2.0**63):
        raise ValueError("scores do not fit the fixed-point grid")
    values = steps.astype(np.int64)
    return -values if minimize else values


def exact_probabilities(mechanism: DiscreteExponentialMechanism,
                        scores: np.ndarray) -> np.ndarray:
    """The exponential mechanism's law on the grid, which
    :meth:`DiscreteExponentialMechanism.select` draws within a factor
    exp(+-2^-53.9), in floats (for tests and reports): exp(-min(c g_k, 128))
    normalised."""
    utilities = mechanism.utility_steps(np.asarray(scores, dtype=float)).tolist()
    best = max(utilities)
    coefficient = mechanism.coefficient
    if coefficient is None:
        weights = np.array([1.0 if u == best else 0.0 for u in utilities])
    else:
        weights = np.array([math.exp(-min(float(coefficient * (best - u)), CLAMP))
                            for u in utilities])
    return weights / weights.sum()


def sampler_probabilities(mechanism: DiscreteExponentialMechanism,
                          scores: np.ndarray) -> np.ndarray:
    """The law the sampler draws, up to its final modular draw's relative
    2^-64: its own integer weights W_k / sum W, in floats."""
    utilities = mechanism.utility_steps(np.asarray(scores, dtype=float))
    weights = integer_weights(utilities, mechanism.coefficient)
    total = sum(weights)
    return np.array([float(Fraction(w, total)) for w in weights])
