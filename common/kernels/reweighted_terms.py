"""The per-record terms of the ``reweighted_gradient`` kernel (seed 000, Alg. 1
and 2, site side), one loop per loss family.

For each record i, with ratio_i = (n/(1-alpha)) / u_i in (0, 1], the kernel
needs clip_G(grad_w l_i) ratio_i (summed: released block 0) and
min(l_i, B) ratio_i^2 (per record: the local block), where every record is
first clipped to ||x|| <= r (and |y| <= Y for the binary losses). A record
whose loss or gradient overflows contributes zero, which keeps both bounds.
Records are processed in chunks so memory stays bounded, and the gradient
terms are summed exactly (:class:`~privadapt.common.kernels.exact_sum.ExactSum`,
exactly): one record moves the sum by its own clipped term only.
"""

from __future__ import annotations

import numpy as np

from privadapt.common.kernels.base import CHUNK_RECORDS
from privadapt.common.kernels.exact_sum import ExactSum
from privadapt.common.losses import clipped_softmax_terms, loss_derivative, loss_values
from privadapt.common.numerics.geometry import clip_coefficients, clip_rows_to_norm, record_products


def binary_record_terms(
    features: np.ndarray,
    labels: np.ndarray,
    weights: np.ndarray,
    ratios: np.ndarray,
    *,
    loss: str,
    feature_norm: float,
    label_bound: float,
    loss_bound: float,
    gradient_bound: float,
) -> tuple[np.ndarray, np.ndarray]:
    """(sum_i clip_G(grad l_i) ratio_i, [min(l_i, B) ratio_i^2]_i) for the
    squared or logistic loss of w (d,)."""
    num_records = len(labels)
    gradient_sum = ExactSum((features.shape[1],))
    scaled_losses = np.empty(num_records)
    for start in range(0, num_records, CHUNK_RECORDS):
        chunk = slice(start, start + CHUNK_RECORDS)
        clipped_features = clip_rows_to_norm(features[chunk], feature_norm)
        clipped_labels = np.clip(labels[chunk], -label_bound, label_bound)
        ratio = ratios[chunk]
        with np.errstate(over="ignore", invalid="ignore"):
            margins = record_products(clipped_features, weights)
            losses = np.minimum(loss_values(loss, margins, clipped_labels), loss_bound)
            coefficients = loss_derivative(loss, margins, clipped_labels)
        clipped = clip_coefficients(coefficients, clipped_features, gradient_bound)
        losses[~np.isfinite(losses)] = 0.0
        with np.errstate(over="ignore", invalid="ignore"):
            terms = clipped_features * (clipped * ratio)[:, None]  # each of norm <= G
        gradient_sum.add_terms(terms, gradient_bound)
        scaled_losses[chunk] = losses * ratio * ratio
    return gradient_sum.value(), scaled_losses


def softmax_record_terms(
    features: np.ndarray,
    classes: np.ndarray,
    weights: np.ndarray,
    ratios: np.ndarray,
    *,
    feature_norm: float,
    loss_bound: float,
    gradient_bound: float,
) -> tuple[np.ndarray, np.ndarray]:
    """The same for the softmax cross-entropy of W (d, C), labels as class
    indices: the gradient sum comes back flattened row-major."""
    num_records, num_classes = len(classes), weights.shape[1]
    gradient_sum = ExactSum(weights.shape)
    scaled_losses = np.empty(num_records)
    # chunk x d x C per-record gradient terms in memory
    chunk_records = max(1, CHUNK_RECORDS * 64 // (num_classes * max(1, features.shape[1])))
    for start in range(0, num_records, chunk_records):
        chunk = slice(start, start + chunk_records)
        clipped = clip_rows_to_norm(features[chunk], feature_norm)
        losses, residuals = clipped_softmax_terms(
            clipped, classes[chunk], weights, loss_bound, gradient_bound)
        ratio = ratios[chunk]
        # Each record's x (r ratio)^T has norm ||x|| ||r ratio|| <= G.
        scaled = residuals * ratio[:, None]
        gradient_sum.add_terms(clipped[:, :, None] * scaled[:, None, :], gradient_bound)
        scaled_losses[chunk] = losses * ratio * ratio
    return gradient_sum.value().reshape(-1), scaled_losses
