"""The softmax smoothing of the spectral norm and its gradient (seed 003, Sec. 4.2,
App. C.2): shared by the coordinator's discrepancy minimisation
(``server/algorithms/discrepancy_minimization/smoothed_discrepancy.py``) and
the site kernel that scores the simplex vertices on a private M_0
(``common/kernels/smoothed_discrepancy_gradient.py``).

For a symmetric A with eigenpairs (lambda_k, v_k),

    F~(A) = f(diag(A, -A)) = (1/mu) log sum_k 2 cosh(mu lambda_k),
    dF~/dA = G = V diag(s) V^T,   s_k = w+_k - w-_k,
    w+-_k = exp(+-mu lambda_k) / sum_l 2 cosh(mu lambda_l),

the softmax over the 2d eigenvalues +-lambda_k of diag(A, -A), computed with a
max-shift (log-sum-exp) so nothing overflows however large mu ||A|| is.

Speed. Source point i's partial derivative of F~(M(q)),
M(q) = M_0 - sum_i q_i x_i x_i^T, is -x_i^T G x_i = -sum_k s_k (v_k . x_i)^2:
one GEMM Y = X V (m x d by d x d'), squared, times s. Directions whose weight
|s_k| is below :data:`NEGLIGIBLE_WEIGHT` are dropped first (d' <= d columns):
with mu ||M|| large only a few eigenvalues carry weight. Dropping moves each
score by at most d * NEGLIGIBLE_WEIGHT * ||x_i||^2 (the s_k sum to at most 1
in absolute value), which the site kernel charges in its computation error.
No d x d x m tensor and no ``expm`` is ever formed.

Certified eigen error (:func:`certified_vertex_gradient`, used by
the site kernel). From ``eigh``'s output (lambda, V) alone, with the proved
products of :mod:`privadapt.common.numerics.rounding_bounds`: eta >= ||V^T V - I||_2,
so V's singular values are within eta of 1 and its polar factor Q (exactly
orthogonal) has ||V - Q||_2 <= eta; and with R = A V - V diag(lambda),
(A - A') Q = R + A (Q - V) - (Q - V) diag(lambda) for A' = Q diag(lambda) Q^T,
so ||A - A'||_2 <= ||R||_2 + (||A||_2 + max|lambda|) eta, plus u max|lambda|
twice for the rounding of mu lambda (a relative perturbation of lambda).
Then G(A') = Q diag(s) Q^T exactly, within mu ||A - A'||_2 of G(A) in trace
norm (mu-smoothness), and V diag(s) V^T - Q diag(s) Q^T = E S Q^T + Q S E^T +
E S E^T (E = V - Q) has trace norm at most (2 eta + eta^2) sum|s_k| <= 2 eta
+ eta^2. Nothing is assumed of LAPACK; a wrong output gives a large bound.
"""

from __future__ import annotations

import math

import numpy as np

from privadapt.common.numerics.rounding_bounds import UNIT, accurate_product, grow, up

#: Softmax weights below this (of a total absolute weight <= 1) are dropped.
NEGLIGIBLE_WEIGHT = 2.0**-60


def smoothed_spectrum(matrix: np.ndarray, mu: float) -> tuple[float, np.ndarray, np.ndarray]:
    """(F~(A), V, s): the smoothed norm, the eigenvectors of A and the signed
    softmax weights s_k = w+_k - w-_k (module docstring), from one ``eigh``."""
    eigenvalues, eigenvectors = np.linalg.eigh(matrix)
    value, signed = _softmax(eigenvalues, mu)
    return value, eigenvectors, signed


def _softmax(eigenvalues: np.ndarray, mu: float) -> tuple[float, np.ndarray]:
    """(F~, s) from the eigenvalues."""
    exponents = mu * np.concatenate([eigenvalues, -eigenvalues])
    # Normalise by the sum itself, not by exp(log-partition): once mu ||A||
    # exceeds ~2^54 the log-partition's log(sum) is absorbed by its largest
    # exponent, and the weights of tied top eigenvalues summed to up to 2d.
    shift = float(exponents.max())
    scaled = np.exp(exponents - shift)
    total = float(scaled.sum())
    softmax = scaled / total
    d = len(eigenvalues)
    return (shift + math.log(total)) / mu, softmax[:d] - softmax[d:]


def smoothed_spectral_norm_gradient(matrix: np.ndarray, mu: float) -> tuple[float, np.ndarray]:
    """(F~(A), G) with G = dF~/dA = V diag(s) V^T, the softmax-weighted
    eigenprojector (App. C.2); d/dq_i of F~(M(q)) is then -x_i^T G x_i."""
    value, eigenvectors, signed = smoothed_spectrum(matrix, mu)
    return value, (eigenvectors * signed) @ eigenvectors.T


def smoothed_norm_and_vertex_gradient(
    points: np.ndarray, matrix: np.ndarray, mu: float
) -> tuple[float, np.ndarray]:
    """(F~(A), g) with g_i = -x_i^T G x_i for the rows x_i of ``points``: the
    gradient of q -> F~(M_0 - sum_i q_i x_i x_i^T) at A = M(q), from one
    ``eigh`` and one GEMM over the non-negligible eigen-directions."""
    value, eigenvectors, signed = smoothed_spectrum(matrix, mu)
    return value, _vertex_gradient(points, eigenvectors, signed)


def certified_vertex_gradient(
    points: np.ndarray, matrix: np.ndarray, mu: float
) -> tuple[float, np.ndarray, float]:
    """(F~(A), g, e): as :func:`smoothed_norm_and_vertex_gradient`, and a bound
    e, proved from ``eigh``'s output (:func:`eigen_error_bound`), on how far
    g_i sits from -x_i^T G(A) x_i in units of ||x_i||^2: e = mu eps + 2 eta +
    eta^2 (module docstring), before the projections' own rounding."""
    eigenvalues, eigenvectors = np.linalg.eigh(matrix)
    value, signed = _softmax(eigenvalues, mu)
    backward, orthogonality = eigen_error_bound(matrix, eigenvalues, eigenvectors)
    error = mu * backward + orthogonality * (2.0 + orthogonality)
    return value, _vertex_gradient(points, eigenvectors, signed), error


def eigen_error_bound(matrix: np.ndarray, eigenvalues: np.ndarray,
                      eigenvectors: np.ndarray) -> tuple[float, float]:
    """(eps, eta), proved a posteriori: an orthogonal Q with ||V - Q||_2 <= eta
    diagonalises some A' = Q diag(lambda') Q^T with ||A - A'||_2 <= eps, where
    lambda' is lambda with mu lambda's rounding (module docstring); (inf, inf)
    when V is too far from orthogonal to tell."""
    size = len(eigenvalues)
    identity = np.eye(size)
    gram_matrix, gram_bound = accurate_product(eigenvectors.T, eigenvectors)
    eta = _frobenius_bound(np.abs(gram_matrix - identity) * up(1.0 + UNIT) + gram_bound)
    if not eta < 0.5:
        return math.inf, math.inf
    product, product_bound = accurate_product(matrix, eigenvectors)
    scaled = eigenvectors * eigenvalues  # one rounding each: u |V lambda|
    residual = product - scaled
    entries = (np.abs(residual) * up(1.0 + UNIT) + product_bound
               + UNIT * np.abs(scaled) * up(1.0 + UNIT))
    largest = float(np.abs(eigenvalues).max(initial=0.0))
    norm = _frobenius_bound(np.abs(matrix))
    eps = up(up(_frobenius_bound(entries) + up(up(norm + largest) * eta))
             + up(2.0 * UNIT * largest))
    return eps, eta


def _frobenius_bound(entries: np.ndarray) -> float:
    """An upper bound on the Frobenius norm of a non-negative float matrix."""
    return up(grow(float(np.sqrt(np.sum(entries * entries))), entries.size + 4)
              + 2.0**-1000 * entries.size)


def _vertex_gradient(points: np.ndarray, eigenvectors: np.ndarray,
                     signed: np.ndarray) -> np.ndarray:
    """-x_i^T V diag(s) V^T x_i over the non-negligible directions: every
    direction is projected and the negligible ones weigh 0, so the work does
    not depend on how many the (private) spectrum keeps (a coordinator times replies)."""
    weights = np.where(np.abs(signed) >= NEGLIGIBLE_WEIGHT, signed, 0.0)
    projections = points @ eigenvectors
    return -(projections * projections) @ weights
