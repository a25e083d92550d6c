"""The generalized exponential mechanism (GEM; Raskhodnikova and Smith 2016):
private selection among candidates whose scores have different sensitivities,
as seed 004 uses it to pick a model among norm guesses (its class docstring).
Shared notions (score vectors, adjacency, events) are in :mod:`.selection`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from privadapt.common.mechanisms.base import Adjacency
from privadapt.common.mechanisms.selection import (
    SelectionMechanism,
    _checked_sensitivities,
    _gumbel_argmax_logits,
)
from privadapt.common.noise.floating import RandomBits, gumbel_noise
from privadapt.common.validation import (
    check_bool,
    check_positive_finite,
    check_probability,
    frozen_value,
)


@frozen_value
class GeneralizedExponentialMechanism(SelectionMechanism):
    """The generalized exponential mechanism (GEM; Raskhodnikova and Smith 2016)
    for candidates whose scores have different sensitivities, as seed 004
    (Arora et al., Algorithm 1 and Appendix D.1) uses it to pick a model among
    K norm guesses: losses q_k with sensitivities Delta_k, minimised.

    The mechanism (RS16's algorithm; seed 004 only cites it), for N
    candidates, privacy parameter epsilon and confidence beta:

    1. t = 2 ln(N / beta) / epsilon;
    2. normalised scores s_i = max_j ((q_i + t Delta_i) - (q_j + t Delta_j))
       / (Delta_i + Delta_j);
    3. output i with probability proportional to exp(-epsilon s_i / 2),
       drawn here in Gumbel-max form.

    Privacy: each term of s_i moves by at most (Delta_i + Delta_j) /
    (Delta_i + Delta_j) = 1 between neighbours, and a max of sensitivity-1
    functions has sensitivity 1; step 3 is the exponential mechanism of
    sensitivity 1 on the utility -s at epsilon, so GEM is epsilon-DP and
    epsilon-bounded-range, accounted as :class:`ExponentialMechanism` is.
    When Delta_i = Delta_j = 0 both scores are data-independent and the term is
    taken as its limit (+inf, 0 or -inf by the sign of q_i - q_j), a constant.

    Accuracy, which fixes the constants: seed 004's Theorem D.1 is OCR-garbled
    (its min reuses the output index j); rebuilt, with probability >= 1 - beta
    the output j* has q_{j*} <= min_j (q_j + 4 Delta_j ln(N / beta) / epsilon).
    It follows from the steps above: s_i >= 0 (take j = i) and the minimiser of
    q + t Delta has s = 0, so the exponential mechanism's accuracy bound gives
    s_{j*} <= 2 ln(N / beta) / epsilon = t; expanding s_{j*} <= t gives
    q_{j*} <= q_j + 2 t Delta_j, the stated bound. Seed 004 runs it at epsilon/2
    and beta/4 with the pairs (0, B_y^2), (Delta(B_1), L~_1), ...

    The randomisation depends only on (Delta / epsilon): GEM(c Delta, c epsilon)
    draws exactly as GEM(Delta, epsilon) (t Delta and s epsilon are unchanged),
    which is how an add/remove release reads under replace-one: sensitivities
    doubled, epsilon doubled (:meth:`in_adjacency`). With ``minimize`` False the
    scores are utilities and GEM runs on the losses -scores.
    """

    sensitivities: tuple[float, ...]
    epsilon: float
    beta: float
    minimize: bool = True
    adjacency: Adjacency = Adjacency.REPLACE_ONE

    kind: ClassVar[str] = "generalized_exponential"

    def __post_init__(self) -> None:
        name = "GeneralizedExponentialMechanism"
        self.sensitivities = _checked_sensitivities(f"{name}.sensitivities", self.sensitivities)
        self.epsilon = check_positive_finite(f"{name}.epsilon", self.epsilon)
        self.beta = check_probability(f"{name}.beta", self.beta)
        self.minimize = check_bool(f"{name}.minimize", self.minimize)
        self.adjacency = Adjacency(self.adjacency)

    @property
    def accounted_as(self) -> str:
        return "bounded_range"

    @property
    def is_free(self) -> bool:
        return not any(self.sensitivities)

    @property
    def pure_epsilon(self) -> float:
        return 0.0 if self.is_free else self.epsilon

    @property
    def score_sensitivities(self) -> tuple[float, ...]:
        return self.sensitivities

    @property
    def summary(self) -> str:
        count = len(self.sensitivities)
        return (f"generalized-exponential {self._direction} eps={self.epsilon:.3g} "
                f"beta={self.beta:.3g} ({count} sensitivit{'ies' if count > 1 else 'y'})")

    def with_score_sensitivities(
        self, sensitivities: Sequence[float], adjacency: Adjacency, *, monotone: bool = False
    ) -> GeneralizedExponentialMechanism:
        # GEM's guarantee does not use monotonicity: the flag changes nothing.
        own = _checked_sensitivities("score sensitivities", sensitivities)
        planned = len(self.sensitivities)
        if len(own) == 1 and planned > 1:
            own = own * planned
        elif planned > 1 and len(own) != planned:
            raise ValueError(f"{len(own)} score sensitivities for a generalized exponential "
                             f"mechanism over {planned} candidates")
        return GeneralizedExponentialMechanism(own, self.epsilon, self.beta, self.minimize,
                                               adjacency)

    def _as_replace_one(self) -> GeneralizedExponentialMechanism:
        return GeneralizedExponentialMechanism(
            tuple(2 * s for s in self.sensitivities), 2 * self.epsilon, self.beta,
            self.minimize, Adjacency.REPLACE_ONE)

    def normalized_scores(self, losses: np.ndarray) -> np.ndarray:
        """s_i of step 2 for ``losses`` q (each s_i >= 0, and 0 at the minimiser
        of q + t Delta)."""
        count = losses.size
        deltas = np.broadcast_to(np.asarray(self.sensitivities), (count,))
        t = 2.0 * math.log(count / self.beta) / self.epsilon
        shifted = losses + t * deltas
        numerator = shifted[:, None] - shifted[None, :]
        denominator = deltas[:, None] + deltas[None, :]
        # Where both sensitivities are 0 the term is data-independent: its limit.
        limit = np.where(numerator > 0, np.inf, np.where(numerator < 0, -np.inf, 0.0))
        terms = np.divide(numerator, denominator, out=limit, where=denominator > 0)
        return terms.max(axis=1)

    def _noisy_utilities(self, utilities: np.ndarray, source: RandomBits | None) -> np.ndarray:
        normalized = self.normalized_scores(-utilities)
        return _gumbel_argmax_logits(self.epsilon / 2.0, -normalized) + gumbel_noise(
            utilities.shape, source)

    def _fields(self) -> dict[str, Any]:
        return {"sensitivities": list(self.sensitivities), "epsilon": self.epsilon,
                "beta": self.beta, "minimize": self.minimize}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GeneralizedExponentialMechanism:
        return cls(tuple(data["sensitivities"]), data["epsilon"], data["beta"],
                   data["minimize"], Adjacency(data["adjacency"]))
