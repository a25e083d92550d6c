"""Softmax cross-entropy of a multi-class linear model, and the constants its privacy needs.

Seed 000 (../shared/seeds/000_c994082081daf396.txt) runs PNCnvxAdap (Alg. 2) on
any G-Lipschitz, beta-smooth loss and names "cross-entropy with softmax" as the
case it covers (Section 1), but states none of its constants; they are derived
here, from the bounds the site enforces (||x|| <= r by clipping, ||W||_F <=
Lambda), never from the data. (Section 5 assumes "without loss of generality"
a loss bound B = G Lambda; that fails here, since l = log C at W = 0, hence
the B below.)

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
from collections.abc import Mapping
from typing import Any

import numpy as np
from scipy import special

from privadapt.common.kernels.base import CHUNK_RECORDS, clip_rows_to_norm, row_norms

SOFTMAX_CROSS_ENTROPY = "softmax_cross_entropy"


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


def num_classes_param(params: Mapping[str, Any]) -> int:
    """The query's ``num_classes`` C, an integer >= 2."""
    value = params.get("num_classes")
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 2:
        raise ValueError(f"parameter 'num_classes' must be an integer >= 2, got {value!r}")
    return int(value)


def class_indices(labels: np.ndarray, num_classes: int) -> np.ndarray:
    """The labels as integer class indices, or ``ValueError`` unless every label
    is an integer in 0..C-1. The message names no record and no count: it goes
    back to whoever asked."""
    labels = np.asarray(labels, dtype=np.float64)
    valid = np.isfinite(labels) & (labels == np.floor(labels)) & (labels >= 0) \
        & (labels <= num_classes - 1)
    if not np.all(valid):
        raise ValueError(
            f"the softmax cross-entropy needs labels that are class indices 0..{num_classes - 1}"
            f" (integers); this data holds other labels: recode the label column (the schema's"
            f" label_map) or ask for the right num_classes"
        )
    return labels.astype(np.intp)


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


def clip_residuals(residuals: np.ndarray, features: np.ndarray, bound: float) -> np.ndarray:
    """Residual rows r_i scaled so that ||x_i r_i^T||_F = ||x_i|| ||r_i|| <= ``bound``;
    a row whose norm cannot be computed in floating point contributes zero."""
    with np.errstate(over="ignore", invalid="ignore"):
        norms = row_norms(features) * row_norms(residuals)
        factors = np.minimum(1.0, bound / np.maximum(norms, np.finfo(float).tiny))
        clipped = residuals * factors[:, None]
    clipped[~(np.all(np.isfinite(clipped), axis=1) & np.isfinite(norms))] = 0.0
    return clipped


def clipped_record_terms(
    features: np.ndarray,
    classes: np.ndarray,
    weights: np.ndarray,
    loss_bound: float,
    gradient_bound: float,
) -> tuple[np.ndarray, np.ndarray]:
    """For clipped ``features`` (n, d), class indices and W (d, C): each record's
    loss clipped to [0, B] (non-finite: 0) and its residual with
    ||x_i|| ||r_i|| <= G (:func:`clip_residuals`)."""
    with np.errstate(over="ignore", invalid="ignore"):
        logits = features @ weights
    losses, residuals = softmax_cross_entropy_terms(logits, classes)
    losses = np.clip(losses, 0.0, loss_bound)
    losses[~np.isfinite(losses)] = 0.0
    return losses, clip_residuals(residuals, features, gradient_bound)


def softmax_record_terms(
    features: np.ndarray,
    classes: np.ndarray,
    weights: np.ndarray,
    ratios: np.ndarray,
    feature_norm: float,
    loss_bound: float,
    gradient_bound: float,
) -> tuple[np.ndarray, np.ndarray]:
    """The reweighted_gradient kernel's per-record terms for this loss (seed 000,
    Alg. 1/2 site side): (sum_i clip_G(grad_W l_i) ratio_i flattened row-major,
    [clip_B(l_i) ratio_i^2]_i), with each row of ``features`` first clipped to
    norm r and ``ratios`` = (n/(1-alpha)) / u_i in (0, 1]."""
    num_records, num_classes = len(classes), weights.shape[1]
    gradient_sum = np.zeros(weights.shape)
    scaled_losses = np.empty(num_records)
    chunk_records = max(1, CHUNK_RECORDS // num_classes)  # chunk x C logits in memory
    for start in range(0, num_records, chunk_records):
        chunk = slice(start, start + chunk_records)
        clipped = clip_rows_to_norm(features[chunk], feature_norm)
        losses, residuals = clipped_record_terms(
            clipped, classes[chunk], weights, loss_bound, gradient_bound)
        ratio = ratios[chunk]
        gradient_sum += clipped.T @ (residuals * ratio[:, None])
        scaled_losses[chunk] = losses * ratio * ratio
    return gradient_sum.reshape(-1), scaled_losses
