"""The regularized_erm kernel (output perturbation's statistic): the site's
T steps land within the certified tolerance of the true minimiser; worst-case
and hypothesis-generated neighbours, run through the real ``Site.answer``
without noise, never move the release by more than the site charges; unsafe
public parameters are refused before any record is read, alike on
neighbours; the charge is the sensitivity plus twice the tolerance."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.client.site import Site
from privadapt.common.data.dataset import Dataset
from privadapt.common.errors import QueryRefusedError
from privadapt.common.federation import Query
from privadapt.common.kernels import get_kernel
from privadapt.common.kernels.regularized_erm import (
    MAX_ITERATIONS,
    RegularizedERM,
    RegularizedERMParams,
    clipped_records,
    iterations_for,
    solver_error,
)
from privadapt.common.losses import loss_values
from privadapt.common.mechanisms import Adjacency
from privadapt.common.numerics.fixed_point import FixedPointCodec

DIM = 3
NUM = 40
NAMES = tuple(f"x{i}" for i in range(DIM))
BITS = 48
KERNEL = RegularizedERM()
_LEDGERS = itertools.count()


def data(seed: int = 0, num: int = NUM) -> Dataset:
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(num, DIM))
    labels = np.where(features @ np.array([1.0, -1.0, 0.5]) + 0.3 * rng.normal(size=num) > 0,
                      1.0, -1.0)
    return Dataset(features, labels, NAMES)


def params(loss="logistic", regularization=2.0, radius=3.0, clip_norm=1.0, label_bound=1.0,
           records=NUM + 1, share=0.01) -> RegularizedERMParams:
    probe = RegularizedERMParams(loss, regularization, radius, clip_norm, label_bound, 1)
    steps = iterations_for(probe, DIM, records, share)
    return RegularizedERMParams(loss, regularization, radius, clip_norm, label_bound, steps)


def exact_minimiser(dataset: Dataset, p: RegularizedERMParams) -> np.ndarray:
    """argmin over the ball of the sum-form objective, by a constrained solver."""
    features, labels = clipped_records(dataset, p)

    def objective(w):
        return (loss_values(p.loss, features @ w, labels).sum()
                + p.regularization / 2 * w @ w)

    ball = {"type": "ineq", "fun": lambda w: p.radius**2 - w @ w}
    found = minimize(objective, np.zeros(DIM), constraints=[ball], method="SLSQP",
                     options={"ftol": 1e-14, "maxiter": 1000})
    return found.x


@pytest.mark.parametrize("loss", ["logistic", "squared"])
@pytest.mark.parametrize("radius", [0.3, 3.0])
def test_the_site_solution_is_within_the_certified_tolerance(loss, radius):
    dataset = data(1)
    p = params(loss, radius=radius, records=NUM)
    (weights,) = KERNEL.compute(dataset, p, {})
    assert np.linalg.norm(weights) <= radius * (1 + 1e-12)
    tolerance = solver_error(p, DIM, NUM)
    # SLSQP itself is only accurate to ~1e-6; the certified tolerance is 1% of G / lambda.
    assert np.linalg.norm(weights - exact_minimiser(dataset, p)) <= tolerance + 1e-5


def test_the_charge_is_the_sensitivity_plus_twice_the_tolerance_plus_the_grid():
    p = params()
    tolerance = solver_error(p, DIM, NUM + 1)
    for adjacency, unit in ((Adjacency.REPLACE_ONE, 2.0), (Adjacency.ADD_REMOVE_ONE, 1.0)):
        (charged,) = KERNEL.charged_sensitivities(p, adjacency, "l2", DIM, BITS, NUM + 1)
        expected = unit * p.sensitivity_unit + 2 * tolerance + math.sqrt(DIM) * 2.0**-BITS
        assert charged == pytest.approx(expected, rel=1e-12)
        assert charged >= expected
    # G / lambda: logistic G = r Y.
    assert p.sensitivity_unit == pytest.approx(1.0 / 2.0)


def site(tmp_path, dataset: Dataset, adjacency: Adjacency) -> Site:
    policy = SitePolicy("s", math.inf, 1e-5, adjacency=adjacency, allow_non_private=True)
    return Site(dataset, policy,
                PrivacyLedger(tmp_path / f"l{next(_LEDGERS)}.db", policy, create=True))


def release(tmp_path, dataset: Dataset, wire: dict, adjacency: Adjacency):
    """The decoded noiseless release of the real site path, or its refusal text."""
    typed = KERNEL.Params.from_wire(wire, DIM)
    mechanism = KERNEL.mechanism(typed, math.inf, adjacency, dim=DIM)
    query = Query("job", "q", KERNEL.name, wire, mechanism, fractional_bits=BITS)
    try:
        share = site(tmp_path, dataset, adjacency).answer(query, 1)
    except QueryRefusedError as err:
        return str(err)
    return FixedPointCodec(BITS).decode(share.blocks[0])


def neighbour(dataset: Dataset, adjacency: Adjacency, record) -> Dataset:
    features, labels = dataset.features.copy(), dataset.labels.copy()
    if adjacency == Adjacency.REPLACE_ONE:
        features[0], labels[0] = record
        return Dataset(features, labels, NAMES)
    return Dataset(np.vstack([features, record[0]]), np.append(labels, record[1]), NAMES)


def check_within_charge(tmp_path, dataset, wire, adjacency, record):
    other = neighbour(dataset, adjacency, record)
    first = release(tmp_path, dataset, wire, adjacency)
    second = release(tmp_path, other, wire, adjacency)
    if isinstance(first, str) or isinstance(second, str):
        assert first == second  # refused on public grounds only, alike
        return
    typed = KERNEL.Params.from_wire(wire, DIM)
    records = SitePolicy("s", math.inf, 1e-5, adjacency=adjacency).range_records(
        max(dataset.num_records, other.num_records))
    (bound,) = KERNEL.charged_sensitivities(typed, adjacency, "l2", DIM, BITS, records)
    moved = float(np.linalg.norm(first - second))
    assert moved <= bound, (moved, bound)
    return moved, bound


def worst_records(p: RegularizedERMParams):
    """Records at and beyond the clip, with the labels that pull hardest."""
    direction = np.array([1.0, -1.0, 0.5]) / 1.5
    yield direction * p.clip_norm, -p.label_bound
    yield -direction * p.clip_norm * 1e300, 1e300
    yield np.zeros(DIM), p.label_bound
    yield direction * p.clip_norm * (1 + 1e-15), p.label_bound


@pytest.mark.parametrize("loss", ["logistic", "squared"])
@pytest.mark.parametrize("adjacency", list(Adjacency))
def test_worst_case_neighbours_move_the_release_by_at_most_the_charge(tmp_path, loss,
                                                                       adjacency):
    # A small lambda makes the minimiser as sensitive as the bound allows.
    p = params(loss, regularization=0.5, radius=2.0)
    dataset = data(2)
    for record in worst_records(p):
        check_within_charge(tmp_path, dataset, p.to_wire(), adjacency, record)


def test_a_one_record_dataset_flipped_is_within_the_charge(tmp_path):
    """Replace the only record of a site: with the squared loss, 1-d, the
    minimiser 2y / (2 + lambda) moves by 4 / 22 against the bound 2G / lambda
    = 4 (R + 1) / 20: the derivation is tight up to R and the ball."""
    p = params("squared", regularization=20.0, radius=0.3, records=1)
    dataset = Dataset(np.array([[1.0, 0.0, 0.0]]), np.array([1.0]), NAMES)
    moved, bound = check_within_charge(tmp_path, dataset, p.to_wire(), Adjacency.REPLACE_ONE,
                                       (np.array([1.0, 0.0, 0.0]), -1.0))
    assert moved == pytest.approx(4 / 22, rel=1e-6)
    assert moved > 0.65 * bound


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(loss=st.sampled_from(["logistic", "squared"]),
       regularization=st.floats(0.3, 30.0), radius=st.floats(0.2, 5.0),
       clip=st.floats(0.2, 2.0), label=st.floats(0.2, 2.0),
       adjacency=st.sampled_from(list(Adjacency)), seed=st.integers(0, 10**6),
       x=st.lists(st.floats(-1e3, 1e3), min_size=DIM, max_size=DIM),
       y=st.floats(-1e3, 1e3))
def test_hypothesis_neighbours_move_the_release_by_at_most_the_charge(
        tmp_path, loss, regularization, radius, clip, label, adjacency, seed, x, y):
    p = params(loss, regularization, radius, clip, label)
    if p.iterations > 3000:
        p = RegularizedERMParams(loss, regularization, radius, clip, label, 3000)
    check_within_charge(tmp_path, data(seed % 97, num=25), p.to_wire(), adjacency,
                        (np.array(x), y))


def test_too_few_iterations_are_refused_before_the_data_is_read(tmp_path, monkeypatch):
    p = params(regularization=0.5)
    short = {**p.to_wire(), "iterations": 2}

    def fail(*args, **kwargs):
        raise AssertionError("private data was read before the refusal")

    monkeypatch.setattr(RegularizedERM, "compute", fail)
    for adjacency in Adjacency:
        text = release(tmp_path, data(0), short, adjacency)
        assert isinstance(text, str) and "ask for at least" in text


@pytest.mark.parametrize("change, message", [
    ({"iterations": 0}, "iterations"), ({"iterations": MAX_ITERATIONS + 1}, "iterations"),
    ({"iterations": True}, "iterations"), ({"iterations": 2.5}, "iterations"),
    ({"regularization": 0.0}, "regularization"), ({"regularization": math.inf}, "regular"),
    ({"radius": -1.0}, "radius"), ({"clip_norm": math.nan}, "clip_norm"),
    ({"label_bound": 2.0**201}, "label_bound"),
    ({"radius": 2.0**199, "clip_norm": 2.0**199}, "outside"),
    ({"loss": "hinge"}, "loss"),
])
def test_unsafe_public_parameters_are_refused_by_their_values(change, message):
    with pytest.raises(ValueError, match=message):
        get_kernel("regularized_erm").Params.from_wire({**params().to_wire(), **change}, DIM)


def test_too_much_work_for_the_sites_bound_on_n_is_refused():
    p = params()
    with pytest.raises(ValueError, match="multiply-adds"):
        solver_error(p, DIM, 2**40)


def test_the_policy_clip_limits_apply():
    assert KERNEL.clip_bounds(params(clip_norm=0.5, label_bound=2.0)) == {
        "clip_norm": 0.5, "label_bound": 2.0}
