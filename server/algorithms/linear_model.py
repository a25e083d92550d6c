"""predict / score for the estimators that fit a linear model ``coef_``.

What a prediction is follows from the loss the model was trained with:

* ``logistic``: labels in {-1, +1}, the sign of x.w (a tie counts as +1, as
  ``public_erm.accuracy`` does); ``score`` is the accuracy;
* ``squared``: the value x.w; ``score`` is R^2 = 1 - SSE/SST (scikit-learn's
  regressor score: higher is better, 1 is perfect; the negative MSE would rank
  models the same on one test set);
* ``softmax_cross_entropy``: W of shape (d, C), the class index argmax_c
  (x W)_c; ``score`` is the accuracy.
"""

from __future__ import annotations

import numpy as np


class LinearModelMixin:
    """Needs ``coef_`` and ``_prediction_loss()`` from the estimator."""

    def _prediction_loss(self) -> str:
        raise NotImplementedError

    def _features(self, features: np.ndarray) -> np.ndarray:
        self._check_is_fitted()  # type: ignore[attr-defined]
        features = np.asarray(features, dtype=float)
        dim = self.coef_.shape[0]  # type: ignore[attr-defined]
        if features.ndim != 2 or features.shape[1] != dim:
            raise ValueError(f"{type(self).__name__}: features must have shape (m, {dim}), "
                             f"got {features.shape}")
        return features

    def decision_function(self, features: np.ndarray) -> np.ndarray:
        """x.w per record (x W, shape (m, C), for the softmax cross-entropy)."""
        return self._features(features) @ self.coef_  # type: ignore[attr-defined]

    def predict(self, features: np.ndarray) -> np.ndarray:
        """Labels in {-1, +1}, values, or class indices (module docstring)."""
        scores = self.decision_function(features)
        loss = self._prediction_loss()
        if loss == "logistic":
            return np.where(scores >= 0, 1.0, -1.0)
        if loss == "softmax_cross_entropy":
            return np.argmax(scores, axis=1)
        return scores

    def score(self, features: np.ndarray, labels: np.ndarray) -> float:
        """Accuracy for the logistic and softmax losses, R^2 for the squared loss."""
        predictions = self.predict(features)
        labels = np.asarray(labels, dtype=float)
        if self._prediction_loss() != "squared":
            return float(np.mean(predictions == labels))
        residual = float(np.sum((labels - predictions) ** 2))
        total = float(np.sum((labels - labels.mean()) ** 2))
        return 1.0 - residual / total if total > 0 else (1.0 if residual == 0 else 0.0)
