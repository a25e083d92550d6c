"""scikit-learn's bundled diabetes regression (Efron et al. 2004; 442 patients,
10 baseline variables, disease progression after one year), split into domains by
its ``sex`` column as ../shared/datasets/README.md suggests for seed 000's
Table 1: public source = sex 1 (235 patients), private target = sex 2 (207).

Scaling uses **public constants only**: features are standardised with the
source's means and standard deviations, clipped to norm FEATURE_CLIP and divided
by it; an intercept column is appended and everything divided by sqrt(2), so
||x|| <= 1 = r. Labels are standardised with the source's mean and standard
deviation, clipped to |y| <= LABEL_CLIP and divided by it, so |y| <= 1 = Y.
scikit-learn is an ``experiments`` extra, needed only here.
"""

from __future__ import annotations

import numpy as np

from experiments.seed000.synthetic import ShiftedRegression

FEATURE_CLIP = 4.0
LABEL_CLIP = 3.0
SOURCE_SEX, TARGET_SEX = 1.0, 2.0


def load_diabetes_domains() -> ShiftedRegression:
    """Source (sex 1) and target pool (sex 2) in scaled units; ``target_weights``
    is NaN (there is no known true regressor for real data)."""
    from sklearn.datasets import load_diabetes

    bunch = load_diabetes(scaled=False)
    sex = bunch.data[:, 1]
    features = np.delete(bunch.data, 1, axis=1)
    source, target = sex == SOURCE_SEX, sex == TARGET_SEX
    mean, std = features[source].mean(axis=0), features[source].std(axis=0)
    label_mean, label_std = bunch.target[source].mean(), bunch.target[source].std()

    def scale(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        standard = (features[rows] - mean) / std
        norms = np.linalg.norm(standard, axis=1)
        standard = standard / np.maximum(1.0, norms / FEATURE_CLIP)[:, None] / FEATURE_CLIP
        with_intercept = np.hstack([standard, np.ones((len(standard), 1))]) / np.sqrt(2.0)
        labels = np.clip((bunch.target[rows] - label_mean) / label_std, -LABEL_CLIP, LABEL_CLIP)
        return with_intercept, labels / LABEL_CLIP

    xs, ys = scale(source)
    xt, yt = scale(target)
    return ShiftedRegression(xs, ys, xt, yt, np.full(xs.shape[1], np.nan))
