"""Review 10a (low, defence in depth): the certificate of exact_discrepancy
now releases within the INTERSECTION of every attempt's proved bracket
(common/numerics/certified_quadratic.py). Each bracket holds the exact maximum only if
its proof is right; if one is wrong (a proof bug, or the floating-point model
broken, which is what the certificate exists to catch), the intersection can
be EMPTY: lower > upper. Then ``certified_discrepancy`` returns a NEGATIVE
error, which passes the kernel's ``error <= allowance`` check, and the value
released is the clamp to the wrong upper bound -- silently, with no refusal
and no latch. An empty intersection is a proof that something broke and
should be treated like a failed certificate (refuse in fixed words, latch).

The FIRST test FAILS on main at 4634877: one attempt's dual bound is made
wrong (below the true maximum) and the kernel releases anyway. The second
PASSES: with honest libraries the brackets always intersect (hypothesis
neighbours at adversarial scales, d = 1..5), i.e. the check costs nothing.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import privadapt.common.numerics.certified_quadratic as certified_quadratic
from privadapt.common.data.dataset import Dataset
from privadapt.common.errors import UncertifiedComputationError
from privadapt.common.kernels import get_kernel
from privadapt.common.numerics.certified_quadratic import certify_maximum
from privadapt.common.numerics.trust_region import maximize_quadratic_on_ball

KERNEL = get_kernel("exact_discrepancy")
PARAMS = {"feature_norm": 1.0, "label_bound": 1.0, "radius": 2.0,
          "public_moments": np.diag([0.2, 0.1, 0.3])}
DATA = Dataset(np.random.default_rng(5).normal(size=(8, 2)) * 0.4,
               np.linspace(-0.9, 0.9, 8), ("a", "b"))


def test_review10a_an_empty_intersection_of_brackets_is_not_released(monkeypatch):
    # FAILS on main: the kernel releases (error < 0 passes the check).
    honest = certified_quadratic._upper_bound
    calls = []

    def one_wrong_bound(*args):
        value, points = honest(*args)
        calls.append(value)
        if len(calls) == 1 and math.isfinite(value):
            value = value - 1e3 * (abs(value) + 1.0)  # a "proved" bound below v*
        return value, points

    monkeypatch.setattr(certified_quadratic, "_upper_bound", one_wrong_bound)
    typed = KERNEL.Params.from_wire(PARAMS, 2)
    with pytest.raises(UncertifiedComputationError):
        released = KERNEL.compute(DATA, typed, {})
        pytest.fail(f"released {released[0][0]!r} from an empty intersection of brackets")


@st.composite
def problems(draw):
    d = draw(st.integers(1, 5))
    scale = 2.0 ** draw(st.integers(-60, 60))
    entries = draw(st.lists(st.floats(-1, 1), min_size=d * d + d, max_size=d * d + d))
    tie = draw(st.booleans())
    matrix = np.array(entries[:d * d]).reshape(d, d) * scale
    matrix = matrix + matrix.T
    if tie:
        matrix = np.eye(d) * scale * entries[0]
    linear = np.array(entries[d * d:]) * scale * 2.0 ** draw(st.integers(-80, 0))
    radius = 2.0 ** draw(st.integers(-20, 20))
    return matrix, linear, draw(st.floats(-1, 1)) * scale, radius


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems())
def test_review10a_honest_brackets_always_intersect(problem):
    # PASSES on main (coverage): lower <= upper on every adversarial problem.
    matrix, linear, constant, radius = problem
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        solution = maximize_quadratic_on_ball(matrix, linear, constant, radius)
        bracket = certify_maximum(matrix, linear, constant, radius, solution)
    assert bracket.lower <= bracket.upper
