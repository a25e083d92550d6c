"""The trust-region subproblem, solved exactly: max over ||w|| <= Lambda of
q(w) = w^T A w + 2 b^T w + c, for any symmetric A (definite or not).

Seed 000 (Section 4, "Discrepancy estimates") needs the supremum over the
ball W = {||w|| <= Lambda} of a difference of mean squared losses, a quadratic
in w that is in general indefinite; the paper solves it by DC programming
(DCA). For the squared loss the supremum is a trust-region subproblem, which
has an exact solution (Moré and Sorensen 1983; Conn, Gould and Toint 2000,
ch. 7). It lives in ``common`` because a site evaluates it too (the
``exact_discrepancy`` kernel); the coordinator uses it for post-processing.

Optimality (Moré-Sorensen): w* maximises q on the ball iff for some mu >= 0

    (mu I - A) w* = b,   mu I - A positive semidefinite,   mu (Lambda - ||w*||) = 0.

In the eigenbasis A = Q diag(lambda) Q^T (lambda_1 the largest), beta = Q^T b,
w(mu)_i = beta_i / (mu - lambda_i), and the boundary solution is the root
mu* > max(lambda_1, 0) of the secular equation ||w(mu)|| = Lambda. It is
solved on 1/||w(mu)|| - 1/Lambda, nearly linear in mu and increasing, with
Brent's method on the bracket (max(lambda_1, 0), max(lambda_1, 0) + ||b||/Lambda]
(at the right end ||w|| <= ||b|| / (mu - lambda_1) <= Lambda).

Three cases, decided at mu_0 = max(lambda_1, 0) with the components whose
mu_0 - lambda_i vanishes ("singular") set aside:
* a singular component has beta_i != 0: ||w(mu)|| -> inf as mu -> mu_0, the
  root exists, boundary solution;
* otherwise, if the remaining w(mu_0) lies inside the ball and nothing is
  singular (then lambda_1 < 0): the interior maximiser w = -A^{-1} b, mu = 0;
* otherwise, if it lies inside the ball: the *hard case*. mu = lambda_1 and
  w = w(mu_0) + tau q_1, with tau filling the ball's radius (q_1 a top
  eigenvector, orthogonal to b).
Fixed work. A site runs this on private moments,
and a coordinator can time its reply: the work must not follow the records.
So every solve does one ``eigh`` (also of a zero matrix, whose answer is
known) and one secular solve of a fixed number of bisection steps (also when
the case analysis then picks the interior or the hard case, which discard
it); what remains data-dependent is O(d) branch work and the value-dependent
speed of floating-point and LAPACK (denormals), as in the certificate
(common/numerics/certified_quadratic.py, "Fixed work"). Bisection, not Brent: the
root is bracketed in an interval of width ||beta|| <= sqrt(d) in the rescaled
problem, so 64 halvings reach adjacent floats for any d below 2^20, and
their count is the same for every input.
Numerically, the problem is first rescaled to radius 1 and entries of A and
b at most 1 (u = w / Lambda, the quadratic divided by its size on the ball);
there beta_i counts as 0 below 1e-12 and eigenvalues within 1e-12 are tied.
Dropping such a beta_i moves the value by at most 2e-12 of the problem's size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# In the rescaled problem (radius 1, entries of A and b at most 1): the size
# below which an eigenvalue gap or an eigen-component of b counts as zero, about
# eigh's backward error (~d eps ||A||) for d ~ 100. A near-tie it misses only
# sends the solve down the secular-equation path, which _CLOSE_GAP keeps exact.
_TOLERANCE = 1e-12
# Halvings of the secular bracket, whatever the input (module docstring).
_BISECTION_STEPS = 64
# Below this gap mu - lambda_i, the secular root (accurate to ~1e-16 in mu) fixes
# beta_i / (mu - lambda_i) to worse than ~1e-10 relative.
_CLOSE_GAP = 1e-6


@dataclass(frozen=True)
class TrustRegionSolution:
    """``value`` = max of w^T A w + 2 b^T w + c over ||w|| <= radius, attained
    at ``weights``; ``multiplier`` is the Lagrange multiplier mu of the ball
    constraint and ``hard_case`` says the hard case occurred."""

    value: float
    weights: np.ndarray
    multiplier: float
    hard_case: bool


def maximize_quadratic_on_ball(
    matrix: np.ndarray, linear: np.ndarray, constant: float, radius: float
) -> TrustRegionSolution:
    """Exact maximiser of w^T A w + 2 b^T w + c over ||w|| <= radius.

    ``matrix`` A (d x d) is symmetrised as (A + A^T) / 2, which leaves the
    quadratic form unchanged; ``linear`` is b (d,). Raises ``ValueError`` for
    non-finite input, mismatched shapes or a radius not finite and > 0.
    """
    matrix, linear = _checked(matrix, linear, constant, radius)
    # Solve for u = w / radius with the quadratic divided by its size on the
    # ball, so every entry is at most 1: tolerances are absolute, and squares
    # neither under- nor overflow.
    size = max(float(np.abs(matrix).max(initial=0.0)) * radius**2,
               float(np.abs(linear).max(initial=0.0)) * radius)
    if not math.isfinite(size):
        raise ValueError("matrix and linear are too large for the radius (overflow)")
    # A zero problem (an empty site's moments) runs the same solve on zeros,
    # then answers c at 0 (module docstring, "Fixed work").
    scale = size if size > 0 else 1.0
    unit_matrix = (matrix / scale) * radius**2
    eigenvalues, eigenvectors = np.linalg.eigh(unit_matrix)
    eigenvalues, eigenvectors = eigenvalues[::-1], eigenvectors[:, ::-1]  # largest first
    beta = eigenvectors.T @ ((linear / scale) * radius)
    multiplier, coordinates, hard_case = _solve_in_eigenbasis(eigenvalues, beta)
    if size == 0:
        return TrustRegionSolution(float(constant), np.zeros_like(linear), 0.0, False)
    unit_value = coordinates @ (eigenvalues * coordinates) + 2.0 * beta @ coordinates
    return TrustRegionSolution(
        value=float(constant + size * unit_value),
        weights=radius * (eigenvectors @ coordinates),
        multiplier=multiplier * size / radius**2,
        hard_case=hard_case,
    )


def quadratic_range_on_ball(
    matrix: np.ndarray, linear: np.ndarray, constant: float, radius: float
) -> tuple[float, float]:
    """(min, max) of w^T A w + 2 b^T w + c over ||w|| <= radius: the minimum
    is minus the maximum of the negated quadratic."""
    matrix, linear = np.asarray(matrix, float), np.asarray(linear, float)
    high = maximize_quadratic_on_ball(matrix, linear, constant, radius).value
    low = -maximize_quadratic_on_ball(-matrix, -linear, -constant, radius).value
    return low, high


def _checked(
    matrix: np.ndarray, linear: np.ndarray, constant: float, radius: float
) -> tuple[np.ndarray, np.ndarray]:
    matrix = np.asarray(matrix, dtype=float)
    linear = np.asarray(linear, dtype=float)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"matrix must be square, got shape {matrix.shape}")
    if linear.shape != (matrix.shape[0],):
        raise ValueError(f"linear must have shape ({matrix.shape[0]},), got {linear.shape}")
    if not (np.all(np.isfinite(matrix)) and np.all(np.isfinite(linear))
            and math.isfinite(constant)):
        raise ValueError("matrix, linear and constant must be finite")
    if not (math.isfinite(radius) and radius > 0):
        raise ValueError(f"radius must be finite and > 0, got {radius!r}")
    return 0.5 * (matrix + matrix.T), linear


def _solve_in_eigenbasis(
    eigenvalues: np.ndarray, beta: np.ndarray
) -> tuple[float, np.ndarray, bool]:
    """(mu, u in the eigenbasis, hard case?) for the unit-radius problem with
    eigenvalues sorted largest first and every entry of A and b at most 1."""
    lowest_multiplier = max(float(eigenvalues[0]), 0.0)
    # Solved whichever case holds, so the work is the same (module docstring).
    root = _secular_root(eigenvalues, beta, lowest_multiplier)
    gaps = lowest_multiplier - eigenvalues
    singular = gaps <= _TOLERANCE
    if not np.any(singular & (np.abs(beta) > _TOLERANCE)):
        regular = np.where(singular, 0.0, beta / np.where(singular, 1.0, gaps))
        norm = float(np.linalg.norm(regular))
        if norm <= 1.0:
            if not np.any(singular):
                return lowest_multiplier, regular, False  # interior maximiser
            # Hard case: fill the ball along a top eigenvector (on the side of
            # the dropped beta component, which can only help).
            top = int(np.argmax(singular))
            regular[top] = math.copysign(math.sqrt(1.0 - norm**2), beta[top] or 1.0)
            return lowest_multiplier, regular, True
    multiplier = root
    gaps = multiplier - eigenvalues
    coordinates = beta / gaps
    # The boundary solution has norm 1. Near the hard case mu - lambda_1 is tiny
    # and its rounding makes the components over it inaccurate, although their
    # direction (beta over tied eigenvalues) is right: give them the norm the
    # accurate components leave.
    close = gaps < _CLOSE_GAP
    rest = float(np.linalg.norm(coordinates[~close]))
    if np.any(close) and rest < 1.0:
        coordinates[close] *= math.sqrt(1.0 - rest**2) / float(np.linalg.norm(coordinates[close]))
    else:
        coordinates /= float(np.linalg.norm(coordinates))
    return multiplier, coordinates, False


def _secular_residual(multiplier: float, eigenvalues: np.ndarray, beta: np.ndarray) -> float:
    """1 / ||beta / (mu - lambda)|| - 1: increasing in mu, -1 at a pole."""
    gaps = multiplier - eigenvalues
    if np.any((gaps <= 0) & (beta != 0)):
        return -1.0  # ||u(mu)|| is infinite at a pole
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        coordinates = np.where(beta != 0, beta / gaps, 0.0)
        norm = float(np.linalg.norm(coordinates))  # inf next to a pole: fine
    return (1.0 / norm if norm > 0 else math.inf) - 1.0


def _secular_root(eigenvalues: np.ndarray, beta: np.ndarray, low: float) -> float:
    """The mu in (low, low + ||beta||] where ||beta / (mu - lambda)|| = 1, by
    ``_BISECTION_STEPS`` halvings whatever the input (module docstring): the
    right end of the last bracket, where the residual is >= 0. Without a root
    in the bracket (the interior and hard cases, whose callers discard it) it
    ends at an end of the bracket."""
    # At the right end ||u|| <= ||beta|| / (mu - lambda_1) <= 1.
    high = low + float(np.linalg.norm(beta))
    if _secular_residual(high, eigenvalues, beta) < 0:  # rounding at the end: widen a hair
        high += 4 * np.finfo(float).eps * max(abs(high), 1.0)
    for _ in range(_BISECTION_STEPS):
        middle = 0.5 * (low + high)
        if _secular_residual(middle, eigenvalues, beta) < 0:
            low = middle
        else:
            high = middle
    return float(high)
