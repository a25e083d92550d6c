"""A refusal is an output, and it is never charged: whether a site answers,
and every word of what it says, may depend only on public things (the query,
the policy, public sizes). Every refusal path of ``QueryAdmission`` and of the
kernels' ``compute``/``compute_local`` is run here on two neighbouring
datasets, under both adjacencies, and must give the same outcome and message.

Neighbours: replace-one swaps the first record for an extreme one (features
far outside every clip region, a label that is no class index); add/remove
adds that record, so n differs by one (n is private there).

The fixed-point encoding of a site's own value is checked by the admission
on public bounds, before the kernel runs: an encoding that failed after the
kernel (on one neighbour and not the other) would be a free, exact threshold
test of a private sum, the coordinator choosing the threshold through the
grid's fractional bits or public score offsets.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.policy import SitePolicy
from privadapt.client.site import Site
from privadapt.common.data.dataset import Dataset
from privadapt.common.errors import QueryRefusedError
from privadapt.common.federation import Query, ReleaseForm
from privadapt.common.kernels import get_kernel
from privadapt.common.mechanisms import (
    Adjacency,
    DiscreteExponentialMechanism,
    DiscreteLaplaceMechanism,
    GaussianMechanism,
    Mechanism,
    PureDpEvent,
)
from privadapt.common.noise.floating import NOISE_REACH, SeededRandomBits
from privadapt.common.numerics.fixed_point import FixedPointCodec

DIM = 3
NUM = 20
CLASSES = 3
RNG = np.random.default_rng(17)
FEATURES = RNG.normal(size=(NUM, DIM)) * 0.3
LABELS = RNG.integers(0, 2, size=NUM).astype(float)  # class indices and binary labels
EXTREME = (np.full(DIM, 1e6), 7.0)  # no clip region holds it; 7 is no class index of C = 3


def neighbours(adjacency: Adjacency) -> tuple[Dataset, Dataset]:
    names = tuple(f"x{i}" for i in range(DIM))
    base = Dataset(FEATURES, LABELS, names)
    if adjacency == Adjacency.REPLACE_ONE:
        features, labels = FEATURES.copy(), LABELS.copy()
        features[0], labels[0] = EXTREME
    else:
        features = np.vstack([FEATURES, EXTREME[0]])
        labels = np.append(LABELS, EXTREME[1])
    return base, Dataset(features, labels, names)


def linear_params(clip_norm: float = 1.0) -> dict:
    return {"weights": np.zeros(DIM), "loss": "logistic", "clip_norm": clip_norm}


def reweighted_params(step: int = 0, **changes) -> dict:
    weights = np.linspace(-0.5, 0.5, DIM * CLASSES)
    return {"weights": weights, "step": step, "objective": "smooth",
            "loss": "softmax_cross_entropy", "num_classes": CLASSES, "alpha": 0.4,
            "total_private_records": NUM, "feature_norm": 1.5, "label_bound": 1.0,
            "radius": 2.0, "k1": 0.2, "k2": 0.3, "kinf": 0.1, "mu": 40.0,
            "inverse_square_sum": 0.01, "log_partition": 4.0, "step_size": 50.0, **changes}


def own_mechanism(kernel: str, params: dict, adjacency: Adjacency, z: float = 2.0,
                  **options) -> Mechanism:
    found = get_kernel(kernel)
    return found.mechanism(found.Params.from_wire(params, DIM), z, adjacency, dim=DIM,
                           **options)


# Many participants make the range check bind before the grid's noise check.
MANY = 20_000


def boundary_clip_norm(participants: int = MANY, z: float = 1.0) -> float:
    """A clip norm at which the range check, were it run on the true n, would
    pass for the NUM records of one neighbour and fail for the NUM + 1 of the
    other (add/remove: sensitivity C, so noise scale z C)."""
    reach = NUM + 0.5 + NOISE_REACH * z
    return FixedPointCodec(32).max_abs_sum / (participants * reach)


def at_the_boundary(adjacency: Adjacency) -> Query:
    params = linear_params(boundary_clip_norm())
    return query("linear_gradient", params,
                 own_mechanism("linear_gradient", params, adjacency, z=1.0))


@dataclass(frozen=True)
class Case:
    """One refusal path: the query a site receives, K, and the policy."""

    name: str
    query: Callable[[Adjacency], Query]
    participants: int = 2
    policy: dict = field(default_factory=dict)


def query(kernel: str, params: dict, mechanism: Mechanism, **fields) -> Query:
    return Query("job-n", "q-1", kernel, params, mechanism, **fields)


def linear(adjacency: Adjacency, **fields) -> Query:
    params = linear_params()
    return query("linear_gradient", params, own_mechanism("linear_gradient", params, adjacency),
                 **fields)


def softmax(adjacency: Adjacency, step: int = 0, **mechanism_options) -> Query:
    params = reweighted_params(step)
    return query("reweighted_gradient", params,
                 own_mechanism("reweighted_gradient", params, adjacency, **mechanism_options))


CASES = [
    Case("answered: linear gradient", linear),
    Case("answered: softmax labels (one is no class index)", softmax),
    Case("unsupported parameter type", lambda a: query(
        "linear_gradient", {**linear_params(), "x": object()}, linear(a).mechanism)),
    Case("t leaves no honest share", lambda a: linear(a, collusion_tolerance=2)),
    Case("kernel not allowed", linear, policy={"allowed_kernels": frozenset({"record_count"})}),
    Case("unknown kernel", lambda a: query("no_such_kernel", {}, linear(a).mechanism)),
    Case("malformed parameters", lambda a: query(
        "linear_gradient", {"clip_norm": -1.0}, linear(a).mechanism)),
    Case("too few participants", linear, policy={"min_participants": 3}),
    Case("t below the policy's", linear, policy={"collusion_tolerance": 1}),
    Case("clip norm above the policy's limit", linear, policy={"max_clip_norm": 0.5}),
    Case("estimated work above the policy's limit", linear, policy={"max_query_work": 10.0}),
    Case("fractional bits out of range", lambda a: linear(a, fractional_bits=70)),
    Case("a mechanism adding no noise to sums", lambda a: query(
        "linear_gradient", linear_params(), PureDpEvent(1.0, a))),
    Case("Poisson sampling (refused under replace-one)", lambda a: query(
        "linear_gradient", linear_params(),
        own_mechanism("linear_gradient", linear_params(), Adjacency.ADD_REMOVE_ONE,
                      sampling_rate=0.5))),
    Case("Poisson sampling of a kernel with local blocks", lambda a: query(
        "reweighted_gradient", reweighted_params(), GaussianMechanism(
            own_mechanism("reweighted_gradient", reweighted_params(), a).blocks,
            Adjacency.ADD_REMOVE_ONE, 0.5))),
    Case("Laplace noise on local blocks", lambda a: query(
        "reweighted_gradient", reweighted_params(),
        own_mechanism("linear_gradient", linear_params(), a, noise="laplace"))),
    Case("block count differs from the kernel's", lambda a: query(
        "reweighted_gradient", reweighted_params(),
        own_mechanism("linear_gradient", linear_params(), a))),
    Case("fewer noised blocks than released ones", lambda a: query(
        "reweighted_gradient", reweighted_params(), GaussianMechanism(
            own_mechanism("reweighted_gradient", reweighted_params(), a).blocks[:2], a, 1.0,
            own_mechanism("reweighted_gradient", reweighted_params(), a).all_blocks[2:]))),
    Case("declared sensitivity too small", lambda a: query(
        "linear_gradient", linear_params(), GaussianMechanism.single(1e-3, 2.0, a))),
    Case("no noise without allow_non_private", lambda a: query(
        "linear_gradient", linear_params(),
        own_mechanism("linear_gradient", linear_params(), a, z=math.inf))),
    Case("noise multiplier below the policy's", linear, policy={"min_noise_multiplier": 5.0}),
    Case("noise too coarse for the grid", lambda a: query(
        "linear_gradient", linear_params(),
        own_mechanism("linear_gradient", linear_params(), a, z=1e12))),
    Case("aggregate could wrap", lambda a: query(
        "linear_gradient", linear_params(4000.0),
        own_mechanism("linear_gradient", linear_params(4000.0), a, z=1.0)), MANY),
    Case("kernel step out of order", lambda a: softmax(a, step=3)),
]

# n is public under replace-one; under add/remove the range check must not
# read it: at this clip norm n records pass and n + 1 would not.
ADD_REMOVE_CASES = [
    Case("range at the boundary of the true n", at_the_boundary, MANY),
    Case("range at the boundary, with a declared max_records", at_the_boundary, MANY,
         policy={"max_records": NUM + 10}),
]


def outcome(tmp_path, tag: str, data: Dataset, adjacency: Adjacency, case: Case) -> str:
    policy = SitePolicy("site-n", epsilon_cap=50.0, delta_cap=1e-5, adjacency=adjacency,
                        **case.policy)
    ledger = PrivacyLedger(tmp_path / f"{tag}.db", policy, create=True)
    site = Site(data, policy, ledger, SeededRandomBits(0))
    try:
        site.answer(case.query(adjacency), case.participants)
    except QueryRefusedError as err:
        assert not site.ledger.charges()
        return f"refused: {err}"
    return "answered"


def _cases() -> list:
    return [pytest.param(adjacency, case, id=f"{adjacency}-{case.name}")
            for adjacency in Adjacency for case in CASES] + \
        [pytest.param(Adjacency.ADD_REMOVE_ONE, case, id=f"add_remove_one-{case.name}")
         for case in ADD_REMOVE_CASES]


@pytest.mark.parametrize(("adjacency", "case"), _cases())
def test_outcome_and_message_are_the_same_on_neighbouring_datasets(tmp_path, adjacency, case):
    base, neighbour = neighbours(adjacency)
    first = outcome(tmp_path, "base", base, adjacency, case)
    second = outcome(tmp_path, "neighbour", neighbour, adjacency, case)
    assert first == second
    sampled_under_add_remove = "Poisson sampling (refused" in case.name \
        and adjacency == Adjacency.ADD_REMOVE_ONE
    if case.name.startswith("answered") or sampled_under_add_remove:
        assert first == "answered"
    else:
        assert first.startswith("refused: "), first


def test_validation_loss_scores_a_label_that_is_no_class_index_as_the_loss_bound(tmp_path):
    # Softmax candidates on neighbours whose changed label (7) is no class
    # index of C = 3: answered on both (a refusal would reveal the label), the
    # record scoring the loss bound L, the worst a record can score.
    candidates = np.zeros((2, DIM, CLASSES))
    params = {"candidates": candidates, "loss": "softmax_cross_entropy", "loss_bound": 5.0}
    kernel = get_kernel("validation_loss")
    parsed = kernel.Params.from_wire(params, DIM)
    base, other = neighbours(Adjacency.REPLACE_ONE)
    (on_base,) = kernel.compute(base, parsed, {})
    (on_other,) = kernel.compute(other, parsed, {})
    first = 5.0 - min(5.0, np.log(CLASSES))  # record 0 scored log C before, L after
    np.testing.assert_allclose(on_other - on_base, first, rtol=1e-12)


def any_outcome(tmp_path, tag: str, data: Dataset, policy: SitePolicy, query: Query) -> str:
    """"answered", or the error's type and words (every error is compared,
    not only refusals: a raw OverflowError once printed the private value)."""
    site = Site(data, policy, PrivacyLedger(tmp_path / f"{tag}.db", policy, create=True),
                SeededRandomBits(0))
    try:
        site.answer(query, 1)
    except Exception as err:  # any outcome is compared
        return f"{type(err).__name__}: {err}"
    return "answered"


def test_neighbours_at_the_encoding_threshold_get_the_same_outcome(tmp_path):
    # A one-site sum passes the range check when its public bound is below
    # 2^(63 - f), but the codec refuses a value of 2^(62 - f) or more. With
    # f = 47 under add/remove and max_records = 40,000, 32,767 records and
    # 32,768 records sit on either side of the codec's limit.
    bits, max_records = 47, 40_000
    policy = SitePolicy("s", 10.0, 1e-6, adjacency=Adjacency.ADD_REMOVE_ONE,
                        max_records=max_records)
    kernel = get_kernel("record_count")
    (charged,) = kernel.charged_sensitivities(kernel.Params.from_wire({}, 2), policy.adjacency,
                                              "l1", 2, bits, max_records)
    mechanism = DiscreteLaplaceMechanism.for_noise_multiplier(charged, 0.2, bits,
                                                              policy.adjacency)
    query = Query("j", "q", "record_count", {}, mechanism, fractional_bits=bits)
    below, above = (any_outcome(tmp_path, str(num), Dataset(np.zeros((num, 2)), np.zeros(num),
                                                            ("a", "b")), policy, query)
                    for num in (2**15 - 1, 2**15))
    assert below == above, (below, above)


def test_a_public_offset_cannot_put_the_encoding_limit_between_neighbours(tmp_path):
    # validation_loss adds the coordinator's public score_offsets o_k to the
    # private scores s_k. With o_0 = 2^(62 - f) - x0 a site whose encoding
    # failed after the kernel ran would error exactly when s_0 >= x0: a binary
    # search reads s_0 to 1e-6 in 30 probes, half of them uncharged errors.
    # Here add/remove neighbours whose s_0 differs by one record's clipped
    # loss, with the threshold between them, on the selection path.
    bits = 32
    scores = {"candidates": np.array([[1.0, -0.5], [0.0, 0.0]]), "loss": "logistic",
              "loss_bound": 1.0}
    rng = np.random.default_rng(0)
    features = rng.normal(size=(50, 2))
    labels = np.where(rng.random(50) < 0.5, -1.0, 1.0)
    base = Dataset(features, labels, ("a", "b"))
    extra = np.array([[-40.0, 20.0]])  # margin -50 under candidate 0: loss ~50, clipped to 1
    neighbour = Dataset(np.vstack([features, extra]), np.append(labels, 1.0), ("a", "b"))
    kernel = get_kernel("validation_loss")
    (base_scores,) = kernel.compute(base, kernel.Params.from_wire(scores, 2), {})
    offset = 2.0 ** (62 - bits) - float(base_scores[0]) - 0.5  # threshold at s_0 + 1/2
    policy = SitePolicy("s", 10.0, 1e-6, adjacency=Adjacency.ADD_REMOVE_ONE)
    params = dict(scores, score_offsets=np.array([offset, 0.0]))
    mechanism = DiscreteExponentialMechanism(2.0, 0.5, bits, adjacency=Adjacency.ADD_REMOVE_ONE)
    query = Query("j", "q", "validation_loss", params, mechanism, fractional_bits=bits,
                  form=ReleaseForm.PER_SITE)
    first = any_outcome(tmp_path, "a", base, policy, query)
    second = any_outcome(tmp_path, "b", neighbour, policy, query)
    assert first == second, (first, second)
