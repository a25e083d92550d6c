"""The reweighted adaptation objectives F (6) and J (7) of seed 000, with gradients.

Paper: ../shared/seeds/000_c994082081daf396.txt (private supervised adaptation),
Section 4 problem (6) and Section 5 problem (7). Public source records
i = 1..m (at the coordinator), private target records i = m+1..m+n (at the
sites), weights q_i reparameterised as u_i = 1/q_i, constrained to
u_i >= m/alpha (public) and u_i >= n/(1-alpha) (private):

    F(w, u) = sum_i [ (w.x_i - y_i)^2 + d_DP 1[i <= m] ] / u_i
              + k1 [ (alpha^2/m^2) sum_{i<=m} u_i + ((1-alpha)^2/n^2) sum_{i>m} u_i - 1 ]
              + k2 ( sum_i 1/u_i^2 )^(1/2) + kinf / min_i u_i

    J(w, u) = sum_i [ l(w; x_i, y_i) + d_DP 1[i <= m] ] / u_i + l1 (1 - sum_i 1/u_i)
              + l2 ( sum_i 1/u_i^2 )^(1/2) + linf (1/mu) log sum_i exp(mu / u_i)

How the OCR-garbled formulas were rebuilt: the k1 bracket of (6) is garbled in
the OCR; it is the first-order upper bound of 1 - sum_i q_i stated just before
(6) (1/u >= 2/u0 - u/u0^2 at u0 = m/alpha and n/(1-alpha): 1 - sum_i 1/u_i <=
(alpha^2/m^2) sum_pub u_i + ((1-alpha)^2/n^2) sum_priv u_i - 1 after using
sum of the reference weights = 1), which matches Claim 1 (q_i <= alpha/m,
(1-alpha)/n) and the k1-derivatives used in the proof of Lemma 1 (Appendix
C.1: dF/du_i contains k1 alpha^2/m^2, resp. k1 (1-alpha)^2/n^2). The
2-norm term is k2 ||q||_2 = k2 (sum 1/u_i^2)^(1/2) and the max term
kinf ||q||_inf = kinf / min_i u_i (Appendix C.1, "1(i in argmin u)"). J is as
printed in (7) and in the Hessian computation of Appendix D.1 (which
differentiates exactly these four terms).

``mu`` (``ReweightingHyperparameters``) chooses the max term of F: ``inf``
gives the exact kinf / min_i u_i (subgradient: the first argmin), a finite mu
the mu-softmax kinf (1/mu) log sum_i exp(mu/u_i) of Section 5, which is what
the federated CnvxAdap optimises (see ``cnvx_adap``). J always uses the
softmax. These functions are the non-private reference (tests, scipy
comparisons) and the coordinator's computations on its public records.

Losses l: squared and logistic (labels in {-1, +1}) of a linear model w in R^d,
and the softmax cross-entropy of a multi-class linear model W in R^{d x C}
(labels class indices 0..C-1; ``w`` is W, either (d, C) or flattened row-major
to (d C,), and its gradient comes back in the shape given). The paper names
the softmax cross-entropy for Alg. 2 but gives no formulas or constants; they
are in :mod:`privadapt.common.losses`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import special

from privadapt.common.losses import (
    SOFTMAX_CROSS_ENTROPY,
    Loss,
    Objective,
    class_indices,
    loss_derivative,
    loss_values,
    penalty_gradient,
    softmax_cross_entropy_terms,
)
from privadapt.common.numerics.geometry import project_to_ball
from privadapt.common.validation import (
    check_nonnegative_finite,
    check_positive,
    check_probability,
)


@dataclass(frozen=True)
class ReweightingHyperparameters:
    """alpha and the penalty weights of F (k1, k2, kinf) or J (l1, l2, linf),
    the softmax parameter mu (``inf``: F's exact max term) and d_DP."""

    alpha: float
    k1: float = 0.0
    k2: float = 0.0
    kinf: float = 0.0
    mu: float = math.inf
    discrepancy: float = 0.0

    def __post_init__(self) -> None:
        check_probability("alpha", self.alpha)
        for name in ("k1", "k2", "kinf", "discrepancy"):
            check_nonnegative_finite(name, getattr(self, name))
        check_positive("mu", self.mu, infinity_means="inf for the exact max term")


@dataclass(frozen=True)
class AdaptationSample:
    """Public source (m records) and private target (n records), for the reference."""

    public_features: np.ndarray
    public_labels: np.ndarray
    private_features: np.ndarray
    private_labels: np.ndarray

    @property
    def num_public(self) -> int:
        return len(self.public_labels)

    @property
    def num_private(self) -> int:
        return len(self.private_labels)


def weight_lower_bounds(num_public: int, num_private: int, alpha: float) -> np.ndarray:
    """The constraint u_i >= m/alpha (public) and u_i >= n/(1-alpha) (private)."""
    return np.concatenate([np.full(num_public, num_public / alpha),
                           np.full(num_private, num_private / (1.0 - alpha))])


def sum_coefficients(num_public: int, num_private: int, alpha: float) -> np.ndarray:
    """F's k1 coefficients alpha^2/m^2 (public) and (1-alpha)^2/n^2 (private):
    1 / (lower bound)^2, the slope of the tangent of 1/u at the bound."""
    return 1.0 / weight_lower_bounds(num_public, num_private, alpha) ** 2


def log_partition(u: np.ndarray, mu: float) -> float:
    """log sum_i exp(mu / u_i), computed without overflow."""
    return float(special.logsumexp(mu / u))


def weighted_loss_gradient(
    w: np.ndarray,
    u: np.ndarray,
    features: np.ndarray,
    labels: np.ndarray,
    loss: Loss,
    offset: float = 0.0,
) -> tuple[float, np.ndarray, np.ndarray]:
    """Value, w-gradient and u-gradient of sum_i (l(w; x_i, y_i) + offset) / u_i."""
    if loss == SOFTMAX_CROSS_ENTROPY:
        return _weighted_softmax_gradient(w, u, features, labels, offset)
    margins = features @ w
    losses = loss_values(loss, margins, labels) + offset
    value = float(np.sum(losses / u))
    gradient_w = features.T @ (loss_derivative(loss, margins, labels) / u)
    return value, gradient_w, -losses / u**2


def _weighted_softmax_gradient(
    w: np.ndarray, u: np.ndarray, features: np.ndarray, labels: np.ndarray, offset: float
) -> tuple[float, np.ndarray, np.ndarray]:
    """:func:`weighted_loss_gradient` for the softmax cross-entropy: W = ``w``
    as (d, C) (or flattened), grad_W = sum_i x_i (p_i - e_{y_i})^T / u_i."""
    dim = features.shape[1]
    if w.size % dim or w.size < 2 * dim:
        raise ValueError(f"softmax cross-entropy weights must hold d x C entries with d = {dim}"
                         f" and C >= 2, got shape {w.shape}")
    weights = w.reshape(dim, -1)
    losses, residuals = softmax_cross_entropy_terms(
        features @ weights, class_indices(labels, weights.shape[1]))
    losses = losses + offset
    gradient_w = features.T @ (residuals / u[:, None])
    return float(np.sum(losses / u)), gradient_w.reshape(w.shape), -losses / u**2


def _max_term(u: np.ndarray, mu: float) -> tuple[float, np.ndarray]:
    """1/min_i u_i (mu = inf; subgradient at the first argmin) or the mu-softmax."""
    if math.isinf(mu):
        first = int(np.argmin(u))
        gradient = np.zeros_like(u)
        gradient[first] = -1.0 / u[first] ** 2
        return 1.0 / u[first], gradient
    log_z = log_partition(u, mu)
    return log_z / mu, -np.exp(mu / u - log_z) / u**2


def objective_and_gradient(
    w: np.ndarray,
    u: np.ndarray,
    sample: AdaptationSample,
    hyper: ReweightingHyperparameters,
    objective: Objective = "convex",
    loss: Loss = "squared",
) -> tuple[float, np.ndarray, np.ndarray]:
    """F(w, u) (``objective="convex"``) or J(w, u) (``"smooth"``) and its gradient
    (w-part, u-part; u ordered public first). F takes the squared loss only."""
    if objective == "convex" and loss != "squared":
        raise ValueError("F (problem (6)) is defined for the squared loss; use J for others")
    if objective == "smooth" and math.isinf(hyper.mu):
        raise ValueError("J (problem (7)) needs a finite softmax parameter mu")
    m, n = sample.num_public, sample.num_private
    u_public, u_private = u[:m], u[m:]
    value_pub, grad_w_pub, grad_u_pub = weighted_loss_gradient(
        w, u_public, sample.public_features, sample.public_labels, loss, hyper.discrepancy)
    value_priv, grad_w_priv, grad_u_priv = weighted_loss_gradient(
        w, u_private, sample.private_features, sample.private_labels, loss)
    inverse_square_sum = float(np.sum(u**-2.0))
    value = value_pub + value_priv + hyper.k2 * math.sqrt(inverse_square_sum)
    if objective == "convex":
        value += hyper.k1 * (float(np.sum(sum_coefficients(m, n, hyper.alpha) * u)) - 1.0)
    else:
        value += hyper.k1 * (1.0 - float(np.sum(1.0 / u)))
    max_value, max_gradient = _max_term(u, hyper.mu)
    value += hyper.kinf * max_value
    penalty = penalty_gradients(u, m, hyper, objective, inverse_square_sum, log_z=0.0)
    grad_u = np.concatenate([grad_u_pub, grad_u_priv]) + penalty + hyper.kinf * max_gradient
    return value, grad_w_pub + grad_w_priv, grad_u


def penalty_gradients(
    u: np.ndarray,
    num_public: int,
    hyper: ReweightingHyperparameters,
    objective: Objective,
    inverse_square_sum: float,
    log_z: float,
    include_max_term: bool = False,
) -> np.ndarray:
    """Gradient of the k1 and k2 terms (and, with ``include_max_term``, the
    softmax max term at the given log Z) over all m + n coordinates of ``u``,
    given the global S = sum_j 1/u_j^2: the same per-coordinate formula the
    sites use (``penalty_gradient``)."""
    m, n = num_public, len(u) - num_public
    lower = weight_lower_bounds(m, n, hyper.alpha)
    parts = []
    for part, bound in ((slice(0, m), lower[0] if m else 1.0), (slice(m, m + n), lower[-1])):
        parts.append(penalty_gradient(
            u[part], objective=objective, k1=hyper.k1, k1_coefficient=1.0 / bound**2,
            k2=hyper.k2, kinf=hyper.kinf if include_max_term else 0.0,
            mu=hyper.mu, inverse_square_sum=inverse_square_sum, log_partition=log_z))
    return np.concatenate(parts)


def objective_value(
    w: np.ndarray,
    u: np.ndarray,
    sample: AdaptationSample,
    hyper: ReweightingHyperparameters,
    objective: Objective = "convex",
    loss: Loss = "squared",
) -> float:
    """F(w, u) or J(w, u) alone."""
    return objective_and_gradient(w, u, sample, hyper, objective, loss)[0]


def reference_descent(
    sample: AdaptationSample,
    hyper: ReweightingHyperparameters,
    *,
    objective: Objective,
    loss: Loss,
    radius: float,
    step_sizes: tuple[float, float, float],
    iterations: int,
    num_classes: int | None = None,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Non-private projected gradient descent on F (finite mu: F_mu) or J with
    all records in one place, from w_0 = 0 and u_0 = the bounds: the iterates
    (w_t, u_t), t = 1..T, that CnvxAdap / NCnvxAdap compute across sites.
    ``step_sizes`` = (eta_w, eta_{u^Pub}, eta_{u^Priv}); the softmax
    cross-entropy's w is W of ``num_classes`` columns, flattened row-major
    (``num_classes`` is needed by the softmax cross-entropy only: the
    estimators declare its default)."""
    if loss == SOFTMAX_CROSS_ENTROPY and num_classes is None:
        raise ValueError("num_classes is needed with the softmax cross-entropy")
    m = sample.num_public
    lower = weight_lower_bounds(m, sample.num_private, hyper.alpha)
    etas = np.concatenate([np.full(m, step_sizes[1]), np.full(sample.num_private, step_sizes[2])])
    dim = sample.public_features.shape[1]
    w = np.zeros(dim * num_classes if loss == SOFTMAX_CROSS_ENTROPY else dim)
    u = lower.copy()
    iterates = []
    for _ in range(iterations):
        _, grad_w, grad_u = objective_and_gradient(w, u, sample, hyper, objective, loss)
        w = project_to_ball(w - step_sizes[0] * grad_w, radius)
        u = np.maximum(u - etas * grad_u, lower)
        iterates.append((w, u))
    return iterates
