"""The fast Gaussian path draws exactly the doubles of its reference formula.

``gaussian_noise`` computes -sigma * sign * ndtri(u) in place, with the sign
applied as a bit flip, and ``SecureRandomBits`` writes its keystream in place
from a shared block of zeros (common/noise/floating.py). Neither may change a single
output bit: the law of the noise, and so everything the privacy analysis says
about it (tails, reach, grid safety), is the law of the reference formula.
"""

import os

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from scipy import special

from privadapt.common.noise import floating as noise
from privadapt.common.noise.floating import SecureRandomBits, SeededRandomBits, gaussian_noise


def reference_gaussian(sigma, count, source):
    """The formula the sampler implements, written the plain way."""
    signs, half = noise.signed_half_uniforms(source, count)
    return -sigma * signs * special.ndtri(half)


class FixedWords:
    """Words at the edges: zero magnitude (u near 0, the far tail), all-ones
    magnitude (u = 1/2 after the cap, z = 0), each with both signs."""

    EDGES = (0, 1, 2**63 - 1, 2**63, 2**63 + 1, 2**64 - 1, 2**62, 12345)

    def words(self, size):
        return np.resize(np.array(self.EDGES, dtype=np.uint64), size)


@pytest.mark.parametrize("sigma", [1.0, 3.7, 0.0, 1e-300, 2.5e300])
@pytest.mark.parametrize("seed", range(5))
def test_gaussian_noise_is_bit_identical_to_its_formula(sigma, seed):
    count = 1000 + 137 * seed
    fast = gaussian_noise(sigma, count, SeededRandomBits(seed))
    slow = reference_gaussian(sigma, count, SeededRandomBits(seed))
    assert fast.tobytes() == slow.tobytes()


@pytest.mark.parametrize("count", range(1, 9))
def test_gaussian_noise_is_bit_identical_at_extreme_words(count):
    fast = gaussian_noise(2.0, count, FixedWords())
    slow = reference_gaussian(2.0, count, FixedWords())
    assert fast.tobytes() == slow.tobytes()  # also the signs of zeros
    assert np.all(np.isfinite(fast))


def test_seeded_gaussian_vector_is_pinned():
    # Drawn before the in-place rewrite: a seeded simulation replays the same noise.
    pinned = ["-0x1.18151b4b42f1bp+0", "0x1.3a1730bdfda1dp-1", "0x1.bd4fcc8e168d4p+0",
              "0x1.10d2160e35101p+1", "-0x1.f247c494e17abp-2", "-0x1.c381b8d636156p-3"]
    drawn = gaussian_noise(1.0, 6, SeededRandomBits(0))
    assert [float(x).hex() for x in drawn] == pinned


@pytest.mark.parametrize("size", [1, 7, 8191, 8192, 8193, 3 * 8192 + 5, 100_000])
def test_secure_words_are_the_chacha20_keystream_of_a_fresh_key(size, monkeypatch):
    key = os.urandom(32)
    monkeypatch.setattr(os, "urandom", lambda n: key[:n])
    words = SecureRandomBits().words(size)
    encryptor = Cipher(algorithms.ChaCha20(key, bytes(16)), mode=None).encryptor()
    expected = np.frombuffer(encryptor.update(bytes(8 * size)), dtype=np.uint64)
    assert words.dtype == np.uint64 and words.shape == (size,)
    assert words.tobytes() == expected.tobytes()
