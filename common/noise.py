"""Noise sampling for releases, and the distributed noise shares of each site.

Every sample starts from uniform bits drawn from the operating system's
cryptographically secure generator (``os.urandom``), fresh for every call, and
is turned into the target distribution by its inverse CDF. A test may inject a
seeded :class:`SeededUniformSource`; production code never uses a fixed seed.

Distributed noise (DESIGN.md section 2): with K participants of whom up to t
may collude with the coordinator, each site adds a share sized so that the
K - t honest shares alone carry the full noise:

* Gaussian: each share is N(0, sigma^2 / (K - t)); K - t of them sum to N(0, sigma^2).
* Laplace(b): each share is G1 - G2 with G1, G2 ~ Gamma(1 / (K - t), b); since
  Gamma shapes add, K - t shares sum to Gamma(1, b) - Gamma(1, b) = Laplace(b)
  (the infinite divisibility of Laplace, as in Goryczka and Xiong 2015).

Floating-point caveat (Mironov 2012): inverse-CDF samples on doubles leave gaps
in the low bits. Releases are rounded onto the fixed-point grid of the
aggregation codec (:mod:`privadapt.common.fixed_point`) before they leave a site,
which removes the low-order bits that attack exploits for the grid sizes used;
a discrete sampler is a later hardening step.
"""

from __future__ import annotations

import os
from typing import Protocol

import numpy as np
from scipy import special

_TWO_POW_MINUS_53 = 2.0**-53


class UniformSource(Protocol):
    """Something that yields i.i.d. uniform doubles in the open interval (0, 1)."""

    def uniform(self, size: int) -> np.ndarray: ...


class SecureUniformSource:
    """Uniforms from the OS CSPRNG: 53 random bits per double, shifted by half
    a grid step so 0 and 1 never occur (inverse CDFs stay finite)."""

    def uniform(self, size: int) -> np.ndarray:
        raw = np.frombuffer(os.urandom(8 * size), dtype=np.uint64)
        return ((raw >> np.uint64(11)).astype(np.float64) + 0.5) * _TWO_POW_MINUS_53


class SeededUniformSource:
    """Reproducible uniforms for tests and simulations that ask for a seed."""

    def __init__(self, seed: int) -> None:
        self._generator = np.random.default_rng(seed)

    def uniform(self, size: int) -> np.ndarray:
        raw = self._generator.integers(0, 2**53, size=size, dtype=np.uint64)
        return (raw.astype(np.float64) + 0.5) * _TWO_POW_MINUS_53


def _size(shape: int | tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    return int(np.prod(shape, dtype=np.int64)), shape


def gaussian_noise(
    sigma: float, shape: int | tuple[int, ...], source: UniformSource | None = None
) -> np.ndarray:
    """N(0, sigma^2) samples of the given shape."""
    if not sigma >= 0:
        raise ValueError(f"sigma must be >= 0, got {sigma!r}")
    count, shape = _size(shape)
    source = source or SecureUniformSource()
    return (sigma * special.ndtri(source.uniform(count))).reshape(shape)


def laplace_noise(
    scale: float, shape: int | tuple[int, ...], source: UniformSource | None = None
) -> np.ndarray:
    """Laplace(0, scale) samples of the given shape."""
    if not scale >= 0:
        raise ValueError(f"scale must be >= 0, got {scale!r}")
    count, shape = _size(shape)
    source = source or SecureUniformSource()
    centred = source.uniform(count) - 0.5
    # log1p keeps precision near the median, where naive log(1 - 2|u|) loses it.
    return (-scale * np.sign(centred) * np.log1p(-2.0 * np.abs(centred))).reshape(shape)


def gamma_noise(
    shape_parameter: float,
    scale: float,
    shape: int | tuple[int, ...],
    source: UniformSource | None = None,
) -> np.ndarray:
    """Gamma(shape_parameter, scale) samples by inverting the regularised
    incomplete gamma function."""
    if not (shape_parameter > 0 and scale >= 0):
        raise ValueError(f"need shape > 0 and scale >= 0, got {shape_parameter!r}, {scale!r}")
    count, shape = _size(shape)
    source = source or SecureUniformSource()
    return (scale * special.gammaincinv(shape_parameter, source.uniform(count))).reshape(shape)


def honest_share_count(num_participants: int, collusion_tolerance: int) -> int:
    """K - t: how many shares must carry the whole noise. Raises when the
    tolerance leaves no honest participant."""
    if num_participants < 1:
        raise ValueError(f"need at least one participant, got {num_participants}")
    if not 0 <= collusion_tolerance < num_participants:
        raise ValueError(
            f"collusion tolerance t={collusion_tolerance} must be in [0, K) with "
            f"K={num_participants} participants: at least one site must be honest"
        )
    return num_participants - collusion_tolerance


def gaussian_share(
    sigma: float,
    num_participants: int,
    collusion_tolerance: int,
    shape: int | tuple[int, ...],
    source: UniformSource | None = None,
) -> np.ndarray:
    """One site's share of N(0, sigma^2) noise: variance sigma^2 / (K - t)."""
    honest = honest_share_count(num_participants, collusion_tolerance)
    return gaussian_noise(sigma / np.sqrt(honest), shape, source)


def laplace_share(
    scale: float,
    num_participants: int,
    collusion_tolerance: int,
    shape: int | tuple[int, ...],
    source: UniformSource | None = None,
) -> np.ndarray:
    """One site's share of Laplace(scale) noise: a difference of two
    Gamma(1 / (K - t), scale) variables."""
    honest = honest_share_count(num_participants, collusion_tolerance)
    source = source or SecureUniformSource()
    first = gamma_noise(1.0 / honest, scale, shape, source)
    return first - gamma_noise(1.0 / honest, scale, shape, source)
