"""The accountant's cases: one entry per family of releases it reads, and the
one dispatch on it.

A mechanism names its case (``Mechanism.accounted_as``: its own kind, or a
family it belongs to, "pure_dp" or "bounded_range"), and the case says how
every accounting method reads one release of it: its privacy loss
distribution (none: the accountant answers by RDP), its Renyi curve, a
closed-form lower bound on its epsilon (a ledger's cheap refusal), and the
loss range its PLD spans (a ledger's refusal of a PLD too large to build).
The formulas live in :mod:`.pld`, :mod:`.rdp` and :mod:`.lower_bounds`; this
table is the only place that pairs them with a mechanism, so a new mechanism
adds one entry here, or none when it is accounted as a family already here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from privadapt.common.accounting import lower_bounds, pld, rdp
from privadapt.common.mechanisms import Mechanism


def _no_loss_width(mechanism: Mechanism) -> float:
    return 0.0


@dataclass(frozen=True)
class AccountingCase:
    """How the accountant reads one release of a family (module docstring)."""

    #: Its RDP at an array of orders.
    rdp: Callable[[Mechanism, np.ndarray], np.ndarray]
    #: The PLD of ``count`` releases at a loss interval; None: RDP only.
    pld: Callable[[Mechanism, int, float], Any] | None = None
    #: A closed-form lower bound on its epsilon at a delta.
    lower_bound: Callable[[Mechanism, float], float] = lower_bounds.no_lower_bound
    #: The loss range its PLD spans (0: none built, or negligible).
    loss_width: Callable[[Mechanism], float] = _no_loss_width
    #: epsilon-bounded-range (Durfee and Rogers 2019): its PLD (the pure
    #: epsilon-DP pair) ignores that property, its RDP uses it, and over many
    #: releases that is the smaller figure, so a PLD accountant holding one
    #: reports the smaller of the two.
    bounded_range: bool = False


_PURE_DP = AccountingCase(rdp=rdp.pure_dp_rdp, pld=pld.pure_dp_pld,
                          lower_bound=lower_bounds.pure_dp_lower_bound,
                          loss_width=pld.pure_loss_width)

#: Case name (``Mechanism.accounted_as``) -> case.
CASES: dict[str, AccountingCase] = {
    "gaussian": AccountingCase(rdp=rdp.gaussian_rdp, pld=pld.gaussian_pld,
                               lower_bound=lower_bounds.gaussian_lower_bound,
                               loss_width=pld.gaussian_loss_width),
    "poisson_sampled_gaussian": AccountingCase(rdp=rdp.sampled_gaussian_rdp,
                                               pld=pld.sampled_gaussian_pld,
                                               loss_width=pld.gaussian_loss_width),
    "laplace": AccountingCase(rdp=rdp.laplace_rdp, pld=pld.laplace_pld,
                              lower_bound=lower_bounds.laplace_lower_bound,
                              loss_width=pld.pure_loss_width),
    # Pure epsilon-DP's RDP bound: sound for the discrete Laplace (exactly pure).
    "discrete_laplace": AccountingCase(rdp=rdp.pure_dp_rdp, pld=pld.discrete_laplace_pld,
                                       lower_bound=lower_bounds.discrete_laplace_lower_bound,
                                       loss_width=pld.pure_loss_width),
    "distributed_discrete_gaussian": AccountingCase(rdp=rdp.distributed_discrete_gaussian_rdp),
    "zcdp": AccountingCase(rdp=rdp.zcdp_rdp),
    # Any epsilon-DP release, read as the tight pair (pure events, report-noisy-min).
    "pure_dp": _PURE_DP,
    # The exponential mechanisms: epsilon-DP and epsilon-bounded-range.
    "bounded_range": AccountingCase(rdp=rdp.bounded_range_rdp, pld=pld.pure_dp_pld,
                                    lower_bound=lower_bounds.bounded_range_lower_bound,
                                    loss_width=pld.pure_loss_width, bounded_range=True),
}


def case_of(mechanism: Mechanism) -> AccountingCase:
    """The case ``mechanism`` is accounted by; ``TypeError`` when it names none."""
    case = CASES.get(mechanism.accounted_as)
    if case is None:
        raise TypeError(f"no accountant case {mechanism.accounted_as!r} for {mechanism!r}")
    return case


def has_pld(mechanism: Mechanism) -> bool:
    """Whether ``mechanism``'s case has a PLD; an accountant holding one that
    has none answers by RDP."""
    return case_of(mechanism).pld is not None


def release_pld(
    mechanism: Mechanism, interval: float = pld.DEFAULT_VALUE_DISCRETIZATION, count: int = 1
):  # -> PrivacyLossDistribution
    """The discretised PLD of ``count`` releases of ``mechanism`` (already in
    the accountant's adjacency): what :meth:`PrivacyAccountant.report
    <privadapt.common.accounting.accountant.PrivacyAccountant.report>` composes for its
    group, and (``count`` 1) what an incremental ledger takes log-MGFs of.
    A ledger does not take it for unsampled Gaussians: the accountant folds
    those into one Gaussian (``composes_as_gaussian``), whose log-MGF the
    ledger bounds in closed form (:mod:`privadapt.common.accounting.log_mgf`)."""
    builder = case_of(mechanism).pld
    if builder is None:
        raise ValueError(
            f"{type(mechanism).__name__} has no privacy loss distribution; use the RDP method"
        )
    return builder(mechanism, count, interval)


def release_rdp(mechanism: Mechanism, orders: np.ndarray) -> np.ndarray:
    """RDP at ``orders`` of one release of ``mechanism`` (already in the
    accountant's adjacency): the term :meth:`PrivacyAccountant.report
    <privadapt.common.accounting.accountant.PrivacyAccountant.report>` adds up for it
    under the RDP method, and the one an incremental ledger sums."""
    curve = case_of(mechanism).rdp
    return np.asarray(curve(mechanism, np.asarray(orders, dtype=float)), dtype=float)


def release_epsilon_lower_bound(mechanism: Mechanism, delta: float) -> float:
    """A lower bound (exact where known) on the epsilon at ``delta`` of one
    release of ``mechanism``, in closed form, with no PLD: inf when it is not
    private, 0 when it is free, else its case's bound
    (:mod:`privadapt.common.accounting.lower_bounds`)."""
    if mechanism.is_non_private:
        return float("inf")
    if mechanism.is_free:
        return 0.0
    return case_of(mechanism).lower_bound(mechanism, delta)


def pld_loss_width(mechanism: Mechanism) -> float:
    """The privacy-loss range dp-accounting's PLD of one release spans
    (measured against dp-accounting 0.6 at interval 1e-4, rounded up)."""
    return case_of(mechanism).loss_width(mechanism)


def is_bounded_range(mechanism: Mechanism) -> bool:
    """Whether its case reads it as epsilon-bounded-range (:class:`AccountingCase`)."""
    return case_of(mechanism).bounded_range
