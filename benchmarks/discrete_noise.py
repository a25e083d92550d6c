"""Exact integer noise samplers versus today's float samplers, samples per second.

Each row draws 1e5 samples with the production source (the operating system's
CSPRNG) and is timed as a median over repeats, next to its float
baseline in the same run. The ratio column is discrete
time over float time (target: at most 2):

* discrete Laplace (scale 1000 grid steps) and Polya shares vs
  :func:`privadapt.common.noise.floating.laplace_share`;
* discrete Gaussian (sigma = 1000 grid steps) and Skellam shares vs
  :func:`privadapt.common.noise.floating.gaussian_share`;
* the exact Polya share against the float path it replaced (numpy's
  ``negative_binomial`` under a PCG64 seeded from the same source), so the
  ratio is the price of exactness itself;
* the wired mechanism: one site's release noise for a block of 1e5
  coordinates as ``Site.answer`` draws and encodes it
  (``mechanism.noise_shares`` then ``codec.encode``), the
  :class:`~privadapt.common.mechanisms.DiscreteLaplaceMechanism` against the
  float :class:`~privadapt.common.mechanisms.LaplaceMechanism` and
  :class:`~privadapt.common.mechanisms.GaussianMechanism` of the same scale;
* the distributed discrete Gaussian: one site's exact N_Z share of
  a :class:`~privadapt.common.mechanisms.DistributedDiscreteGaussianMechanism`
  (sigma = 1000 grid steps summed over K - t honest shares) against the float
  :class:`~privadapt.common.mechanisms.GaussianMechanism` share of the same
  sigma, encoded as ``Site.answer`` does.

Which exact sampler each row measures: the discrete Gaussian (sigma = 1000
steps), the Polya shares' negative binomials (t = 1000), the Skellam
shares' Poissons and the discrete Laplace (t = 1000) are drawn by inversion
of a certified CDF table (:mod:`privadapt.common.noise.table_inversion`,
about one word a sample). A sigma whose table would pass 2^18 entries is
drawn by bucketed rejection (:mod:`privadapt.common.noise.bucket_rejection`,
the "(buckets)" rows at 2^18 and at the largest admitted sigma, 2^28), next
to CKS Algorithm 3 called directly at 2^18 (the "(CKS)" row, the path it
replaced); so is a discrete Laplace scale past the table (t = 1e5, next to
Algorithm 2 called directly, and also against the float Gaussian, because
the float Laplace share is itself slow); a Polya scale past the table takes
the compound Poisson (the "t=1e5" row).

Run: ``.venv/bin/python benchmarks/discrete_noise.py``. Compare ratios, not
absolute rates across machines.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from fractions import Fraction

import numpy as np
from timing import median_seconds

from privadapt.common.mechanisms import (
    DiscreteLaplaceMechanism,
    DistributedDiscreteGaussianMechanism,
    GaussianMechanism,
    KernelMechanism,
    LaplaceMechanism,
)
from privadapt.common.noise.discrete import (
    KeystreamBits,
    _discrete_gaussian_by_rejection,
    _discrete_laplace,
    discrete_gaussian,
    discrete_laplace,
)
from privadapt.common.noise.discrete_shares import polya_share, skellam_share
from privadapt.common.noise.floating import SecureRandomBits, gaussian_share, laplace_share
from privadapt.common.numerics.fixed_point import FixedPointCodec

SAMPLES = 100_000
REPEATS = 7
K, T = 5, 1  # participants and collusion tolerance of the share rows


BITS = 32
CODEC = FixedPointCodec(BITS)
# Scale 1000 grid steps of 2^-32 on a block of L1 sensitivity 1 (data units).
DISCRETE = DiscreteLaplaceMechanism(1.0, 1000.0, BITS)
LAPLACE = LaplaceMechanism(1.0, DISCRETE.scale)
GAUSSIAN = GaussianMechanism.single(1.0, DISCRETE.scale)
# sigma = 1000 grid steps over K - t honest shares of N_Z(0, 10^6 / (K - t)),
# the same sigma as GAUSSIAN.
DISTRIBUTED = DistributedDiscreteGaussianMechanism(1.0, 10**6 / (K - T), K - T, BITS)
ONE_SHARE = DistributedDiscreteGaussianMechanism(1.0, 10**6, 1, BITS)


def float_polya_share(scale: float, num_participants: int, collusion_tolerance: int,
                      count: int) -> np.ndarray:
    """The float Polya share the exact one replaced: NB(1/n, q) - NB(1/n, q)
    from numpy's negative_binomial, seeded with 256 bits of the OS CSPRNG."""
    seed = int.from_bytes(os.urandom(32), "little")
    generator = np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed)))
    honest, success = num_participants - collusion_tolerance, -math.expm1(-1.0 / scale)
    first = generator.negative_binomial(1.0 / honest, success, count)
    return (first - generator.negative_binomial(1.0 / honest, success, count)).astype(np.int64)


def cks_gaussian(sigma_squared: int) -> np.ndarray:
    """CKS Algorithm 3 called directly: what a sigma past the table cost
    before the bucketed rejection took it over (the "before" row)."""
    return _discrete_gaussian_by_rejection(Fraction(sigma_squared), SAMPLES,
                                           KeystreamBits(SecureRandomBits()))


def algorithm_2_laplace(scale: int) -> np.ndarray:
    """CKS Algorithm 2 called directly: a discrete Laplace past the table
    before the bucketed rejection took it over."""
    return _discrete_laplace(Fraction(scale), SAMPLES, KeystreamBits(SecureRandomBits()))


def release(mechanism: KernelMechanism, num_sites: int, tolerance: int) -> Callable[[], object]:
    """One site's noise for one block of SAMPLES coordinates, encoded."""
    return lambda: CODEC.encode(mechanism.noise_shares([(SAMPLES,)], num_sites, tolerance)[0])


def rows() -> list[tuple[str, Callable[[], object], Callable[[], object]]]:
    float_laplace = lambda: laplace_share(1000.0, 1, 0, SAMPLES)  # noqa: E731
    float_gaussian = lambda: gaussian_share(1000.0, 1, 0, SAMPLES)  # noqa: E731
    return [
        ("discrete Laplace, t=1000", lambda: discrete_laplace(1000, SAMPLES), float_laplace),
        ("d. Laplace, t=1e5 (Algorithm 2)", lambda: algorithm_2_laplace(10**5), float_laplace),
        ("d. Laplace, t=1e5 (buckets)", lambda: discrete_laplace(10**5, SAMPLES), float_laplace),
        ("d. Laplace, t=1e5 (buckets) vs N", lambda: discrete_laplace(10**5, SAMPLES),
         lambda: gaussian_share(1000.0, 1, 0, SAMPLES)),
        (f"Polya share, K={K} t={T}", lambda: polya_share(1000, K, T, SAMPLES),
         lambda: laplace_share(1000.0, K, T, SAMPLES)),
        (f"Polya share vs float NB, K={K} t={T}", lambda: polya_share(1000, K, T, SAMPLES),
         lambda: float_polya_share(1000.0, K, T, SAMPLES)),
        ("discrete Gaussian, sigma=1000", lambda: discrete_gaussian(10**6, SAMPLES),
         float_gaussian),
        ("d. Gaussian, sigma=2^18 (CKS)", lambda: cks_gaussian(2**36), float_gaussian),
        ("d. Gaussian, sigma=2^18 (buckets)", lambda: discrete_gaussian(2**36, SAMPLES),
         float_gaussian),
        ("d. Gaussian, sigma=2^28 (buckets)", lambda: discrete_gaussian(2**56, SAMPLES),
         float_gaussian),
        (f"Polya t=1e5 (compound) vs NB K={K}", lambda: polya_share(10**5, K, T, SAMPLES),
         lambda: float_polya_share(1e5, K, T, SAMPLES)),
        (f"Skellam share, K={K} t={T}", lambda: skellam_share(2 * 10**6, K, T, SAMPLES),
         lambda: gaussian_share(1000.0, K, T, SAMPLES)),
        ("release, discrete vs Laplace", release(DISCRETE, 1, 0), release(LAPLACE, 1, 0)),
        ("release, discrete vs Gaussian", release(DISCRETE, 1, 0), release(GAUSSIAN, 1, 0)),
        (f"release K={K} t={T}, vs Laplace", release(DISCRETE, K, T), release(LAPLACE, K, T)),
        (f"release K={K} t={T}, vs Gaussian", release(DISCRETE, K, T),
         release(GAUSSIAN, K, T)),
        ("distributed discrete Gaussian", release(ONE_SHARE, 1, 0), release(GAUSSIAN, 1, 0)),
        (f"distributed d. Gaussian K={K} t={T}", release(DISTRIBUTED, K, T),
         release(GAUSSIAN, K, T)),
    ]


def main() -> int:
    print(f"{'sampler (1e5 samples)':<32} {'samples/s':>12} {'float samples/s':>16} "
          f"{'ratio':>7}")
    for name, discrete, baseline in rows():
        print(f"running {name} ...", file=sys.stderr, flush=True)
        discrete_seconds = median_seconds(discrete, REPEATS, warm_up=True)
        float_seconds = median_seconds(baseline, REPEATS, warm_up=True)
        ratio = discrete_seconds / float_seconds
        print(f"{name:<32} {SAMPLES / discrete_seconds:>12,.0f} "
              f"{SAMPLES / float_seconds:>16,.0f} {ratio:>6.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
