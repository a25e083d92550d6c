"""OpenDP as an independent oracle for the exact integer samplers: for the
same parameter, N samples of our discrete Laplace and discrete Gaussian and N
of OpenDP's (``make_laplace`` / ``make_gaussian`` on a vector of i64, which
draw the discrete Laplace with P(x) ∝ exp(-|x| / scale) and the discrete
Gaussian with P(x) ∝ exp(-x^2 / (2 scale^2))) follow the same law.

Scales cover each of our paths: small and mid scales drawn by table inversion
(common/noise/table_inversion.py), scales past the table drawn by bucketed
rejection (common/noise/bucket_rejection.py, asserted past the threshold
here), and the bucket samplers called directly at a scale the table would
otherwise serve.

False alarms: each comparison is a two-sample Kolmogorov-Smirnov test at
ALPHA = 1e-4, conservative on integers (with ties the statistic's null law is
below the continuous one its p-value assumes), so correct samplers fail one
of the 8 comparisons in under 1e-3 of runs. OpenDP
cannot be seeded (it draws from OpenSSL's CSPRNG), so only our side is seeded.
Power: every comparison has a twin drawn by our sampler at 1.5 times the
scale, which must be rejected; at N = 10,000 the KS distance between the two
laws is at least 0.07 against a critical value of 0.031.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import opendp.prelude as dp
import pytest
from scipy import stats

from privadapt.common.noise.bucket_rejection import (
    discrete_gaussian_by_buckets,
    discrete_laplace_by_buckets,
)
from privadapt.common.noise.certified_laws import (
    gaussian_table_entries,
    geometric_tail_table_entries,
)
from privadapt.common.noise.discrete import KeystreamBits, discrete_gaussian, discrete_laplace
from privadapt.common.noise.floating import SeededRandomBits
from privadapt.common.noise.table_inversion import MAX_TABLE_ENTRIES

# About 6 s of CPU, 2 of them loading OpenDP's library; past 10 s of wall time
# on a loaded machine.
pytestmark = pytest.mark.slow

N = 10_000
ALPHA = 1e-4
WRONG = Fraction(3, 2)  # the twin's scale factor

Sampler = Callable[[Fraction, int, int], np.ndarray]  # (scale, count, seed) -> int64


def _laplace(scale: Fraction, count: int, seed: int) -> np.ndarray:
    return discrete_laplace(scale, count, SeededRandomBits(seed))


def _gaussian(scale: Fraction, count: int, seed: int) -> np.ndarray:
    return discrete_gaussian(scale**2, count, SeededRandomBits(seed))


def _laplace_by_buckets(scale: Fraction, count: int, seed: int) -> np.ndarray:
    return discrete_laplace_by_buckets(scale, count, KeystreamBits(SeededRandomBits(seed)))


def _gaussian_by_buckets(scale: Fraction, count: int, seed: int) -> np.ndarray:
    return discrete_gaussian_by_buckets(scale**2, count, KeystreamBits(SeededRandomBits(seed)))


# (name, our sampler, OpenDP's law, scale, our path at that scale)
CASES = [
    ("laplace t=3", _laplace, "laplace", 3, "table"),
    ("laplace t=300", _laplace, "laplace", 300, "table"),
    ("laplace t=1e4", _laplace, "laplace", 10_000, "buckets"),
    ("laplace buckets t=300", _laplace_by_buckets, "laplace", 300, "buckets called directly"),
    ("gaussian sigma=2", _gaussian, "gaussian", 2, "table"),
    ("gaussian sigma=1000", _gaussian, "gaussian", 1000, "table"),
    ("gaussian sigma=3e4", _gaussian, "gaussian", 30_000, "buckets"),
    ("gaussian buckets sigma=1000", _gaussian_by_buckets, "gaussian", 1000,
     "buckets called directly"),
]


@functools.cache
def _opendp(law: str, scale: int) -> np.ndarray:
    """N draws of OpenDP's integer mechanism added to zeros."""
    dp.enable_features("contrib")
    domain = dp.vector_domain(dp.atom_domain(T="i64"))
    if law == "laplace":
        measurement = dp.m.make_laplace(domain, dp.l1_distance(T="i64"), scale=float(scale))
    else:
        measurement = dp.m.make_gaussian(domain, dp.l2_distance(T="i64"), scale=float(scale))
    return np.asarray(measurement([0] * N), dtype=np.int64)


def _p_value(ours: np.ndarray, theirs: np.ndarray) -> float:
    return stats.ks_2samp(ours, theirs, method="asymp").pvalue


def test_the_scales_reach_each_path():
    for _, _, law, scale, path in CASES:
        entries = (geometric_tail_table_entries(Fraction(scale)) if law == "laplace"
                   else gaussian_table_entries(Fraction(scale) ** 2))
        past_the_table = entries > MAX_TABLE_ENTRIES
        assert past_the_table == (path == "buckets"), (law, scale, entries)


@pytest.mark.parametrize("name, sampler, law, scale, path", CASES, ids=[c[0] for c in CASES])
def test_our_sampler_follows_opendps_law(name: str, sampler: Sampler, law: str, scale: int,
                                         path: str):
    ours = sampler(Fraction(scale), N, 1)
    assert _p_value(ours, _opendp(law, scale)) >= ALPHA, (name, path)


@pytest.mark.parametrize("name, sampler, law, scale, path", CASES, ids=[c[0] for c in CASES])
def test_a_scale_half_again_as_large_is_told_apart(name: str, sampler: Sampler, law: str,
                                                   scale: int, path: str):
    wrong = sampler(Fraction(scale) * WRONG, N, 2)
    assert _p_value(wrong, _opendp(law, scale)) < ALPHA, (name, path)
