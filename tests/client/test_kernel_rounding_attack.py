"""A floating-point attack on a kernel: a coordinator picks public
parameters that make a kernel's own float rounding depend on one record by
more than the sensitivity the site charges. Every registered kernel is run
through the real ``Site.answer`` (without noise, on a simulation site) on
neighbouring datasets with adversarially scaled public parameters, and the
decoded releases must differ by at most what the site charges, in the
mechanism's norm; or the query must be refused on both neighbours with the
same words. The kernel with local blocks (Gaussian noise only) runs the
site's pipeline by hand with zero noise.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.client.site import Site
from privadapt.common.data.dataset import Dataset
from privadapt.common.errors import QueryRefusedError
from privadapt.common.federation import Query
from privadapt.common.kernels import get_kernel, registered_kernels
from privadapt.common.mechanisms import Adjacency
from privadapt.common.numerics.fixed_point import FixedPointCodec

DIM = 3
NUM = 12
RNG = np.random.default_rng(2024)
FEATURES = RNG.normal(size=(NUM, DIM))
LABELS = np.where(RNG.random(NUM) < 0.5, -1.0, 1.0)
NAMES = tuple(f"x{i}" for i in range(DIM))
FRACTIONAL_BITS = 48  # the finest grid: rounding there hides the least

SCALES = [2.0**-200, 1e-30, 1e-9, 1e-5, 1.0, 1e5, 2.0**30, 1e30, 2.0**200]
scale = st.sampled_from(SCALES)


_LEDGERS = itertools.count()


def site(ledger_path: Path, data: Dataset, adjacency: Adjacency) -> Site:
    policy = SitePolicy("s", math.inf, 1e-5, adjacency=adjacency, allow_non_private=True)
    return Site(data, policy, PrivacyLedger(ledger_path, policy, create=True))


def neighbours(adjacency: Adjacency, record: tuple[np.ndarray, float]) -> tuple[Dataset, Dataset]:
    base = Dataset(FEATURES, LABELS, NAMES)
    if adjacency == Adjacency.REPLACE_ONE:
        features, labels = FEATURES.copy(), LABELS.copy()
        features[0], labels[0] = record
    else:
        features, labels = np.vstack([FEATURES, record[0]]), np.append(LABELS, record[1])
    return base, Dataset(features, labels, NAMES)


def charged(kernel_name: str, params: dict, adjacency: Adjacency, norm: str) -> tuple:
    """What a site charges for this query's released blocks."""
    kernel_name = kernel_name.split("/")[0]  # a case of a kernel: "kernel/variant"
    kernel = get_kernel(kernel_name)
    typed = kernel.Params.from_wire(params, DIM)
    policy = SitePolicy("s", math.inf, 1e-5, adjacency=adjacency, allow_non_private=True)
    released = len(kernel.output_shapes(typed, DIM))
    return kernel.charged_sensitivities(typed, adjacency, norm, DIM, FRACTIONAL_BITS,
                                        policy.range_records(NUM + 1))[:released]


def answers(tmp_path, kernel_name: str, params: dict, adjacency: Adjacency,
            record: tuple[np.ndarray, float]) -> list:
    """The decoded release of each neighbour, or its refusal message."""
    kernel_name = kernel_name.split("/")[0]
    kernel = get_kernel(kernel_name)
    outcomes = []
    ledger_path = tmp_path / f"ledger-{next(_LEDGERS)}.db"  # fresh per example
    for tag, data in zip("ab", neighbours(adjacency, record), strict=True):
        try:
            mechanism = kernel.mechanism(kernel.Params.from_wire(params, DIM), math.inf,
                                         adjacency, dim=DIM)
            query = Query("job", f"q-{tag}", kernel_name, params, mechanism,
                          fractional_bits=FRACTIONAL_BITS)
            share = site(ledger_path, data, adjacency).answer(query, 1)
        except (QueryRefusedError, ValueError) as err:
            outcomes.append(str(err).replace("q-b", "q-a"))
            continue
        codec = FixedPointCodec(FRACTIONAL_BITS)
        outcomes.append(tuple(codec.decode(block) for block in share.blocks))
    return outcomes


def check_neighbours(outcomes: list, bounds: tuple, norm: str) -> None:
    first, second = outcomes
    if isinstance(first, str) or isinstance(second, str):
        assert first == second  # a refusal may depend on public things only
        return
    for a, b, bound in zip(first, second, bounds, strict=True):
        difference = np.abs(a - b).ravel()
        moved = difference.sum() if norm == "l1" else float(np.linalg.norm(difference))
        assert moved <= bound, (moved, bound)


def adversarial_record(x_scale: float, y: float, clip: float, how: str) -> tuple:
    """One record at the clip boundary, just inside or outside it, or far out."""
    direction = np.array([1.0, -2.0, 0.5]) / np.linalg.norm([1.0, -2.0, 0.5])
    factor = {"boundary": 1.0, "inside": 1 - 1e-15, "outside": 1 + 1e-15, "far": 1e300}[how]
    if how == "far":
        return direction * 1e300, -1e300  # finite: data loading refuses inf
    return direction * clip * factor * x_scale, y


how = st.sampled_from(["boundary", "inside", "outside", "far"])
adjacency = st.sampled_from(list(Adjacency))
SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def moments_at_the_limits(r: float, y: float, shape: int) -> np.ndarray:
    """Public moments as large as the clip region allows: feature trace r^2,
    label entry Y^2, the cross terms as large as PSD allows."""
    x = np.zeros(DIM)
    x[shape % DIM] = r
    z = np.append(x, y)
    return np.outer(z, z)


@SETTINGS
@given(r=scale, y=scale, radius=scale, shape=st.integers(0, 5), adj=adjacency, where=how)
def test_exact_discrepancy_neighbours_differ_by_at_most_the_charge(
        tmp_path, r, y, radius, shape, adj, where):
    params = {"feature_norm": r, "label_bound": y, "radius": radius,
              "public_moments": moments_at_the_limits(r, y, shape)}
    try:
        bounds = charged("exact_discrepancy", params, adj, "l1")
    except (ValueError, ArithmeticError):
        bounds = None  # refused params: both neighbours must be refused alike
    outcomes = answers(tmp_path, "exact_discrepancy", params, adj,
                       adversarial_record(1.0, y, r, where))
    check_neighbours(outcomes, bounds, "l1")


def test_moments_beyond_the_clip_bounds_are_refused_alike_on_both_neighbours(tmp_path):
    # Y^2 = 1e-10 and moments of size 2^28 / n: one ulp of n M_pub was 89 times B.
    params = {"feature_norm": 1e-5, "label_bound": 1e-5, "radius": 1.0,
              "public_moments": np.full((DIM + 1, DIM + 1), 2.0**28 / NUM)}
    record = (np.zeros(DIM), 1e-5)
    for adj in Adjacency:
        first, second = answers(tmp_path, "exact_discrepancy", params, adj, record)
        assert isinstance(first, str) and first == second
        assert "second moments of records clipped" in first


def test_the_attack_with_admissible_moments_stays_within_the_charge(tmp_path):
    # The same record change (y: label 0 -> Y) against the largest moments allowed.
    r = y = 1e-5
    params = {"feature_norm": r, "label_bound": y, "radius": 1.0,
              "public_moments": moments_at_the_limits(r, y, 0)}
    for adj in Adjacency:
        outcomes = answers(tmp_path, "exact_discrepancy", params, adj, (np.zeros(DIM), y))
        check_neighbours(outcomes, charged("exact_discrepancy", params, adj, "l1"), "l1")


SUM_KERNELS = {
    "second_moments": lambda r, y, w: {"feature_norm": r, "label_bound": y},
    "linear_gradient": lambda r, y, w: {"weights": np.full(DIM, w), "loss": "squared",
                                        "clip_norm": r},
    "validation_loss": lambda r, y, w: {"candidates": np.array([[w, -w, 1.0], [0.0, w, w]]),
                                        "loss": "logistic", "loss_bound": r},
    # Paired differences to a reference: clips r, reference of size y.
    "validation_loss/paired": lambda r, y, w: {
        "candidates": np.array([[w, -w, 1.0], [0.0, w, w]]), "loss": "logistic",
        "loss_bound": np.array([r, 2 * r]) if r < 2.0**199 else r,
        "reference": np.full(DIM, y)},
    "loss_difference_histogram": lambda r, y, w: {
        "candidates": np.array([[w, -w, 1.0], [0.0, w, w]]), "loss": "squared",
        "reference": np.full(DIM, y), "edges": np.array([[r, 2 * r], [r / 2, r]])},
    "record_count": lambda r, y, w: {},
    "smoothed_discrepancy_gradient": lambda r, y, w: {
        "feature_norm": r, "source_points": r * np.array([[1.0, 0, 0], [0, 0.6, 0.8]]),
        "weights": np.array([0.5, 0.5]), "mu": w, "scale": 1.0, "regularization": 0.0,
        "offset_bound": 0.0},
    # NNA's form (the default clip 1/2, no weights) when y < 1 (y is unused
    # here); the DP Lloyd baselines' form (a clip radius, count and moment
    # weights) otherwise.
    "nearest_target_sums": lambda r, y, w: (
        {"targets": np.array([[0.3, -0.2, 0.1], [-0.1, 0.4, 0.2]]) * min(w, 1.0)} if y < 1 else
        {"targets": np.array([[0.6, 0.0, 0.0], [-0.3, 0.2, 0.1]]) * r, "clip_norm": r,
         "count_weight": w, "moment_weight": w}),
    "nearest_source_averages": lambda r, y, w: {"targets": np.array([[0.3, -0.2, 0.1]])
                                                * min(w, 1.0), "t": 4},
    "linf_gradient": lambda r, y, w: {"weights": np.full(DIM, w), "loss": "squared",
                                      "clip_norm": r},
    "l1_vertex_scores": lambda r, y, w: {"offset": np.array([w, -w, 0.0]) / 2, "radius": w,
                                         "clip_norm": r, "loss": "squared",
                                         "center": np.full(DIM, y)},
    # Output perturbation's solver: refused alike on both neighbours where 400 steps
    # certify too little (lambda = w small against n r^2).
    "regularized_erm": lambda r, y, w: {"loss": "squared", "regularization": w, "radius": 1.0,
                                        "clip_norm": r, "label_bound": y, "iterations": 400},
}


@pytest.mark.parametrize("kernel_name", sorted(SUM_KERNELS))
@SETTINGS
@given(r=scale, y=scale, w=scale, adj=adjacency, where=how)
def test_sum_kernels_neighbours_differ_by_at_most_the_charge(
        tmp_path, kernel_name, r, y, w, adj, where):
    params = SUM_KERNELS[kernel_name](r, y, w)
    try:
        bounds = charged(kernel_name, params, adj, "l2")
    except (ValueError, ArithmeticError):
        bounds = None
    outcomes = answers(tmp_path, kernel_name, params, adj, adversarial_record(1.0, y, r, where))
    check_neighbours(outcomes, bounds, "l2")


def reweighted_params(r: float, y: float, radius: float, loss: str, step: float) -> dict:
    params = {"weights": np.linspace(-1, 1, DIM * (3 if loss == "softmax_cross_entropy" else 1))
              * radius, "step": 0, "objective": "smooth", "loss": loss, "alpha": 0.3,
              "total_private_records": NUM, "feature_norm": r, "label_bound": y,
              "radius": radius, "k1": 0.2, "k2": 0.3, "kinf": 0.1, "mu": 4.0,
              "inverse_square_sum": 0.5, "log_partition": 1.0, "step_size": step}
    if loss == "softmax_cross_entropy":
        params["num_classes"] = 3
    return params


def reweighted_release(data: Dataset, params: dict) -> tuple:
    """The site's pipeline for a kernel with local blocks, with zero noise,
    each released block rounded onto the grid as the site rounds it."""
    kernel = get_kernel("reweighted_gradient")
    typed = kernel.Params.from_wire(params, DIM)
    state: dict = {}
    local = kernel.compute_local(data, typed, state)
    kernel.apply_local(data, typed, state, local)
    codec = FixedPointCodec(FRACTIONAL_BITS)
    return tuple(codec.decode(codec.encode(block)) for block in kernel.compute(data, typed, state))


@SETTINGS
@given(r=scale, y=scale, radius=scale, adj=adjacency, where=how,
       loss=st.sampled_from(["squared", "logistic", "softmax_cross_entropy"]),
       step=st.sampled_from([1e-9, 1.0, 1e30, 2.0**400]))
def test_reweighted_gradient_neighbours_differ_by_at_most_the_charge(
        r, y, radius, adj, where, loss, step):
    params = reweighted_params(r, y, radius, loss, step)
    try:
        bounds = charged("reweighted_gradient", params, adj, "l2")
        kernel = get_kernel("reweighted_gradient")
        typed = kernel.Params.from_wire(params, DIM)
        # The site's range check, on the public bound on n (client/query_admission).
        reach = kernel.max_abs_sum(typed, SitePolicy("s", math.inf, 1e-5, adjacency=adj)
                                   .range_records(NUM + 1))
        FixedPointCodec(FRACTIONAL_BITS).check_sum_bound(reach)
    except (ValueError, ArithmeticError):
        return  # refused on the params alone, before any data is read
    outcomes = []
    for data in neighbours(adj, adversarial_record(1.0, y, r, where)):
        try:
            outcomes.append(reweighted_release(data, params))
        except (ValueError, OverflowError) as err:  # e.g. the codec's range
            outcomes.append(str(err))
    check_neighbours(outcomes, bounds, "l2")


def test_every_registered_kernel_is_attacked_here():
    attacked = {case.split("/")[0] for case in SUM_KERNELS} | {"exact_discrepancy",
                                                                "reweighted_gradient"}
    # Other tests register probe kernels named test_*; every real one is here.
    assert {name for name in registered_kernels() if not name.startswith("test_")} == attacked


@pytest.mark.parametrize("step", [1e300, 1e200])
def test_reweighted_params_that_could_overflow_u_are_refused_by_their_values(step):
    params = reweighted_params(1.0, 1.0, 1.0, "squared", step) | {"k1": 1e200}
    with pytest.raises(ValueError, match="u step of"):
        get_kernel("reweighted_gradient").Params.from_wire(params, DIM)


def test_reweighted_weights_never_become_nan_whatever_the_noise():
    kernel = get_kernel("reweighted_gradient")
    params = kernel.Params.from_wire(reweighted_params(1.0, 1.0, 1.0, "squared", 1.0), DIM)
    data = Dataset(FEATURES, LABELS, NAMES)
    state: dict = {}
    kernel.compute_local(data, params, state)
    noise = np.array([np.inf, -np.inf, np.nan, 1e308] + [0.0] * (NUM - 4))
    kernel.apply_local(data, params, state, (noise,))
    assert not np.any(np.isnan(state["reweighted_gradient"]["u"]))
    blocks = kernel.compute(data, params, state)
    assert all(np.all(np.isfinite(block)) for block in blocks)
