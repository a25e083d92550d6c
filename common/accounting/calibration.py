"""Noise calibration: the least noise that meets a target (epsilon, delta).

:func:`noise_multiplier` is the one entry point every algorithm calibrates
through, in the shape of Opacus's ``make_private_with_epsilon`` and
dp-accounting's ``calibrate_dp_mechanism``: a target (epsilon, delta), a
:class:`ReleasePlan` (how many releases of which mechanism, after which
releases already spent) and ``calibration``: ``"accountant"``, the least
multiplier the site's own accountant admits (:func:`calibrate_noise_multiplier`
below), or ``"paper"``, the closed form of the algorithm's paper, registered
beside the algorithm with :func:`paper_closed_form` and carried by its plan.
:func:`noise_scale` is the same for a plan whose noise is a scale (report-noisy-min).

Why not ``calibrate_dp_mechanism`` itself: its Brent search, run on this
accountant, finds a multiplier about 0.1% smaller for a Gaussian plan (the
search below stops at a relative 1e-3, rounded up), with 8 accountant probes
where the analytic start below needs 2, and for a Poisson-sampled Gaussian it
takes 10 fine-grid PLD probes (5.3 s) where the coarse-to-fine search below
takes 1.9 s (eps 1, delta 1e-5, 20 steps at q = 0.05); its default bracket
search also probes multipliers near 0, whose PLDs do not fit in memory. And
every algorithm's noise would change in its last digits.

:func:`calibrate_noise_multiplier` finds the smallest noise multiplier ``z``
such that ``num_releases`` copies of ``make_mechanism(z)`` (by default one
Gaussian of sensitivity 1 and sigma ``z``), composed after the releases already
spent, stay within ``epsilon`` at ``delta``. It asks the project's own
:class:`~privadapt.common.accounting.accountant.PrivacyAccountant` (the code every site
ledger checks its cap with, same method and adjacency), never a separate
formula, so a job calibrated to exactly a site's cap is not refused on its last
release. The answer errs on the safe side: the returned ``z`` always meets the
target, and ``z * (1 - relative_tolerance)`` does not.

The search brackets ``z`` from a starting guess, widening the step by doubling
its logarithm, then bisects. For Gaussian mechanisms the guess is the analytic
Gaussian (Balle and Wang 2018): ``T`` Gaussians of multiplier ``z`` compose to
one of multiplier ``z / sqrt(T)``, whose exact sigma for (epsilon, delta) is
``analytic_gaussian.gaussian_sigma`` (dp-accounting's ``get_sigma_gaussian``, tested
equal, without its 75 MiB import); a pessimistic accountant, or releases
already spent, can only ask for more noise, so the bracket is a few steps wide.

Poisson-sampled Gaussians (``sampling_rate`` q < 1, add/remove adjacency) are
calibrated by the same accountant (dp-accounting's PLD of
``PoissonSampledDpEvent``); the starting guess is the central-limit
approximation of Bu, Dong, Long and Su (2020, "Deep learning with Gaussian
differential privacy", Thm. 5): T sampled releases of multiplier z are about
mu-GDP with mu = q sqrt(T (e^{1/z^2} - 1)), and mu-GDP is one Gaussian of
multiplier 1/mu. The approximation is optimistic for few releases, so the
search widens from it in steps of a few percent.

Coarse to fine (PLD): each probe of the search builds a privacy loss
distribution, which for a Poisson-sampled Gaussian at dp-accounting's 1e-4
loss grid takes a second or more; a calibration took 17 of them (figure 1's
quick run spent 550 of its 660 s there). The search first runs on a grid 10
times coarser (:data:`_COARSE_DISCRETIZATION`: 10 times cheaper, and its
epsilons agree with the fine grid's to about 1e-5 relative), and its answer is
only the starting guess of the real search on the accountant's own grid, which
alone decides the answer (the guarantee above holds whatever the guess): two
fine probes when the guess is right, a few more when it is not.

:func:`calibrate_laplace_scale` is the closed form for pure epsilon-DP.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

from privadapt.common.accounting.accountant import AccountingMethod, PrivacyAccountant
from privadapt.common.accounting.analytic_gaussian import gaussian_sigma
from privadapt.common.mechanisms import Adjacency, GaussianMechanism, Mechanism
from privadapt.common.validation import check_int_at_least, check_positive_finite

_MAX_BRACKET_STEPS = 200
# The coarse search's loss grid and tolerance (module docstring).
_COARSE_DISCRETIZATION = 1e-3

Calibration = Literal["accountant", "paper"]
CALIBRATIONS: tuple[str, ...] = ("accountant", "paper")

#: A paper's closed form: (epsilon, delta, number of releases) -> its noise
#: multiplier (or its noise scale, for a plan calibrated by :func:`noise_scale`).
PaperForm = Callable[[float, float, int], float]
_Form = TypeVar("_Form", bound=Callable[..., float])

#: Every algorithm's paper closed form, by name (:func:`paper_closed_form`).
PAPER_CLOSED_FORMS: dict[str, Callable[..., float]] = {}


def paper_closed_form(name: str) -> Callable[[_Form], _Form]:
    """Decorator: register an algorithm's closed-form noise from its paper,
    beside the algorithm, under ``name``. The function takes (epsilon, delta,
    number of releases) and any public constants of the algorithm by keyword
    (bound into the plan's ``paper`` with ``functools.partial``)."""

    def register(form: _Form) -> _Form:
        if PAPER_CLOSED_FORMS.setdefault(name, form) is not form:
            raise ValueError(f"a paper closed form {name!r} is registered twice")
        return form

    return register


@dataclass(frozen=True)
class ReleasePlan:
    """What a noise multiplier z is calibrated for: ``num_releases`` releases
    of ``make_mechanism(z)`` (default: one Gaussian of sensitivity 1 and
    sigma z, on a Poisson sample at ``sampling_rate``) after
    ``already_spent``, accounted as a site does under ``adjacency`` by
    ``method``; ``paper`` is the algorithm's paper closed form for it, if it
    has one (:func:`paper_closed_form`). ``reuse``: keep the accountant's
    answer (the last 256) for an equal plan, for a plan of module-level
    values that recurs across fits (a pilot's charges), whose search costs
    seconds; ``paper`` is not part of what is compared."""

    num_releases: int
    make_mechanism: Callable[[float], Mechanism] | None = None
    adjacency: Adjacency = Adjacency.REPLACE_ONE
    sampling_rate: float = 1.0
    already_spent: tuple[Mechanism, ...] = ()
    paper: PaperForm | None = None
    method: AccountingMethod = AccountingMethod.PLD
    reuse: bool = False


def noise_multiplier(epsilon: float, delta: float, plan: ReleasePlan, *,
                     calibration: Calibration | str = "accountant") -> float:
    """The noise multiplier of ``plan`` at the target (``epsilon``, ``delta``):
    with ``calibration="accountant"`` the least the site's accountant admits
    (:func:`calibrate_noise_multiplier`), with ``"paper"`` the plan's paper
    closed form. inf for ``epsilon = inf`` (no noise: the kernel then builds
    ``NoNoise``). ``ValueError`` for another calibration, or ``"paper"`` for
    a plan whose algorithm has no closed form."""
    if calibration not in CALIBRATIONS:
        raise ValueError(f"calibration must be one of {CALIBRATIONS}, got {calibration!r}")
    if math.isinf(epsilon) and epsilon > 0:
        return math.inf
    if calibration == "paper":
        # The same target checks as the accountant's path: a closed form would
        # divide by epsilon = 0 or return a negative multiplier.
        _check_target(epsilon, delta, plan.num_releases, 0.5)
        if plan.paper is None:
            raise ValueError("this release has no closed form in its paper: calibrate it with "
                             "calibration='accountant'")
        return plan.paper(epsilon, delta, plan.num_releases)
    if plan.reuse:
        return _reused_multiplier(epsilon, delta, dataclasses.replace(plan, paper=None))
    return _accountant_multiplier(epsilon, delta, plan)


def _accountant_multiplier(epsilon: float, delta: float, plan: ReleasePlan) -> float:
    return calibrate_noise_multiplier(
        epsilon, delta, plan.num_releases, plan.make_mechanism, method=plan.method,
        adjacency=plan.adjacency, already_spent=plan.already_spent,
        sampling_rate=plan.sampling_rate)


@functools.lru_cache(maxsize=256)
def _reused_multiplier(epsilon: float, delta: float, plan: ReleasePlan) -> float:
    return _accountant_multiplier(epsilon, delta, plan)


def noise_scale(epsilon: float, delta: float, plan: ReleasePlan, sensitivity: float, *,
                calibration: Calibration | str = "accountant") -> float:
    """The noise scale b of a plan whose mechanism is stated by a scale over
    ``sensitivity`` (report-noisy-min): ``sensitivity`` times the
    accountant's :func:`noise_multiplier`, or the paper's own closed form,
    which such a plan states as a scale."""
    if calibration == "paper" and plan.paper is not None:
        return plan.paper(epsilon, delta, plan.num_releases)
    return sensitivity * noise_multiplier(epsilon, delta, plan, calibration=calibration)


def calibrate_noise_multiplier(
    epsilon: float,
    delta: float,
    num_releases: int,
    make_mechanism: Callable[[float], Mechanism] | None = None,
    *,
    method: AccountingMethod | str = AccountingMethod.PLD,
    adjacency: Adjacency = Adjacency.REPLACE_ONE,
    already_spent: Sequence[Mechanism] = (),
    relative_tolerance: float = 1e-3,
    sampling_rate: float = 1.0,
) -> float:
    """The smallest ``z`` (within ``relative_tolerance``, rounded up) such that
    ``already_spent`` then ``num_releases`` x ``make_mechanism(z)`` compose to at
    most ``epsilon`` at ``delta`` under :class:`PrivacyAccountant` (``method``,
    ``adjacency``).

    ``make_mechanism`` must give less privacy loss for larger ``z``; by default
    it is ``GaussianMechanism.single(1.0, z, adjacency, sampling_rate)``, so
    ``z`` is sigma over the L2 sensitivity of each release (on a Poisson sample
    at rate ``sampling_rate``, which needs add/remove ``adjacency``). Raises
    ``ValueError`` for a target that cannot be met: ``epsilon`` not > 0,
    ``epsilon = inf`` (release with ``NoNoise``), ``delta`` outside [0, 1) or 0
    for a Gaussian, ``num_releases`` < 1, or ``already_spent`` using up the
    whole target.
    """
    adjacency = Adjacency(adjacency)
    method = AccountingMethod(method)
    _check_target(epsilon, delta, num_releases, relative_tolerance)
    if make_mechanism is None and not already_spent:
        # A pure function of these public numbers, and the searches cost
        # seconds where a PLD is slow to build (a sampled Gaussian over many
        # steps): every fit asking for the same plan gets the same answer.
        return _default_multiplier(epsilon, delta, num_releases, method, adjacency,
                                   relative_tolerance, sampling_rate)
    return _calibrate(epsilon, delta, num_releases, make_mechanism, method, adjacency,
                      already_spent, relative_tolerance, sampling_rate)


@functools.lru_cache(maxsize=256)
def _default_multiplier(epsilon: float, delta: float, num_releases: int,
                        method: AccountingMethod, adjacency: Adjacency,
                        relative_tolerance: float, sampling_rate: float) -> float:
    return _calibrate(epsilon, delta, num_releases, None, method, adjacency, (),
                      relative_tolerance, sampling_rate)


def _calibrate(epsilon: float, delta: float, num_releases: int,
               make_mechanism: Callable[[float], Mechanism] | None, method: AccountingMethod,
               adjacency: Adjacency, already_spent: Sequence[Mechanism],
               relative_tolerance: float, sampling_rate: float) -> float:
    """calibrate_noise_multiplier's search, its arguments checked."""
    if make_mechanism is None:
        def make_mechanism(z: float) -> Mechanism:
            return GaussianMechanism.single(1.0, z, adjacency, sampling_rate)
    elif sampling_rate != 1.0:
        raise ValueError("sampling_rate shapes the default mechanism only; build the "
                         "sampling into make_mechanism instead")

    already_spent = tuple(already_spent)
    probe = make_mechanism(1.0)
    if delta == 0 and math.isinf(probe.pure_epsilon) and not probe.is_non_private:
        raise ValueError(
            f"a {type(probe).__name__} is never private at delta = 0: "
            "give a delta in (0, 1), or calibrate a Laplace mechanism"
        )

    def ledger(coarse: bool = False) -> PrivacyAccountant:
        accountant = (PrivacyAccountant(adjacency, method,
                                        value_discretization_interval=_COARSE_DISCRETIZATION)
                      if coarse else PrivacyAccountant(adjacency, method))
        for mechanism in already_spent:
            accountant.compose(mechanism)
        return accountant

    if already_spent:
        spent_epsilon = ledger().get_epsilon(delta)
        if spent_epsilon >= epsilon:
            raise ValueError(
                f"nothing left to calibrate: the releases already spent cost "
                f"epsilon={spent_epsilon:.6g} at delta={delta:.3g}, which reaches the "
                f"target epsilon={epsilon:.6g}; raise the target or spend less first"
            )

    def meets(z: float, coarse: bool = False) -> bool:
        accountant = ledger(coarse).compose(make_mechanism(z), num_releases)
        return accountant.get_epsilon(delta) <= epsilon

    guess = _initial_guess(probe, epsilon, delta, num_releases)
    if guess is None:
        guess, first_step = 1.0, 2.0
    elif probe.is_sampled:
        # The CLT guess is off by a few percent, not by the tolerance.
        first_step = 1.05
    else:
        first_step = 1.0 + relative_tolerance
    if method == AccountingMethod.PLD and probe.is_sampled:
        # Only where a PLD is slow to build (module docstring): the coarse
        # answer becomes the guess, a step of a few coarse tolerances away.
        guess = _search(lambda z: meets(z, coarse=True), guess, first_step,
                        relative_tolerance / 4)
        first_step = 1.0 + relative_tolerance
    return _search(meets, guess, first_step, relative_tolerance)


def _search(
    meets: Callable[[float], bool], guess: float, first_step: float, tolerance: float
) -> float:
    """The least ``z`` that ``meets``, within ``tolerance`` (relative), rounded
    up: a bracket from ``guess``, then bisection."""
    low, high = _bracket(meets, guess, first_step=first_step)
    while high - low > tolerance * high:
        middle = 0.5 * (low + high)
        if meets(middle):
            high = middle
        else:
            low = middle
    return high


def calibrate_laplace_scale(epsilon: float, sensitivity: float, num_releases: int) -> float:
    """Laplace scale ``b = num_releases * sensitivity / epsilon`` so that
    ``num_releases`` releases of L1 ``sensitivity`` are ``epsilon``-DP in total.

    This is basic composition, each release getting ``epsilon / num_releases``:
    at delta = 0 it is exact (pure DP composes to the sum of the epsilons and no
    better), and any tighter composition (advanced, PLD, RDP) buys its smaller
    epsilon with a delta > 0, so the guarantee would no longer be pure. A caller
    who accepts a delta > 0 gets less noise from :func:`calibrate_noise_multiplier`
    with ``make_mechanism=lambda b: LaplaceMechanism(sensitivity, b)``.
    """
    _check_epsilon(epsilon)
    check_positive_finite("sensitivity", sensitivity)
    _check_num_releases(num_releases)
    return num_releases * sensitivity / epsilon


def _check_epsilon(epsilon: float) -> None:
    if math.isinf(epsilon) and epsilon > 0:
        raise ValueError(
            "epsilon = inf needs no noise: release with NoNoise (non-private) "
            "instead of calibrating"
        )
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}")


def _check_target(epsilon: float, delta: float, num_releases: int, tolerance: float) -> None:
    _check_epsilon(epsilon)
    if not 0 <= delta < 1:
        raise ValueError(f"delta must be in [0, 1) (in (0, 1) for a Gaussian), got {delta!r}")
    _check_num_releases(num_releases)
    if not 0 < tolerance < 1:
        raise ValueError(f"relative_tolerance must be in (0, 1), got {tolerance!r}")


def _check_num_releases(num_releases: int) -> None:
    check_int_at_least("num_releases", num_releases, 1)


def _initial_guess(
    probe: Mechanism, epsilon: float, delta: float, num_releases: int
) -> float | None:
    """For a Gaussian ``probe = make_mechanism(1)`` whose multiplier scales with
    ``z``: the ``z`` at which the exact (analytic) Gaussian meets the target,
    or, for a Poisson-sampled (Gaussian) probe, its central-limit approximation."""
    if not (probe.composes_as_gaussian or probe.is_sampled) or probe.is_free:
        return None
    sigma = gaussian_sigma(epsilon, delta)
    if probe.is_sampled:
        # q sqrt(T (e^{1/z^2} - 1)) = 1/sigma, solved for z.
        mu_per_rate = 1.0 / (sigma * probe.sampling_rate * math.sqrt(num_releases))
        return 1.0 / math.sqrt(math.log1p(mu_per_rate**2)) / probe.noise_multiplier
    return sigma * math.sqrt(num_releases) / probe.noise_multiplier


def _bracket(
    meets: Callable[[float], bool], guess: float, first_step: float
) -> tuple[float, float]:
    """``(low, high)`` with ``meets(high)`` and not ``meets(low)``, searched
    outwards from ``guess`` by a factor that squares at each step (the log-step
    doubles) up to 2. Downward steps stay at most 2 because a mechanism with
    little noise has a wide privacy loss distribution, slow to build."""
    step = first_step
    if meets(guess):
        high = guess
        for _ in range(_MAX_BRACKET_STEPS):
            low = high / step
            if not meets(low):
                return low, high
            high, step = low, min(step * step, 2.0)
        raise ValueError(
            f"make_mechanism(z) meets the target even at z={high:.3g}: its privacy "
            "loss does not grow as z shrinks, so there is no smallest noise multiplier"
        )
    low = guess
    for _ in range(_MAX_BRACKET_STEPS):
        high = low * step
        if meets(high):
            return low, high
        low, step = high, min(step * step, 2.0)
    raise ValueError(
        f"make_mechanism(z) misses the target even at z={low:.3g}: its privacy loss "
        "does not fall below the target as z grows"
    )
