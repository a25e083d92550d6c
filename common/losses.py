"""Loss functions of linear models, their derivatives, and the bounds privacy needs.

One module for the losses privadapt fits: the site-side kernels clip with
them, the coordinator's algorithms step with them, and both read the same
per-record bounds (B on the loss, G on the gradient norm, beta on the
smoothness) from here, so a bound is derived once. Every bound holds over
the clip region the site enforces, ||x|| <= r (``feature_norm``), |y| <= Y
(``label_bound``), and the model ball ||w|| <= Lambda (``radius``), never
over the data.

Losses (:data:`Loss`): for w in R^d, margin w.x,

* ``squared``: (w.x - y)^2, derivative 2 (w.x - y) in the margin;
  B = (Lambda r + Y)^2, G = 2 r (Lambda r + Y) (seed 000, Section 4),
  smoothness 2 r^2;
* ``logistic``: log(1 + exp(-y w.x)), y in {-1, +1}, derivative
  -y sigmoid(-y w.x); B = log(1 + exp(Lambda r Y)), G = r Y, smoothness r^2 Y^2 / 4;
* ``softmax_cross_entropy``: a multi-class linear model, below.

The reweighted objectives' penalty gradient (:func:`penalty_gradient`) is
here too: sites and coordinator evaluate it on their own u's with the same
formula.

Softmax cross-entropy. Seed 000 (../shared/seeds/000_c994082081daf396.txt)
runs PNCnvxAdap (Alg. 2) on any G-Lipschitz, beta-smooth loss and names
"cross-entropy with softmax" as the case it covers (Section 1), but states
none of its constants; they are derived here, from the bounds the site
enforces (||x|| <= r by clipping, ||W||_F <= Lambda), never from the data.
(Section 5 assumes "without loss of generality" a loss bound B = G Lambda;
that fails here, since l = log C at W = 0, hence the B below.)

Model W in R^{d x C} (sent flattened row-major, W[j, c] at j C + c), label y a
class index in 0..C-1, logits z = W^T x, p = softmax(z):

    l(W; x, y) = logsumexp(z) - z_y,      grad_W l = x (p - e_y)^T.

* Lipschitz constant G = sqrt(2) r: ||grad_W l||_F = ||x|| ||p - e_y|| and
  ||p - e_y||^2 = (1 - p_y)^2 + sum_{c != y} p_c^2 <= 2 (1 - p_y)^2 <= 2. This
  holds for every W (p is a probability vector), so the gradient needs no
  weight bound at all; it approaches sqrt(2) r when p puts all mass on one
  wrong class.
* Smoothness beta = r^2 / 2: the Hessian in vec(W) is (diag(p) - p p^T) (x) x x^T
  (Kronecker), of norm ||diag(p) - p p^T|| ||x||^2. The first factor is
  positive semi-definite and, by Gershgorin, its eigenvalues are at most
  max_c [p_c (1 - p_c) + p_c sum_{c' != c} p_c'] = max_c 2 p_c (1 - p_c) <= 1/2
  (reached at p = (1/2, 1/2, 0, ...)). With C = 2 this is the logistic loss's
  r^2 Y^2 / 4 for w = W_1 - W_0, whose norm is up to sqrt(2) ||W||_F.
* Loss bound B = log(1 + (C - 1) exp(sqrt(2) Lambda r)): l >= 0 because
  logsumexp(z) >= max_c z_c >= z_y, and l = log sum_c exp(z_c - z_y) with
  z_c - z_y = (W_c - W_y).x <= ||W_c - W_y|| r <= sqrt(2) ||W||_F r for c != y
  (||a - b||^2 <= 2 (||a||^2 + ||b||^2)). So B <= log C + sqrt(2) Lambda r,
  inside the cruder log C + 2 Lambda r; with C = 2 it is the logistic
  log(1 + exp(Lambda' r)) at Lambda' = sqrt(2) Lambda.

The site clips losses to [0, B] and gradients to norm G anyway, so the bounds
hold even for a coordinator that sends ||W||_F > Lambda and for floating-point
rounding; a record whose logits overflow contributes zero.
"""

from __future__ import annotations

import math
from typing import Literal, get_args

import numpy as np
from scipy import special

from privadapt.common.numerics.geometry import clip_residuals, record_products
from privadapt.common.numerics.trust_region import quadratic_range_on_ball

BinaryLoss = Literal["squared", "logistic"]
Loss = Literal["squared", "logistic", "softmax_cross_entropy"]
Objective = Literal["convex", "smooth"]

SOFTMAX_CROSS_ENTROPY = "softmax_cross_entropy"
BINARY_LOSSES: tuple[str, ...] = get_args(BinaryLoss)
LOSSES: tuple[str, ...] = get_args(Loss)
OBJECTIVES: tuple[str, ...] = get_args(Objective)


# ---------------------------------------------------------------- binary losses


def loss_values(loss: str, margins: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """l(w; x, y) from the margin w.x: (w.x - y)^2 or log(1 + exp(-y w.x))."""
    if loss == "squared":
        return (margins - labels) ** 2
    return np.logaddexp(0.0, -labels * margins)


def loss_derivative(loss: str, margins: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """d loss / d (w.x) for each record: the per-record gradient is this times x."""
    if loss == "squared":
        return 2.0 * (margins - labels)
    return -labels * special.expit(-labels * margins)


def record_loss_derivatives(
    loss: str, features: np.ndarray, weights: np.ndarray, labels: np.ndarray
) -> np.ndarray:
    """:func:`loss_derivative` at each record's own margin w.x_i
    (:func:`~privadapt.common.numerics.geometry.record_products`: no other record's
    rounding), the coefficient of each per-record gradient c_i x_i; an
    overflowing margin gives a non-finite c_i, which the kernels' clipping zeroes."""
    with np.errstate(over="ignore", invalid="ignore"):
        return loss_derivative(loss, record_products(features, weights), labels)


def loss_bounds(
    loss: str, feature_norm: float, label_bound: float, radius: float, num_classes: int = 2
) -> tuple[float, float]:
    """(B, G): bounds on the loss and on its gradient norm in w over
    ||x|| <= r, |y| <= Y, ||w|| <= Lambda (seed 000, Section 4 for the squared loss);
    ``num_classes`` is read by the softmax cross-entropy only."""
    if loss == SOFTMAX_CROSS_ENTROPY:
        return softmax_cross_entropy_bounds(feature_norm, radius, num_classes)
    if loss == "squared":
        reach = radius * feature_norm + label_bound
        return reach**2, 2.0 * feature_norm * reach
    return float(np.logaddexp(0.0, radius * feature_norm * label_bound)), feature_norm * label_bound


def loss_smoothness(loss: str, feature_norm: float, label_bound: float) -> float:
    """beta_w: smoothness in w of one record's loss (and of sum_i l_i / u_i when
    sum_i 1/u_i <= 1): 2 r^2 (squared), r^2 Y^2 / 4 (logistic), r^2 / 2 (softmax
    cross-entropy)."""
    if loss == SOFTMAX_CROSS_ENTROPY:
        return softmax_cross_entropy_smoothness(feature_norm)
    r, y = feature_norm, label_bound
    return 2.0 * r * r if loss == "squared" else r * r * y * y / 4.0


# ---------------------------------------------------------------- squared-loss discrepancy


def squared_loss_range(moments: np.ndarray, radius: float) -> tuple[float, float]:
    """(min, max) over ||w|| <= radius of v^T M v with v = [w, -1], M of size
    (d+1) x (d+1) (symmetrised): the range of a mean squared loss, or of a
    difference of two, given second moments of z = [x, y]."""
    moments = np.asarray(moments, dtype=float)
    moments = 0.5 * (moments + moments.T)
    # v^T M v = w^T M_xx w - 2 M_xy^T w + M_yy
    return quadratic_range_on_ball(moments[:-1, :-1], -moments[:-1, -1], moments[-1, -1], radius)


def squared_loss_discrepancy(moment_difference: np.ndarray, radius: float) -> float:
    """sup over ||w|| <= radius of |v^T D v|, v = [w, -1]: the discrepancy of
    seed 000, eq. (2), for the squared loss, given D = M_pub - M_priv."""
    low, high = squared_loss_range(moment_difference, radius)
    return max(abs(low), abs(high))


# ---------------------------------------------------------------- softmax cross-entropy


def softmax_cross_entropy_bounds(
    feature_norm: float, radius: float, num_classes: int
) -> tuple[float, float]:
    """(B, G): the per-record loss and gradient-norm bounds of the module docstring
    over ||x|| <= r (``feature_norm``) and ||W||_F <= Lambda (``radius``)."""
    reach = math.sqrt(2.0) * radius * feature_norm
    loss_bound = float(np.logaddexp(0.0, math.log(num_classes - 1) + reach))
    return loss_bound, math.sqrt(2.0) * feature_norm


def softmax_cross_entropy_smoothness(feature_norm: float) -> float:
    """beta = r^2 / 2: the smoothness in W of one record's loss (module docstring)."""
    return feature_norm * feature_norm / 2.0


def class_indices(labels: np.ndarray, num_classes: int) -> np.ndarray:
    """The labels as integer class indices, or ``ValueError`` unless every label
    is an integer in 0..C-1. For public labels only (the coordinator's): on
    private data whether this raises is itself a release, so kernels use
    :func:`masked_class_indices` instead."""
    classes, valid = masked_class_indices(labels, num_classes)
    if not np.all(valid):
        raise ValueError(
            f"the softmax cross-entropy needs labels that are class indices 0..{num_classes - 1}"
            f" (integers); this data holds other labels: recode the label column (the schema's"
            f" label_map) or ask for the right num_classes"
        )
    return classes


def masked_class_indices(
    labels: np.ndarray, num_classes: int
) -> tuple[np.ndarray, np.ndarray]:
    """(classes, valid): each label as an integer class index where it is an
    integer in 0..C-1 (``valid``), and class 0 where it is not. Never raises on
    the labels: a kernel gives a record whose label is no class index a zero
    term, so whether a site answers cannot depend on its data."""
    labels = np.asarray(labels, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        valid = np.isfinite(labels) & (labels == np.floor(labels)) & (labels >= 0) \
            & (labels <= num_classes - 1)
    return np.where(valid, labels, 0.0).astype(np.intp), valid


def softmax_cross_entropy_terms(
    logits: np.ndarray, classes: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per record, l = logsumexp(z) - z_y and the residual p - e_y (so that
    grad_W l = x (p - e_y)^T), computed without overflow for finite logits;
    rows with non-finite logits come out non-finite."""
    rows = np.arange(len(classes))
    with np.errstate(over="ignore", invalid="ignore"):
        log_partition = special.logsumexp(logits, axis=1)
        losses = log_partition - logits[rows, classes]
        residuals = np.exp(logits - log_partition[:, None])
    residuals[rows, classes] -= 1.0
    return losses, residuals


def clipped_softmax_terms(
    features: np.ndarray,
    classes: np.ndarray,
    weights: np.ndarray,
    loss_bound: float,
    gradient_bound: float,
) -> tuple[np.ndarray, np.ndarray]:
    """For clipped ``features`` (n, d), class indices and W (d, C): each record's
    loss clipped to [0, B] (non-finite: 0) and its residual with
    ||x_i|| ||r_i|| <= G (:func:`privadapt.common.numerics.geometry.clip_residuals`)."""
    with np.errstate(over="ignore", invalid="ignore"):
        logits = record_products(features, weights)
    losses, residuals = softmax_cross_entropy_terms(logits, classes)
    losses = np.clip(losses, 0.0, loss_bound)
    losses[~np.isfinite(losses)] = 0.0
    return losses, clip_residuals(residuals, features, gradient_bound)


# ---------------------------------------------------------------- reweighting penalties


def penalty_gradient(
    u: np.ndarray,
    *,
    objective: str,
    k1: float,
    k1_coefficient: float,
    k2: float,
    kinf: float,
    mu: float,
    inverse_square_sum: float,
    log_partition: float,
) -> np.ndarray:
    """Gradient in u of the penalty terms of F (6) or J (7) of seed 000 at coordinates ``u``.

    * sum term: F's k1 (c sum_i u_i - 1) gives k1 c with c = ``k1_coefficient``
      (alpha^2/m^2 public, (1-alpha)^2/n^2 private); J's l1 (1 - sum_i 1/u_i)
      gives l1 / u_i^2;
    * k2 (sum_j 1/u_j^2)^(1/2) gives -k2 / (u_i^3 sqrt(S)), S = ``inverse_square_sum``;
    * kinf (1/mu) log sum_j exp(mu/u_j) gives -kinf softmax_i / u_i^2 with
      softmax_i = exp(mu/u_i - log Z), log Z = ``log_partition``. (F's exact
      kinf / min_j u_j is replaced by this softmax in the federated algorithm;
      see ``privadapt.server.algorithms.reweighting.cnvx_adap``.)
    """
    inverse = 1.0 / u
    inverse_squared = inverse * inverse
    if objective == "convex":
        gradient = np.full_like(u, k1 * k1_coefficient)
    else:
        gradient = k1 * inverse_squared
    if k2 > 0:
        gradient -= k2 * inverse_squared * inverse / math.sqrt(inverse_square_sum)
    if kinf > 0:
        gradient -= kinf * np.exp(mu * inverse - log_partition) * inverse_squared
    return gradient
