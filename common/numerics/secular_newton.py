"""The accuracy-only solves of the trust-region certificate
(:mod:`privadapt.common.numerics.certified_quadratic`): a Cholesky factorisation that
never raises, LAPACK's triangular solves without input checks, primal
candidates from a dual solve, and the eigen-free re-solve of the multiplier
(Newton on the secular equation, Moré and Sorensen 1983). Nothing here is
trusted: the certificate proves its bracket from whatever these return.

Each function runs a number of operations fixed by the problem's size (the
certificate's "Fixed work"): a failed factorisation returns the
identity for the caller to run the same work on, and the re-solve's loops
have fixed counts.
"""

from __future__ import annotations

import math

import numpy as np

from privadapt.common.numerics.rounding_bounds import UNIT

#: Rungs of the re-solve's ladder for a definite start (searched by bisection
#: in a fixed :data:`START_PROBES` factorisations), and its Newton steps (one
#: factorisation each, always all of them).
START_RUNGS = 30
START_PROBES = 5
NEWTON_STEPS = 30


def shift_estimate(unit_matrix: np.ndarray, multiplier: float) -> float:
    """u (|mu| + max|a_ij|): about the Cholesky test's measured error and an
    eigen-solver's error in mu, the unit of the shift schedule (a function of
    the rounded problem and mu only)."""
    peak = float(np.abs(unit_matrix).max(initial=0.0))
    return UNIT * (abs(multiplier) + peak) + 2.0**-1000


def cholesky_or_identity(matrix: np.ndarray) -> tuple[np.ndarray, bool]:
    """(the lower Cholesky factor, True), or (the identity, False) when the
    floating factorisation fails or is not finite: one LAPACK call either
    way, and a factor the caller's remaining work runs on regardless."""
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            factor_l = np.linalg.cholesky(matrix)
    except np.linalg.LinAlgError:
        return np.eye(matrix.shape[0]), False
    if np.all(np.isfinite(factor_l)):
        return factor_l, True
    return np.eye(matrix.shape[0]), False


def cho_solve(factor_l: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """(L L^T)^-1 rhs by LAPACK's potrs, as scipy's cho_solve without its
    input checks (non-finite values propagate; the callers' bounds see them)."""
    from scipy.linalg.lapack import dpotrs  # imported here: a site rarely needs it

    return dpotrs(factor_l, rhs, lower=1)[0]


def forward_solve(factor_l: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """L^-1 rhs by LAPACK's trtrs, as scipy's solve_triangular without its checks."""
    from scipy.linalg.lapack import dtrtrs

    return dtrtrs(factor_l, rhs, lower=1)[0]


def refine_multiplier(matrix: np.ndarray, linear: np.ndarray, rho: float, multiplier: float,
                      step_factor: float) -> tuple[float, list[np.ndarray]]:
    """A second solve that uses no eigen-solver (Moré and Sorensen 1983), in a
    fixed number of factorisations: the smallest definite mu on a ladder
    above the given one (rungs ``step_factor`` times :func:`shift_estimate`
    above it, then 16 times further each), found by bisection in
    :data:`START_PROBES` factorisations, then :data:`NEWTON_STEPS`
    safeguarded Newton steps on 1/||x(mu)|| - 1/rho with Cholesky factors of
    mu I - A, one factorisation each (a failed step
    halves toward the last definite mu; a converged one repeats itself);
    then x(mu) and, for the hard case, x(mu) +- tau z filled along z, an
    inverse-iteration estimate of A's top eigenvector. Accuracy only: the
    bracket is proved from whatever this returns."""
    size = len(linear)
    identity = np.eye(size)
    start = max(multiplier, 0.0) if math.isfinite(multiplier) else 0.0
    step = step_factor * shift_estimate(matrix, start)
    # Rung i: min(start + 16^i step, size); ||A||_2 < size in unit scale.
    rungs = [min(start + step * 16.0**i, float(size)) for i in range(START_RUNGS)]
    low, high = -1, START_RUNGS  # rung low not definite (or none), rung high definite (or none)
    mu, factor_l, found = rungs[-1], identity, False
    for _ in range(START_PROBES):  # bisection: low + 1 == high after these
        probe = min(max((low + high) // 2, 0), START_RUNGS - 1)
        trial, definite = cholesky_or_identity(rungs[probe] * identity - matrix)
        if definite:
            high, mu, factor_l, found = probe, rungs[probe], trial, True
        else:
            low = max(low, probe)
    lowest = -math.inf  # the largest mu found not definite in the Newton steps
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for _ in range(NEWTON_STEPS):
            x = cho_solve(factor_l, linear)
            norm = float(np.linalg.norm(x))
            y = forward_solve(factor_l, x)
            curvature = float(y @ y)
            candidate = mu
            if found and 0 < norm < math.inf and 0 < curvature < math.inf:
                candidate = max(mu + (norm * norm / curvature) * (norm - rho) / rho, 0.0)
            if not candidate > lowest:  # an overshoot below lambda_1: halve the step
                candidate = (lowest + mu) / 2
            if not math.isfinite(candidate):
                candidate = mu
            trial, definite = cholesky_or_identity(candidate * identity - matrix)
            if definite:
                mu, factor_l = candidate, trial
            else:
                lowest = max(lowest, candidate)
        x = cho_solve(factor_l, linear)
    return mu, candidate_points(factor_l, x, rho)


def candidate_points(factor_l: np.ndarray, x: np.ndarray, rho: float) -> list[np.ndarray]:
    """Primal points from a dual solve x = (mu I - A)^-1 b: x, and x +- tau z
    filling the ball along z, an inverse-iteration estimate (with the same
    factor L of mu I - A) of A's top eigenvector, for the (near-)hard case,
    where x(mu) misses the top direction."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        direction = np.cos(np.arange(len(x)) + 1.0)  # a fixed start, not the data's
        for _ in range(3):
            direction = cho_solve(factor_l, direction)
            direction /= max(float(np.linalg.norm(direction)), 2.0**-1000)
        fill = math.sqrt(max(rho * rho - float(x @ x), 0.0)) if np.all(np.isfinite(x)) else 0.0
    return [x, x + fill * direction, x - fill * direction]
