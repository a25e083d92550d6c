"""A distributed discrete Gaussian release through the real ``Site.answer`` of K
sites: each ledger charges exactly the plan (the Kairouz-Liu-Steinke bound by
RDP), the decoded sum's noise has variance sigma^2 = n s^2 and is an exact
integer, neighbouring datasets (worst-case and generated) release integers
no further apart than the charged grid bound Q, and every refusal -- another
grid, fewer honest shares than charged, a per-site answer of one share, a
noise floor -- comes before any charge with the same words on neighbours."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.client.site import Site
from privadapt.common.accounting.accountant import PrivacyAccountant
from privadapt.common.data.dataset import Dataset
from privadapt.common.errors import QueryRefusedError
from privadapt.common.federation import Query, ReleaseForm
from privadapt.common.kernels import get_kernel
from privadapt.common.mechanisms import Adjacency, DistributedDiscreteGaussianMechanism
from privadapt.common.noise.floating import SeededRandomBits
from privadapt.common.numerics.fixed_point import FixedPointCodec

ADD_REMOVE = Adjacency.ADD_REMOVE_ONE
REPLACE = Adjacency.REPLACE_ONE
KERNEL = "linear_gradient"
_LEDGERS = itertools.count()


def params(dim: int) -> dict:
    return {"weights": np.linspace(-0.3, 0.3, dim), "loss": "logistic", "clip_norm": 1.0}


def dataset(num: int, dim: int, seed: int) -> Dataset:
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(num, dim)) / np.sqrt(dim)
    labels = np.where(rng.random(num) < 0.5, -1.0, 1.0)
    return Dataset(features, labels, tuple(f"x{i}" for i in range(dim)))


def make_site(path, data: Dataset, policy: SitePolicy, seed: int) -> Site:
    return Site(data, policy, PrivacyLedger(path, policy, create=True), SeededRandomBits(seed))


def planned(policy: SitePolicy, dim: int, bits: int, multiplier: float, shares: int,
            num: int) -> DistributedDiscreteGaussianMechanism:
    """What an algorithm asks for: the site's own charged L2 sensitivity on
    the query's grid, n = K - t honest shares of the noise multiplier's sigma."""
    kernel = get_kernel(KERNEL)
    typed = kernel.Params.from_wire(params(dim), dim)
    (charged,) = kernel.charged_sensitivities(typed, policy.adjacency, "l2", dim, bits,
                                              policy.range_records(num))
    return DistributedDiscreteGaussianMechanism.for_noise_multiplier(
        charged, multiplier, bits, shares, policy.adjacency)


@pytest.mark.parametrize("adjacency", [REPLACE, ADD_REMOVE])
def test_k_sites_charge_the_plan_and_the_sum_carries_sigma_squared(tmp_path, adjacency):
    dim, bits, num_sites, releases = 64, 16, 3, 12
    policy = SitePolicy("s", 1e4, 1e-6, adjacency=adjacency)
    data = [dataset(30, dim, seed) for seed in range(num_sites)]
    sites = [make_site(tmp_path / f"l{i}.db", d, policy, 10 + i) for i, d in enumerate(data)]
    mechanism = planned(policy, dim, bits, 0.8, num_sites, 30)
    codec = FixedPointCodec(bits)
    kernel = get_kernel(KERNEL)
    typed = kernel.Params.from_wire(params(dim), dim)
    values = sum(codec.encode_saturating(kernel.compute(d, typed, {})[0]).view(np.int64)
                 for d in data)
    noise = []
    for i in range(releases):
        query = Query("j", f"q{i}", KERNEL, params(dim), mechanism, fractional_bits=bits)
        shares = [site.answer(query, num_sites).blocks[0] for site in sites]
        total = np.sum(shares, axis=0, dtype=np.uint64)  # mod 2^64, as the secure sum
        noise.append(total.view(np.int64) - values)
    plan = PrivacyAccountant(adjacency).compose(mechanism, releases).report(1e-6)
    for site in sites:
        assert {c.mechanism for c in site.ledger.charges()} == {mechanism}
        spent = site.ledger.spent()
        assert spent.epsilon == pytest.approx(plan.epsilon, rel=1e-9)
        assert spent.epsilon >= plan.epsilon * (1 - 1e-12)
    steps = np.concatenate(noise).astype(float)
    sigma_squared = num_sites * mechanism.share_sigma_squared
    # 768 samples: the sample variance is within 20% but with probability ~1e-4.
    assert steps.var() == pytest.approx(sigma_squared, rel=0.2)
    assert abs(steps.mean()) < 5 * np.sqrt(sigma_squared / steps.size)


def released_steps(tmp_path, data: Dataset, query: Query, policy: SitePolicy, seed: int,
                   num_sites: int) -> np.ndarray:
    """The integers one site releases (the same noise seed on both neighbours:
    the noise cancels and the difference is the rounded values')."""
    site = make_site(tmp_path / f"n-{next(_LEDGERS)}.db", data, policy, seed)
    return site.answer(query, num_sites).blocks[0].view(np.int64)


def neighbour_pair(adjacency: Adjacency, record: tuple[np.ndarray, float],
                   base: Dataset) -> tuple[Dataset, Dataset]:
    if adjacency == REPLACE:
        features, labels = base.features.copy(), base.labels.copy()
        features[0], labels[0] = record
    else:
        features = np.vstack([base.features, record[0]])
        labels = np.append(base.labels, record[1])
    return base, Dataset(features, labels, base.feature_names)


DIM = 4


def check_neighbours(tmp_path, adjacency: Adjacency, bits: int,
                     record: tuple[np.ndarray, float], seed: int) -> None:
    policy = SitePolicy("s", 1e6, 1e-6, adjacency=adjacency)
    a, b = neighbour_pair(adjacency, record, dataset(20, DIM, seed))
    mechanism = planned(policy, DIM, bits, 1.0, 2, b.num_records)
    query = Query("j", "q", KERNEL, params(DIM), mechanism, fractional_bits=bits)
    difference = released_steps(tmp_path, a, query, policy, seed, 2) \
        - released_steps(tmp_path, b, query, policy, seed, 2)
    assert int(np.sum(difference.astype(object) ** 2)) <= mechanism.grid_l2_squared


WORST = [(np.array([1e6, 0.0, 0.0, 0.0]), 1.0), (np.array([-1e6, 0.0, 0.0, 0.0]), -1.0),
         (np.zeros(DIM), 1.0), (np.full(DIM, 0.5), -1.0), (np.full(DIM, -1e3), 1.0)]


@pytest.mark.parametrize("bits", [16, 24])
@pytest.mark.parametrize("adjacency", [REPLACE, ADD_REMOVE])
@pytest.mark.parametrize("record", WORST, ids=range(len(WORST)))
def test_worst_case_neighbours_stay_within_the_charged_grid_bound(tmp_path, bits, adjacency,
                                                                   record):
    check_neighbours(tmp_path, adjacency, bits, record, 1)


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(direction=st.lists(st.floats(-1e3, 1e3), min_size=DIM, max_size=DIM),
       label=st.sampled_from([-1.0, 1.0]), bits=st.sampled_from([16, 20, 27]),
       adjacency=st.sampled_from([REPLACE, ADD_REMOVE]), seed=st.integers(0, 2**16))
def test_generated_neighbours_stay_within_the_charged_grid_bound(
        tmp_path, direction, label, bits, adjacency, seed):
    check_neighbours(tmp_path, adjacency, bits, (np.asarray(direction), label), seed)


# -- refusals: before any charge, the same words on neighbouring datasets -------------

def grid_mismatch(policy: SitePolicy) -> tuple[Query, int]:
    mechanism = planned(policy, DIM, 16, 1.0, 2, 40)
    return Query("j", "q", KERNEL, params(DIM), mechanism, fractional_bits=24), 2


def fewer_sites(policy: SitePolicy) -> tuple[Query, int]:
    mechanism = planned(policy, DIM, 16, 1.0, 3, 40)
    return Query("j", "q", KERNEL, params(DIM), mechanism, fractional_bits=16), 2


def colluders(policy: SitePolicy) -> tuple[Query, int]:
    mechanism = planned(policy, DIM, 16, 1.0, 3, 40)
    return Query("j", "q", KERNEL, params(DIM), mechanism, fractional_bits=16,
                 collusion_tolerance=1), 3


def per_site(policy: SitePolicy) -> tuple[Query, int]:
    mechanism = planned(policy, DIM, 16, 1.0, 2, 40)
    return Query("j", "q", KERNEL, params(DIM), mechanism, fractional_bits=16,
                 form=ReleaseForm.PER_SITE), 1


def too_small(policy: SitePolicy) -> tuple[Query, int]:
    mechanism = DistributedDiscreteGaussianMechanism(1e-3, 2.0**30, 2, 16, policy.adjacency)
    return Query("j", "q", KERNEL, params(DIM), mechanism, fractional_bits=16), 2


def answered(policy: SitePolicy) -> tuple[Query, int]:
    mechanism = planned(policy, DIM, 16, 1.0, 2, 40)
    return Query("j", "q", KERNEL, params(DIM), mechanism, fractional_bits=16), 3


CASES = {
    "answered (three sites for two charged shares)": (answered, {}),
    "another grid": (grid_mismatch, {}),
    "fewer sites than charged shares": (fewer_sites, {}),
    "colluders leave fewer honest shares": (colluders, {}),
    "a per-site answer is one share": (per_site, {}),
    "declared sensitivity too small": (too_small, {}),
    "below the policy's noise floor": (answered, {"min_noise_multiplier": 2.0}),
}
REFUSAL_WORDS = {
    "another grid": "exact on the grid 2\\^-16 but the query rounds onto 2\\^-24",
    "fewer sites than charged shares": "charged for 3 honest shares but this release has 2",
    "colluders leave fewer honest shares": "charged for 3 honest shares but this release has 2",
    "a per-site answer is one share": "charged for 2 honest shares but this release has 1",
    "declared sensitivity too small": "declares l2 sensitivity",
    "below the policy's noise floor": "noise multiplier",
}


def outcome(tmp_path, data: Dataset, adjacency: Adjacency, name: str) -> str:
    build, options = CASES[name]
    policy = SitePolicy("site-n", 50.0, 1e-5, adjacency=adjacency, **options)
    site = make_site(tmp_path / f"r-{next(_LEDGERS)}.db", data, policy, 0)
    query, num_sites = build(policy)
    try:
        site.answer(query, num_sites)
    except QueryRefusedError as err:
        assert site.ledger.charges() == []
        return f"refused: {err}"
    return "answered"


@pytest.mark.parametrize("adjacency", [REPLACE, ADD_REMOVE])
@pytest.mark.parametrize("name", list(CASES))
def test_refusals_are_the_same_on_neighbouring_datasets(tmp_path, adjacency, name):
    base, neighbour = neighbour_pair(adjacency, WORST[0], dataset(40, DIM, 3))
    first = outcome(tmp_path, base, adjacency, name)
    assert first == outcome(tmp_path, neighbour, adjacency, name)
    if name.startswith("answered"):
        assert first == "answered"
    else:
        assert first.startswith("refused: ")
        assert re.search(REFUSAL_WORDS[name], first), first
