"""Mask expansion throughput of secure aggregation versus the raw cipher.

For each vector length n (uint64 values) and roster size K, one site masks a
share with :func:`privadapt.common.secure.secagg.mask_share`: K - 1 pairwise masks of
8n bytes each (HKDF per pair, ChaCha20 keystream, modular add). The raw-cipher
row does only the ChaCha20 keystream for the same K - 1 fresh keys into a
preallocated buffer -- the best the cipher can do. MB/s counts mask bytes
(K - 1) * 8n per second; the ratio says how much the masking costs on top of
the keystream (target: within ~2x).

Run: ``.venv/bin/python benchmarks/secagg.py``. Numbers are medians over
repeats within one run; compare the ratio column, not absolute MB/s across
machines.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from timing import median_seconds

from privadapt.common.secure.roster import Roster
from privadapt.common.secure.secagg import RoundKeys, mask_share

SIZES = (1_000, 100_000, 1_000_000)
ROSTER_SIZES = (3, 10)
TARGET_SECONDS = 0.5


def mask_seconds(action: Callable[[], object], mask_bytes: int) -> float:
    """Median seconds, with repeats sized so each row takes about TARGET_SECONDS."""
    repeats = max(5, min(200, int(TARGET_SECONDS * 1e9 / max(mask_bytes, 1))))
    return median_seconds(action, repeats, warm_up=True)


def masking(n: int, k: int) -> Callable[[], object]:
    keys = [RoundKeys.generate() for _ in range(k)]
    names = [f"site-{i:02d}" for i in range(k)]
    members = tuple(zip(names, (key.public_key for key in keys), strict=True))
    # The roster is built directly: certificate checks are not what is timed.
    roster = Roster(bytes(32), "bench", 1, names[0], members, bytes(32))
    share = np.random.default_rng(0).integers(0, 2**64, size=n, dtype=np.uint64)
    query = iter(range(10**9))  # a fresh query id per call: masks are single-use
    return lambda: mask_share(share, keys[0], roster, "bench", 1, f"q-{next(query)}", 0)


def raw_cipher(n: int, k: int) -> Callable[[], object]:
    zeros = bytes(8 * n)
    out = bytearray(8 * n)
    nonce = bytes(16)

    def run() -> None:
        for _ in range(k - 1):
            stream = Cipher(algorithms.ChaCha20(os.urandom(32), nonce), mode=None).encryptor()
            stream.update_into(zeros, out)

    return run


def main() -> None:
    print(
        f"{'n (uint64)':>11} {'K':>3} {'mask_share MB/s':>16} {'raw ChaCha20 MB/s':>18} "
        f"{'raw / mask':>10}"
    )
    for n in SIZES:
        for k in ROSTER_SIZES:
            mask_bytes = (k - 1) * 8 * n
            masked = mask_bytes / mask_seconds(masking(n, k), mask_bytes) / 1e6
            raw = mask_bytes / mask_seconds(raw_cipher(n, k), mask_bytes) / 1e6
            print(f"{n:>11,} {k:>3} {masked:>16,.0f} {raw:>18,.0f} {raw / masked:>10.2f}")


if __name__ == "__main__":
    main()
