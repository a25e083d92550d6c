"""A synthetic covariate-shift regression with a known answer (seed 000, Sec. 6).

Source x ~ N(0, I_d); target x ~ N(shift * 1/sqrt(d), target_scale^2 I_d).
Labels y = w_T . x + noise_std * N(0, 1) on the target and y = w_S . x + noise
on the source. By default there is a **concept shift**, said so here:
w_S = w* and w_T = w* + concept_shift * v (v a fixed unit vector); with
``concept_shift=0`` the shift is covariate-only and a well-specified linear
model makes reweighting unnecessary (source-only is already unbiased), which
would make the comparison uninformative. The known answer is ``target_weights``.

Bounds: every x is clipped to ||x|| <= FEATURE_CLIP and every y to
|y| <= LABEL_CLIP, then divided by those **public constants**, so the data the
algorithms see satisfy ||x|| <= 1 = r and |y| <= 1 = Y (and the true regressor
in scaled units is w_T * FEATURE_CLIP / LABEL_CLIP).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FEATURE_CLIP = 3.5
LABEL_CLIP = 6.0


@dataclass(frozen=True)
class ShiftedRegression:
    """Scaled source, target pool and the true target regressor (scaled units)."""

    source_features: np.ndarray
    source_labels: np.ndarray
    target_features: np.ndarray
    target_labels: np.ndarray
    target_weights: np.ndarray


def _clip_and_scale(features: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    norms = np.linalg.norm(features, axis=1)
    features = features / np.maximum(1.0, norms / FEATURE_CLIP)[:, None]
    labels = np.clip(labels, -LABEL_CLIP, LABEL_CLIP)
    return features / FEATURE_CLIP, labels / LABEL_CLIP


def make_shifted_regression(
    num_source: int = 1000,
    num_target: int = 2000,
    dim: int = 5,
    shift: float = 1.5,
    target_scale: float = 0.6,
    concept_shift: float = 0.5,
    noise_std: float = 0.5,
    seed: int = 0,
) -> ShiftedRegression:
    """Draw the source sample and a target pool (split it into train / validation /
    test yourself); everything is fixed by ``seed``."""
    if num_source < 1 or num_target < 1 or dim < 1:
        raise ValueError(f"sizes must be >= 1, got num_source={num_source}, "
                         f"num_target={num_target}, dim={dim}")
    rng = np.random.default_rng(seed)
    w_star = np.linspace(1.0, -1.0, dim) + 0.5
    direction = np.ones(dim) / np.sqrt(dim)
    v = np.zeros(dim)
    v[0] = 1.0
    w_target = w_star + concept_shift * v
    source = rng.normal(size=(num_source, dim))
    target = shift * direction + target_scale * rng.normal(size=(num_target, dim))
    y_source = source @ w_star + noise_std * rng.normal(size=num_source)
    y_target = target @ w_target + noise_std * rng.normal(size=num_target)
    xs, ys = _clip_and_scale(source, y_source)
    xt, yt = _clip_and_scale(target, y_target)
    return ShiftedRegression(xs, ys, xt, yt, w_target * FEATURE_CLIP / LABEL_CLIP)
