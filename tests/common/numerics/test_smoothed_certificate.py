"""The a posteriori bound on eigh's error in the smoothed spectral gradient
(common/numerics/smoothed_spectral.py, eigen_error_bound) and the kernel's check of it:
small for an exact decomposition, at least the true distance for a wrong
one, and a corrupted eigh is refused by smoothed_discrepancy_gradient."""

import math

import numpy as np
import pytest

from privadapt.common.data.dataset import Dataset
from privadapt.common.errors import UncertifiedComputationError
from privadapt.common.kernels import get_kernel
from privadapt.common.numerics.smoothed_spectral import (
    eigen_error_bound,
    smoothed_norm_and_vertex_gradient,
)

UNIT = 2.0**-53


def hadamard(size: int) -> np.ndarray:
    matrix = np.array([[1.0]])
    while matrix.shape[0] < size:
        matrix = np.block([[matrix, matrix], [matrix, -matrix]])
    return matrix / math.sqrt(size)


@pytest.mark.parametrize("size", [4, 16, 64])
def test_an_exact_decomposition_has_a_tiny_bound(size):
    q = hadamard(size)  # exactly orthogonal, entries +-2^-k
    eigenvalues = np.arange(size, dtype=float) - size / 2
    matrix = q @ np.diag(eigenvalues) @ q.T  # exact: dyadic sums
    eps, eta = eigen_error_bound(matrix, eigenvalues, q)
    assert eta <= 4 * size * UNIT
    assert eps <= 16 * size * UNIT * size


@pytest.mark.parametrize("shift", [1e-6, 1e-9, 1e-12])
def test_wrong_eigenvalues_are_bounded_by_at_least_their_error(shift):
    # With Q exact, any A' that Q' (near Q) diagonalises with these values has
    # them as eigenvalues; by Weyl ||A - A'|| >= the shift.
    q = hadamard(16)
    eigenvalues = np.linspace(-1, 1, 16)
    matrix = q @ np.diag(eigenvalues) @ q.T
    eps, _ = eigen_error_bound(matrix, eigenvalues + shift, q)
    assert eps >= shift * (1 - 1e-6)


def test_non_orthogonal_vectors_are_bounded_by_at_least_their_defect():
    q = hadamard(16)
    eigenvalues = np.linspace(-1, 1, 16)
    matrix = q @ np.diag(eigenvalues) @ q.T
    skewed = q * (1 + 1e-7)  # V^T V = (1 + 1e-7)^2 I
    _, eta = eigen_error_bound(matrix, eigenvalues, skewed)
    assert eta >= 2e-7 * (1 - 1e-3)
    assert eigen_error_bound(matrix, eigenvalues, q * 2)[1] == math.inf


KERNEL = get_kernel("smoothed_discrepancy_gradient")


def kernel_case():
    rng = np.random.default_rng(4)
    features = rng.normal(size=(50, 5))
    points = rng.normal(size=(3, 5))
    points /= np.linalg.norm(points, axis=1)[:, None]
    params = KERNEL.Params.from_wire({"feature_norm": 1.0, "source_points": points,
                                      "weights": np.full(3, 1 / 3), "mu": 8.0}, 5)
    return Dataset(features, np.zeros(50), tuple(f"x{i}" for i in range(5))), params


def test_the_kernel_answers_as_before_when_eigh_is_honest():
    data, params = kernel_case()
    (scores,) = KERNEL.compute(data, params, {})
    assert np.all(np.isfinite(scores))
    # The certified route computes the same scores as the plain one.
    from privadapt.common.numerics.geometry import clip_rows_to_norm

    clipped = clip_rows_to_norm(data.features, 1.0)
    matrix = clipped.T @ clipped / 50 - params.source_points.T @ (
        params.weights[:, None] * params.source_points)
    _, gradient = smoothed_norm_and_vertex_gradient(params.source_points,
                                                    0.5 * (matrix + matrix.T), 8.0)
    assert scores == pytest.approx(50 * gradient, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("size", [1e-9, 1e-4])
def test_a_corrupted_eigh_is_refused(monkeypatch, size):
    data, params = kernel_case()
    honest = np.linalg.eigh

    def corrupted(matrix, *args, **kwargs):
        values, vectors = honest(matrix, *args, **kwargs)
        noise = np.random.default_rng(0).normal(size=vectors.shape)
        return values * (1 - size), vectors + size * noise

    monkeypatch.setattr(np.linalg, "eigh", corrupted)
    with pytest.raises(UncertifiedComputationError):
        KERNEL.compute(data, params, {})
