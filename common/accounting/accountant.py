"""Privacy accounting over dp-accounting: compose any sequence of mechanisms.

Two methods, each saying which it is in every number it produces:

* ``PLD`` (privacy loss distributions, pessimistic discretisation): the tight
  epsilon a report states and the one a site's cap is checked against, so a job
  calibrated to exactly its site's cap can run to completion.
* ``RDP`` (Renyi DP): cheap running totals; a looser but valid upper bound.

The accountant reads only what a mechanism says about itself (the accountant
case it names, whether it is free or not private, its pure epsilon, whether it
composes as one Gaussian). The one dispatch on the case is
:mod:`privadapt.common.accounting.cases`: a release's PLD
(:mod:`privadapt.common.accounting.pld`), its RDP
(:mod:`privadapt.common.accounting.rdp`) and its cheap lower bound
(:mod:`privadapt.common.accounting.lower_bounds`); a new mechanism adds one
case there, or names one already there. The Gaussian closed form is
:mod:`privadapt.common.accounting.analytic_gaussian`, and the additive bounds
an incremental ledger keeps :mod:`privadapt.common.accounting.log_mgf`.

Poisson-sampled Gaussians (``GaussianMechanism.sampling_rate`` q < 1) are the
exception to the plain shift pairs of
:mod:`~privadapt.common.accounting.pld`: their PLD is dp-accounting's own
``from_gaussian_mechanism(sigma, sampling_prob=q)`` under ``ADD_OR_REMOVE_ONE``
(the remove pair q N(1, z^2) + (1 - q) N(0, z^2) vs N(0, z^2) and its add
mirror, both kept; what ``PLDAccountant`` builds for ``PoissonSampledDpEvent``),
and their RDP is dp-accounting's sampled-Gaussian RDP (Mironov, Talwar and
Zhang 2019). They never enter the closed-form Gaussian fold: a mixture of
Gaussians is not a Gaussian.

Adjacency of sampled releases. dp-accounting 0.6 accounts
``PoissonSampledDpEvent`` under ``ADD_OR_REMOVE_ONE`` (and ``REPLACE_SPECIAL``)
in both accountants; its RDP accountant refuses ``REPLACE_ONE``, and its PLD one
builds a one-dimensional replace pair (a record's contribution moving from -s
to +s) whose norm bound s is a *per-record* bound, not the sum's replace-one
sensitivity our mechanisms declare (google/differential-privacy#378 is
this very confusion). Nor can a sampled add/remove guarantee be converted by
doubling the sensitivity: the shift of a sampled record is not a shift of the
whole output. So a sampled mechanism exists only under add/remove
(:class:`GaussianMechanism` enforces it), ``in_adjacency`` refuses to move it
to replace-one, and a site whose cap is stated under replace-one refuses it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from privadapt.common.accounting.analytic_gaussian import gaussian_epsilon
from privadapt.common.accounting.cases import (
    has_pld,
    is_bounded_range,
    pld_loss_width,
    release_epsilon_lower_bound,
    release_pld,
    release_rdp,
)
from privadapt.common.accounting.pld import DEFAULT_VALUE_DISCRETIZATION
from privadapt.common.accounting.rdp import DEFAULT_RDP_ORDERS
from privadapt.common.mechanisms import Adjacency, GaussianMechanism, Mechanism

#: The most points one release's discretised PLD may have before an accountant
#: refuses to build it (:meth:`PrivacyAccountant.pld_points`): about 450 MiB
#: and a few seconds of dp-accounting time. Only a release costing epsilon
#: ~100 or more reaches it (a Laplace of epsilon 104, a Gaussian of multiplier
#: 0.074), far beyond any cap a site would set.
MAX_PLD_POINTS = 2**21


class AccountingMethod(StrEnum):
    PLD = "pld"
    RDP = "rdp"


@dataclass(frozen=True)
class EpsilonReport:
    """An epsilon at a delta, and the method it came from."""

    epsilon: float
    delta: float
    method: AccountingMethod

    def __str__(self) -> str:
        return f"epsilon={self.epsilon:.4g} at delta={self.delta:.3g} ({self.method.value.upper()})"


class PrivacyAccountant:
    """Composes mechanisms (all expressed in one adjacency) and reports epsilon.

    Identical mechanisms are grouped and self-composed, so a ledger of T
    releases of the same noise costs one PLD construction, not T convolutions.
    """

    def __init__(
        self,
        adjacency: Adjacency = Adjacency.REPLACE_ONE,
        method: AccountingMethod | str = AccountingMethod.PLD,
        value_discretization_interval: float = DEFAULT_VALUE_DISCRETIZATION,
        rdp_orders: Iterable[float] = DEFAULT_RDP_ORDERS,
    ) -> None:
        self.adjacency = Adjacency(adjacency)
        self.method = AccountingMethod(method)
        self.value_discretization_interval = value_discretization_interval
        self._orders = np.asarray(tuple(rdp_orders), dtype=float)
        self._counts: Counter[Mechanism] = Counter()
        self._non_private = False

    def compose(self, mechanism: Mechanism, count: int = 1) -> PrivacyAccountant:
        if count < 0 or int(count) != count:
            raise ValueError(f"count must be a non-negative integer, got {count!r}")
        mechanism = mechanism.in_adjacency(self.adjacency)
        if mechanism.is_non_private:
            self._non_private = self._non_private or count > 0
        elif not mechanism.is_free and count > 0:
            self._counts[mechanism] += int(count)
        return self

    def needs_rdp(self) -> bool:
        """True when some composed mechanism has no PLD (zCDP events)."""
        return not all(has_pld(m) for m in self._counts)

    def get_epsilon(self, delta: float) -> float:
        return self.report(delta).epsilon

    def report(self, delta: float) -> EpsilonReport:
        """Epsilon at ``delta``. A PLD accountant holding a zCDP event answers
        by RDP and says so in the report's ``method``. A PLD accountant holding
        a bounded-range selection
        (:attr:`~privadapt.common.accounting.cases.AccountingCase.bounded_range`) computes
        both figures and reports the smaller, with its method: each is a valid
        upper bound on the composition's epsilon at ``delta`` (the PLD one
        treats those selections as pure epsilon-DP, the RDP one as epsilon-
        bounded-range), so their minimum is one too, and with many exponential-
        mechanism steps the RDP one is the tighter."""
        if not 0 <= delta < 1:
            raise ValueError(f"delta must be in [0, 1), got {delta!r}")
        method = self.method
        if method == AccountingMethod.PLD and self.needs_rdp():
            method = AccountingMethod.RDP
        if self._non_private:
            return EpsilonReport(math.inf, delta, method)
        if not self._counts:
            return EpsilonReport(0.0, delta, method)
        if delta == 0:
            return EpsilonReport(self._pure_epsilon(), delta, method)
        if method == AccountingMethod.RDP:
            return EpsilonReport(self._rdp_epsilon(delta), delta, method)
        pld = EpsilonReport(self._pld_epsilon(delta), delta, method)
        if not any(is_bounded_range(m) for m in self._counts):
            return pld
        rdp = EpsilonReport(self._rdp_epsilon(delta), delta, AccountingMethod.RDP)
        return rdp if rdp.epsilon < pld.epsilon else pld

    def _rdp_epsilon(self, delta: float) -> float:
        rdp = sum(count * release_rdp(m, self._orders) for m, count in self._counts.items())
        # Imported lazily, as the PLD modules are (accounting_pld._pld_modules).
        from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib

        epsilon, _ = rdp_lib.compute_epsilon(self._orders, rdp, delta)
        return float(epsilon)

    def _pld_epsilon(self, delta: float) -> float:
        groups = self._pld_groups()
        if self.pld_points() > MAX_PLD_POINTS:
            raise ValueError(
                f"its privacy loss distribution would have about {self.pld_points():.3g} "
                f"points (at most {MAX_PLD_POINTS} are built): a release this costly is "
                "beyond any cap; refuse it by epsilon_lower_bound first"
            )
        only = groups[0][0]
        if len(groups) == 1 and only.composes_as_gaussian:
            return gaussian_epsilon(only.noise_multiplier, delta)
        interval = self.value_discretization_interval
        composed = None
        for mechanism, count in groups:
            pld = release_pld(mechanism, interval, count)
            composed = pld if composed is None else composed.compose(pld)
        return float(composed.get_epsilon_for_delta(delta))

    def _pld_groups(self) -> list[tuple[Mechanism, int]]:
        """Mechanisms to build PLDs for, with their counts. All unsampled
        Gaussian releases fold into one Gaussian of multiplier
        (sum_i 1/z_i^2)^(-1/2): composing Gaussians is exactly a Gaussian, so
        this is tighter and faster than convolving their discretised PLDs.
        Sampled Gaussians (mixtures, not Gaussians) keep their own groups."""
        inverse_square = 0.0
        groups: list[tuple[Mechanism, int]] = []
        for mechanism, count in sorted(self._counts.items(), key=lambda kv: repr(kv[0])):
            if mechanism.composes_as_gaussian:
                # (1/z)(1/z), not 1/z**2: z = 1e-300 gives inf, not ZeroDivisionError
                # (z**2 underflows) nor OverflowError (float ** raises, * does not).
                inverse = 1.0 / mechanism.noise_multiplier
                inverse_square += count * inverse * inverse
            else:
                groups.append((mechanism, count))
        if inverse_square > 0:
            # A Gaussian so narrow that its multiplier underflows is accounted
            # as a multiplier of the smallest float: epsilon inf either way.
            multiplier = max(inverse_square**-0.5, math.ulp(0.0))
            folded = GaussianMechanism.single(1.0, multiplier, self.adjacency)
            groups.insert(0, (folded, 1))
        return groups

    def epsilon_lower_bound(self, delta: float) -> float:
        """A lower bound on :meth:`report`'s epsilon at ``delta`` that builds no
        PLD: a composition never costs less than any one of its releases (or
        than the fold of all its Gaussians, itself one Gaussian), each taken
        in closed form (:func:`release_epsilon_lower_bound`). So a ledger can
        refuse what its cap cannot afford before paying for the exact figure."""
        if self._non_private:
            return math.inf
        return max(
            (release_epsilon_lower_bound(m, delta) for m, _ in self._pld_groups()), default=0.0
        )

    def pld_points(self) -> float:
        """The support size of the largest single-release PLD :meth:`report`
        would build (0 when it builds none). Above :data:`MAX_PLD_POINTS` the
        PLD would take gigabytes and minutes; callers refuse instead."""
        if self._non_private or self.needs_rdp() or self.method != AccountingMethod.PLD:
            return 0.0
        groups = self._pld_groups()
        if not groups or (len(groups) == 1 and groups[0][0].composes_as_gaussian):
            return 0.0  # nothing to account, or the closed form
        width = max(pld_loss_width(m) for m, _ in groups)
        return width / self.value_discretization_interval

    def _pure_epsilon(self) -> float:
        """Epsilon at delta = 0: the sum of the pure epsilons (basic composition is
        exact there), or inf if any composed mechanism is not pure. Not left to the
        PLD, whose tail truncation and rounding leave ~1e-16 mass at infinite loss
        and so report inf even for one Laplace release; RDP always reports inf."""
        total = 0.0
        for mechanism, count in self._counts.items():
            epsilon = mechanism.pure_epsilon
            if math.isinf(epsilon):
                return math.inf
            total += count * epsilon
        return total


def epsilon_spent(
    mechanisms: Iterable[Mechanism],
    delta: float,
    adjacency: Adjacency = Adjacency.REPLACE_ONE,
    method: AccountingMethod | str = AccountingMethod.PLD,
) -> EpsilonReport:
    """The composed epsilon at ``delta`` of a sequence of releases."""
    accountant = PrivacyAccountant(adjacency, method)
    for mechanism in mechanisms:
        accountant.compose(mechanism)
    return accountant.report(delta)
