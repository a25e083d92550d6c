"""What a kernel is, and the registry of kernels a site can run.

A kernel is a named site-side function (private records, public params, per-job
state) -> sum over records of clipped per-record contributions, one array per
block, together with the sensitivity its clipping guarantees under an adjacency.
Kernels are the only code that reads private records (DESIGN.md section 3).

Sensitivities are functions of the public parameters alone, never of the data:
a site computes them itself and refuses a mechanism that declares less.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, MutableMapping
from typing import Any, ClassVar, Literal

import numpy as np

from privadapt.common.data import Dataset
from privadapt.common.mechanisms import Adjacency

Norm = Literal["l2", "l1"]

# Records per chunk: bounds a kernel's working memory to chunk x d doubles.
CHUNK_RECORDS = 16_384


class Kernel(ABC):
    """A registered site-side statistic with clipping and a sensitivity bound."""

    name: ClassVar[str]

    @abstractmethod
    def validate_params(self, params: Mapping[str, Any], dim: int) -> None:
        """Raise ``ValueError`` for malformed public parameters."""

    @abstractmethod
    def output_shapes(self, params: Mapping[str, Any], dim: int) -> tuple[tuple[int, ...], ...]:
        """Shape of each released block for records of dimension ``dim``."""

    @abstractmethod
    def l2_sensitivities(
        self, params: Mapping[str, Any], adjacency: Adjacency
    ) -> tuple[float, ...]:
        """Largest L2 change of each block when one record changes."""

    @abstractmethod
    def compute(
        self, data: Dataset, params: Mapping[str, Any], state: MutableMapping[str, Any]
    ) -> tuple[np.ndarray, ...]:
        """The clipped sums over ``data``, one array per block."""

    @abstractmethod
    def max_abs_sum(self, params: Mapping[str, Any], num_records: int) -> float:
        """A bound on any entry of the un-noised sum (for fixed-point range checks)."""

    def clip_bounds(self, params: Mapping[str, Any]) -> dict[str, float]:
        """The data bounds this query asks the site to clip to, by policy name
        (``clip_norm``, ``label_bound``), for the site's policy to check."""
        return {}

    def sensitivities(
        self, params: Mapping[str, Any], adjacency: Adjacency, norm: Norm, dim: int
    ) -> tuple[float, ...]:
        """Per-block sensitivity in ``norm``. L1 follows from L2 by
        ||v||_1 <= sqrt(size) ||v||_2 unless a kernel knows better."""
        l2 = self.l2_sensitivities(params, adjacency)
        if norm == "l2":
            return l2
        shapes = self.output_shapes(params, dim)
        return tuple(s * math.sqrt(math.prod(shape)) for s, shape in zip(l2, shapes, strict=True))


_REGISTRY: dict[str, Kernel] = {}


def register(kernel: type[Kernel]) -> type[Kernel]:
    """Class decorator: make a kernel available to sites under its ``name``."""
    if kernel.name in _REGISTRY:
        raise ValueError(f"kernel {kernel.name!r} is registered twice")
    _REGISTRY[kernel.name] = kernel()
    return kernel


def get_kernel(name: str) -> Kernel:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown kernel {name!r}; registered: {sorted(_REGISTRY)}") from None


def registered_kernels() -> tuple[str, ...]:
    return tuple(sorted(_REGISTRY))


def positive_param(params: Mapping[str, Any], key: str) -> float:
    """A required finite, positive float parameter, or ``ValueError``."""
    if key not in params:
        raise ValueError(f"missing parameter {key!r}")
    value = params[key]
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
        raise ValueError(f"parameter {key!r} must be a number, got {value!r}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"parameter {key!r} must be finite and > 0, got {value!r}")
    return float(value)


# Below this (or above its inverse) the plain sqrt(sum x^2) under- or overflows.
_SAFE_NORM = 1e-150


def row_norms(rows: np.ndarray) -> np.ndarray:
    """L2 norm of each row, exact to rounding even for rows whose squares
    under- or overflow (an adversarial record of 1e-300s must not look like 0,
    or it escapes clipping); inf only when the norm itself exceeds float range."""
    with np.errstate(over="ignore", under="ignore"):
        norms = np.sqrt(np.einsum("ij,ij->i", rows, rows))
    suspect = (norms < _SAFE_NORM) | ~(norms < 1.0 / _SAFE_NORM)
    if np.any(suspect):
        extreme = rows[suspect]
        largest = np.max(np.abs(extreme), axis=1)
        scale = np.where(largest > 0, largest, 1.0)
        with np.errstate(over="ignore"):
            norms[suspect] = largest * np.linalg.norm(extreme / scale[:, None], axis=1)
    return norms


def clip_coefficients(coefficients: np.ndarray, rows: np.ndarray, bound: float) -> np.ndarray:
    """a_i with ||a_i x_i|| <= ``bound``: each per-record gradient c_i x_i of a
    linear model scaled down to the bound. A record whose gradient cannot be
    computed in floating point (overflow) contributes zero, which keeps the bound."""
    with np.errstate(over="ignore", invalid="ignore"):
        norms = np.abs(coefficients) * row_norms(rows)
        factors = np.minimum(1.0, bound / np.maximum(norms, np.finfo(float).tiny))
        clipped = coefficients * factors
    clipped[~(np.isfinite(clipped) & np.isfinite(norms))] = 0.0
    return clipped


def clip_rows_to_norm(rows: np.ndarray, bound: float) -> np.ndarray:
    """Each row scaled to L2 norm at most ``bound`` (rows too large for their
    norm to be computed in floating point are scaled to zero)."""
    norms = row_norms(rows)
    with np.errstate(over="ignore", invalid="ignore"):
        factors = np.minimum(1.0, bound / np.maximum(norms, np.finfo(float).tiny))
    factors[~np.isfinite(norms)] = 0.0
    return rows * factors[:, None]
