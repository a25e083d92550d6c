"""Noise sampling for releases, and the distributed noise shares of each site.

Every sample starts from random bits of a cryptographically secure generator:
a ChaCha20 keystream under a 256-bit key drawn fresh from the operating
system's CSPRNG (``os.urandom``) for every call, and is turned into the target
distribution by its inverse CDF. ChaCha20 is the construction the Linux kernel
itself uses to expand its entropy pool (and the one the secure aggregation's
masks use here); expanding one 32-byte seed per call costs 0.2 ms for 1e5
Gaussians where reading all 1.6 MB from ``os.urandom`` cost 2.7 ms. A test may inject
:class:`SeededRandomBits`; production code never uses a fixed seed.

Distributed noise (DESIGN.md section 2): with K participants of whom up to t
may collude with the coordinator, each site adds a share sized so that the
K - t honest shares alone carry the full noise:

* Gaussian: each share is N(0, sigma^2 / (K - t)); K - t of them sum to N(0, sigma^2).
* Laplace(b): each share is G1 - G2 with G1, G2 ~ Gamma(1 / (K - t), b); since
  Gamma shapes add, K - t shares sum to Gamma(1, b) - Gamma(1, b) = Laplace(b)
  (the infinite divisibility of Laplace, as in Goryczka and Xiong 2015).

Floating point (Mironov 2012): a sampler that maps a fixed grid of uniforms
through an inverse CDF reaches only a sparse set of doubles, and an output off
that set under a neighbouring dataset reveals which dataset it came from. Two
defences, both needed: (1) every sample draws its magnitude from a uniform in
(0, 1/2) with *relative* precision (63 random bits, so the tails are as finely
resolved as the bulk) and its sign from a separate bit; (2) the site rounds its
kernel sum and its noise share separately onto the fixed-point grid of the
aggregation codec, which is coarser than the gaps of (1) for every sigma the
site accepts (:func:`max_grid_safe_noise`). The release is then an exact
post-processing of the ideal mechanism applied to the grid-rounded sum
(:mod:`privadapt.client.site` charges the rounding in its sensitivity).
"""

from __future__ import annotations

import os
from typing import Protocol

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from scipy import special

_TWO_POW_MINUS_64 = 2.0**-64
_SIGN_BIT = np.uint64(1 << 63)
_MAGNITUDE_BITS = np.uint64((1 << 63) - 1)
# Plaintext for the keystream (SecureRandomBits.words), reused by every call.
_ZERO_CHUNK_BYTES = 1 << 16
_ZEROS = memoryview(bytes(_ZERO_CHUNK_BYTES))


class RandomBits(Protocol):
    """Something that yields i.i.d. uniformly random 64-bit words."""

    def words(self, size: int) -> np.ndarray: ...


class SecureRandomBits:
    """Random words from a CSPRNG: the ChaCha20 keystream of a fresh key from
    ``os.urandom`` on every call (module docstring), so no state outlives a
    call and no two calls share a key."""

    def words(self, size: int) -> np.ndarray:
        # A fresh key from the OS each call, so the nonce (block counter 0)
        # never repeats under one key; the keystream is the cipher applied to
        # zeros: 2^32 blocks of 64 bytes before the 32-bit counter would wrap.
        if 8 * size > 2**38:
            raise ValueError(f"{size} random words exceed one ChaCha20 keystream")
        cipher = algorithms.ChaCha20(os.urandom(32), bytes(16))
        keystream = Cipher(cipher, mode=None).encryptor()
        # The same keystream as update(bytes(8 * size)), written in place from
        # one shared page-resident block of zeros: a fresh 1.6 MB zero input
        # cost 0.9 ms of page faults per 1e5 Gaussians, 4x the cipher itself.
        words = np.empty(size, dtype=np.uint64)
        out = memoryview(words).cast("B")
        for start in range(0, len(out), _ZERO_CHUNK_BYTES):
            chunk = out[start:start + _ZERO_CHUNK_BYTES]
            keystream.update_into(_ZEROS[:len(chunk)], chunk)
        return words


class SeededRandomBits:
    """Reproducible words for tests and simulations that ask for a seed."""

    def __init__(self, seed: int) -> None:
        self._generator = np.random.default_rng(seed)

    def words(self, size: int) -> np.ndarray:
        return self._generator.integers(0, 2**64, size=size, dtype=np.uint64, endpoint=False)


def signed_half_uniforms(source: RandomBits, count: int) -> tuple[np.ndarray, np.ndarray]:
    """``count`` signs in {-1, +1} and uniforms u in (0, 1/2] with full floating
    relative precision: u = (m + v) 2^-64 with m the low 63 bits of one word and
    v in (0, 1) from 53 bits of a second, so even u ~ 2^-60 (a 6-sigma Gaussian
    tail) is resolved to 2^-53 relative, and inverse CDFs at u leave no gaps wider
    than the aggregation grid anywhere but at probabilities below 2^-100."""
    first, half = _sign_words_and_half_uniforms(source, count)
    return np.where(first & _SIGN_BIT, -1.0, 1.0), half


def _sign_words_and_half_uniforms(source: RandomBits,
                                  count: int) -> tuple[np.ndarray, np.ndarray]:
    """The words whose top bit is each sample's sign (set: negative) and the
    half-uniforms of :func:`signed_half_uniforms`, computed with the same
    floating-point operations in the same order, in place (no temporaries)."""
    words = source.words(2 * count)
    first, second = words[:count], words[count:]
    fraction = (second >> np.uint64(11)).astype(np.float64)
    fraction += 0.5
    fraction *= 2.0**-53
    half = (first & _MAGNITUDE_BITS).astype(np.float64)
    half += fraction
    half *= _TWO_POW_MINUS_64
    return first, np.minimum(half, 0.5, out=half)


def uniforms(size: int, source: RandomBits | None = None) -> np.ndarray:
    """Uniforms in the open interval (0, 1)."""
    signs, half = signed_half_uniforms(source or SecureRandomBits(), size)
    return np.where(signs > 0, half, 1.0 - half)


def _size(shape: int | tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    return int(np.prod(shape, dtype=np.int64)), shape


def gaussian_noise(
    sigma: float, shape: int | tuple[int, ...], source: RandomBits | None = None
) -> np.ndarray:
    """N(0, sigma^2) samples of the given shape."""
    if not sigma >= 0:
        raise ValueError(f"sigma must be >= 0, got {sigma!r}")
    count, shape = _size(shape)
    first, half = _sign_words_and_half_uniforms(source or SecureRandomBits(), count)
    # ndtri(u) for u <= 1/2 is -|z|: the lower tail, where u is most precise.
    # The sample is -sigma * sign * ndtri(u), computed as (-sigma) * ndtri(u)
    # with its sign bit flipped where the sign is negative: IEEE products are
    # sign-symmetric, so this is the same double, bit for bit, without the
    # array of signs and two more passes.
    noise = special.ndtri(half, out=half)
    noise *= -sigma
    noise.view(np.uint64)[...] ^= first & _SIGN_BIT
    return noise.reshape(shape)


def laplace_noise(
    scale: float, shape: int | tuple[int, ...], source: RandomBits | None = None
) -> np.ndarray:
    """Laplace(0, scale) samples of the given shape."""
    if not scale >= 0:
        raise ValueError(f"scale must be >= 0, got {scale!r}")
    count, shape = _size(shape)
    signs, half = signed_half_uniforms(source or SecureRandomBits(), count)
    # P(|X| > x) = exp(-x / scale): |X| = -scale log(2u) with u uniform on (0, 1/2].
    return (-scale * signs * np.log(2.0 * half)).reshape(shape)


def gamma_noise(
    shape_parameter: float,
    scale: float,
    shape: int | tuple[int, ...],
    source: RandomBits | None = None,
) -> np.ndarray:
    """Gamma(shape_parameter, scale) samples by inverting the regularised
    incomplete gamma function."""
    if not (shape_parameter > 0 and scale >= 0):
        raise ValueError(f"need shape > 0 and scale >= 0, got {shape_parameter!r}, {scale!r}")
    count, shape = _size(shape)
    signs, half = signed_half_uniforms(source or SecureRandomBits(), count)
    # Invert the lower tail for one half and the upper tail (via the complement)
    # for the other, so both tails keep relative precision.
    lower = special.gammaincinv(shape_parameter, half)
    upper = special.gammainccinv(shape_parameter, half)
    return (scale * np.where(signs > 0, lower, upper)).reshape(shape)


def gumbel_noise(shape: int | tuple[int, ...], source: RandomBits | None = None) -> np.ndarray:
    """Standard Gumbel samples, G = -log(-log U), for the Gumbel-max form of
    the exponential mechanism. U is 1 - h or h with h a half-uniform of full
    relative precision, and -log U is taken as -log1p(-h) or -log(h), so both
    tails of G (U near 1 and U near 0) are resolved as finely as the bulk."""
    count, shape = _size(shape)
    signs, half = signed_half_uniforms(source or SecureRandomBits(), count)
    exponential = np.where(signs > 0, -np.log1p(-half), -np.log(half))
    return (-np.log(exponential)).reshape(shape)


# The smallest half-uniform is about 2^-118, so samples stay below ~13 standard
# deviations (Gaussian) and ~82 scales (Laplace, Gamma tails): 100 bounds both.
NOISE_REACH = 100.0


def max_grid_safe_noise(fractional_bits: int) -> float:
    """The largest noise standard deviation (or Laplace scale) whose samples
    still resolve the fixed-point grid 2^-f: samples reach NOISE_REACH scales,
    where doubles are spaced 2^-52 times the magnitude, and that spacing must
    stay below the grid."""
    return 2.0 ** (52 - fractional_bits) / NOISE_REACH


def honest_share_count(num_participants: int, collusion_tolerance: int) -> int:
    """K - t: how many shares must carry the whole noise. Raises when the
    tolerance leaves no honest participant."""
    for name, value in (("participants", num_participants), ("collusion tolerance",
                                                             collusion_tolerance)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise ValueError(f"the number of {name} must be an integer, got {value!r}")
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
    source: RandomBits | None = None,
) -> np.ndarray:
    """One site's share of N(0, sigma^2) noise: variance sigma^2 / (K - t)."""
    honest = honest_share_count(num_participants, collusion_tolerance)
    return gaussian_noise(sigma / np.sqrt(honest), shape, source)


def laplace_share(
    scale: float,
    num_participants: int,
    collusion_tolerance: int,
    shape: int | tuple[int, ...],
    source: RandomBits | None = None,
) -> np.ndarray:
    """One site's share of Laplace(scale) noise: a difference of two
    Gamma(1 / (K - t), scale) variables."""
    honest = honest_share_count(num_participants, collusion_tolerance)
    source = source or SecureRandomBits()
    first = gamma_noise(1.0 / honest, scale, shape, source)
    return first - gamma_noise(1.0 / honest, scale, shape, source)
