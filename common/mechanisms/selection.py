"""Private selection: a site scores K candidates on its private data, noises the
scores itself and releases only the index of the winner.

Three mechanisms, each with its own ledger kind. Throughout, a *score vector*
u(D) in R^K has per-candidate sensitivity Delta_k = max |u_k(D) - u_k(D')| over
neighbours D, D' under the mechanism's ``adjacency``; ``minimize`` says whether
the winner is the smallest score (losses) or the largest (utilities). For
arg-min a mechanism runs on the utilities -u, which have the same sensitivities.

**Monotone scores.** A score vector is *monotone* (under add/remove) when adding
any record moves every score in one fixed direction: u_k(D + x) >= u_k(D) for
all k and all x (or <= for all). Counts, and sums of clipped non-negative
terms (losses clipped to [0, C]), are monotone. Under replace-one no
non-constant score vector is monotone in this sense (replacing x by x' and then
x' by x would move every score up and then down), and sums of clipped
non-negative terms are *not* monotone there: replacing x by x' moves score k by
l_k(x') - l_k(x), whose sign depends on k. So ``monotone=True`` is accepted
only under ``ADD_REMOVE_ONE``. A monotone add/remove vector of sensitivity
Delta changes by at most Delta (in either direction) when a record is replaced
(remove: every score down by at most Delta; add: every score up by at most
Delta), which is how :meth:`SelectionMechanism.in_adjacency` reads it under
replace-one: not monotone, sensitivity Delta.

**Who declares what.** A site computes the sensitivities from its own clipping
and calls :meth:`SelectionMechanism.with_score_sensitivities`; monotonicity is
passed there too, by the site (from its kernel), never read from the plan the
coordinator sent, since a plan claiming it would halve the site's charge.

**Floating point.** The output is an index, not a number, so Mironov's (2012)
low-bit attack on noisy values has nothing to read; the site still rounds the
scores onto its fixed-point grid first (and charges the rounding in the
sensitivity), so the noise is applied to a grid value as the proofs assume.
One gap remains: the Laplace and Gumbel samples are bounded
(about 82 scales, since a half-uniform bottoms out near 2^-118), so a candidate
whose scaled score trails another's by more than about 86 has probability
exactly 0 on one dataset and may not on its neighbour: report-noisy-min and the
exponential mechanism are (epsilon, ~1e-37)-DP rather than pure epsilon-DP.
:class:`~privadapt.common.mechanisms.discrete_selection.DiscreteExponentialMechanism`
closes it for the exponential mechanism (integer weights on the grid, every
candidate's probability positive, pure (epsilon + 2^-50)-DP).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from privadapt.common.mechanisms.base import Adjacency, Mechanism
from privadapt.common.noise.floating import RandomBits, gumbel_noise, laplace_noise
from privadapt.common.validation import (
    check_bool,
    check_finite_array,
    check_nonnegative_finite,
    check_positive_finite,
    check_probability,
)


def _checked_sensitivities(name: str, values: Sequence[float]) -> tuple[float, ...]:
    if isinstance(values, str | bytes) or not isinstance(values, Sequence | np.ndarray):
        raise ValueError(f"{name} must be a sequence of numbers, got {values!r}")
    checked = tuple(check_nonnegative_finite(f"{name}[{k}]", v) for k, v in enumerate(values))
    if not checked:
        raise ValueError(f"{name} needs at least one sensitivity")
    return checked


def _check_monotone_adjacency(name: str, monotone: bool, adjacency: Adjacency) -> None:
    if monotone and adjacency != Adjacency.ADD_REMOVE_ONE:
        raise ValueError(
            f"{name}: monotone scores are defined under add/remove adjacency only; under "
            f"{adjacency} no non-constant score vector is monotone (sums of clipped "
            "non-negative terms are not): declare monotone=False"
        )


class SelectionMechanism(Mechanism):
    """A mechanism a site applies to a kernel's score vector (one block of
    shape (K,)), releasing only the index of the winning candidate."""

    releases_kernel_sums: ClassVar[bool] = False  # never a noised sum
    releases_index: ClassVar[bool] = True
    minimize: bool

    @property
    def score_sensitivities(self) -> tuple[float, ...]:
        """Declared per-candidate sensitivity: the largest change of score k when
        one record changes under ``self.adjacency`` (length 1 = the same bound
        for every candidate)."""
        raise NotImplementedError

    def with_score_sensitivities(
        self, sensitivities: Sequence[float], adjacency: Adjacency, *, monotone: bool = False
    ) -> SelectionMechanism:
        """This mechanism as the site runs and charges it, with the site's own
        per-candidate ``sensitivities`` under ``adjacency`` (from its clipping),
        and ``monotone`` as the site's kernel certifies it (default: not).

        What stays from the plan is what parametrises the randomisation: the
        Laplace scale for :class:`ReportNoisyMin` (its epsilon follows from the
        site's sensitivity), and epsilon (and beta) for the exponential
        mechanisms (their temperature follows from the site's sensitivities,
        so they cost exactly the planned epsilon)."""
        raise NotImplementedError

    def select(self, scores: np.ndarray, source: RandomBits | None = None) -> int:
        """The released index; noise from ``source`` (None: the OS CSPRNG,
        :mod:`privadapt.common.noise.floating`)."""
        scores = self._checked_scores(scores)
        utilities = -scores if self.minimize else scores
        return int(np.argmax(self._noisy_utilities(utilities, source)))

    def _noisy_utilities(self, utilities: np.ndarray, source: RandomBits | None) -> np.ndarray:
        """A vector whose arg-max is the mechanism's output on ``utilities``."""
        raise NotImplementedError

    def _checked_scores(self, scores: Any) -> np.ndarray:
        array = check_finite_array("scores", scores, (None,))
        declared = len(self.score_sensitivities)
        if array.size == 0:
            raise ValueError("scores must hold at least one candidate's score")
        if declared > 1 and array.size != declared:
            raise ValueError(
                f"scores has {array.size} candidates but {declared} per-candidate "
                "sensitivities were declared"
            )
        return array

    @property
    def _direction(self) -> str:
        return "arg-min" if self.minimize else "arg-max"


@dataclass(frozen=True)
class ReportNoisyMin(SelectionMechanism):
    """Laplace report-noisy-min (or -max): add Lap(b) independently to every
    score and release the arg-min (``minimize``) or arg-max.

    Guarantee: pure epsilon = 2 Delta / b in general, Delta / b for monotone
    scores, with Delta = max_k Delta_k the scores' infinity-norm sensitivity.

    Derivation (Dwork and Roth 2014, Claim 3.9, stated there for counts with
    Lap(1/epsilon); the same proof with sensitivity Delta gives both cases).
    Work with utilities (arg-max). Fix the output i and the other candidates'
    noise r_{-i}; candidate i wins iff its noise exceeds
    r*(D) = max_{j != i} (u_j(D) + r_j) - u_i(D). From D to a neighbour D' each
    u_j moves by at most Delta, so r*(D') <= r*(D) + 2 Delta in general: i
    still wins on D' whenever r_i >= r*(D) + 2 Delta, which has probability at
    least e^(-2 Delta / b) P(r_i >= r*(D)) for Laplace noise. Averaging over
    r_{-i} gives P(i | D') >= e^(-2 Delta / b) P(i | D), and symmetrically.
    If the scores are monotone (package docstring), say u(D) <= u(D') <=
    u(D) + Delta, then r*(D') <= r*(D) + Delta (the max rises by at most Delta
    and u_i does not fall) and r*(D) <= r*(D') + Delta (the max does not rise
    and u_i falls by at most Delta going back); so the factor 2 drops to 1.
    It applies under add/remove only: under replace-one, sums of clipped
    non-negative terms move in different directions, and the factor 2 is
    needed.

    Under replace-one (:meth:`in_adjacency`) an add/remove release of
    sensitivity Delta reads as sensitivity 2 Delta (not monotone), or as
    sensitivity Delta (not monotone) when it was monotone: epsilon doubles,
    which is group privacy of size 2 either way. It is epsilon-DP but not
    known to be epsilon-bounded-range, so it is accounted as pure epsilon-DP.
    """

    sensitivity: float
    scale: float
    minimize: bool = True
    monotone: bool = False
    adjacency: Adjacency = Adjacency.REPLACE_ONE

    kind: ClassVar[str] = "report_noisy_laplace"

    def __post_init__(self) -> None:
        object.__setattr__(self, "sensitivity",
                           check_nonnegative_finite("ReportNoisyMin.sensitivity", self.sensitivity))
        object.__setattr__(self, "scale",
                           check_positive_finite("ReportNoisyMin.scale", self.scale))
        object.__setattr__(self, "minimize", check_bool("ReportNoisyMin.minimize", self.minimize))
        object.__setattr__(self, "monotone", check_bool("ReportNoisyMin.monotone", self.monotone))
        object.__setattr__(self, "adjacency", Adjacency(self.adjacency))
        _check_monotone_adjacency("ReportNoisyMin", self.monotone, self.adjacency)

    @property
    def epsilon(self) -> float:
        return (1.0 if self.monotone else 2.0) * self.sensitivity / self.scale

    @property
    def is_free(self) -> bool:
        return self.sensitivity == 0

    @property
    def pure_epsilon(self) -> float:
        return self.epsilon

    @property
    def score_sensitivities(self) -> tuple[float, ...]:
        return (self.sensitivity,)

    @property
    def summary(self) -> str:
        monotone = ", monotone" if self.monotone else ""
        return f"report-noisy laplace {self._direction} eps={self.epsilon:.3g}{monotone}"

    def with_score_sensitivities(
        self, sensitivities: Sequence[float], adjacency: Adjacency, *, monotone: bool = False
    ) -> ReportNoisyMin:
        sensitivity = max(_checked_sensitivities("score sensitivities", sensitivities))
        return ReportNoisyMin(sensitivity, self.scale, self.minimize, monotone, adjacency)

    def _as_replace_one(self) -> ReportNoisyMin:
        sensitivity = self.sensitivity if self.monotone else 2 * self.sensitivity
        return ReportNoisyMin(sensitivity, self.scale, self.minimize, False, Adjacency.REPLACE_ONE)

    def _noisy_utilities(self, utilities: np.ndarray, source: RandomBits | None) -> np.ndarray:
        # Laplace noise is symmetric: arg-min(u + Z) has the law of arg-max(-u + Z).
        return utilities + laplace_noise(self.scale, utilities.shape, source)

    def _fields(self) -> dict[str, Any]:
        return {"sensitivity": self.sensitivity, "scale": self.scale,
                "minimize": self.minimize, "monotone": self.monotone}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReportNoisyMin:
        return cls(data["sensitivity"], data["scale"], data["minimize"], data["monotone"],
                   Adjacency(data["adjacency"]))


def _gumbel_argmax_logits(coefficient: float, utilities: np.ndarray) -> np.ndarray:
    """coefficient * (u - max u): the exponential mechanism's log-weights up to
    a constant, kept <= 0 so that no large coefficient overflows; an infinite
    coefficient (sensitivity 0) keeps only the maximisers."""
    centred = utilities - utilities.max()
    if math.isinf(coefficient):
        return np.where(centred == 0, 0.0, -np.inf)
    return coefficient * centred


@dataclass(frozen=True)
class ExponentialMechanism(SelectionMechanism):
    """The exponential mechanism (McSherry and Talwar 2007) in Gumbel-max form:
    release arg-max_k (c u_k + G_k) with G_k i.i.d. standard Gumbel and
    c = epsilon / (2 Delta), or c = epsilon / Delta for monotone scores; for
    ``minimize`` u = -scores. By the Gumbel-max trick the output has the law
    P(k) = exp(c u_k) / sum_j exp(c u_j), the mechanism's definition.

    Guarantees, with Delta = max_k Delta_k:

    * epsilon-DP: log P(k | D) / P(k | D') = c (u_k(D) - u_k(D'))
      + log Z(D') / Z(D), each term in [-c Delta, c Delta] = [-epsilon/2,
      epsilon/2] (Dwork and Roth 2014, Thm. 3.10). Monotone: if u(D') >= u(D)
      the first term is in [-epsilon, 0] and the second in [0, epsilon].
    * epsilon-bounded-range (Durfee and Rogers 2019; Dong, Durfee and Rogers
      2020): for fixed D, D' the privacy loss over all outputs k lies in an
      interval of width epsilon, since only its first term depends on k and
      c (u_k(D) - u_k(D')) ranges over width 2 c Delta = epsilon (general) or,
      with every score moving the same way, c Delta = epsilon (monotone).
    * hence (epsilon^2 / 8)-zCDP (Cesar and Rogers 2021: an epsilon-BR loss
      lies in an interval of width epsilon, Hoeffding's lemma bounds its
      moment generating function), i.e. Renyi DP of order alpha at most
      min(epsilon, alpha epsilon^2 / 8), a quarter of pure epsilon-DP's
      alpha epsilon^2 / 2: many EM steps compose much tighter.

    The accountant uses both: a PLD of the pure epsilon-DP pair and the RDP
    curve above, and reports the smaller epsilon
    (:mod:`privadapt.common.accounting.accountant`).

    Under replace-one an add/remove release reads as sensitivity 2 Delta and
    epsilon 2 epsilon (same c), or, monotone, as sensitivity Delta not
    monotone and epsilon 2 epsilon (same c): group privacy of size 2, which
    also doubles the bounded range.
    """

    sensitivity: float
    epsilon: float
    minimize: bool = True
    monotone: bool = False
    adjacency: Adjacency = Adjacency.REPLACE_ONE

    kind: ClassVar[str] = "exponential"

    def __post_init__(self) -> None:
        object.__setattr__(self, "sensitivity", check_nonnegative_finite(
            "ExponentialMechanism.sensitivity", self.sensitivity))
        object.__setattr__(self, "epsilon",
                           check_positive_finite("ExponentialMechanism.epsilon", self.epsilon))
        object.__setattr__(self, "minimize",
                           check_bool("ExponentialMechanism.minimize", self.minimize))
        object.__setattr__(self, "monotone",
                           check_bool("ExponentialMechanism.monotone", self.monotone))
        object.__setattr__(self, "adjacency", Adjacency(self.adjacency))
        _check_monotone_adjacency("ExponentialMechanism", self.monotone, self.adjacency)

    @property
    def coefficient(self) -> float:
        """c: the weight of a utility in the log-probabilities (inf when the
        scores do not depend on the data, sensitivity 0)."""
        if self.sensitivity == 0:
            return math.inf
        return self.epsilon / ((1.0 if self.monotone else 2.0) * self.sensitivity)

    @property
    def is_free(self) -> bool:
        return self.sensitivity == 0

    @property
    def pure_epsilon(self) -> float:
        return 0.0 if self.is_free else self.epsilon

    @property
    def score_sensitivities(self) -> tuple[float, ...]:
        return (self.sensitivity,)

    @property
    def summary(self) -> str:
        monotone = ", monotone" if self.monotone else ""
        return f"exponential {self._direction} eps={self.epsilon:.3g}{monotone}"

    def with_score_sensitivities(
        self, sensitivities: Sequence[float], adjacency: Adjacency, *, monotone: bool = False
    ) -> ExponentialMechanism:
        sensitivity = max(_checked_sensitivities("score sensitivities", sensitivities))
        return ExponentialMechanism(sensitivity, self.epsilon, self.minimize, monotone, adjacency)

    def _as_replace_one(self) -> ExponentialMechanism:
        sensitivity = self.sensitivity if self.monotone else 2 * self.sensitivity
        return ExponentialMechanism(sensitivity, 2 * self.epsilon, self.minimize, False,
                                    Adjacency.REPLACE_ONE)

    def _noisy_utilities(self, utilities: np.ndarray, source: RandomBits | None) -> np.ndarray:
        return _gumbel_argmax_logits(self.coefficient, utilities) + gumbel_noise(
            utilities.shape, source)

    def _fields(self) -> dict[str, Any]:
        return {"sensitivity": self.sensitivity, "epsilon": self.epsilon,
                "minimize": self.minimize, "monotone": self.monotone}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExponentialMechanism:
        return cls(data["sensitivity"], data["epsilon"], data["minimize"], data["monotone"],
                   Adjacency(data["adjacency"]))


@dataclass(frozen=True)
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
        object.__setattr__(self, "sensitivities",
                           _checked_sensitivities(f"{name}.sensitivities", self.sensitivities))
        object.__setattr__(self, "epsilon", check_positive_finite(f"{name}.epsilon", self.epsilon))
        object.__setattr__(self, "beta", check_probability(f"{name}.beta", self.beta))
        object.__setattr__(self, "minimize", check_bool(f"{name}.minimize", self.minimize))
        object.__setattr__(self, "adjacency", Adjacency(self.adjacency))

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
