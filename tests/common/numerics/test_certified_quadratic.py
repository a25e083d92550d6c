"""The trust-region certificate: its bracket holds the exact maximum (checked
against an exact rational reference), is narrow, and catches a corrupted
eigen-solver: the exact_discrepancy kernel then either releases a value within
its charged error of the exact one or raises, never anything under-charged.

Exact reference. A = Q diag(lambda) Q^T with Q a scaled Hadamard matrix (an
exactly orthogonal matrix with entries +-2^-k for d = 4, 16, 64) or the
identity (d = 1, 2), and integer (or dyadic) eigenvalues, so A is exactly a
float matrix and its spectrum is known. With beta = Q^T b in Fractions, the
maximum is c + mu Lambda^2 + sum beta_i^2 / (mu - lambda_i) at the root mu of
the secular equation (or at mu = max(lambda_1, 0) in the interior and hard
cases, in closed form): bisection in Fractions brackets it within 2^-200
relative, primal below (a feasible point's exact value), dual above.

The kernel releases within the intersection of every attempt's proved
bracket; an empty intersection (lower > upper) proves that something broke
and is refused like a failed certificate, and honest brackets always
intersect.
"""

from __future__ import annotations

import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from privadapt.common.data.dataset import Dataset
from privadapt.common.errors import UncertifiedComputationError
from privadapt.common.kernels import get_kernel
from privadapt.common.kernels.exact_discrepancy import ExactDiscrepancyParams
from privadapt.common.numerics import certified_quadratic
from privadapt.common.numerics.certified_quadratic import (
    UNIT,
    certified_discrepancy,
    certify_maximum,
)
from privadapt.common.numerics.trust_region import maximize_quadratic_on_ball


def hadamard(size: int) -> np.ndarray:
    """An orthogonal matrix with entries +-1/sqrt(size) (size a power of 4), exactly."""
    matrix = np.array([[1.0]])
    while matrix.shape[0] < size:
        matrix = np.block([[matrix, matrix], [matrix, -matrix]])
    return matrix / math.sqrt(size)


def basis(dim: int) -> np.ndarray:
    return np.eye(dim) if dim < 4 else hadamard(dim)


def exact_matrix(eigenvalues: np.ndarray, dim: int) -> np.ndarray:
    """Q diag(lambda) Q^T, checked to be exact in floats."""
    q = basis(dim)
    matrix = q @ np.diag(eigenvalues) @ q.T
    exact = [[sum(Fraction(q[i, k]) * Fraction(eigenvalues[k]) * Fraction(q[j, k])
                  for k in range(dim)) for j in range(dim)] for i in range(dim)]
    assert all(Fraction(matrix[i, j]) == exact[i][j] for i in range(dim) for j in range(dim))
    return matrix


def exact_maximum(eigenvalues, matrix_basis, linear, constant, radius) -> tuple[Fraction, Fraction]:
    """(lower, upper) exact rationals around max of q on the ball, upper -
    lower below 2^-150 of the problem's size."""
    lam = [Fraction(v) for v in eigenvalues]
    dim = len(lam)
    beta = [sum(Fraction(matrix_basis[i, k]) * Fraction(linear[i]) for i in range(dim))
            for k in range(dim)]
    c, rho2 = Fraction(constant), Fraction(radius) ** 2
    top = max(lam)
    low = max(top, Fraction(0))

    def norm2(mu):
        return sum(b * b / (mu - v) ** 2 for b, v in zip(beta, lam, strict=True) if b)

    def dual(mu):
        return c + mu * rho2 + sum(b * b / (mu - v) for b, v in zip(beta, lam, strict=True) if b)

    def primal(mu, fill=Fraction(0)):
        w = [b / (mu - v) if b else Fraction(0) for b, v in zip(beta, lam, strict=True)]
        value = c + sum(v * x * x + 2 * b * x for v, b, x in zip(lam, beta, w, strict=True))
        return value + top * fill  # a top eigen-direction filling the rest

    singular_beta = any(b and v == low for b, v in zip(beta, lam, strict=True))
    if not singular_beta and norm2(low) <= rho2:
        value = dual(low)
        if low == 0 and top < 0:
            return value, value  # interior maximiser
        # hard case (or boundary at mu = lambda_1 >= 0): exact
        return primal(low, rho2 - norm2(low)) if top == low else value, value
    # At mu = low + sum|beta_i| / Lambda >= low + ||beta|| / Lambda, ||w(mu)|| <= Lambda.
    high = low + sum(abs(b) for b in beta) / Fraction(radius)
    lo, grain = low, (high - low) * Fraction(1, 2**420)
    for _ in range(400):
        mid = (lo + high) / 2
        if norm2(mid) > rho2:
            lo = mid
        else:
            high = mid
        # Keep the denominators small: round outward on a fine grid.
        lo, high = grain * math.floor(lo / grain), grain * math.ceil(high / grain)
    # w(high) is feasible (norm2 <= rho2); dual(high) is an upper bound.
    return primal(high), dual(high)


SCALES = [2.0**-300, 2.0**-20, 1.0, 2.0**30, 2.0**300]


@st.composite
def exact_problems(draw):
    dim = draw(st.sampled_from([1, 2, 4, 16]))
    kind = draw(st.sampled_from(["random", "ties", "cluster", "hard", "near_hard", "negative"]))
    values = draw(st.lists(st.integers(-8, 8), min_size=dim, max_size=dim))
    eigenvalues = np.array(values, dtype=float)
    if kind == "ties":
        eigenvalues[: max(1, dim // 2)] = 5.0
    elif kind == "cluster":
        eigenvalues = 5.0 + np.arange(dim) * 2.0**-40
    elif kind == "negative":
        eigenvalues = -np.abs(eigenvalues) - 1.0
    q = basis(dim)
    coefficients = np.array(draw(st.lists(st.integers(-4, 4), min_size=dim, max_size=dim)),
                            dtype=float) / 8
    if kind in ("hard", "near_hard"):
        eigenvalues[0] = 9.0  # a distinct top, beta orthogonal (or nearly) to it
        coefficients[0] = 0.0 if kind == "hard" else 2.0**-30
        coefficients /= 64
    linear = q @ coefficients  # exact: entries are sums of dyadics
    scale = draw(st.sampled_from(SCALES))
    radius = draw(st.sampled_from([2.0**-10, 0.75, 1.0, 3.0, 2.0**12]))
    constant = float(draw(st.integers(-5, 5)))
    return eigenvalues * scale, q, linear * scale, constant * scale, radius


@pytest.mark.slow
@settings(max_examples=80, deadline=None)
@given(problem=exact_problems())
def test_bracket_holds_the_exact_maximum(problem):
    eigenvalues, q, linear, constant, radius = problem
    matrix = exact_matrix(eigenvalues, len(eigenvalues))
    solution = maximize_quadratic_on_ball(matrix, linear, constant, radius)
    bracket = certify_maximum(matrix, linear, constant, radius, solution)
    exact_low, exact_high = exact_maximum(eigenvalues, q, linear, constant, radius)
    assert Fraction(bracket.lower) <= exact_low
    assert Fraction(bracket.upper) >= exact_high
    # ...and it is narrow: a few m^2 u of the problem's size on the ball.
    size = (np.abs(eigenvalues).max() * radius**2 + np.abs(linear).max() * radius
            + abs(constant))
    m = len(linear) + 1
    assert bracket.width <= 64 * m * m * UNIT * size + 2.0**-1000


@pytest.mark.parametrize("re_solve", [True, False])
def test_the_bracket_of_a_wrong_answer_still_holds(monkeypatch, re_solve):
    if not re_solve:  # the solver's answer alone (and the dual solves' candidates)
        monkeypatch.setattr(certified_quadratic, "refine_multiplier",
                            lambda *args: (math.nan, []))
    eigenvalues = np.array([3.0, 1.0, -2.0, 0.0])
    q = basis(4)
    matrix, linear = exact_matrix(eigenvalues, 4), q @ np.array([0.5, 0.25, 0.0, -0.5])
    good = maximize_quadratic_on_ball(matrix, linear, 1.0, 1.0)
    exact_low, exact_high = exact_maximum(eigenvalues, q, linear, 1.0, 1.0)
    for wrong in (good.__class__(good.value, good.weights * 0.9, good.multiplier, False),
                  good.__class__(good.value, good.weights, good.multiplier * 0.5, False),
                  good.__class__(good.value, good.weights + 1e-4, good.multiplier + 1e-4, False),
                  good.__class__(good.value, np.full(4, np.nan), math.nan, False)):
        bracket = certify_maximum(matrix, linear, 1.0, 1.0, wrong)
        assert bracket.lower == -math.inf or Fraction(bracket.lower) <= exact_low
        assert bracket.upper == math.inf or Fraction(bracket.upper) >= exact_high
    # With nothing to start from and no re-solve, nothing is certified.
    nothing = good.__class__(math.nan, np.full(4, np.nan), math.nan, False)
    bracket = certify_maximum(matrix, linear, 1.0, 1.0, nothing)
    assert (bracket.upper == math.inf) != re_solve


def test_asymmetric_matrices_are_refused():
    with pytest.raises(ValueError, match="symmetric"):
        certify_maximum(np.array([[1.0, 2.0], [0.0, 1.0]]), np.zeros(2), 0.0, 1.0,
                        maximize_quadratic_on_ball(np.eye(2), np.zeros(2), 0.0, 1.0))


def test_certified_discrepancy_is_the_solver_value_when_it_is_right():
    from privadapt.common.losses import squared_loss_discrepancy

    rng = np.random.default_rng(3)
    z = rng.normal(size=(30, 5))
    difference = z[:10].T @ z[:10] * 3 - z.T @ z
    value, error = certified_discrepancy(difference, 1.7)
    assert value == squared_loss_discrepancy(difference, 1.7)
    assert 0 < error <= 1e-12 * value


# -------------------------------------------------- a corrupted eigen-solver

KERNEL = get_kernel("exact_discrepancy")
DIM = 6


def kernel_case(seed: int = 5):
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(40, DIM))
    features /= np.maximum(np.linalg.norm(features, axis=1), 1.0)[:, None]
    labels = np.clip(rng.normal(size=40), -1, 1)
    public = np.zeros((DIM + 1, DIM + 1))
    public[0, 0] = 1.0  # rank one: a near-hard case against the data
    params = ExactDiscrepancyParams(1.0, 1.0, 2.0, public)
    return Dataset(features, labels, tuple(f"x{i}" for i in range(DIM))), params


def corrupt_eigh(monkeypatch, size: float) -> None:
    """eigh as if LAPACK had a backward error of ``size`` relative."""
    honest = np.linalg.eigh

    def corrupted(matrix, *args, **kwargs):
        values, vectors = honest(matrix, *args, **kwargs)
        noise = np.random.default_rng(0).normal(size=vectors.shape)
        return values * (1 - size), vectors + size * noise

    monkeypatch.setattr(np.linalg, "eigh", corrupted)


@pytest.mark.parametrize("size", [1e-6, 1e-3])
def test_a_corrupted_eigh_never_releases_an_under_charged_value(monkeypatch, size):
    data, params = kernel_case()
    (honest_value,) = KERNEL.compute(data, params, {})
    difference = data.num_records * params.public_moments - _moment_sum(data, params)
    _, honest_error = certified_discrepancy(difference, params.radius)
    allowance = KERNEL.solver_allowance(params, DIM, data.num_records)
    corrupt_eigh(monkeypatch, size)
    raw = max(abs(v) for v in _raw_range(difference, params.radius))
    assert abs(raw - honest_value[0]) > allowance  # the corruption matters
    try:
        (value,) = KERNEL.compute(data, params, {})
    except UncertifiedComputationError:
        return  # refused: nothing released
    # Released: within the charged solver error of every point of the honest bracket.
    assert abs(value[0] - honest_value[0]) + honest_error <= allowance


def test_the_re_solve_repairs_a_badly_corrupted_eigh(monkeypatch):
    # The second solve (Newton on the secular equation with Cholesky factors)
    # uses no eigen-solver: the kernel answers, within its charge.
    data, params = kernel_case()
    (honest_value,) = KERNEL.compute(data, params, {})
    corrupt_eigh(monkeypatch, 1e-2)
    (value,) = KERNEL.compute(data, params, {})
    assert abs(value[0] - honest_value[0]) <= KERNEL.solver_allowance(params, DIM, 40) / 2


def corrupt_cholesky(monkeypatch, size: float) -> None:
    """cholesky as if LAPACK had a backward error of ``size`` (relative)."""
    honest = np.linalg.cholesky

    def corrupted(matrix, *args, **kwargs):
        factor = honest(matrix, *args, **kwargs)
        return factor * (1 + size * np.random.default_rng(1).normal(size=factor.shape))

    monkeypatch.setattr(np.linalg, "cholesky", corrupted)


@pytest.mark.parametrize("size", [1e-6, 1e-3])
def test_corrupted_eigh_and_cholesky_are_refused(monkeypatch, size):
    data, params = kernel_case()
    corrupt_eigh(monkeypatch, size)
    corrupt_cholesky(monkeypatch, size)
    with pytest.raises(UncertifiedComputationError):
        KERNEL.compute(data, params, {})


def test_a_corrupted_cholesky_alone_cannot_narrow_the_bracket_wrongly(monkeypatch):
    eigenvalues = np.array([3.0, 1.0, -2.0, 0.0])
    q = basis(4)
    matrix, linear = exact_matrix(eigenvalues, 4), q @ np.array([0.0, 0.25, 0.0, -0.5])
    corrupt_cholesky(monkeypatch, 1e-9)
    solution = maximize_quadratic_on_ball(matrix, linear, 1.0, 1.0)
    bracket = certify_maximum(matrix, linear, 1.0, 1.0, solution)
    exact_low, exact_high = exact_maximum(eigenvalues, q, linear, 1.0, 1.0)
    assert Fraction(bracket.lower) <= exact_low
    assert bracket.upper == math.inf or Fraction(bracket.upper) >= exact_high


def _moment_sum(data, params):
    from privadapt.common.kernels.second_moments import exact_moment_sum

    return exact_moment_sum(data, params.clipping)


def _raw_range(difference, radius):
    matrix, linear, constant = difference[:-1, :-1], -difference[:-1, -1], difference[-1, -1]
    return (maximize_quadratic_on_ball(matrix, linear, constant, radius).value,
            maximize_quadratic_on_ball(-matrix, -linear, -constant, radius).value)


# -------------------------------------------- the intersection of the brackets
# Each bracket holds the exact maximum only if its proof is right. Were one
# wrong (a proof bug, or the floating-point model broken), the intersection
# could be empty, and ``certified_discrepancy`` would return a negative error
# that passes the kernel's ``error <= allowance`` check, releasing the clamp
# to the wrong upper bound with no refusal and no latch.

BRACKET_PARAMS = {"feature_norm": 1.0, "label_bound": 1.0, "radius": 2.0,
                  "public_moments": np.diag([0.2, 0.1, 0.3])}
BRACKET_DATA = Dataset(np.random.default_rng(5).normal(size=(8, 2)) * 0.4,
                       np.linspace(-0.9, 0.9, 8), ("a", "b"))


def test_an_empty_intersection_of_brackets_is_not_released(monkeypatch):
    honest = certified_quadratic._upper_bound
    calls = []

    def one_wrong_bound(*args):
        value, points = honest(*args)
        calls.append(value)
        if len(calls) == 1 and math.isfinite(value):
            value = value - 1e3 * (abs(value) + 1.0)  # a "proved" bound below v*
        return value, points

    monkeypatch.setattr(certified_quadratic, "_upper_bound", one_wrong_bound)
    typed = KERNEL.Params.from_wire(BRACKET_PARAMS, 2)
    with pytest.raises(UncertifiedComputationError):
        released = KERNEL.compute(BRACKET_DATA, typed, {})
        pytest.fail(f"released {released[0][0]!r} from an empty intersection of brackets")


@st.composite
def adversarial_problems(draw):
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
@given(adversarial_problems())
def test_honest_brackets_always_intersect(problem):
    # The refusal of an empty intersection costs nothing on honest inputs:
    # lower <= upper on every adversarial problem.
    matrix, linear, constant, radius = problem
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        solution = maximize_quadratic_on_ball(matrix, linear, constant, radius)
        bracket = certify_maximum(matrix, linear, constant, radius, solution)
    assert bracket.lower <= bracket.upper
