"""Private selection: a site scores K candidates on its private data, noises the
scores itself and releases only the index of the winner.

Report-noisy-min and the exponential mechanism here, their exact grid forms
(:mod:`.discrete_report_noisy_min`, :mod:`.discrete_selection`) and the
generalized exponential mechanism (:mod:`.generalized_exponential`), each
with its own ledger kind. Throughout, a *score vector*
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

**dp-accounting events.** Every selection here is pure epsilon-DP; its event
is randomized response over two buckets, the tight epsilon-DP pair
(:func:`~privadapt.common.mechanisms.base.pure_dp_event`). dp-accounting has
no bounded-range event, so the exponential mechanisms' event forgets that
property: a replay of many of them is looser than the ledger, which also
reads them as epsilon-bounded-range.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from privadapt.common.mechanisms.base import Adjacency, Mechanism, pure_dp_event
from privadapt.common.noise.floating import RandomBits, gumbel_noise, laplace_noise
from privadapt.common.validation import (
    check_bool,
    check_finite_array,
    check_nonnegative_finite,
    check_positive_finite,
    frozen_value,
)

if TYPE_CHECKING:
    from dp_accounting.dp_event import DpEvent


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
    def accounted_as(self) -> str:
        """"pure_dp": an epsilon-DP release, accounted as the tight pair
        (the exponential mechanisms say "bounded_range")."""
        return "pure_dp"

    def _dp_event(self) -> DpEvent:
        return pure_dp_event(self.pure_epsilon)

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


class OneBoundSelection(SelectionMechanism):
    """A selection on scores of one declared ``sensitivity`` bound, monotone
    or not: report-noisy-min and the exponential mechanisms. Subclasses are
    frozen dataclasses with ``sensitivity``, ``minimize``, ``monotone`` and
    ``adjacency`` fields and check them with :meth:`_check_sensitivity` and
    :meth:`_check_direction`."""

    sensitivity: float
    monotone: bool
    adjacency: Adjacency

    def _check_sensitivity(self) -> None:
        self.sensitivity = check_nonnegative_finite(  # type: ignore[misc]
            f"{type(self).__name__}.sensitivity", self.sensitivity)

    def _check_direction(self) -> None:
        name = type(self).__name__
        self.minimize = check_bool(f"{name}.minimize", self.minimize)  # type: ignore[misc]
        self.monotone = check_bool(f"{name}.monotone", self.monotone)  # type: ignore[misc]
        self.adjacency = Adjacency(self.adjacency)  # type: ignore[misc]
        _check_monotone_adjacency(name, self.monotone, self.adjacency)

    @property
    def is_free(self) -> bool:
        return self.sensitivity == 0

    @property
    def score_sensitivities(self) -> tuple[float, ...]:
        return (self.sensitivity,)

    @property
    def _monotone_note(self) -> str:
        return ", monotone" if self.monotone else ""

    def with_score_sensitivities(
        self, sensitivities: Sequence[float], adjacency: Adjacency, *, monotone: bool = False
    ) -> OneBoundSelection:
        sensitivity = max(_checked_sensitivities("score sensitivities", sensitivities))
        return dataclasses.replace(self, sensitivity=sensitivity,  # type: ignore[type-var]
                                   monotone=monotone, adjacency=adjacency)

    def _as_replace_one(self) -> OneBoundSelection:
        """Group privacy of size 2: sensitivity Delta (monotone) or 2 Delta, not
        monotone, and whatever else :meth:`_replace_one_changes` says."""
        sensitivity = self.sensitivity if self.monotone else 2 * self.sensitivity
        return dataclasses.replace(self, sensitivity=sensitivity,  # type: ignore[type-var]
                                   monotone=False, adjacency=Adjacency.REPLACE_ONE,
                                   **self._replace_one_changes())

    def _replace_one_changes(self) -> dict[str, Any]:
        """Other fields the replace-one reading changes (none for report-noisy-min)."""
        return {}


@frozen_value
class ReportNoisyMin(OneBoundSelection):
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
        self._check_sensitivity()
        self.scale = check_positive_finite("ReportNoisyMin.scale", self.scale)
        self._check_direction()

    @property
    def epsilon(self) -> float:
        return (1.0 if self.monotone else 2.0) * self.sensitivity / self.scale

    @property
    def pure_epsilon(self) -> float:
        return self.epsilon

    @property
    def summary(self) -> str:
        return (f"report-noisy laplace {self._direction} eps={self.epsilon:.3g}"
                f"{self._monotone_note}")

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


@frozen_value
class ExponentialMechanism(OneBoundSelection):
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
        self._check_sensitivity()
        self.epsilon = check_positive_finite("ExponentialMechanism.epsilon", self.epsilon)
        self._check_direction()

    @property
    def accounted_as(self) -> str:
        return "bounded_range"

    @property
    def coefficient(self) -> float:
        """c: the weight of a utility in the log-probabilities (inf when the
        scores do not depend on the data, sensitivity 0)."""
        if self.sensitivity == 0:
            return math.inf
        return self.epsilon / ((1.0 if self.monotone else 2.0) * self.sensitivity)

    @property
    def pure_epsilon(self) -> float:
        return 0.0 if self.is_free else self.epsilon

    @property
    def summary(self) -> str:
        return f"exponential {self._direction} eps={self.epsilon:.3g}{self._monotone_note}"

    def _replace_one_changes(self) -> dict[str, Any]:
        return {"epsilon": 2 * self.epsilon}  # same coefficient c: epsilon doubles

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
