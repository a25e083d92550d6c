"""Could OpenDP replace our exact integer samplers? Ours against OpenDP's
(the ``opendp`` package, in the test extra only) in one run, on what a site
needs of them:

* speed: CPU seconds for 1e5 samples of the discrete Laplace (scale t) and the
  discrete Gaussian (sigma) at 1000 and 2^18 grid steps. Ours with the
  production source (:class:`~privadapt.common.noise.floating.SecureRandomBits`):
  the first call at a scale (which builds the certified table or bucket law)
  and the median of the warm ones; OpenDP's ``make_laplace`` /
  ``make_gaussian`` on a vector of 1e5 i64 zeros, median. CPU time, not wall
  time: the machine is shared, and both run on the calling thread.
* work against the value drawn: single draws (OpenDP's scalar measurement,
  ours with shape 1), wall time per draw, the median over the draws with |x|
  below the median |x| against the median over the top 5%. A ratio away from
  1 is a timing channel on the noise, so on the data under a released sum.
* randomness: ours take their bits from a given source (a seeded one
  reproduces a draw exactly, which tests and simulations at fixed seeds rely
  on); OpenDP's draw from OpenSSL's CSPRNG inside its library and take no
  source, so no run of a job that uses them can be reproduced.

Run: ``.venv/bin/python benchmarks/opendp_samplers.py [--draws 10000]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
import opendp.prelude as dp

from privadapt.common.noise.discrete import discrete_gaussian, discrete_laplace
from privadapt.common.noise.floating import SecureRandomBits

COUNT = 100_000
SCALES = (1000, 2**18)


def cpu_seconds(action: Callable[[], object]) -> float:
    started = time.process_time()
    action()
    return time.process_time() - started


def ours(law: str, scale: int, count: int) -> Callable[[], np.ndarray]:
    if law == "laplace":
        return lambda: discrete_laplace(scale, count, SecureRandomBits())
    return lambda: discrete_gaussian(scale**2, count, SecureRandomBits())


def opendp_measurement(law: str, scale: int, vector: bool) -> dp.Measurement:
    atom = dp.atom_domain(T="i64")
    domain = dp.vector_domain(atom) if vector else atom
    if law == "laplace":
        metric = dp.l1_distance(T="i64") if vector else dp.absolute_distance(T="i64")
        return dp.m.make_laplace(domain, metric, scale=float(scale))
    metric = dp.l2_distance(T="i64") if vector else dp.absolute_distance(T="i64")
    return dp.m.make_gaussian(domain, metric, scale=float(scale))


def speed(repeats: int) -> None:
    print(f"CPU seconds for {COUNT:,} samples (median of {repeats})")
    print(f"{'law':<9}{'scale':>8}{'ours, 1st':>11}{'ours':>9}{'OpenDP':>9}{'OpenDP/ours':>13}")
    zeros = [0] * COUNT
    for law in ("laplace", "gaussian"):
        for scale in SCALES:
            draw = ours(law, scale, COUNT)
            first = cpu_seconds(draw)
            warm = statistics.median(cpu_seconds(draw) for _ in range(repeats))
            measurement = opendp_measurement(law, scale, vector=True)
            theirs = statistics.median(cpu_seconds(lambda m=measurement: m(zeros))
                                       for _ in range(repeats))
            print(f"{law:<9}{scale:>8}{first:>11.3f}{warm:>9.3f}{theirs:>9.3f}"
                  f"{theirs / warm:>13.0f}")


def value_timing(draws: int) -> None:
    print(f"\nWall microseconds per single draw ({draws:,} draws): median over |x| below "
          "the median |x|, over the top 5%, and their ratio")
    print(f"{'sampler':<9}{'law':<9}{'scale':>8}{'small |x|':>11}{'top 5%':>9}{'ratio':>8}")
    for law in ("laplace", "gaussian"):
        for scale in SCALES:
            measurement = opendp_measurement(law, scale, vector=False)
            single = ours(law, scale, 1)
            single()  # the table or bucket law, built once, out of the figures
            for name, draw in (("ours", lambda s=single: int(s()[0])),
                               ("OpenDP", lambda m=measurement: m(0))):
                values, times = np.empty(draws), np.empty(draws)
                for i in range(draws):
                    started = time.perf_counter_ns()
                    values[i] = draw()
                    times[i] = time.perf_counter_ns() - started
                size = np.abs(values)
                small = np.median(times[size <= np.median(size)]) / 1e3
                large = np.median(times[size >= np.quantile(size, 0.95)]) / 1e3
                print(f"{name:<9}{law:<9}{scale:>8}{small:>11.1f}{large:>9.1f}"
                      f"{large / small:>8.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--draws", type=int, default=10_000)
    args = parser.parse_args()
    dp.enable_features("contrib")
    speed(args.repeats)
    value_timing(args.draws)


if __name__ == "__main__":
    main()
