"""Closed-form lower bounds on one release's epsilon, built without a PLD.

Why: a ledger must refuse a release its cap cannot afford before paying for
the exact figure, and an attacker may send one whose PLD would take gigabytes
(a Laplace of epsilon 1e4). Every bound here is at most what any valid
accounting of the release (PLD or RDP) reports, so refusing on it is sound;
:meth:`PrivacyAccountant.epsilon_lower_bound
<privadapt.common.accounting.accountant.PrivacyAccountant.epsilon_lower_bound>` takes the
largest over a composition's releases; which bound a release gets is its
accountant case's (:mod:`privadapt.common.accounting.cases`).
"""

from __future__ import annotations

import math

import numpy as np

from privadapt.common.accounting.analytic_gaussian import gaussian_epsilon
from privadapt.common.mechanisms import Mechanism


def gaussian_lower_bound(mechanism: Mechanism, delta: float) -> float:
    """A Gaussian of multiplier z: :func:`gaussian_epsilon`, exact."""
    return gaussian_epsilon(mechanism.noise_multiplier, delta)


def laplace_lower_bound(mechanism: Mechanism, delta: float) -> float:
    """A Laplace of pure epsilon e: e + 2 log(1 - delta), from its exact
    delta(epsilon) = 1 - exp((epsilon - e) / 2)."""
    return max(0.0, mechanism.pure_epsilon + 2.0 * math.log1p(-delta))


def discrete_laplace_lower_bound(mechanism: Mechanism, delta: float) -> float:
    """A discrete Laplace of pure epsilon e: e + log(1 - 2 delta). Mass
    1/(1 + q) >= 1/2 sits at loss exactly e (outputs at or beyond the far
    centre), so delta(epsilon') >= (1 - e^(epsilon' - e)) / 2."""
    return max(0.0, mechanism.pure_epsilon + math.log1p(-min(1.0, 2.0 * delta)))


def pure_dp_lower_bound(mechanism: Mechanism, delta: float) -> float:
    """A pure e-DP event or a report-noisy-min, read as the tight pair:
    log(e^e - delta (1 + e^e))."""
    return _randomized_response_epsilon(mechanism.pure_epsilon, delta)


def bounded_range_lower_bound(mechanism: Mechanism, delta: float) -> float:
    """An e-bounded-range selection (exponential mechanisms): the exact
    epsilon of the worst of a grid of e-bounded-range pairs, which both its
    PLD and its RDP bound from above."""
    return _bounded_range_epsilon_lower_bound(mechanism.pure_epsilon, delta)


def no_lower_bound(mechanism: Mechanism, delta: float) -> float:
    """Anything else (sampled Gaussians, zCDP): 0, no bound claimed."""
    return 0.0


def _bounded_range_epsilon_lower_bound(pure: float, delta: float) -> float:
    """The largest exact epsilon at ``delta`` over a grid of two-point
    ``pure``-bounded-range pairs: Q puts mass q on an output of privacy loss
    t + e and 1 - q on one of loss t, with t = -log(1 + x), x = q (e^e - 1), so
    that P is a distribution. For epsilon' in [0, t + e] its delta is
    q e^(t + e) - q e^epsilon', so epsilon' = e - log(1 + x)
    + log(1 - delta (1 + x) (1 - e^-e) / x), written in x so that no e^e is
    formed (e may be 1e4: an attack the ledger must refuse cheaply). Every pair
    is e-bounded-range (and e-DP), so any valid accounting of an
    e-bounded-range release, PLD or RDP, is at least this."""
    x = np.geomspace(1e-15, math.expm1(min(pure, 700.0)), 600)  # q in (0, 1]
    inner = 1.0 - delta * (1.0 + x) * -math.expm1(-pure) / x
    with np.errstate(divide="ignore"):
        epsilons = np.where(inner > 0, pure - np.log1p(x) + np.log(np.maximum(inner, 1e-300)),
                            0.0)
    return max(0.0, float(epsilons.max()))


def _randomized_response_epsilon(pure: float, delta: float) -> float:
    """Exact epsilon at ``delta`` of the tight pure ``pure``-DP pair."""
    shrink = delta * (1.0 + math.exp(-pure))
    return 0.0 if shrink >= 1 else max(0.0, pure + math.log1p(-shrink))
