"""What rounding onto the fixed-point grid adds to a kernel's sensitivity.

A site rounds its clipped sum and its noise share onto the grid 2^-f
*separately* (Mironov 2012; ``client/site.py``), so the release is a
post-processing of the ideal mechanism on the rounded sum. Rounding moves each
coordinate by at most half a step, so two neighbouring sums, each rounded,
differ by at most the kernel's sensitivity plus one step per coordinate:
sqrt(size) 2^-f in L2, size 2^-f in L1. A block of sensitivity 0 computed
exactly is identical on neighbours, and so is its rounding: it is charged
nothing. Local blocks
never reach the grid and are charged their own sensitivity.

The kernel's own float computation comes first: its value may sit
up to e per coordinate (``Kernel.computation_errors``, a public bound: the one
float64 rounding of an exact sum, a solver's error) from a function whose
sensitivity is the kernel's, so two neighbours differ by up to 2e more per
coordinate; that is charged with the step.

A selection charges per entry instead: each score is rounded onto
the grid and decoded back to a float before the site draws, which rounds once
more by at most u B on each neighbour (B the public bound on the sum):
:func:`score_rounding_charged`.

This is the one place the charge is written: the site charges it, and
``Kernel.mechanism`` sizes the noise an algorithm asks for with it. An
algorithm does not know the federation's grid, so it sizes for the coarsest
grid a site accepts; the noise is then sound for every grid (a finer grid
charges less), and exactly the target on the coarsest.

A block of sensitivity 0 whose computation still carries an error bound e > 0
is not free: its ideal value is the same on neighbours, but the computed
values may differ by 2e per entry and then round to different grid points, so
it is charged the step and 2e like any other block.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from privadapt.common.kernels.exact_sum import conversion_error

Norm = Literal["l2", "l1"]

# The fixed-point grids 2^-f a site accepts: f in [low, high].
ACCEPTED_FRACTIONAL_BITS = (16, 48)
COARSEST_FRACTIONAL_BITS = ACCEPTED_FRACTIONAL_BITS[0]


def rounding_charged(
    sensitivities: tuple[float, ...],
    shapes: tuple[tuple[int, ...], ...],
    norm: Norm,
    fractional_bits: int,
    errors: tuple[float, ...] | None = None,
) -> tuple[float, ...]:
    """Each released block's sensitivity plus what rounding its ``shape`` entries
    onto the grid 2^-``fractional_bits`` can add in ``norm``, and twice the
    kernel's computation error ``errors`` per entry (module docstring)."""
    step = 2.0**-fractional_bits
    errors = (0.0,) * len(shapes) if errors is None else errors
    return tuple(
        s + (math.prod(shape) if norm == "l1" else math.sqrt(math.prod(shape))) * (step + 2 * e)
        if s > 0 or e > 0 else 0.0
        for s, shape, e in zip(sensitivities, shapes, errors, strict=True)
    )


def score_rounding_charged(
    sensitivities: Sequence[float], fractional_bits: int, error: float, magnitude: float
) -> tuple[float, ...]:
    """Each score's sensitivity as a site charges it for a selection: plus one
    grid step (rounding), twice the kernel's computation error ``error`` and
    twice the decoding's rounding of a sum of at most ``magnitude`` (once per
    neighbour each), rounded up so the float sum cannot fall below it."""
    extra = 2.0**-fractional_bits + 2 * error + 2 * conversion_error(magnitude)
    return tuple(math.nextafter(s + extra, math.inf) for s in sensitivities)
