"""experiments/gain_study.py's held-out lognormal-scale regression: its
records lie within the public bounds the study's tasks assume, and its
loss tail is heavy, as its docstring says."""

import numpy as np

from experiments.gain_study import lognormal_scale_regression
from privadapt.server.algorithms.public_erm import fit_linear


def test_the_lognormal_scale_rows_lie_within_the_public_bounds():
    data = lognormal_scale_regression(num_source=500, num_target=2000)
    for features, labels in ((data.source_features, data.source_labels),
                             (data.target_features, data.target_labels)):
        assert features.shape[1] == 11  # d = 10 and the intercept column
        assert np.all(np.linalg.norm(features, axis=1) <= 1.0 + 1e-12)
        assert np.all(np.abs(labels) <= 1.0)


def test_the_lognormal_scale_target_has_a_heavy_loss_tail_under_source_only():
    data = lognormal_scale_regression()
    source_only = fit_linear(data.source_features, data.source_labels, "squared", 5.0)
    target = (data.target_features @ source_only - data.target_labels) ** 2
    source = (data.source_features @ source_only - data.source_labels) ** 2
    # A Gaussian residual's squared loss has its 99th percentile at 6.6 times
    # its mean; the lognormal scale and t(2.5) noise put it above 10.
    assert np.quantile(target, 0.99) > 10 * np.mean(target)
    assert np.quantile(source, 0.99) < 8 * np.mean(source)
