"""Small synthetic private data for tests: a module of its own, so test files
import it as they import any helper (a conftest is pytest's, not a library)."""

from __future__ import annotations

import numpy as np

from privadapt.common.data.dataset import Dataset


def synthetic_dataset(num_records: int, dim: int, seed: int) -> Dataset:
    """Linearly separable-ish logistic data with ||x|| <= 1."""
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(num_records, dim))
    features /= np.maximum(1.0, np.linalg.norm(features, axis=1))[:, None]
    truth = np.linspace(-2.0, 2.0, dim)
    labels = np.where(features @ truth + 0.3 * rng.normal(size=num_records) >= 0, 1.0, -1.0)
    return Dataset(features, labels, tuple(f"x{i}" for i in range(dim)))
