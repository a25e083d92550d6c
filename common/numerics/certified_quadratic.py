"""A posteriori certificate for the trust-region maximum: a rigorous bracket
[L, U] around v* = max over ||w|| <= Lambda of q(w) = w^T A w + 2 b^T w + c,
computed from a solver's answer (maximiser w, multiplier mu) in ordinary
floating point with proved rounding bounds (the solver's error must be a
checked fact, not a margin).

Floating-point model (the one assumption, stated in
:mod:`privadapt.common.numerics.rounding_bounds`, the same as
:mod:`privadapt.common.kernels.blocked_gram`): IEEE double, round to nearest,
u = 2^-53, and the classical gamma_k bound for every BLAS dot product of
length k in any summation order. Nothing is assumed of LAPACK: ``eigh`` (inside the solver) and
``cholesky`` may return anything; the bracket is proved from what they
return. Underflow: the problem is first scaled by powers of two (exact) so
that its entries are below 1 and the radius rho is in [1/2, 1); an operation
that underflows (or flushes to zero) errs by at most 2^-1022 absolute, and
every bound below carries :func:`_underflow_slack`, far above the sum of those.

Lower bound (primal feasibility). Each candidate point -- the solver's w, and
those a dual solve below gives -- scaled into the ball so that even its
computed norm's error cannot leave it (``_feasible``), is feasible, so
v* >= q(w); q(w) = v^T D v with v = [w, -1] and D = [[A, -b], [-b^T, c]] is
evaluated as y = fl(D v), fl(v^T y), within gamma_m (2 + gamma_m) |v|^T |D| |v|
of exact (m = d + 1). The largest such bound is kept.

Upper bound (Lagrangian duality). For any mu >= 0 with H = mu I - A positive
definite and ||w|| <= Lambda,
    q(w) <= q(w) + mu (Lambda^2 - ||w||^2) = c + mu Lambda^2 + 2 b^T w - w^T H w
         <= c + mu Lambda^2 + b^T H^-1 b,
the maximum over all w of the concave part. For any x, with r = b - H x,
    b^T H^-1 b = x^T b + x^T r + r^T H^-1 r <= x^T b + ||x|| ||r|| + ||r||^2 / lambda_min(H)
(H^-1 b = x + H^-1 r, expanded). H's definiteness and lambda_min(H) >= ell
are proved a posteriori: a floating Cholesky L of H_s = fl(t I - A), t =
fl(mu - delta/2) slightly below mu, has ||L L^T - H_s||_2 <= e, the
Frobenius norm of (1 + u) |fl(P - H_s)| plus the entrywise error bound of P =
fl(L L^T) (:func:`privadapt.common.numerics.rounding_bounds.accurate_product`, an
error-free split that keeps that bound about 2^-20 below the classical
gamma_m |L| |L^T|); so lambda_min(H_s) >= -e since L L^T >= 0; H_s differs
from t I - A only on its diagonal, by at most u max|h_ii|; and H = (t I - A)
+ (mu - t) I. So ell = (mu - t) - e - u max|h_ii|: S. M. Rump's verification
of positive definiteness (BIT 46, 2006), with the Cholesky's backward error
measured rather than assumed (Rump's a priori gamma_(m+1) trace(H) would cost
m^2 u in the width). The residual r is computed as fl(b - fl(fl(mu x) -
fl(A x))), A x by the same accurate product, with the entrywise bound
u |r^| + u |h| + u mu |x| + (A x's bound).

Choice of mu: the solver's multiplier plus a shift delta, for which the dual
bound costs at most delta Lambda^2 over the optimum (the dual function's slope
Lambda^2 - ||x(mu)||^2 lies in [0, Lambda^2] above mu*), and delta must exceed
the measured Cholesky error and the solver's error in mu, both about
u (|mu| + max|a_ij|): attempts use delta = 16, 256, ..., 2^20 times that,
and one shift sized so that its delta rho^2 takes a quarter of the caller's
tolerance (2^24 times the unit when that is no larger). Each attempt's
solve x(mu) also gives primal candidates: x itself and x +- tau z, z an
inverse-iteration estimate of the top eigenvector (with the same Cholesky
factor), filling the ball -- the hard case's maximiser.

Re-solve. A second solve that uses no eigen-solver
(:func:`privadapt.common.numerics.secular_newton.refine_multiplier`: a definite start
on a ladder above the solver's mu, then safeguarded Newton steps of Moré and
Sorensen on the secular equation with Cholesky factors) gives a new
mu and candidates, and the five shifts run once more at it. A near-hard
case, where the eigen-based solver's mu is off by ~1e-11 relative (its
tolerances), and an eigen-solver corrupted by up to 1e-2 (tests) are both
repaired here. Measured widths: about 3 m u times the problem's reach on the
ball for adversarial kernel inputs.

The bracket released is the intersection of every attempt's: each is proved
(the lower bounds are values at feasible points, the upper bounds dual values
at verified multipliers), so their intersection [max of the lowers, min of
the uppers] is proved, and it is at least as narrow as any one of them. Which
attempt gives the tightest side depends on the data; that moves only where
the proved bracket lies, never whether it holds, so the caller's argument
(a released value inside a bracket of width at most its charge is within
that charge of the exact maximum) is unchanged.

Fixed work. The site's reply time is
seen by the coordinator and the charge covers only the released value, so
which operations run must not depend on the records. Formerly the schedule
stopped at the first shift that fitted and ran the re-solve only when none
did: on replace-one neighbours the re-solve ran on one and not the other
(1.80 ms against 0.63 ms), and the shifts took 4 attempts against 2. Now the
operations are fixed by the problem's size alone: per certificate, the five
shifts at the solver's mu, the sized shift, the re-solve (``START_PROBES``
factorisations bisecting its ladder of ``START_RUNGS`` rungs, then
``NEWTON_STEPS`` steps of one factorisation and two triangular solves
each: a failed step halves toward the last definite mu, a converged one
repeats itself), and the five shifts at the re-solve's mu; every attempt
runs one Cholesky, one proved product L L^T, the dual solve, its value and
three candidates' values whether or not the Cholesky fails (a failed or
non-finite factor is replaced by the identity and the attempt's upper bound
discarded). tests/client/test_certificate_fixed_work.py records the sequence
of operations and checks it on neighbours. What remains: LAPACK's ``potrf``
stops at a failing pivot, so a failed factorisation costs up to one
factorisation less than a definite one (the rest of the attempt, three
m x m products for L L^T, costs several times more and always runs); BLAS
and LAPACK time may depend on values (denormals, NaN and infinity paths);
small O(m) branches (``_feasible``'s scaling) remain; and the trust-region
solver before the certificate (``maximize_quadratic_on_ball``: its case
analysis, Brent's iterations on the secular equation, and no eigen-solve at
all for D = 0) is data-dependent in its work. Perfect constant time is not attainable in numpy; the
schedule of attempts and solves is what is fixed.

Every scalar combination of the bounds rounds outward (``math.nextafter``
after each operation), and a sum of k non-negative float terms is raised by a
factor (1 + 2 k u) >= (1 - u)^-k before use (:func:`rounding_bounds.grow`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from privadapt.common.numerics.rounding_bounds import UNIT, accurate_product, down, gamma, grow, up
from privadapt.common.numerics.secular_newton import (
    candidate_points,
    cho_solve,
    cholesky_or_identity,
    refine_multiplier,
    shift_estimate,
)
from privadapt.common.numerics.trust_region import TrustRegionSolution, maximize_quadratic_on_ball

#: Shifts delta tried, as multiples of the Cholesky test's error estimate.
SHIFT_FACTORS = (16.0, 256.0, 4096.0, 65536.0, 2.0**20)
#: The width-sized shift's factor when the caller's width does not size one
#: (no tolerance, or one below the smallest shift): the next rung of the ladder.
FALLBACK_FACTOR = 2.0**24


@dataclass(frozen=True)
class QuadraticBracket:
    """``lower`` <= max over the ball of q <= ``upper``, proved."""

    lower: float
    upper: float

    @property
    def width(self) -> float:
        return up(self.upper - self.lower)


def _underflow_slack(size: int) -> float:
    """Covers every underflow or flush-to-zero of the unit-scaled evaluation:
    at most (size + 4)^2 operations each erring by 2^-1022, times factors <= 4 size."""
    return float(size + 4) ** 3 * 2.0**-1000


def _exponent(value: float) -> int:
    """e with |value| < 2^e (0 for 0)."""
    return math.frexp(value)[1] if value else -1080


def certify_maximum(
    matrix: np.ndarray, linear: np.ndarray, constant: float, radius: float,
    solution: TrustRegionSolution, tolerance: float = 0.0,
) -> QuadraticBracket:
    """A proved bracket of max over ||w|| <= ``radius`` of w^T A w + 2 b^T w + c
    from a solver's ``solution`` (any values: a wrong one gives a wide or
    infinite bracket, never a wrong one). ``matrix`` must be exactly symmetric
    and everything finite. The whole schedule always runs (module docstring,
    "Fixed work"); ``tolerance``, the width the caller needs, only sizes one of
    its shifts. The bracket is the intersection of every attempt's."""
    matrix = np.asarray(matrix, dtype=float)
    linear = np.asarray(linear, dtype=float)
    if not np.array_equal(matrix, matrix.T):
        raise ValueError("certify_maximum needs an exactly symmetric matrix")
    # Unit scale: radius = 2^k rho, rho in [1/2, 1); q(2^k u) 2^j has entries < 1.
    rho, k = math.frexp(radius)
    j = -max(_exponent(float(np.abs(matrix).max(initial=0.0))) + 2 * k,
             _exponent(float(np.abs(linear).max(initial=0.0))) + k,
             _exponent(float(constant)))
    unit_matrix = np.ldexp(matrix, 2 * k + j)
    unit_linear = np.ldexp(linear, k + j)
    unit_constant = math.ldexp(constant, j)
    size = len(linear) + 1
    slack = _underflow_slack(size)
    weights = np.ldexp(np.asarray(solution.weights, dtype=float), -k)
    multiplier = math.ldexp(solution.multiplier, 2 * k + j)
    problem = (unit_matrix, unit_linear, unit_constant, rho)
    form = _quadratic_form(unit_matrix, unit_linear, unit_constant)
    unit_lower, unit_upper = _lower_bound(form, rho, weights), math.inf

    def attempt(mu: float, factor: float) -> None:
        """Intersect with the bracket of the dual solve at this shift (its
        upper bound, and its primal candidates' lower bounds)."""
        nonlocal unit_lower, unit_upper
        upper, points = _upper_bound(*problem, mu, factor)
        unit_upper = min(unit_upper, upper)
        for point in points:
            unit_lower = max(unit_lower, _lower_bound(form, rho, point))

    base = max(multiplier, 0.0) if math.isfinite(multiplier) else 0.0
    for factor in SHIFT_FACTORS:
        attempt(base, factor)
    # A shift whose mu' rho^2 term takes a quarter of the allowed width (with
    # A = 0 and a tiny b, mu* is tiny, the relative shifts
    # above leave mu' I - A barely definite, and the residual term over it
    # grew like 1/|b|, so a certificate failed on one record's presence).
    estimate = shift_estimate(unit_matrix, base)
    with np.errstate(over="ignore", invalid="ignore"):  # np: overflow gives inf, not a raise
        sized = float(np.ldexp(tolerance, j)) / (4.0 * rho * rho) / estimate
    attempt(base, sized if math.isfinite(sized) and sized > 1.0 else FALLBACK_FACTOR)
    # A second solve without the eigen-solver, and its schedule.
    mu, points = refine_multiplier(unit_matrix, unit_linear, rho, multiplier,
                                   SHIFT_FACTORS[-1])
    for point in points:
        unit_lower = max(unit_lower, _lower_bound(form, rho, point))
    for factor in SHIFT_FACTORS:
        attempt(mu, factor)
    return QuadraticBracket(lower=down(math.ldexp(down(unit_lower - slack), -j)),
                            upper=up(math.ldexp(up(unit_upper + slack), -j)))


def _feasible(weights: np.ndarray, rho: float) -> np.ndarray:
    """``weights`` scaled so that its exact norm is at most ``rho``."""
    if not np.all(np.isfinite(weights)):
        return np.zeros_like(weights)
    # ||w||^2 <= fl(w.w) (1 + gamma_d); the square root adds one rounding.
    norm = grow(float(np.sqrt(weights @ weights)), len(weights) + 2)
    if norm <= rho:
        return weights
    # fl(rho / norm) (1 - 4u), times each w_i with one rounding: the exact norm
    # of the result is at most (rho / norm) (1 + u)^3 (1 - 4u) norm < rho.
    factor = (rho / norm) * (1.0 - 4.0 * UNIT)
    return weights * factor


def _quadratic_form(unit_matrix: np.ndarray, unit_linear: np.ndarray,
                    unit_constant: float) -> tuple[np.ndarray, np.ndarray]:
    """(D, |D|) with D = [[A, -b], [-b^T, c]], so q(w) = v^T D v, v = [w, -1]:
    formed once per certificate for every candidate's :func:`_lower_bound`."""
    moments = np.block([[unit_matrix, -unit_linear[:, None]],
                        [-unit_linear[None, :], np.array([[unit_constant]])]])
    return moments, np.abs(moments)


def _lower_bound(form: tuple[np.ndarray, np.ndarray], rho: float,
                 weights: np.ndarray) -> float:
    """q at a candidate point made feasible, minus its evaluation's error."""
    moments, magnitudes = form
    point = np.append(_feasible(weights, rho), -1.0)
    size = len(point)
    value = float(point @ (moments @ point))
    magnitude = np.abs(point)
    absolute = grow(float(magnitude @ (magnitudes @ magnitude)), 2 * size)
    rounding = gamma(size)
    error = up(up(rounding * up(2.0 + rounding)) * absolute)
    return down(value - error)


def _upper_bound(unit_matrix: np.ndarray, unit_linear: np.ndarray, unit_constant: float,
                 rho: float, multiplier: float, factor: float,
                 ) -> tuple[float, list[np.ndarray]]:
    """(the dual bound at mu = ``multiplier`` + factor * estimate, or inf when
    the Cholesky test cannot prove mu I - A positive definite; primal
    candidates from the x solving (mu I - A) x = b,
    :func:`~privadapt.common.numerics.secular_newton.candidate_points`).
    The same operations run either way: a failed factorisation is replaced
    by the identity and its bound discarded (module docstring, "Fixed work")."""
    size = unit_matrix.shape[0]
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        delta = factor * shift_estimate(unit_matrix, multiplier)
        mu = up(multiplier + delta)
        shifted_multiplier = down(mu - delta / 2)  # t < mu
        identity = np.eye(size)
        shifted = shifted_multiplier * identity - unit_matrix  # off-diagonal exact
        factor_l, definite = cholesky_or_identity(shifted)
        # ||L L^T - H_s||_2 <= || (1 + u) |F| + bound ||_F, F = fl(fl(L L^T) - H_s).
        product, bound = accurate_product(factor_l, factor_l.T)
        entries = np.abs(product - shifted) * up(1.0 + UNIT) + bound
        error = up(grow(float(np.sqrt(np.sum(entries * entries))), size * size + 8)
                   + _underflow_slack(size))
        diagonal = up(UNIT * float(np.abs(np.diag(shifted)).max()))
        ell = down(down(down(mu - shifted_multiplier) - error) - diagonal)
        solution = _solve(factor_l, unit_linear, unit_matrix, mu)
        value = _dual_value(unit_matrix, unit_linear, unit_constant, rho, mu, ell, solution)
        candidates = candidate_points(factor_l, solution, rho)
    proved = definite and ell > 0 and math.isfinite(mu)
    return (value if proved else math.inf), candidates


def _solve(factor_l: np.ndarray, linear: np.ndarray, matrix: np.ndarray,
           mu: float) -> np.ndarray:
    """x with (mu I - A) x ~ b: the Cholesky of the nearby H_s, then two steps
    of iterative refinement on H itself (accuracy only; the bound is a
    posteriori). Non-finite values propagate rather than raise."""
    x = cho_solve(factor_l, linear)
    for _ in range(2):
        x = x + cho_solve(factor_l, linear - (mu * x - matrix @ x))
    return x


def _dual_value(matrix: np.ndarray, linear: np.ndarray, constant: float, rho: float,
                mu: float, ell: float, x: np.ndarray) -> float:
    """c + mu rho^2 + x^T b + ||x|| ||r|| + ||r||^2 / ell, rounded up, for
    lambda_min(mu I - A) >= ell > 0 (inf for a non-finite x, after the same
    work on x = 0)."""
    finite = bool(np.all(np.isfinite(x)))
    x = x if finite else np.zeros_like(x)
    size = len(x)
    product, product_bound = accurate_product(matrix, x)
    scaled = mu * x
    difference = scaled - product
    residual = linear - difference
    rounding = gamma(size)
    magnitude = np.abs(x)
    # |r^ - r| <= u |r^| + u |h| + u mu |x| + |fl(A x) - A x|, entrywise.
    bound = UNIT * (np.abs(residual) + np.abs(difference) + np.abs(scaled)) + product_bound
    bound_norm = grow(float(np.sqrt(bound @ bound)), 2 * size + 8)
    residual_norm = up(grow(float(np.sqrt(residual @ residual)), size + 2) + bound_norm)
    x_norm = grow(float(np.sqrt(x @ x)), size + 2)
    inner = float(x @ linear)
    inner_up = up(inner + up(rounding * grow(float(magnitude @ np.abs(linear)), size)))
    quadratic = up(up(inner_up + up(x_norm * residual_norm))
                    + (up(up(residual_norm * residual_norm) / ell) if ell > 0 else math.inf))
    radius_term = up(up(mu * rho) * rho)
    value = up(up(constant + radius_term) + quadratic)
    return value if finite else math.inf


def certified_discrepancy(
    moment_difference: np.ndarray, radius: float, tolerance: float = 0.0,
) -> tuple[float, float]:
    """(value, error): sup over ||w|| <= radius of |v^T D v|, v = [w, -1] (the
    squared-loss discrepancy, :func:`privadapt.common.losses.squared_loss_discrepancy`)
    for an exactly symmetric D, and a proved bound on |value - exact|.

    The supremum of |f| is max(max f, max -f) (f's range [low, high] gives
    sup |f| = max(high, -low)), and max is 1-Lipschitz, so the two brackets
    give one: [max(L1, L2), max(U1, U2)]. The value is the solver's, clamped
    into that bracket (unchanged whenever the solver is right), so its error
    is at most the bracket's width whatever the solver returned. ``tolerance``
    (the width the caller will require) sizes one shift of each schedule;
    the work does not depend on it (module docstring, "Fixed work")."""
    moments = np.asarray(moment_difference, dtype=float)
    matrix, linear, constant = moments[:-1, :-1], -moments[:-1, -1], float(moments[-1, -1])
    brackets, values = [], []
    for sign in (1.0, -1.0):  # max of f, then max of -f (negation is exact)
        problem = (sign * matrix, sign * linear, sign * constant)
        solution = maximize_quadratic_on_ball(*problem, radius)
        brackets.append(certify_maximum(*problem, radius, solution, tolerance))
        values.append(solution.value)
    if not all(bracket.lower <= bracket.upper for bracket in brackets):
        # An empty intersection: some "proved" bound is false, so nothing is
        # proved. An infinite error fails every allowance: the
        # caller refuses as for any failed certificate.
        return max(abs(v) for v in values), math.inf
    lower = max(bracket.lower for bracket in brackets)
    upper = max(bracket.upper for bracket in brackets)
    value = min(max(max(abs(v) for v in values), lower), upper)
    return value, up(upper - lower)
