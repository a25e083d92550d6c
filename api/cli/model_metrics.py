"""How well a linear model predicts labelled records: the figures of
``privadapt evaluate``.

What is predicted follows the model's shape and the schema's label coding,
as the estimators predict (server/algorithms/linear_model.py):

* a weight vector and a label coded -1/+1: a classifier, the sign of x.w (a
  tie counts as +1); scored by accuracy, balanced accuracy (the mean over
  the classes present of the share of each class predicted right) and ROC
  AUC of the score x.w (the probability that a random +1 record scores
  above a random -1 record, ties counting one half);
* a weight matrix W (d, C) and a label coded 0..C-1: a classifier, argmax of
  x W; ROC AUC is the mean over the classes present of each class's
  one-against-the-rest AUC of its softmax probability;
* a weight vector and a numeric label (no label map): a regression, x.w;
  scored by mean squared error, mean absolute error and R^2 = 1 - SSE/SST.

A figure that the test records cannot define (ROC AUC with a single class
present, R^2 of a constant label) is None.
"""

from __future__ import annotations

import numpy as np
from scipy.special import softmax
from scipy.stats import rankdata

from privadapt.common.data.schema import Schema
from privadapt.common.errors import ConfigError

BINARY = "binary classification"
MULTICLASS = "multi-class classification"
REGRESSION = "regression"


def task_of(weights: np.ndarray, schema: Schema) -> str:
    """What the model predicts, from its shape and the schema's label map;
    ``ConfigError`` when they do not fit together."""
    codes = None if schema.label_map is None else sorted(set(schema.label_map.values()))
    if weights.ndim == 2:
        classes = [float(c) for c in range(weights.shape[1])]
        if codes is None or not set(codes) <= set(classes):
            raise ConfigError(f"the model has one weight column per class ({weights.shape[1]}) "
                              f"but the schema's label_map does not code the labels "
                              f"0..{weights.shape[1] - 1}")
        return MULTICLASS
    if weights.ndim != 1:
        raise ConfigError(f"the model's weights have shape {weights.shape}; expected a vector "
                          f"or a (features, classes) matrix")
    if codes is None:
        return REGRESSION
    if codes != [-1.0, 1.0]:
        raise ConfigError(f"a weight vector predicts labels -1/+1, but the schema's label_map "
                          f"codes them {codes}")
    return BINARY


def model_metrics(weights: np.ndarray, features: np.ndarray, labels: np.ndarray,
                  task: str) -> dict[str, float | None]:
    """The figures of ``task`` (module docstring) on the records."""
    scores = features @ weights
    if task == REGRESSION:
        return regression_metrics(labels, scores)
    if task == BINARY:
        predictions = np.where(scores >= 0, 1.0, -1.0)
        auc = roc_auc(labels == 1.0, scores)
    else:
        predictions = np.argmax(scores, axis=1).astype(float)
        probabilities = softmax(scores, axis=1)
        per_class = [roc_auc(labels == c, probabilities[:, int(c)]) for c in np.unique(labels)]
        defined = [a for a in per_class if a is not None]
        auc = float(np.mean(defined)) if len(defined) == len(per_class) and defined else None
    return {"accuracy": float(np.mean(predictions == labels)),
            "balanced_accuracy": balanced_accuracy(labels, predictions),
            "roc_auc": auc}


def balanced_accuracy(labels: np.ndarray, predictions: np.ndarray) -> float:
    """The mean over the classes present of the share of each predicted right."""
    return float(np.mean([np.mean(predictions[labels == c] == c) for c in np.unique(labels)]))


def roc_auc(positive: np.ndarray, scores: np.ndarray) -> float | None:
    """P(score of a random positive > score of a random negative), ties one
    half (the Mann-Whitney statistic); None without both kinds."""
    num_positive = int(np.sum(positive))
    num_negative = len(positive) - num_positive
    if num_positive == 0 or num_negative == 0:
        return None
    ranks = rankdata(scores)  # ties get their average rank
    rank_sum = float(np.sum(ranks[positive]))
    return (rank_sum - num_positive * (num_positive + 1) / 2) / (num_positive * num_negative)


def regression_metrics(labels: np.ndarray, predictions: np.ndarray) -> dict[str, float | None]:
    """Mean squared error, mean absolute error and R^2 (None for a constant label)."""
    residuals = labels - predictions
    total = float(np.sum((labels - labels.mean()) ** 2))
    return {"mse": float(np.mean(residuals**2)), "mae": float(np.mean(np.abs(residuals))),
            "r2": 1.0 - float(np.sum(residuals**2)) / total if total > 0 else None}
