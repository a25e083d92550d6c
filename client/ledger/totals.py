"""What a ledger keeps about its history so that a charge costs the same
after a hundred charges or a hundred thousand.

Why not keep the composed PLD of the history and convolve each new release
into it: the composed figure would then depend on the order of composition
and its truncations, and no longer equal what a recomputation from the rows
gives (the policy's exact accountant, :func:`~privadapt.client.ledger.accounting.exact_report`,
groups identical releases and self-composes them). Instead the ledger keeps
quantities that compose by *addition*, exactly, in any order:

* the groups (mechanism JSON -> count), from which the exact figure is
  recomputed when it is needed, at a cost that grows with the number of
  distinct mechanisms, never with the number of charges;
* the pure-epsilon sum (the exact figure at delta = 0);
* the RDP curve at the accountant's orders (the exact figure under the RDP
  method, and whenever a zCDP event forces the accountant to RDP);
* for the PLD method, the log moment generating function of the very
  discretised PLDs the exact accountant self-composes
  (:func:`~privadapt.common.accounting.log_mgf.pld_log_mgfs`), per direction, with
  their infinity masses, and the sum of 1/z^2 of the unsampled Gaussians
  the accountant folds into one (its discretised PLD bounded by
  :func:`~privadapt.common.accounting.log_mgf.gaussian_pld_log_mgf_bound`).

:meth:`Sums.upper_bound` turns them into an epsilon that is never below the
policy's exact figure for the same history: at delta = 0 and under RDP it
is that figure (rounded up by a relative 1e-9, more than the float error of
summing in another order); under PLD it bounds the exact accountant's own
discretised PLD, whose epsilon is the figure the cap is checked against (not
the true epsilon, which plain RDP would bound, but which the discretised PLD
can exceed: dp-accounting rounds a pure-DP event's loss up to its grid, so a
thousand pure events of epsilon 1.1e-4 are charged as epsilon 2e-4 each).
So a charge whose upper bound fits the cap is admitted without any PLD, and
only one near the cap pays for the exact figure.

A selection mechanism kind needs nothing here: its RDP
and PLD come through ``release_rdp`` and ``release_pld``, the accountant's
own dispatch tables.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import dataclass, field, replace

import numpy as np

from privadapt.client.ledger.accounting import parse_mechanism
from privadapt.common.accounting.accountant import AccountingMethod
from privadapt.common.accounting.cases import has_pld, release_pld, release_rdp
from privadapt.common.accounting.log_mgf import (
    GAUSSIAN_PLD_INFINITY_MASS,
    epsilon_from_log_mgf,
    gaussian_pld_log_mgf_bound,
    pld_log_mgfs,
)
from privadapt.common.accounting.pld import DEFAULT_VALUE_DISCRETIZATION
from privadapt.common.accounting.rdp import DEFAULT_RDP_ORDERS
from privadapt.common.mechanisms import Adjacency

ORDERS = np.asarray(DEFAULT_RDP_ORDERS, dtype=float)
LAMBDAS = ORDERS - 1.0
# Float error of adding up to ~1e7 terms in another order, rounded up.
_ROUNDING = 1e-9
# Mass dp-accounting's compose and self_compose may move to infinite loss
# when they truncate tails (1e-15 per operation), for thousands of operations.
_TRUNCATION_SLACK = 1e-12
_ZEROS = np.zeros_like(ORDERS)
_ZEROS.flags.writeable = False


@dataclass(frozen=True)
class ReleaseTerms:
    """What one release of a stored mechanism adds to the sums, in the
    ledger's adjacency."""

    non_private: bool
    free: bool
    folds: bool  # an unsampled Gaussian: joins the accountant's one-Gaussian fold
    inverse_square: float
    pure_epsilon: float
    needs_rdp: bool  # a kind with no PLD (zCDP): the accountant answers by RDP
    rdp: np.ndarray


@functools.lru_cache(maxsize=4096)
def release_terms(text: str, adjacency: Adjacency) -> ReleaseTerms:
    """The terms of one release of the mechanism stored as ``text``."""
    mechanism = parse_mechanism(text).in_adjacency(adjacency)
    if mechanism.is_non_private or mechanism.is_free:
        return ReleaseTerms(mechanism.is_non_private, mechanism.is_free, False, 0.0, 0.0,
                            False, _ZEROS)
    folds = mechanism.composes_as_gaussian
    inverse = 1.0 / mechanism.noise_multiplier if folds else 0.0
    rdp = release_rdp(mechanism, ORDERS)
    rdp.flags.writeable = False
    needs_rdp = not has_pld(mechanism)  # the accountant's test, on one release
    return ReleaseTerms(False, False, folds, inverse * inverse, mechanism.pure_epsilon,
                        needs_rdp, rdp)


@functools.lru_cache(maxsize=1024)
def release_pld_terms(text: str, adjacency: Adjacency) -> tuple[np.ndarray, np.ndarray, float]:
    """Log-MGFs (remove, add) of the discretised PLD the exact accountant
    composes for one release of ``text`` (not a folded Gaussian, not a kind
    without PLD), and the larger of its two infinity masses. Built once per
    mechanism and process: the one PLD a charge may build."""
    mechanism = parse_mechanism(text).in_adjacency(adjacency)
    remove, add, mass_remove, mass_add = pld_log_mgfs(
        release_pld(mechanism, DEFAULT_VALUE_DISCRETIZATION), LAMBDAS)
    return remove, add, max(mass_remove, mass_add)


@dataclass(frozen=True)
class Sums:
    """The additive quantities of a multiset of releases."""

    private_releases: int = 0
    non_private: bool = False
    needs_rdp: bool = False
    pure_epsilon: float = 0.0
    rdp: np.ndarray = field(default_factory=lambda: _ZEROS)
    inverse_square: float = 0.0
    # None: not tracked (an RDP policy), or not yet built (see LedgerTotals).
    pld_remove: np.ndarray | None = None
    pld_add: np.ndarray | None = None
    infinity_mass: float = 0.0

    def plus(self, text: str, adjacency: Adjacency, count: int = 1) -> Sums:
        """These sums with ``count`` more releases of ``text``."""
        terms = release_terms(text, adjacency)
        if terms.non_private:
            return replace(self, non_private=True)
        if terms.free or count == 0:
            return self
        changes: dict = {
            "private_releases": self.private_releases + count,
            "needs_rdp": self.needs_rdp or terms.needs_rdp,
            "pure_epsilon": self.pure_epsilon + count * terms.pure_epsilon,
            "rdp": self.rdp + count * terms.rdp,
            "inverse_square": self.inverse_square + count * terms.inverse_square,
        }
        if self.pld_remove is not None and not terms.folds and not terms.needs_rdp:
            remove, add, mass = release_pld_terms(text, adjacency)
            changes.update(pld_remove=self.pld_remove + count * remove,
                           pld_add=self.pld_add + count * add,
                           infinity_mass=self.infinity_mass + count * mass)
        return replace(self, **changes)

    def method(self, policy_method: AccountingMethod) -> AccountingMethod:
        """The method the exact accountant answers these releases by."""
        return AccountingMethod.RDP if self.needs_rdp else AccountingMethod(policy_method)

    def upper_bound(self, delta: float, policy_method: AccountingMethod) -> float:
        """An epsilon at ``delta`` never below the exact accountant's figure
        for these releases (module docstring); inf when none can be given."""
        if self.non_private:
            return math.inf
        if self.private_releases == 0:
            return 0.0
        if delta == 0:
            return self.pure_epsilon * (1 + _ROUNDING)
        if self.method(policy_method) == AccountingMethod.RDP:
            return _epsilon_at(self.rdp * LAMBDAS * (1 + _ROUNDING), delta)
        if self.pld_remove is None:
            return math.inf
        fold = _ZEROS
        mass = self.infinity_mass + _TRUNCATION_SLACK
        if self.inverse_square > 0:
            fold = gaussian_pld_log_mgf_bound(self.inverse_square, LAMBDAS)
            mass += GAUSSIAN_PLD_INFINITY_MASS
        if not delta > mass:
            return math.inf
        return max(
            _epsilon_at(_rounded_up(curve + fold), delta - mass)
            for curve in (self.pld_remove, self.pld_add)
        )


def _rounded_up(curve: np.ndarray) -> np.ndarray:
    return curve + np.abs(curve) * _ROUNDING


def _epsilon_at(log_mgf: np.ndarray, delta: float) -> float:
    """``epsilon_from_log_mgf`` at the ledger's orders, kept per curve."""
    return _epsilon_of_curve(np.ascontiguousarray(log_mgf, dtype=float).tobytes(), delta)


# Kept by the curve's exact bytes: the sites of a federation in one process
# hold the same history and check the same release, so each asks for the
# same curves (a dozen numpy calls each, twice per budget check).
@functools.lru_cache(maxsize=1024)
def _epsilon_of_curve(curve: bytes, delta: float) -> float:
    return epsilon_from_log_mgf(np.frombuffer(curve), LAMBDAS, delta)


class LedgerTotals:
    """The groups and sums of a ledger's charges, kept as charges are added.

    ``track_pld``: keep the PLD log-MGFs too (a PLD policy). They are built on
    first use (:meth:`sums`), not when a ledger opens: opening a ledger never
    builds a PLD."""

    def __init__(self, adjacency: Adjacency, track_pld: bool) -> None:
        self.adjacency = Adjacency(adjacency)
        self.groups: Counter[str] = Counter()
        self.count = 0
        self._track_pld = track_pld
        self._sums = Sums()

    @classmethod
    def from_groups(cls, groups: Counter[str] | dict[str, int], adjacency: Adjacency,
                    track_pld: bool) -> LedgerTotals:
        totals = cls(adjacency, track_pld)
        for text, count in sorted(groups.items()):
            totals.add(text, count)
        return totals

    def add(self, text: str, count: int = 1) -> None:
        self.groups[text] += count
        self.count += count
        self._sums = self._sums.plus(text, self.adjacency, count)

    def sums(self) -> Sums:
        """The sums, with PLD log-MGFs built now if tracked and not yet built."""
        if self._track_pld and self._sums.pld_remove is None:
            sums = replace(Sums(), pld_remove=_ZEROS, pld_add=_ZEROS)
            for text, count in sorted(self.groups.items()):
                sums = sums.plus(text, self.adjacency, count)
            self._sums = sums
        return self._sums

    def stored_sums(self) -> tuple[float, np.ndarray]:
        """The pure-epsilon sum and RDP curve a ledger stores and checks."""
        return self._sums.pure_epsilon, self._sums.rdp
