"""Report-noisy-min (or -max) with exact discrete Laplace noise on the
fixed-point grid: the pure-epsilon selection of
:class:`~privadapt.common.mechanisms.selection.ReportNoisyMin` without its
float gap.

Why: the float Laplace samples are bounded (about 82 scales), so a candidate
trailing by more than that has probability exactly 0 on one dataset and not
on its neighbour: (epsilon, ~1e-37)-DP (selection.py, module docstring).
Here the scores, rounded onto the query's grid 2^-f, are integers of grid
steps u_k (negated for ``minimize``), each gets an independent two-sided
geometric Z_k, P(z) proportional to exp(-|z| / t) on the integers, drawn
exactly from CSPRNG bits (:func:`privadapt.common.noise.discrete.discrete_laplace`),
and the released index is the *first* k (lowest index) maximising u_k + Z_k.
Ties have positive probability with integer noise; breaking them by index is
part of the mechanism and of the proof below.

**Guarantee: pure (2 Delta / t)-DP, (Delta / t) for monotone scores**, Delta
the scores' sensitivity in grid steps (:func:`.discrete_laplace.grid_steps`
of the site's charged float sensitivity, which holds the rounding onto the
grid). The proof is Dwork and Roth's (2014, Claim 3.9) for report-noisy-max,
with two changes, both checked here:

1. *Ties.* Fix the output i and the other noises z_-i. With lowest-index
   tie-breaking, i wins iff u_i + Z_i > u_j + z_j for every j < i and
   u_i + Z_i >= u_j + z_j for every j > i; in integers, iff Z_i >= T(D) with
   T(D) = max_(j != i) (u_j(D) + z_j + [j < i]) - u_i(D), an integer. The
   indicator [j < i] depends on indices only, never on the data, so between
   neighbours T moves exactly as the continuous threshold does: by at most
   2 Delta in general, T(D') <= T(D) + 2 Delta (the max rises by at most
   Delta and u_i falls by at most Delta); and for monotone scores (all u_k
   move one way, by at most Delta: selection.py, "Monotone scores")
   T(D') <= T(D) + Delta and T(D) <= T(D') + Delta.
2. *The noise's tail.* For the two-sided geometric,
   P(Z = z + 1) / P(Z = z) >= exp(-1/t) at every integer z (it is exp(-1/t)
   for z >= 0 and exp(1/t) below), so P(Z = z + k) >= exp(-k/t) P(Z = z)
   for every integer k >= 0, and summing over z >= a:
   P(Z >= a + k) >= exp(-k / t) P(Z >= a) for every integer a.

So P(i | D', z_-i) = P(Z_i >= T(D')) >= P(Z_i >= T(D) + 2 Delta)
>= exp(-2 Delta / t) P(i | D, z_-i); averaging over the independent z_-i,
P(i | D') >= exp(-2 Delta / t) P(i | D), and the same from D' to D. For
monotone scores both directions hold with Delta in place of 2 Delta. Every
probability here is the exact sampler's (no float enters), so the release is
exactly pure epsilon-DP, epsilon = (2 or 1) Delta / t, rounded up to a double
(:attr:`pure_epsilon`). It is not known to be epsilon-bounded-range (nor is
the float report-noisy-min), so it is accounted as pure epsilon-DP, like
:class:`ReportNoisyMin` (the tight randomized-response pair).

Under replace-one (:meth:`in_adjacency`) an add/remove release reads as
sensitivity 2 Delta (Delta if monotone), not monotone: group privacy of size
2, as for :class:`ReportNoisyMin`.

**Work.** The K noises are drawn before the scores are read and do not
depend on them (the sampler's work depends on t and its random words only);
the sums and the first maximum take K integer operations each. Memory
access patterns and branches inside the maximum are not addressed.

**Scale.** ``scale_steps`` t is, as for
:class:`~privadapt.common.mechanisms.discrete_laplace.DiscreteLaplaceMechanism`,
a float whose exact binary value has numerator and denominator at most 2^48,
with t <= 2^45 steps; the sums are exact Python integers, so no score of the
grid and no noise can overflow them. The grid is the mechanism's field
``fractional_bits``, which a site refuses unless it is the query's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np

from privadapt.common.mechanisms.base import Adjacency
from privadapt.common.mechanisms.discrete_laplace import (
    check_grid_bits,
    check_scale_steps,
    float_at_least,
    grid_steps,
)
from privadapt.common.mechanisms.discrete_selection import grid_utilities
from privadapt.common.mechanisms.selection import OneBoundSelection
from privadapt.common.noise.discrete import discrete_laplace
from privadapt.common.noise.floating import RandomBits
from privadapt.common.validation import frozen_value


@frozen_value
class DiscreteReportNoisyMin(OneBoundSelection):
    """Report-noisy-min (or -max) with discrete Laplace noise of ``scale_steps``
    grid steps on scores of charged ``sensitivity`` read on the grid
    2^-``fractional_bits``, ties to the lowest index (module docstring)."""

    sensitivity: float
    scale_steps: float
    fractional_bits: int
    minimize: bool = True
    monotone: bool = False
    adjacency: Adjacency = Adjacency.REPLACE_ONE

    kind: ClassVar[str] = "discrete_report_noisy_laplace"

    def __post_init__(self) -> None:
        self._check_sensitivity()
        self.scale_steps = check_scale_steps("DiscreteReportNoisyMin.scale_steps",
                                             self.scale_steps)
        self.fractional_bits = check_grid_bits("DiscreteReportNoisyMin.fractional_bits",
                                               self.fractional_bits)
        self._check_direction()

    @property
    def grid_sensitivity(self) -> int:
        """Delta: the scores' sensitivity in grid steps."""
        return grid_steps(self.sensitivity, self.fractional_bits)

    @property
    def exact_epsilon(self) -> Fraction:
        """(2 or 1) Delta / t, exactly."""
        return (1 if self.monotone else 2) * self.grid_sensitivity / Fraction(self.scale_steps)

    @property
    def epsilon(self) -> float:
        return self.pure_epsilon

    @property
    def pure_epsilon(self) -> float:
        return float_at_least(self.exact_epsilon)

    @property
    def noise_grid_bits(self) -> int:
        return self.fractional_bits

    @property
    def summary(self) -> str:
        return (f"discrete report-noisy laplace {self._direction} eps={self.epsilon:.3g}"
                f"{self._monotone_note} (Delta={self.grid_sensitivity} steps of "
                f"2^-{self.fractional_bits})")

    def select(self, scores: np.ndarray, source: RandomBits | None = None) -> int:
        scores = self._checked_scores(scores)
        noise = discrete_laplace(Fraction(self.scale_steps), scores.size, source).tolist()
        utilities = grid_utilities(scores, self.fractional_bits, self.minimize).tolist()
        noisy = [u + z for u, z in zip(utilities, noise, strict=True)]
        return max(range(len(noisy)), key=noisy.__getitem__)  # the first maximiser

    def _fields(self) -> dict[str, Any]:
        return {"sensitivity": self.sensitivity, "scale_steps": self.scale_steps,
                "fractional_bits": self.fractional_bits, "minimize": self.minimize,
                "monotone": self.monotone}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DiscreteReportNoisyMin:
        return cls(data["sensitivity"], data["scale_steps"], data["fractional_bits"],
                   data["minimize"], data["monotone"], Adjacency(data["adjacency"]))


def winner_probabilities(utilities: Sequence[int], scale: Fraction,
                         reach: int = 60) -> np.ndarray:
    """The law of the first maximiser of u_k + Z_k, Z_k i.i.d. two-sided
    geometric of scale t, for small integer utilities (tests and reports):
    P(i) = sum_z P(Z = z) prod_(j < i) P(Z_j < u_i + z - u_j)
    prod_(j > i) P(Z_j <= u_i + z - u_j), summed over |z| <= reach t + spread
    (the rest has mass below 2 exp(-reach))."""
    q = math.exp(-1.0 / float(scale))

    def pmf(z: int) -> float:
        return (1 - q) / (1 + q) * q ** abs(z)

    def cdf(z: int) -> float:  # P(Z <= z)
        return 1 - q ** (z + 1) / (1 + q) if z >= 0 else q ** (-z) / (1 + q)

    spread = max(utilities) - min(utilities)
    span = int(reach * float(scale)) + spread + 1
    out = np.zeros(len(utilities))
    for i, u_i in enumerate(utilities):
        for z in range(-span, span + 1):
            mass = pmf(z)
            for j, u_j in enumerate(utilities):
                if j != i:
                    mass *= cdf(u_i + z - u_j - (1 if j < i else 0))
            out[i] += mass
    return out
