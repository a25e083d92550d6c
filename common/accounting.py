"""Privacy accounting over dp-accounting: compose any sequence of mechanisms.

Two methods, each saying which it is in every number it produces:

* ``PLD`` (privacy loss distributions, pessimistic discretisation): the tight
  epsilon a report states and the one a site's cap is checked against, so a job
  calibrated to exactly its site's cap can run to completion.
* ``RDP`` (Renyi DP): cheap running totals; a looser but valid upper bound.

Why PLDs are built per mechanism instead of through dp-accounting's
``PLDAccountant``: that accountant fixes one neighbouring relation for every
event, and its relations disagree on what a Gaussian's sensitivity means and
refuse some events (Laplace under replace-one, randomized response under
add/remove). Our mechanisms already declare the sensitivity of the released sum
under their own adjacency, so each one is a plain "shift by sensitivity" pair
(Gaussian, Laplace) or the tight pure-DP pair; an accountant only has to express
every mechanism in its own adjacency first (``Mechanism.in_adjacency``).

The accountant reads only what a mechanism says about itself (its kind, whether
it is free or not private, its pure epsilon, whether it composes as one
Gaussian) and holds the only two dispatches on kind: a mechanism's PLD and its
RDP. A new mechanism kind adds one entry to each.

Poisson-sampled Gaussians (``GaussianMechanism.sampling_rate`` q < 1) are the
exception to "plain shift pairs": their PLD is dp-accounting's own
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
sensitivity our mechanisms declare (google/differential-privacy issue 378 is
this very confusion). Nor can a sampled add/remove guarantee be converted by
doubling the sensitivity: the shift of a sampled record is not a shift of the
whole output. So a sampled mechanism exists only under add/remove
(:class:`GaussianMechanism` enforces it), ``in_adjacency`` refuses to move it
to replace-one, and a site whose cap is stated under replace-one refuses it.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction

import numpy as np
from scipy import special

from privadapt.common.mechanisms import Adjacency, GaussianMechanism, Mechanism

DEFAULT_RDP_ORDERS: tuple[float, ...] = tuple(
    [1.0 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)) + [128.0, 256.0, 512.0, 1024.0]
)
DEFAULT_VALUE_DISCRETIZATION = 1e-4
#: The most points one release's discretised PLD may have before an accountant
#: refuses to build it (:meth:`PrivacyAccountant.pld_points`): about 450 MiB
#: and a few seconds of dp-accounting time. Only a release costing epsilon
#: ~100 or more reaches it (a Laplace of epsilon 104, a Gaussian of multiplier
#: 0.074), far beyond any cap a site would set.
MAX_PLD_POINTS = 2**21
# Half-width, in standard deviations, of the Gaussian tail dp-accounting keeps
# (its log_mass_truncation_bound of -50 is about 9.7 sigma), rounded up.
_GAUSSIAN_TAIL_SIGMAS = 10.0


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


def _pld_modules():  # -> (dp_accounting.pld.common, .privacy_loss_distribution)
    # dp-accounting's PLD modules import scipy.signal and scipy.stats (about
    # 75 MiB and 0.7 s per process); a Gaussian-only ledger never needs them,
    # so every site and the coordinator import them only when they do.
    from dp_accounting.pld import common as pld_common
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    return pld_common, pld_lib


def _gaussian_pld(mechanism: Mechanism, count: int, interval: float):
    # count Gaussians of multiplier z compose to one of multiplier z/sqrt(count).
    return _pld_modules()[1].from_gaussian_mechanism(
        standard_deviation=mechanism.noise_multiplier / math.sqrt(count),
        value_discretization_interval=interval,
    )


def _sampled_gaussian_pld_composed(mechanism: Mechanism, count: int, interval: float):
    single = _sampled_gaussian_pld(mechanism.noise_multiplier, mechanism.sampling_rate, interval)
    return single.self_compose(count)


def _laplace_pld(mechanism: Mechanism, count: int, interval: float):
    single = _pld_modules()[1].from_laplace_mechanism(
        parameter=mechanism.scale / mechanism.sensitivity,
        value_discretization_interval=interval,
    )
    return single.self_compose(count)


def _discrete_laplace_pld(mechanism: Mechanism, count: int, interval: float):
    # The exact integer mechanism's own PLD, in grid steps (Delta, t), built in
    # closed form: its cost grows with epsilon / interval, not with Delta.
    from privadapt.common.discrete_accounting import discrete_laplace_pld

    return discrete_laplace_pld(mechanism.exact_scale, mechanism.grid_sensitivity, count,
                                interval)


def pure_epsilon_on_grid(epsilon: float, interval: float) -> float:
    """The least float e >= ``epsilon`` that dp-accounting's PLD of the pure
    e-DP pair puts exactly on its loss grid (both losses +-k ``interval``).

    That PLD rounds the loss +e up and -e towards zero to multiples of the
    interval, so an e off the grid is charged a whole interval more on one
    side: 1000 releases at epsilon 0.01 gave 0.9876 at delta 1/8000 (the
    exact value), at 0.0099986 gave 1.0323, and on the float grid itself
    0.0196 (whose ratio to 1e-4 is not exactly 196) gave more than 0.0198. A
    site charging a hair less than a job was calibrated for was then refused
    at release 948 of 1000 (seed 003's noisy Frank-Wolfe). The pair of a
    larger epsilon dominates a smaller one's, so e is a sound upper bound, and
    the composed figure is now exact at e and monotone in ``epsilon``. Not
    every multiple of the interval has a float whose ratio to it is exact
    (above 1, the floats are coarser than the quotient's ulp), so e may lie a
    few steps up: at most 5 steps of 1e-4 in 25,000 values measured, 3 below 1."""
    if not epsilon > 0:
        return 0.0
    first = max(1, math.ceil(epsilon / interval))  # dp-accounting's own rounding
    for steps in range(first, first + _GRID_SEARCH_STEPS):
        # The floats within a few ulps of steps * interval whose ratio to the
        # interval is exactly steps (there may be none: then the next step).
        guess = float(Fraction(steps) * Fraction(interval))
        near, up, down = [guess], guess, guess
        for _ in range(4):
            up, down = math.nextafter(up, math.inf), math.nextafter(down, 0.0)
            near += [up, down]
        exact = [c for c in near if c >= epsilon and c / interval == steps]
        if exact:
            return max(exact)
    # No float lies exactly on the grid nearby: dp-accounting's own rounding
    # of this (larger) epsilon, still a sound upper bound and monotone.
    return float(Fraction(first + _GRID_SEARCH_STEPS) * Fraction(interval))


#: How many grid steps above epsilon to look for a float exactly on the grid.
_GRID_SEARCH_STEPS = 8


def _pure_dp_pld(mechanism: Mechanism, count: int, interval: float):
    # The tight pair of pure epsilon-DP (randomized response), which dominates
    # every epsilon-DP mechanism: pure events and selections alike, at its
    # epsilon rounded up to the loss grid (pure_epsilon_on_grid).
    pld_common, pld_lib = _pld_modules()
    epsilon = pure_epsilon_on_grid(mechanism.pure_epsilon, interval)
    params = pld_common.DifferentialPrivacyParameters(epsilon, 0.0)
    return pld_lib.from_privacy_parameters(params, interval).self_compose(count)


#: The one PLD dispatch: mechanism kind -> PLD of ``count`` releases of it. A
#: kind missing here (zCDP events) is accounted by RDP only.
_PLD_BY_KIND = {
    "gaussian": _gaussian_pld,
    "poisson_sampled_gaussian": _sampled_gaussian_pld_composed,
    "laplace": _laplace_pld,
    "discrete_laplace": _discrete_laplace_pld,
    "pure_dp": _pure_dp_pld,
    "report_noisy_laplace": _pure_dp_pld,
    "discrete_report_noisy_laplace": _pure_dp_pld,
    "exponential": _pure_dp_pld,
    "discrete_exponential": _pure_dp_pld,
    "generalized_exponential": _pure_dp_pld,
}

#: Kinds that are epsilon-bounded-range (Durfee and Rogers 2019) with epsilon
#: their pure epsilon: the exponential mechanisms. Their PLD above is the pure
#: epsilon-DP pair, which ignores that property; their RDP uses it
#: ((epsilon^2/8)-zCDP, Cesar and Rogers 2021), and over many releases that is
#: the smaller figure. Both are valid upper bounds, so a PLD accountant holding
#: one of these reports the smaller (:meth:`PrivacyAccountant.report`).
_BOUNDED_RANGE_KINDS = frozenset({"exponential", "discrete_exponential",
                                  "generalized_exponential"})


def _pld(mechanism: Mechanism, count: int, interval: float):  # -> PrivacyLossDistribution
    builder = _PLD_BY_KIND.get(mechanism.kind)
    if builder is None:
        raise ValueError(
            f"{type(mechanism).__name__} has no privacy loss distribution; use the RDP method"
        )
    return builder(mechanism, count, interval)


@functools.lru_cache(maxsize=64)
def _sampled_gaussian_pld(noise_multiplier: float, sampling_rate: float, interval: float):
    """One Poisson-sampled Gaussian release's PLD under add/remove, exactly as
    dp-accounting's ``PLDAccountant`` builds it for ``PoissonSampledDpEvent``.
    Cached: a ledger recomposes the same release at every charge, and building
    it (a quarter second) costs more than self-composing it."""
    from dp_accounting import NeighboringRelation
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    return pld_lib.from_gaussian_mechanism(
        standard_deviation=noise_multiplier,
        value_discretization_interval=interval,
        sampling_prob=sampling_rate,
        neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
    )


def _sampled_gaussian_rdp(
    noise_multiplier: float, sampling_rate: float, orders: np.ndarray
) -> np.ndarray:
    """RDP of one Poisson-sampled Gaussian at ``orders`` (Mironov, Talwar and
    Zhang 2019), through dp-accounting's public ``RdpAccountant``."""
    from dp_accounting import GaussianDpEvent, NeighboringRelation, PoissonSampledDpEvent
    from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib

    accountant = rdp_lib.RdpAccountant(list(orders), NeighboringRelation.ADD_OR_REMOVE_ONE)
    accountant.compose(PoissonSampledDpEvent(sampling_rate, GaussianDpEvent(noise_multiplier)))
    return accountant.rdp


_ROOT_TOLERANCE = 1e-10


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


def release_epsilon_lower_bound(mechanism: Mechanism, delta: float) -> float:
    """A lower bound (exact where known) on the epsilon at ``delta`` of one
    release of ``mechanism``, in closed form, with no PLD:

    * Gaussian of multiplier z: :func:`gaussian_epsilon` (exact);
    * Laplace of pure epsilon e: e + 2 log(1 - delta), from its exact
      delta(epsilon) = 1 - exp((epsilon - e) / 2);
    * discrete Laplace of pure epsilon e: e + log(1 - 2 delta) (its mass
      1/(1 + q) >= 1/2 at loss e);
    * a pure e-DP event or a report-noisy-min (the tight pair):
      log(e^e - delta (1 + e^e));
    * an e-bounded-range selection (exponential mechanisms): the exact
      epsilon of the worst of a grid of e-bounded-range pairs
      (:func:`_bounded_range_epsilon_lower_bound`), which both its PLD and its
      RDP bound from above;
    * anything else (sampled Gaussians, zCDP): 0, no bound claimed.
    """
    if mechanism.is_non_private:
        return math.inf
    if mechanism.is_free:
        return 0.0
    if mechanism.composes_as_gaussian:
        return gaussian_epsilon(mechanism.noise_multiplier, delta)
    pure = mechanism.pure_epsilon
    if mechanism.kind == "laplace":
        return max(0.0, pure + 2.0 * math.log1p(-delta))
    if mechanism.kind == "discrete_laplace":
        # Mass 1/(1 + q) >= 1/2 sits at loss exactly e (outputs at or beyond
        # the far centre), so delta(epsilon') >= (1 - e^(epsilon' - e)) / 2.
        return max(0.0, pure + math.log1p(-min(1.0, 2.0 * delta)))
    if mechanism.kind in ("pure_dp", "report_noisy_laplace", "discrete_report_noisy_laplace"):
        return _randomized_response_epsilon(pure, delta)
    if mechanism.kind in _BOUNDED_RANGE_KINDS:
        return _bounded_range_epsilon_lower_bound(pure, delta)
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


def _pld_loss_width(mechanism: Mechanism) -> float:
    """The privacy-loss range dp-accounting's PLD of one release spans
    (measured against dp-accounting 0.6 at interval 1e-4, rounded up)."""
    if mechanism.kind in ("gaussian", "poisson_sampled_gaussian"):
        # Loss (2x - 1) / (2 z^2) over |x| <= 10 z, and the mean shift 1/z^2.
        if not mechanism.noise_multiplier > 0:
            return math.inf
        inverse = 1.0 / mechanism.noise_multiplier
        return 2.0 * _GAUSSIAN_TAIL_SIGMAS * inverse + inverse * inverse
    if mechanism.kind in ("laplace", "discrete_laplace") \
            or _PLD_BY_KIND.get(mechanism.kind) is _pure_dp_pld:
        return 2.0 * mechanism.pure_epsilon  # losses in [-e, e]
    return 0.0


def _laplace_rdp(scale_over_sensitivity: float, orders: np.ndarray) -> np.ndarray:
    """Renyi divergence of Laplace(0, lam) and Laplace(1, lam) (Mironov 2017, Prop. 6)."""
    inv = 1.0 / scale_over_sensitivity
    a = orders
    log_terms = np.logaddexp(
        np.log(a / (2 * a - 1)) + (a - 1) * inv,
        np.log((a - 1) / (2 * a - 1)) - a * inv,
    )
    return log_terms / (a - 1)


def _pure_dp_rdp(mechanism: Mechanism, orders: np.ndarray) -> np.ndarray:
    # epsilon-DP implies (epsilon^2/2)-zCDP (Bun and Steinke 2016, Prop. 1.4)
    # and trivially (alpha, epsilon)-RDP.
    eps = mechanism.pure_epsilon
    return np.minimum(eps, orders * eps**2 / 2)


def _bounded_range_rdp(mechanism: Mechanism, orders: np.ndarray) -> np.ndarray:
    # epsilon-bounded-range implies (epsilon^2/8)-zCDP (Cesar and Rogers 2021)
    # and, being epsilon-DP, (alpha, epsilon)-RDP.
    eps = mechanism.pure_epsilon
    return np.minimum(eps, orders * eps**2 / 8)


def _distributed_discrete_gaussian_rdp(mechanism: Mechanism, orders: np.ndarray) -> np.ndarray:
    # A sum of n discrete Gaussians is no discrete Gaussian and has no PLD
    # here: Kairouz, Liu and Steinke 2021's Renyi bound (Proposition 14) for
    # any integer shift of squared L2 norm at most Q, in grid steps. No PLD
    # entry, so a ledger holding it answers by RDP, as for zCDP events.
    from privadapt.common.discrete_accounting import discrete_gaussian_sum_grid_rdp

    return discrete_gaussian_sum_grid_rdp(mechanism.exact_share_sigma_squared,
                                          mechanism.honest_shares, mechanism.grid_l2_squared,
                                          orders)


#: The one RDP dispatch: mechanism kind -> its RDP at ``orders`` for one release.
_RDP_BY_KIND = {
    "gaussian": lambda m, orders: orders / (2 * m.noise_multiplier**2),
    "poisson_sampled_gaussian": lambda m, orders: _sampled_gaussian_rdp(
        m.noise_multiplier, m.sampling_rate, orders
    ),
    "laplace": lambda m, orders: _laplace_rdp(m.scale / m.sensitivity, orders),
    # Pure epsilon-DP's RDP bound: sound for the discrete Laplace (exactly pure).
    "discrete_laplace": _pure_dp_rdp,
    "distributed_discrete_gaussian": _distributed_discrete_gaussian_rdp,
    "pure_dp": _pure_dp_rdp,
    "zcdp": lambda m, orders: orders * m.rho,
    "report_noisy_laplace": _pure_dp_rdp,
    "discrete_report_noisy_laplace": _pure_dp_rdp,
    "exponential": _bounded_range_rdp,
    "discrete_exponential": _bounded_range_rdp,
    "generalized_exponential": _bounded_range_rdp,
}


def _rdp(mechanism: Mechanism, orders: np.ndarray) -> np.ndarray:
    rdp = _RDP_BY_KIND.get(mechanism.kind)
    if rdp is None:
        raise TypeError(f"unknown mechanism {mechanism!r}")
    return rdp(mechanism, orders)


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
        return any(m.kind not in _PLD_BY_KIND for m in self._counts)

    def get_epsilon(self, delta: float) -> float:
        return self.report(delta).epsilon

    def report(self, delta: float) -> EpsilonReport:
        """Epsilon at ``delta``. A PLD accountant holding a zCDP event answers
        by RDP and says so in the report's ``method``. A PLD accountant holding
        a bounded-range selection (:data:`_BOUNDED_RANGE_KINDS`) computes both
        figures and reports the smaller, with its method: each is a valid upper
        bound on the composition's epsilon at ``delta`` (the PLD one treats
        those selections as pure epsilon-DP, the RDP one as epsilon-bounded-
        range), so their minimum is one too, and with many exponential-
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
        if not any(m.kind in _BOUNDED_RANGE_KINDS for m in self._counts):
            return pld
        rdp = EpsilonReport(self._rdp_epsilon(delta), delta, AccountingMethod.RDP)
        return rdp if rdp.epsilon < pld.epsilon else pld

    def _rdp_epsilon(self, delta: float) -> float:
        rdp = sum(count * _rdp(m, self._orders) for m, count in self._counts.items())
        from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib  # see _pld

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
            pld = _pld(mechanism, count, interval)
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
        width = max(_pld_loss_width(m) for m, _ in groups)
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


# -- Upper bounds an incremental ledger adds up (client/ledger_totals.py) -----
#
# A ledger that must not recompose its history at every charge keeps additive
# curves instead: RDP composes by addition, and so does the log moment
# generating function of a discretised privacy loss distribution (composition
# convolves PLDs, which multiplies their moment generating functions). Both
# give, by the RDP-to-DP conversion (Balle et al. 2020, Thm. 21, which holds
# for any sub-probability measure of losses), an upper bound on epsilon that
# costs one vector operation per charge.


def release_rdp(mechanism: Mechanism, orders: np.ndarray) -> np.ndarray:
    """RDP at ``orders`` of one release of ``mechanism`` (already in the
    accountant's adjacency): the term :meth:`PrivacyAccountant.report` adds
    up for it under the RDP method."""
    return np.asarray(_rdp(mechanism, np.asarray(orders, dtype=float)), dtype=float)


def release_pld(mechanism: Mechanism, interval: float = DEFAULT_VALUE_DISCRETIZATION):
    """The discretised PLD of one release of ``mechanism`` (already in the
    accountant's adjacency), the one :meth:`PrivacyAccountant.report`
    self-composes for its group. Not for unsampled Gaussians, which the
    accountant folds into one Gaussian instead (``composes_as_gaussian``)."""
    return _pld(mechanism, 1, interval)


def pld_log_mgfs(pld, lambdas: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, float]:
    """``log E[exp(lambda L)]`` over the *finite* losses of ``pld``, for its
    remove and its add direction, and the mass each puts at infinite loss.

    For a composition, the finite parts' log-MGFs add and the infinity masses
    at most add, so these are what a ledger accumulates per release. Reads
    dp-accounting 0.6's pmf fields (``_pmf_remove``, ``_pmf_add``, dense
    ``_lower_loss`` and ``_probs``); tests/common check them against its own
    epsilons."""
    from scipy.special import logsumexp

    lambdas = np.asarray(lambdas, dtype=float)
    curves, masses = [], []
    for pmf in (pld._pmf_remove, pld._pmf_add):
        dense = pmf.to_dense_pmf()
        probs = np.asarray(dense._probs, dtype=float)
        keep = probs > 0
        losses = (dense._lower_loss + np.flatnonzero(keep)) * dense._discretization
        if not keep.any():
            curves.append(np.full(lambdas.shape, -np.inf))
        else:
            # One order at a time: an outer product would take orders x points
            # floats (a gigabyte for a PLD of a million points).
            weights = probs[keep]
            curves.append(np.array([logsumexp(lam * losses, b=weights) for lam in lambdas]))
        masses.append(float(dense._infinity_mass))
    return curves[0], curves[1], masses[0], masses[1]


#: The mass dp-accounting's Gaussian PLD puts at infinite loss (its
#: log_mass_truncation_bound of -50 leaves about 2e-22 per tail), rounded up.
GAUSSIAN_PLD_INFINITY_MASS = 1e-20


def gaussian_pld_log_mgf_bound(
    inverse_square: float, lambdas: np.ndarray, interval: float = DEFAULT_VALUE_DISCRETIZATION
) -> np.ndarray:
    """An upper bound on the log-MGF of dp-accounting's discretised PLD of one
    Gaussian of multiplier ``inverse_square ** -0.5`` (the accountant's fold
    of every unsampled Gaussian): the exact Gaussian privacy loss is
    N(mu, 2 mu) with mu = 1/(2 z^2), whose log-MGF is lambda (lambda + 1) mu;
    connect-the-dots discretisation moves each loss to a neighbouring grid
    point, at most ``interval`` up, so it multiplies the MGF by at most
    exp(lambda interval)."""
    lambdas = np.asarray(lambdas, dtype=float)
    return lambdas * (lambdas + 1.0) * (0.5 * inverse_square) + lambdas * interval


def epsilon_from_log_mgf(log_mgf: np.ndarray, lambdas: np.ndarray, delta: float) -> float:
    """The smallest epsilon the RDP-to-DP conversion certifies at ``delta``
    for losses with this log-MGF (``log_mgf / lambda`` is the RDP at order
    alpha = ``lambda + 1``): min over alpha of
    r + log(1 - 1/alpha) - log(delta alpha) / (alpha - 1) (Balle et al. 2020;
    dp-accounting's ``compute_epsilon`` without its KL shortcut, which needs a
    true divergence, not the finite part of a PLD). A negative curve (a
    sub-probability's) is raised to 0, which only loosens it."""
    if not delta > 0:
        return math.inf
    lambdas = np.asarray(lambdas, dtype=float)
    alphas = lambdas + 1.0
    rdp = np.maximum(np.asarray(log_mgf, dtype=float), 0.0) / lambdas
    with np.errstate(invalid="ignore", over="ignore"):
        eps = rdp + np.log1p(-1.0 / alphas) - np.log(delta * alphas) / lambdas
    eps = np.where(alphas > 1.01, eps, np.inf)
    eps = np.where(np.isnan(eps), np.inf, eps)
    return max(0.0, float(np.min(eps)))
