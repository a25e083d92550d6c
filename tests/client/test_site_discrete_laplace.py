"""A discrete Laplace release through the real ``Site.answer``: the site charges
exactly the plan, which is dp-accounting's discrete Laplace PLD computed
independently; neighbouring datasets, worst-case and hypothesis-generated,
release integers no further apart than the charged grid sensitivity; and the
site refuses what its cap or its grid cannot take, cheaply and before
anything is charged."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.client.site import Site
from privadapt.common.accounting.discrete import discrete_laplace_epsilon
from privadapt.common.data.dataset import Dataset
from privadapt.common.errors import BudgetExceededError, QueryRefusedError
from privadapt.common.federation import Query
from privadapt.common.kernels import get_kernel
from privadapt.common.mechanisms import Adjacency, DiscreteLaplaceMechanism
from privadapt.common.noise.floating import SeededRandomBits
from privadapt.common.numerics.fixed_point import FixedPointCodec
from tests.pld_builds import counted_pld_builds

DIM = 3
NAMES = tuple(f"x{i}" for i in range(DIM))
ADD_REMOVE = Adjacency.ADD_REMOVE_ONE
REPLACE = Adjacency.REPLACE_ONE
MOMENTS = {"feature_norm": 1.0, "label_bound": 2.0}
_LEDGERS = itertools.count()


def dataset(num: int = 20, seed: int = 0) -> Dataset:
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(num, DIM))
    features /= np.maximum(1.0, np.linalg.norm(features, axis=1))[:, None]
    return Dataset(features, rng.uniform(-2.0, 2.0, num), NAMES)


def make_site(path, data: Dataset, policy: SitePolicy, seed: int = 0) -> Site:
    return Site(data, policy, PrivacyLedger(path, policy, create=True), SeededRandomBits(seed))


def planned(kernel: str, params: dict, policy: SitePolicy, bits: int,
            multiplier: float, num: int) -> DiscreteLaplaceMechanism:
    """What an algorithm asks for: the site's own charged L1 sensitivity on
    the query's grid, noise multiplier (1/epsilon) applied in grid steps."""
    k = get_kernel(kernel)
    typed = k.Params.from_wire(params, DIM)
    (charged,) = k.charged_sensitivities(typed, policy.adjacency, "l1", DIM, bits,
                                         policy.range_records(num))
    return DiscreteLaplaceMechanism.for_noise_multiplier(charged, multiplier, bits,
                                                         policy.adjacency)


@pytest.mark.parametrize("bits,adjacency", [(16, ADD_REMOVE), (16, REPLACE), (24, REPLACE)])
def test_the_charge_is_the_plan_and_dp_accountings_discrete_pld(tmp_path, bits, adjacency):
    policy = SitePolicy("s", 10.0, 1e-6, adjacency=adjacency)
    data = dataset()
    site = make_site(tmp_path / "l.db", data, policy)
    mechanism = planned("second_moments", MOMENTS, policy, bits, 20.0, data.num_records)
    releases = 15
    for i in range(releases):
        site.answer(Query("j", f"q{i}", "second_moments", MOMENTS, mechanism,
                          fractional_bits=bits), 1)
    assert {c.mechanism for c in site.ledger.charges()} == {mechanism}
    spent = site.ledger.spent().epsilon
    steps, scale = mechanism.grid_sensitivity, mechanism.exact_scale
    assert spent == pytest.approx(discrete_laplace_epsilon(scale, steps, 1e-6, releases),
                                  abs=1e-12)
    if steps > 2**21:
        return  # dp-accounting visits every one of the Delta outputs: too many here
    # dp-accounting's own construction, independently (its float ceil may put
    # a loss on a bucket edge one bucket lower: at most 1e-4 per release).
    theirs = privacy_loss_distribution.from_discrete_laplace_mechanism(
        1 / float(scale), sensitivity=steps,
        value_discretization_interval=1e-4).self_compose(releases).get_epsilon_for_delta(1e-6)
    assert theirs - 1e-9 <= spent <= theirs + releases * 1e-4
    assert spent <= releases * float(mechanism.exact_epsilon) <= releases / 20.0


def released_steps(tmp_path, tag: str, data: Dataset, query: Query, policy: SitePolicy,
                   seed: int) -> np.ndarray:
    """The integers a site releases (same noise seed on both neighbours: the
    noise cancels and the difference is the rounded values')."""
    site = make_site(tmp_path / f"{tag}-{next(_LEDGERS)}.db", data, policy, seed)
    (block,) = site.answer(query, 1).blocks
    return block.view(np.int64)


def neighbour_pair(adjacency: Adjacency, record: tuple[np.ndarray, float],
                   base: Dataset) -> tuple[Dataset, Dataset]:
    if adjacency == REPLACE:
        features, labels = base.features.copy(), base.labels.copy()
        features[0], labels[0] = record
    else:
        features = np.vstack([base.features, record[0]])
        labels = np.append(base.labels, record[1])
    return base, Dataset(features, labels, NAMES)


def check_neighbours(tmp_path, kernel: str, params: dict, adjacency: Adjacency, bits: int,
                     record: tuple[np.ndarray, float], seed: int) -> None:
    policy = SitePolicy("s", 1e6, 1e-6, adjacency=adjacency)
    a, b = neighbour_pair(adjacency, record, dataset(seed=seed))
    mechanism = planned(kernel, params, policy, bits, 1.0, b.num_records)
    query = Query("j", "q", kernel, params, mechanism, fractional_bits=bits)
    difference = released_steps(tmp_path, f"a{seed}", a, query, policy, seed) \
        - released_steps(tmp_path, f"b{seed}", b, query, policy, seed)
    assert int(np.abs(difference).sum()) <= mechanism.grid_sensitivity


WORST = [(np.array([1.0, 0.0, 0.0]), 2.0), (np.array([-1.0, 0.0, 0.0]), -2.0),
         (np.zeros(DIM), 0.0), (np.array([0.6, 0.8, 0.0]), -2.0),
         (np.full(DIM, 3.0**-0.5), 2.0)]


@pytest.mark.parametrize("bits", [16, 32])
@pytest.mark.parametrize("adjacency", [REPLACE, ADD_REMOVE])
@pytest.mark.parametrize("record", WORST, ids=range(len(WORST)))
def test_worst_case_neighbours_stay_within_the_charged_grid_sensitivity(
        tmp_path, bits, adjacency, record):
    check_neighbours(tmp_path, "second_moments", MOMENTS, adjacency, bits, record, 1)
    if adjacency == ADD_REMOVE:
        check_neighbours(tmp_path, "record_count", {}, adjacency, bits, record, 1)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(direction=st.lists(st.floats(-1, 1), min_size=DIM, max_size=DIM),
       label=st.floats(-2, 2), bits=st.sampled_from([16, 30, 33]),
       adjacency=st.sampled_from([REPLACE, ADD_REMOVE]), seed=st.integers(0, 2**16))
def test_generated_neighbours_stay_within_the_charged_grid_sensitivity(
        tmp_path, direction, label, bits, adjacency, seed):
    x = np.asarray(direction)
    x = x / max(1.0, float(np.linalg.norm(x)))
    check_neighbours(tmp_path, "second_moments", MOMENTS, adjacency, bits, (x, label), seed)


def test_integer_noise_on_another_grid_is_refused_before_any_charge(tmp_path):
    policy = SitePolicy("s", 10.0, 1e-6)
    site = make_site(tmp_path / "l.db", dataset(), policy)
    mechanism = planned("second_moments", MOMENTS, policy, 16, 5.0, 20)
    query = Query("j", "q", "second_moments", MOMENTS, mechanism, fractional_bits=32)
    with pytest.raises(QueryRefusedError, match="grid 2\\^-16 but the query rounds onto"):
        site.answer(query, 1)
    assert site.ledger.charges() == []


def test_an_unaffordable_epsilon_is_refused_by_closed_forms_without_a_pld(tmp_path):
    policy = SitePolicy("s", 1.0, 1e-6)
    site = make_site(tmp_path / "l.db", dataset(), policy)
    mechanism = planned("second_moments", MOMENTS, policy, 32, 1e-4, 20)  # epsilon 1e4
    with counted_pld_builds() as built, pytest.raises(BudgetExceededError, match="closed-form"):
        site.answer(Query("j", "q", "second_moments", MOMENTS, mechanism,
                          fractional_bits=32), 1)
    assert built == []
    assert site.ledger.charges() == []


def test_a_release_too_costly_to_account_is_refused_without_a_pld(tmp_path):
    policy = SitePolicy("s", 1e4, 1e-6)  # the cap could afford it; the accountant cannot
    site = make_site(tmp_path / "l.db", dataset(), policy)
    mechanism = planned("second_moments", MOMENTS, policy, 32, 1 / 500, 20)
    with counted_pld_builds() as built, pytest.raises(QueryRefusedError,
                                                      match="privacy loss distribution"):
        site.answer(Query("j", "q", "second_moments", MOMENTS, mechanism,
                          fractional_bits=32), 1)
    assert built == []
    assert site.ledger.charges() == []


def test_the_policy_noise_floor_reads_the_exact_epsilon(tmp_path):
    policy = SitePolicy("s", 10.0, 1e-6, min_noise_multiplier=2.0)
    site = make_site(tmp_path / "l.db", dataset(), policy)
    mechanism = planned("second_moments", MOMENTS, policy, 20, 1.9, 20)
    with pytest.raises(QueryRefusedError, match="noise multiplier"):
        site.answer(Query("j", "q", "second_moments", MOMENTS, mechanism,
                          fractional_bits=20), 1)


def test_the_release_is_the_rounded_value_plus_integer_noise(tmp_path):
    """Decoded, the answer is (value rounded to the grid) + noise steps 2^-f,
    exactly: nothing of the float noise sampler is left."""
    policy = SitePolicy("s", 10.0, 1e-6)
    data = dataset()
    mechanism = planned("second_moments", MOMENTS, policy, 20, 2.0, data.num_records)
    query = Query("j", "q", "second_moments", MOMENTS, mechanism, fractional_bits=20)
    steps = released_steps(tmp_path, "a", data, query, policy, 5)
    kernel = get_kernel("second_moments")
    (value,) = kernel.compute(data, kernel.Params.from_wire(MOMENTS, DIM), {})
    codec = FixedPointCodec(20)
    noise = steps - codec.encode(value).view(np.int64)
    assert math.isclose(float(np.abs(noise).mean()), float(mechanism.exact_scale), rel_tol=0.9)


def test_an_absurd_clip_is_refused_not_raised(tmp_path):
    policy = SitePolicy("s", 10.0, 1e-6)  # no clip limit in the policy
    site = make_site(tmp_path / "l.db", dataset(), policy)
    huge = {"feature_norm": 2.0**199, "label_bound": 2.0**199}  # the kernels' limit
    mechanism = DiscreteLaplaceMechanism(2.0**300, 4.0, 32)  # declares what it needs
    with pytest.raises(QueryRefusedError):
        site.answer(Query("j", "q", "second_moments", huge, mechanism, fractional_bits=32), 1)
    assert site.ledger.charges() == []
