"""The certificates' work is fixed by public things, so a site's reply time
does not say which of them ran: a refusal or a running time that depends on
private data is a free release (module docstring of
common/numerics/certified_quadratic.py, "Fixed work").

Not a timing assertion: every numerical operation of the certificate (each
LAPACK factorisation and solve, each proved product, each dual attempt,
re-solve and candidate evaluation, with the shapes it ran on) is recorded in
order, and the sequence must be identical on neighbouring datasets: timing
pairs once measured apart (on the first the re-solve ran and on the second
not, 1.80 ms against 0.63 ms; the shift schedule took 4 attempts against 2),
the degenerate and empty-site pairs, the adversarial cases of
test_exact_discrepancy_certificate.py, and hypothesis-generated neighbours
under both adjacencies (n = 0 against 1 and scales from 2^-60 to 2^60
among them), through ``ExactDiscrepancy.compute`` and ``Site.answer``. The
trust-region solver that runs before the certificate does the same work on
neighbours too, and the smoothed gradient's empty sample runs its eigen
check.
"""

from __future__ import annotations

import itertools
import math
import warnings
from typing import ClassVar

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import privadapt.common.numerics.certified_quadratic as certified_quadratic
import privadapt.common.numerics.secular_newton as secular_newton
import privadapt.common.numerics.smoothed_spectral as smoothed_spectral
import privadapt.common.numerics.trust_region as trust_region
from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.client.site import Site
from privadapt.common.data.dataset import Dataset
from privadapt.common.errors import UncertifiedComputationError
from privadapt.common.federation import Query
from privadapt.common.kernels import get_kernel
from privadapt.common.mechanisms import Adjacency
from privadapt.common.numerics.trust_region import maximize_quadratic_on_ball
from tests.client.test_exact_discrepancy_certificate import adversarial_case, neighbours

KERNEL = get_kernel("exact_discrepancy")
SMOOTHED = get_kernel("smoothed_discrepancy_gradient")
_LEDGERS = itertools.count()
#: (module, name) of every operation traced: the LAPACK calls, the proved
#: products, and the certificate's steps.
TRACED = ((np.linalg, "cholesky"), (np.linalg, "eigh"),
          (secular_newton, "cho_solve"), (certified_quadratic, "cho_solve"),
          (secular_newton, "forward_solve"), (certified_quadratic, "accurate_product"),
          (certified_quadratic, "_upper_bound"), (certified_quadratic, "refine_multiplier"),
          (certified_quadratic, "_lower_bound"), (certified_quadratic, "candidate_points"),
          (secular_newton, "candidate_points"), (smoothed_spectral, "accurate_product"))


def _shapes(values) -> tuple:
    return tuple(np.shape(value) for value in values if isinstance(value, np.ndarray))


def traced(action) -> tuple[list, str]:
    """(the operations ``action`` ran, by name and argument shapes, in order;
    its outcome: "answered" or the error's type)."""
    trace: list = []
    with pytest.MonkeyPatch.context() as patch:
        for owner, name in TRACED:
            original = getattr(owner, name)

            def recorded(*args, _name=name, _original=original, **kwargs):
                trace.append((_name, _shapes(args)))
                return _original(*args, **kwargs)

            patch.setattr(owner, name, recorded)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            try:
                action()
                outcome = "answered"
            except UncertifiedComputationError as err:
                outcome = type(err).__name__
    return trace, outcome


def compute_trace(data: Dataset, params: dict, kernel=KERNEL) -> tuple[list, str]:
    typed = kernel.Params.from_wire(params, data.dim)
    return traced(lambda: kernel.compute(data, typed, {}))


def certificate_only(trace: tuple[list, str]) -> tuple[list, str]:
    """The trace without the trust-region solver's ``eigh``: the solver runs
    before the certificate, and its own work is counted apart
    (``solver_work``, at the end of this file)."""
    return [step for step in trace[0] if step[0] != "eigh"], trace[1]


def assert_same_work(first: tuple[list, str], second: tuple[list, str]) -> None:
    assert first[1] == second[1]
    assert len(first[0]) == len(second[0])
    assert first[0] == second[0]


def near_degenerate_moments(off_diagonal: float, label: float) -> np.ndarray:
    return np.array([[1.0, off_diagonal], [off_diagonal, label]])


# ----------------------------------------- pairs once timed apart


def timed_pair() -> tuple[Dataset, Dataset]:
    """Twelve records x = 0.5, y = 0, and the replace-one neighbour with one
    label 0.5: the pair whose reply times once differed."""
    features, labels = np.full((12, 1), 0.5), np.zeros(12)
    other = labels.copy()
    other[0] = 0.5
    return Dataset(features, labels, ("x0",)), Dataset(features, other, ("x0",))


@pytest.mark.parametrize(("off_diagonal", "radius"), [(3e-11, 69.3), (1e-12, 10.0)])
def test_pairs_once_timed_apart_run_the_same_operations(off_diagonal, radius):
    # Measured before: (re-solves, dual attempts) (1, 8) against (0, 2), and
    # (0, 4) against (0, 2).
    params = {"feature_norm": 1.0, "label_bound": 1.0, "radius": radius,
              "public_moments": near_degenerate_moments(off_diagonal, 0.5)}
    data, neighbour = timed_pair()
    first, second = compute_trace(data, params), compute_trace(neighbour, params)
    assert_same_work(first, second)
    names = [name for name, _ in first[0]]
    # The whole schedule ran: per sign, 2 x 5 shifts, the width-sized shift
    # and one re-solve.
    assert names.count("refine_multiplier") == 2
    assert names.count("_upper_bound") == 2 * (2 * len(certified_quadratic.SHIFT_FACTORS) + 1)


@pytest.mark.parametrize("off_diagonal", [1e-40, 1e-100, 1e-300, 1e-315])
def test_degenerate_pairs_run_the_same_operations(off_diagonal):
    features, labels = np.full((12, 1), 0.5), np.zeros(12)
    other = features.copy()
    other[0] = 0.25
    moments = np.array([[0.25, off_diagonal], [off_diagonal, 1.0 / 12.0]])
    params = {"feature_norm": 1.0, "label_bound": 1.0, "radius": 1.0, "public_moments": moments}
    first = compute_trace(Dataset(features, labels, ("x0",)), params)
    second = compute_trace(Dataset(other, labels, ("x0",)), params)
    assert_same_work(first, second)


def test_an_empty_site_runs_the_same_operations_as_one_record():
    params = {"feature_norm": 1.0, "label_bound": 1.0, "radius": 1.0,
              "public_moments": np.array([[0.25, 0.0], [0.0, 1.0 / 12.0]])}
    traces = [compute_trace(Dataset(np.full((num, 1), 0.5), np.zeros(num), ("x0",)), params)
              for num in (0, 1)]
    assert_same_work(*traces)


def test_a_timed_pair_through_the_site_runs_the_same_operations(tmp_path):
    params = {"feature_norm": 1.0, "label_bound": 1.0, "radius": 69.3,
              "public_moments": near_degenerate_moments(3e-11, 0.5)}
    policy = SitePolicy("s", math.inf, 1e-5, adjacency=Adjacency.REPLACE_ONE,
                        allow_non_private=True, max_records=24)
    mechanism = KERNEL.mechanism(KERNEL.Params.from_wire(params, 1), math.inf,
                                 Adjacency.REPLACE_ONE, dim=1)
    # Lambda = 69.3 makes the range 1e5: a grid of 24 fractional bits holds it.
    query = Query("job", "q", "exact_discrepancy", params, mechanism, fractional_bits=24)
    traces = []
    for data in timed_pair():
        site = Site(data, policy, PrivacyLedger(tmp_path / f"l{next(_LEDGERS)}.db", policy,
                                                create=True))
        traces.append(traced(lambda s=site: s.answer(query, 1)))
    assert_same_work(*traces)


# ---------------------------------------------- a certificate that cannot fit


def test_a_failed_factorisation_costs_the_same_operations():
    # The solver's answer (a multiplier below lambda_1: every shift's Cholesky
    # fails) against the right one (they succeed): the same operations.
    matrix = np.diag([3.0, 1.0, -2.0])
    linear = np.array([0.5, 0.25, 0.0])
    good = maximize_quadratic_on_ball(matrix, linear, 1.0, 1.0)
    wrong = good.__class__(good.value, good.weights, 0.0, False)
    nothing = good.__class__(math.nan, np.full(3, np.nan), math.nan, False)
    traces = [traced(lambda s=solution: certified_quadratic.certify_maximum(
        matrix, linear, 1.0, 1.0, s, 1e-6)) for solution in (good, wrong, nothing)]
    assert_same_work(traces[0], traces[1])
    assert_same_work(traces[0], traces[2])


# ------------------------------------------------------- the adversarial cases


@pytest.mark.parametrize("kind", ["hard", "near_hard", "ties", "clustered", "rank_one"])
@pytest.mark.parametrize("adjacency", list(Adjacency))
def test_adversarial_neighbours_run_the_same_operations(kind, adjacency):
    dim, r, y = 3, 1.0, 0.5
    public, features, labels = adversarial_case(kind, dim, r, y)
    params = {"feature_norm": r, "label_bound": y, "radius": 1e3, "public_moments": public}
    pair = neighbours(features, labels, adjacency, r, y)
    assert_same_work(compute_trace(pair[0], params), compute_trace(pair[1], params))


# ------------------------------------------------------------------ hypothesis


@st.composite
def neighbour_queries(draw):
    """(params, dataset, neighbour): a few clipped records, public moments of
    other clipped records (or the near-degenerate shape for d = 1),
    a radius across scales, and a replace-one or add/remove neighbour."""
    dim = draw(st.integers(1, 3))
    num = draw(st.integers(1, 6))
    value = st.floats(-1.0, 1.0, allow_nan=False)
    rows = draw(st.lists(st.lists(value, min_size=dim + 1, max_size=dim + 1),
                         min_size=num + 2, max_size=num + 2))
    records = np.array(rows)
    features, labels = records[:, :dim], records[:, dim] / 2
    features /= np.maximum(np.linalg.norm(features, axis=1), 1.0)[:, None]
    public = np.column_stack([features[-1:], labels[-1:]])
    moments = public.T @ public
    if dim == 1 and draw(st.booleans()):
        moments = near_degenerate_moments(draw(st.sampled_from([3e-11, 1e-12, 1e-40, 0.0])), 0.25)
    params = {"feature_norm": 1.0, "label_bound": 0.5,
              "radius": draw(st.sampled_from([1e-3, 1.0, 10.0, 69.3, 1e3])),
              "public_moments": moments}
    names = tuple(f"x{i}" for i in range(dim))
    data = Dataset(features[:num], labels[:num], names)
    if draw(st.booleans()):  # replace one
        other_x, other_y = features[:num].copy(), labels[:num].copy()
        other_x[0], other_y[0] = features[num], labels[num]
    else:  # add one
        other_x, other_y = features[:num + 1], labels[:num + 1]
    return params, data, Dataset(other_x, other_y, names)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=neighbour_queries())
def test_hypothesis_neighbours_run_the_same_operations(case):
    params, data, neighbour = case
    assert_same_work(certificate_only(compute_trace(data, params)),
                     certificate_only(compute_trace(neighbour, params)))


# ---------------------------------------------------- the smoothed eigen check


def test_smoothed_gradient_empty_sample_runs_the_eigen_check():
    # n = 0 used to return at once, before the eigen solve and its check: under
    # add/remove the reply time then said whether the site held any record.
    points = np.array([[1.0, 0.0], [0.0, 0.5]])
    params = {"feature_norm": 1.0, "source_points": points, "weights": np.array([0.5, 0.5]),
              "mu": 1.0}
    traces = [compute_trace(Dataset(np.full((num, 2), 0.5), np.zeros(num), ("a", "b")),
                            params, SMOOTHED) for num in (0, 1)]
    assert_same_work(*traces)
    assert [name for name, _ in traces[0][0]] == ["eigh", "accurate_product",
                                                  "accurate_product"]
    empty = Dataset(np.zeros((0, 2)), np.zeros(0), ("a", "b"))
    (scores,) = SMOOTHED.compute(empty, SMOOTHED.Params.from_wire(params, 2), {})
    assert np.array_equal(scores, np.zeros(2))


class _RecordingPoints(np.ndarray):
    """Source points that record the shape of every matrix they multiply."""

    shapes: ClassVar[list] = []

    def __matmul__(self, other):
        _RecordingPoints.shapes.append(np.shape(other))
        return np.asarray(self) @ other


def test_smoothed_projections_do_not_depend_on_how_many_directions_count():
    # The kept directions depend on the private spectrum (mu times its gaps);
    # their number once set the projection product's width (m x d x kept).
    rng = np.random.default_rng(0)
    points = rng.normal(size=(5, 4)).view(_RecordingPoints)
    vectors, _ = np.linalg.qr(rng.normal(size=(4, 4)))
    one = np.array([1.0, 0.0, 0.0, 0.0])  # one direction counts
    spread = np.array([0.4, 0.3, -0.2, 0.1])  # all four count
    results = []
    for signed in (one, spread):
        _RecordingPoints.shapes = []
        results.append(smoothed_spectral._vertex_gradient(points, vectors, signed))
        assert _RecordingPoints.shapes == [(4, 4)]
    # The same values as the kept directions alone give.
    projections = np.asarray(points) @ vectors[:, :1]
    assert np.allclose(results[0], -(projections[:, 0] ** 2), rtol=1e-15, atol=0)


# --------------------------------------------------- the smallest sites, any scale
# Corners the neighbours above do not draw (d <= 3, n >= 1, clip 1): the
# empty site against one record and n = 1 against 2 under add/remove, d = 1..5,
# clip bounds and radius from 2^-60 to 2^60, public moments zero, tied or rank
# one; and the smoothed gradient's eigen check on n = 0..2, mu up to 2^20.

SCALES = st.integers(-60, 60).map(lambda e: 2.0**e)


def corner_moments(kind: str, d: int, r: float, y: float, direction: np.ndarray) -> np.ndarray:
    if kind == "zero":
        return np.zeros((d + 1, d + 1))
    if kind == "tied":
        return np.diag(np.append(np.full(d, r * r / d), y * y))
    z = np.append(direction / np.linalg.norm(direction) * r, y)
    return np.outer(z, z)


@st.composite
def smallest_exact_pairs(draw):
    d = draw(st.integers(1, 5))
    r, y, radius = draw(SCALES), draw(SCALES), draw(SCALES)
    kind = draw(st.sampled_from(["zero", "tied", "rank_one"]))
    direction = np.array(draw(st.lists(st.floats(0.1, 1.0), min_size=d, max_size=d)))
    num = draw(st.integers(0, 1))
    values = draw(st.lists(st.floats(-1.0, 1.0), min_size=(num + 1) * (d + 1),
                           max_size=(num + 1) * (d + 1)))
    rows = np.array(values).reshape(num + 1, d + 1)
    names = tuple(f"x{i}" for i in range(d))
    features, labels = rows[:, :d] * r, rows[:, d] * y
    params = {"feature_norm": r, "label_bound": y, "radius": radius,
              "public_moments": corner_moments(kind, d, r, y, direction)}
    return (params, Dataset(features[:num], labels[:num], names),
            Dataset(features, labels, names))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(smallest_exact_pairs())
def test_add_remove_at_n_0_and_1_runs_the_same_certificate(case):
    params, data, neighbour = case
    assert_same_work(certificate_only(compute_trace(data, params)),
                     certificate_only(compute_trace(neighbour, params)))


@st.composite
def smallest_smoothed_pairs(draw):
    d = draw(st.integers(1, 5))
    m = draw(st.integers(1, 4))
    r = draw(SCALES)
    points = np.array(draw(st.lists(st.floats(-1.0, 1.0), min_size=m * d, max_size=m * d)))
    points = points.reshape(m, d)
    points = points / np.maximum(np.linalg.norm(points, axis=1), 1.0)[:, None] * r
    weights = np.full(m, 1.0 / m)
    mu = 2.0 ** draw(st.integers(-30, 20))
    num = draw(st.integers(0, 2))
    values = draw(st.lists(st.floats(-2.0, 2.0), min_size=(num + 1) * d,
                           max_size=(num + 1) * d))
    features = np.array(values).reshape(num + 1, d) * r
    names = tuple(f"x{i}" for i in range(d))
    params = {"feature_norm": r, "source_points": points, "weights": weights, "mu": mu}
    return (params, Dataset(features[:num], np.zeros(num), names),
            Dataset(features, np.zeros(num + 1), names))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(smallest_smoothed_pairs())
def test_smoothed_neighbours_run_the_same_eigen_check(case):
    params, data, neighbour = case
    assert_same_work(compute_trace(data, params, SMOOTHED),
                     compute_trace(neighbour, params, SMOOTHED))


# ------------------------------------------------ the solver before the certificate
# ``certificate_only`` leaves the trust-region solver's eigh out of the traces
# above. The solver must be fixed-work too: it once skipped its eigh when
# A = 0 and b = 0 (the empty site's D = 0 always is, a one-record neighbour's
# generally not) and ran Brent's method for a data-dependent number of
# secular-equation evaluations: 3.74 ms with 0 eigh and 0 evaluations at
# n = 0 against 3.91 ms with 2 eigh and 4 at n = 1, a gap a coordinator timing
# repeated queries could read. It now always runs one eigh and a secular solve
# of a fixed number of bisection steps (common/numerics/trust_region.py,
# "Fixed work").

SOLVER_PARAMS = {"feature_norm": 1.0, "label_bound": 1.0, "radius": 1.0,
                 "public_moments": np.array([[0.25, 0.0], [0.0, 1.0 / 12.0]])}


def solver_work(data: Dataset, monkeypatch) -> tuple[int, int]:
    """(eigh calls, secular-equation evaluations) of one compute."""
    counts = {"eigh": 0, "secular": 0}
    eigh, residual = np.linalg.eigh, trust_region._secular_residual

    def counted_eigh(*args, **kwargs):
        counts["eigh"] += 1
        return eigh(*args, **kwargs)

    def counted_residual(*args):
        counts["secular"] += 1
        return residual(*args)

    with monkeypatch.context() as patch, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        patch.setattr(np.linalg, "eigh", counted_eigh)
        patch.setattr(trust_region, "_secular_residual", counted_residual)
        KERNEL.compute(data, KERNEL.Params.from_wire(SOLVER_PARAMS, 1), {})
    return counts["eigh"], counts["secular"]


def half_records(labels: list[float]) -> Dataset:
    return Dataset(np.full((len(labels), 1), 0.5), np.array(labels, dtype=float), ("x0",))


@pytest.mark.parametrize(("first", "second"), [
    ([], [0.5]),            # add/remove: the empty site and one record
    ([0.0], [0.5]),         # replace-one: one label changed
    ([0.0] * 12, [0.5] + [0.0] * 11),
])
def test_the_solver_before_the_certificate_does_the_same_work(first, second, monkeypatch):
    assert (solver_work(half_records(first), monkeypatch)
            == solver_work(half_records(second), monkeypatch))
