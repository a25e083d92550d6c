"""The softmax smoothing of the spectral norm and its gradient (seed 003, Sec. 4.2,
App. C.2): shared by the coordinator's discrepancy minimisation
(``server/algorithms/smoothed_discrepancy.py``) and the site kernel that scores
the simplex vertices on a private M_0 (``common/kernels/smoothed_discrepancy_gradient.py``).

For a symmetric A with eigenpairs (lambda_k, v_k),

    F~(A) = f(diag(A, -A)) = (1/mu) log sum_k 2 cosh(mu lambda_k),
    dF~/dA = G = V diag(s) V^T,   s_k = w+_k - w-_k,
    w+-_k = exp(+-mu lambda_k) / sum_l 2 cosh(mu lambda_l),

the softmax over the 2d eigenvalues +-lambda_k of diag(A, -A), computed with a
max-shift (log-sum-exp) so nothing overflows however large mu ||A|| is.

Speed (issue 14 item 5). Source point i's partial derivative of F~(M(q)),
M(q) = M_0 - sum_i q_i x_i x_i^T, is -x_i^T G x_i = -sum_k s_k (v_k . x_i)^2:
one GEMM Y = X V (m x d by d x d'), squared, times s. Directions whose weight
|s_k| is below :data:`NEGLIGIBLE_WEIGHT` are dropped first (d' <= d columns):
with mu ||M|| large only a few eigenvalues carry weight. Dropping moves each
score by at most d * NEGLIGIBLE_WEIGHT * ||x_i||^2 (the s_k sum to at most 1
in absolute value), which the site kernel charges in its computation error.
No d x d x m tensor and no ``expm`` is ever formed.
"""

from __future__ import annotations

import numpy as np
from scipy import special

#: Softmax weights below this (of a total absolute weight <= 1) are dropped.
NEGLIGIBLE_WEIGHT = 2.0**-60


def smoothed_spectrum(matrix: np.ndarray, mu: float) -> tuple[float, np.ndarray, np.ndarray]:
    """(F~(A), V, s): the smoothed norm, the eigenvectors of A and the signed
    softmax weights s_k = w+_k - w-_k (module docstring), from one ``eigh``."""
    eigenvalues, eigenvectors = np.linalg.eigh(matrix)
    exponents = mu * np.concatenate([eigenvalues, -eigenvalues])
    log_partition = special.logsumexp(exponents)
    softmax = np.exp(exponents - log_partition)
    d = len(eigenvalues)
    return float(log_partition / mu), eigenvectors, softmax[:d] - softmax[d:]


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
    keep = np.abs(signed) >= NEGLIGIBLE_WEIGHT
    projections = points @ eigenvectors[:, keep]
    return value, -(projections * projections) @ signed[keep]
