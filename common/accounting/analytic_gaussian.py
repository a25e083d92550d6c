"""The analytic Gaussian mechanism (Balle and Wang 2018, Thm. 8) in closed
form: delta(epsilon) of one Gaussian release, and its two inversions, epsilon
at a delta and the noise multiplier at an (epsilon, delta).

Why a module of its own: a composition of Gaussians is exactly one Gaussian,
so a Gaussian-only ledger (the common case at every site) and the
coordinator's calibration need only these formulas, which cost a millisecond
and import no dp-accounting PLD module (:mod:`privadapt.common.accounting.pld`
says why that import is avoided).
"""

from __future__ import annotations

import functools
import math

from scipy import special

_ROOT_TOLERANCE = 1e-10


# Kept: every site of a federation in one process asks for the same few
# (multiplier, delta) pairs on every check and charge (the policy's cap delta
# and the job's Gaussians), and the bisection is 40-odd evaluations of
# delta(epsilon); the answer is a pure function of the two floats.
@functools.lru_cache(maxsize=1024)
def gaussian_epsilon(noise_multiplier: float, delta: float) -> float:
    """Exact epsilon at ``delta`` of one Gaussian release with this noise
    multiplier (Balle and Wang 2018, Thm. 8), rounded up by the root tolerance.

    A composition of Gaussians is exactly one Gaussian, so a Gaussian-only
    ledger needs no discretised PLD: this is the PLD's own closed form (the
    discretised PLD is at most ~1e-6 above it), and costs a millisecond where
    building the PLD of a long composition costs tens.
    """
    if not noise_multiplier > 0:
        return math.inf  # a multiplier that underflowed to 0: no noise at all

    def excess(epsilon: float) -> float:
        return gaussian_delta(noise_multiplier, epsilon) - delta

    if excess(0.0) <= 0:
        return 0.0
    high = 1.0
    while excess(high) > 0:
        high *= 2.0
        if high > 1e6:
            return math.inf
    # Bisection on the monotone delta(epsilon): about 40 halvings reach the
    # tolerance, and it spares every process scipy.optimize (~23 MiB).
    low = 0.0
    while high - low > _ROOT_TOLERANCE:
        middle = 0.5 * (low + high)
        if excess(middle) > 0:
            low = middle
        else:
            high = middle
    return float(high + _ROOT_TOLERANCE)


def gaussian_delta(noise_multiplier: float, epsilon: float) -> float:
    """delta(epsilon) of one Gaussian release of sensitivity 1 and standard
    deviation ``noise_multiplier`` (Balle and Wang 2018, Thm. 8):
    Phi(1/(2 sigma) - epsilon sigma) - e^epsilon Phi(-1/(2 sigma) - epsilon sigma),
    the second term in log space so e^epsilon cannot overflow."""
    sigma = noise_multiplier
    if not sigma > 0:
        return 1.0  # no noise: the two outputs are told apart surely
    first = special.ndtr(0.5 / sigma - epsilon * sigma)
    second = math.exp(epsilon + special.log_ndtr(-0.5 / sigma - epsilon * sigma))
    return max(0.0, float(first - second))


def gaussian_sigma(epsilon: float, delta: float) -> float:
    """The noise multiplier at which one Gaussian release is exactly
    (epsilon, delta)-DP: :func:`gaussian_delta` inverted by bisection in log
    space (delta falls as sigma grows) to a relative 1e-12. The analytic
    Gaussian mechanism (Balle and Wang 2018), as dp-accounting's
    ``get_sigma_gaussian``, without importing its PLD modules."""
    if not (epsilon > 0 and 0 < delta < 1):
        raise ValueError(f"need epsilon > 0 and 0 < delta < 1, got {epsilon!r}, {delta!r}")
    low, high = 1.0, 1.0
    while gaussian_delta(high, epsilon) > delta:
        high *= 2.0
    while gaussian_delta(low, epsilon) <= delta and low > 1e-12:
        low /= 2.0
    while high / low > 1 + 1e-12:
        middle = math.sqrt(low * high)
        if gaussian_delta(middle, epsilon) > delta:
            low = middle
        else:
            high = middle
    return high
