"""The exponential mechanism drawn with score-independent work
(common/mechanisms/fixed_work_exponential.py): its arithmetic against exact
integers and mpmath, its law against the exponential mechanism's, its work
counted on extreme score vectors (a timing attack that once read 5 ms on
tied scores against 626 ms on one clear winner, made deterministic), its
exact law on neighbours whose gaps cross its clamp, and its charge,
epsilon + 2^-50, through the ledger."""

from __future__ import annotations

import gc
import itertools
import math
import sys
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.local_federation import LocalFederation
from privadapt.client.policy import SitePolicy
from privadapt.client.site import Site
from privadapt.common.accounting.accountant import PrivacyAccountant
from privadapt.common.data.dataset import Dataset
from privadapt.common.federation import Query, ReleaseForm
from privadapt.common.mechanisms import DiscreteExponentialMechanism
from privadapt.common.mechanisms.discrete_selection import (
    exact_probabilities,
    sampler_probabilities,
)
from privadapt.common.mechanisms.fixed_work_exponential import (
    _WEIGHT_BITS,
    CLAMP,
    EPSILON_SURCHARGE,
    SamplerWork,
    _product,
    charged_epsilon,
    factor_table,
    fixed_work_exponential_index,
    integer_weights,
    lower_mantissa,
    random_words,
)
from privadapt.common.noise.floating import SeededRandomBits
from privadapt.common.numerics.fixed_point import FixedPointCodec
from tests.common.mechanisms.neighbour_enumeration import log_ratio, moves


@pytest.fixture(autouse=True, scope="module")
def _four_hundred_bits():
    """mpmath at 400 bits for this module's tests, whatever another module
    set before."""
    with mpmath.workprec(400):
        yield


#: rho, the weights' relative deficit the derivation allows (< 2^-55).
RHO = 2.0**-55


class CountingBits:
    """A random source that counts the words it hands out."""

    def __init__(self, seed: int) -> None:
        self._source = SeededRandomBits(seed)
        self.words_drawn = 0

    def words(self, size: int) -> np.ndarray:
        self.words_drawn += size
        return self._source.words(size)


# -- the arithmetic ------------------------------------------------------------------------

mantissas = st.integers(2**63, 2**64 - 1)


@given(st.lists(st.tuples(mantissas, mantissas), min_size=1, max_size=20))
def test_the_vector_product_keeps_the_top_64_bits_of_the_exact_product(pairs):
    a = np.array([p for p, _ in pairs], dtype=np.uint64)
    b = np.array([q for _, q in pairs], dtype=np.uint64)
    mantissa, exponent = _product(a, np.full(a.size, -3), b, np.full(a.size, 5))
    for (p, q), m, e in zip(pairs, mantissa.tolist(), exponent.tolist(), strict=True):
        shift = 64 if p * q >= 2**127 else 63
        assert m == (p * q) >> shift and e == 2 + shift
        assert 2**63 <= m < 2**64


def test_multiplying_by_the_exact_one_changes_nothing():
    a = np.array([2**63, 2**64 - 1, 12345678901234567890], dtype=np.uint64)
    mantissa, exponent = _product(a, np.array([-7, 0, 9]), np.full(3, 2**63, np.uint64),
                                  np.full(3, -63))
    assert mantissa.tolist() == a.tolist() and exponent.tolist() == [-7, 0, 9]


@pytest.mark.parametrize("x", [Fraction(1, 2**60), Fraction(1, 3), Fraction(1), Fraction(5, 2),
                               Fraction(3**30, 2**42), Fraction(127, 1), Fraction(CLAMP)])
def test_each_constant_is_a_lower_bound_within_2_to_the_minus_62(x):
    m, e = lower_mantissa(x)
    exact = mpmath.exp(-mpmath.mpf(x.numerator) / x.denominator)
    value = mpmath.mpf(m) * mpmath.mpf(2) ** e
    assert 2**63 <= m < 2**64
    assert exact * (1 - mpmath.mpf(2) ** -62) <= value <= exact


def ideal_weight(gap: int, coefficient: Fraction) -> mpmath.mpf:
    scaled = mpmath.mpf(coefficient.numerator) * gap / coefficient.denominator
    return mpmath.exp(-min(scaled, CLAMP))


coefficients = st.one_of(
    st.fractions(min_value=Fraction(1, 2**20), max_value=300, max_denominator=2**40),
    st.sampled_from([Fraction(1, 2**70), Fraction(2**-60), Fraction(129), Fraction(1, 8)]))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-2**63 + 1, 2**63 - 1), min_size=1, max_size=12)
       | st.lists(st.integers(-600, 600), min_size=1, max_size=12), coefficients)
def test_every_weight_is_within_rho_below_the_clamped_exponential_weight(utilities, c):
    weights = integer_weights(np.array(utilities, dtype=np.int64), c)
    best = max(utilities)
    for u, w in zip(utilities, weights, strict=True):
        ideal = ideal_weight(best - u, c)
        value = mpmath.mpf(w) / mpmath.mpf(2) ** _WEIGHT_BITS
        assert ideal * (1 - mpmath.mpf(RHO)) <= value <= ideal
    assert weights[utilities.index(best)] == 2**_WEIGHT_BITS  # the best weighs exactly 1


def test_the_surcharge_covers_the_derivation():
    """xi >= 2 rho + 2 L, with rho from J <= 64 factors and products and
    L = log((1 + s)/(1 - s)), s = 2^-64."""
    rho = -64 * math.log1p(-2.0**-62) - 64 * math.log1p(-2.0**-63)
    s = 2.0**-64
    assert rho < RHO and 2 * rho + 2 * (math.log1p(s) - math.log1p(-s)) < EPSILON_SURCHARGE / 8
    assert factor_table(Fraction(1, 2**70))[0].size == 64  # J never exceeds 64
    for epsilon in (1e-300, 1e-9, 0.3, 1.0, 3.0, 1e6):
        charged = charged_epsilon(epsilon)
        assert Fraction(charged) >= Fraction(epsilon) + Fraction(EPSILON_SURCHARGE)
        assert Fraction(math.nextafter(charged, 0.0)) < Fraction(epsilon) \
            + Fraction(EPSILON_SURCHARGE)


# -- the law -------------------------------------------------------------------------------


def chi_square_pvalue(draws: np.ndarray, law: np.ndarray) -> float:
    observed = np.bincount(draws, minlength=law.size)
    expected = law * draws.size
    kept = expected > 5  # pool the far tail, if there is one
    if not kept.all():
        observed = np.append(observed[kept], observed[~kept].sum())
        expected = np.append(expected[kept], expected[~kept].sum())
    return stats.chisquare(observed, expected).pvalue


STEP = 2.0**-16


@pytest.mark.parametrize(("sensitivity", "epsilon", "monotone", "scores"), [
    (3.5 * STEP, 1.0, False, [0, 3, 8, 8, 20, 40, 200]),
    (STEP / 2, 2.0, False, [0, 1, 1, 2, 3]),
    (10 * STEP, 0.5, True, [5, 0, 30, 12, -7, 9]),
    (STEP, 30.0, False, [1, 0, 0]),  # c above 1: one step is worth many nats
])
def test_draws_follow_the_exponential_mechanism(sensitivity, epsilon, monotone, scores):
    from privadapt.common.mechanisms import Adjacency

    adjacency = Adjacency.ADD_REMOVE_ONE if monotone else Adjacency.REPLACE_ONE
    mechanism = DiscreteExponentialMechanism(sensitivity, epsilon, 16, True, monotone,
                                             adjacency)
    scores = np.array(scores) * STEP
    law = exact_probabilities(mechanism, scores)
    assert np.max(np.abs(sampler_probabilities(mechanism, scores) / law - 1)) < 1e-15
    source = SeededRandomBits(7)
    draws = np.array([mechanism.select(scores, source) for _ in range(4000)])
    assert chi_square_pvalue(draws, law) > 1e-3


def test_the_final_draw_is_uniform_over_the_cumulative_weights():
    """With weights 1 : e^-1 : e^-2 the index follows them; a source whose
    words reduce to each residue shows the bisection's boundaries."""
    utilities = np.array([0, -1, -2], dtype=np.int64)
    weights = integer_weights(utilities, Fraction(1))
    total = sum(weights)
    count = random_words(3)

    class Fixed:
        def __init__(self, value: int) -> None:
            self.value = value

        def words(self, size: int) -> np.ndarray:
            assert size == count
            data = self.value.to_bytes(8 * size, "little")
            return np.frombuffer(data, dtype=np.uint64)

    edges = [0, weights[0] - 1, weights[0], weights[0] + weights[1] - 1,
             weights[0] + weights[1], total - 1]
    picked = [fixed_work_exponential_index(utilities, Fraction(1), Fixed(r)) for r in edges]
    assert picked == [0, 0, 1, 1, 2, 2]


# -- the work ------------------------------------------------------------------------------

K = 20_000  # the timed attack's scale: 5 ms tied against 626 ms with one clear winner


def extreme_score_vectors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    winner = np.full(K, -2**62, dtype=np.int64)
    winner[0] = 2**62
    loser = np.zeros(K, dtype=np.int64)
    loser[K // 2] = -2**62
    alternating = np.where(np.arange(K) % 2 == 0, 2**62, -2**62).astype(np.int64)
    return {"tied": np.zeros(K, dtype=np.int64), "one clear winner": winner,
            "one far loser": loser, "alternating extremes": alternating,
            "random": rng.integers(-2**40, 2**40, K), "small spread": rng.integers(-3, 3, K)}


@pytest.mark.parametrize("coefficient", [Fraction(1, 2**30), Fraction(1, 8), Fraction(200)])
def test_the_work_count_is_the_same_for_extreme_score_vectors(coefficient):
    counts = {}
    for name, utilities in extreme_score_vectors().items():
        work, source = SamplerWork(), CountingBits(1)
        fixed_work_exponential_index(utilities, coefficient, source, work)
        counts[name] = (work.as_tuple(), source.words_drawn)
    (expected,) = set(counts.values())
    J = factor_table(coefficient)[0].size
    assert expected == ((random_words(K), J, J * K, K), random_words(K))


def call_trace(function, *args) -> list[tuple[str, str]]:
    """Every Python and C-level call ``function(*args)`` makes, in order."""
    trace: list[tuple[str, str]] = []

    def profile(frame, event, arg):
        if event == "call":
            trace.append((event, frame.f_code.co_qualname))
        elif event == "c_call":
            trace.append((event, getattr(arg, "__qualname__", repr(arg))))

    gc.disable()  # a collection's callbacks depend on earlier allocations, not on the call
    sys.setprofile(profile)
    try:
        function(*args)
    finally:
        sys.setprofile(None)
        gc.enable()
    return trace


DIM = 2
SITE_K = 4096  # the most candidates a site scores in one query (the timed attack: 20,000)
DIRECTION = np.array([1.0, 0.0])


def spread_candidates() -> np.ndarray:
    """The hostile coordinator's public candidates t_k v, t_k from -20 to
    20: on records orthogonal to v every candidate scores the same (all
    tied); on records along v the scores spread over K distinct values, one
    clear winner."""
    return np.linspace(-20.0, 20.0, SITE_K)[:, None] * DIRECTION[None, :]


def site_with(features: np.ndarray, tmp_path, tag: str) -> tuple[Site, CountingBits]:
    labels = np.ones(features.shape[0])
    policy = SitePolicy("s", 50.0, 1e-6)
    source = CountingBits(3)
    site = Site(Dataset(features, labels, ("a", "b")), policy,
                PrivacyLedger(tmp_path / f"{tag}.db", policy, create=True), source)
    return site, source


def test_a_timing_attack_sees_the_same_work_on_tied_and_spread_scores(tmp_path, monkeypatch):
    """Timed over 20,000 candidates, the selection once took 5 ms with all
    scores tied and 626 ms with one clear winner. Here the same attack runs through the
    real site path (at the 4,096 candidates a site scores), deterministically: the coordinator's
    candidates make the scores all tied on one dataset and spread on the
    other, and the words the site draws and every call its mechanism makes
    are recorded; they must be identical."""
    rng = np.random.default_rng(5)
    orthogonal = np.column_stack([np.zeros(40), rng.uniform(-1, 1, 40)])
    along = np.column_stack([rng.uniform(0.5, 1, 40), np.zeros(40)])
    traces: dict[str, list] = {}
    original = DiscreteExponentialMechanism.select

    def traced(self, scores, source=None):
        index = []
        traces[current] = (call_trace(lambda: index.append(original(self, scores, source))),
                           np.ptp(scores) > 0)
        return index[0]

    monkeypatch.setattr(DiscreteExponentialMechanism, "select", traced)
    words = {}
    params = {"candidates": spread_candidates(), "loss": "logistic", "loss_bound": 30.0}
    # A first answer warms the interpreter's own caches (isinstance checks on
    # abstract classes), which later calls then skip whatever the data.
    for current, features in (("warm-up", along), ("tied", orthogonal), ("spread", along)):
        site, source = site_with(features, tmp_path, current)
        factor_table.cache_clear()  # its hits depend on earlier (public) c, not on data
        query = Query("j", "q", "validation_loss", params,
                      DiscreteExponentialMechanism(30.0, 1.0, 32), fractional_bits=32,
                      form=ReleaseForm.PER_SITE)
        site.answer(query, 1)
        words[current] = source.words_drawn
    assert not traces["tied"][1] and traces["spread"][1]  # the attack's two cases happened
    assert traces["tied"][0] == traces["spread"][0]
    assert words["tied"] == words["spread"]
    products = sum(1 for event in traces["tied"][0] if event == ("call", "_product"))
    assert products > 0  # the trace does see the per-bit products


# -- the charge ------------------------------------------------------------------------------

CANDIDATES = np.array([[1.0, -1.0], [0.0, 0.0], [3.0, 3.0], [0.2, 0.1]])


def test_the_ledger_charges_epsilon_plus_the_surcharge_as_planned():
    rng = np.random.default_rng(0)
    features = rng.normal(size=(120, DIM))
    features /= np.maximum(1.0, np.linalg.norm(features, axis=1))[:, None]
    labels = np.where(rng.random(120) < 0.5, -1.0, 1.0)
    federation = LocalFederation.from_datasets([Dataset(features, labels, ("a", "b"))],
                                               epsilon_cap=50.0, delta_cap=1e-6,
                                               noise_seed=3)
    federation.codec = FixedPointCodec(32)
    params = {"candidates": CANDIDATES, "loss": "logistic", "loss_bound": 4.0}
    with federation:
        for _ in range(4):
            federation.select("validation_loss", params,
                              DiscreteExponentialMechanism(4.0, 0.75, 32))
        (spent,) = federation.privacy_spent(0.0).values()
    plan = PrivacyAccountant()
    for mechanism in spent.mechanisms:
        assert mechanism.pure_epsilon == charged_epsilon(0.75) > 0.75
        plan = plan.compose(mechanism)
    assert spent.job.epsilon == plan.get_epsilon(0.0)
    assert Fraction(spent.job.epsilon) >= 4 * (Fraction(0.75) + Fraction(EPSILON_SURCHARGE))


# -- the exact law on neighbours across the clamp ---------------------------------------------
# The sampler's own law (its integer weights W_k / S, the clamp at 128 nats
# included) on neighbouring utility vectors whose gaps cross the clamp
# G = floor(128 / c), with c large enough that G is 0, 1, 2 or small enough
# that the clamp is far: the log ratio of every output's probability stays
# within epsilon + 2^-50 (the charge), in 400-bit mpmath on exact Fractions.
# A fuller run (542,280 pairs, K = 2 and 3, ten settings) found the worst log
# ratio 5e-20 above epsilon, against the 2^-50 = 8.9e-16 charged.


def sampler_law(utilities: tuple[int, ...], coefficient: Fraction) -> list[Fraction]:
    weights = integer_weights(np.array(utilities, dtype=np.int64), coefficient)
    total = sum(weights)
    return [Fraction(w, total) for w in weights]


@pytest.mark.parametrize(("epsilon", "delta", "monotone"), [
    (Fraction(200), 1, False), (Fraction(128), 1, True), (Fraction(300), 3, False),
    (Fraction(1, 10), 1, False), (Fraction(3), 1, False), (Fraction(255), 1, True)])
def test_the_clamped_law_stays_within_the_charge_on_clamp_crossing_neighbours(
        epsilon, delta, monotone):
    coefficient = epsilon / ((1 if monotone else 2) * delta)
    clamp_gap = factor_table(coefficient)[4]
    gaps = sorted({g + s for g in (0, clamp_gap, clamp_gap + 1) for s in (-delta, 0, delta)
                   if g + s >= 0})[:6]
    laws: dict[tuple[int, ...], list[Fraction]] = {}
    charged = mpmath.mpf(charged_epsilon(float(epsilon)))
    worst = mpmath.mpf(-1)
    for gap_vector in itertools.product(gaps, repeat=3):
        u = tuple(-g for g in gap_vector)
        for move in moves(3, delta, monotone):
            v = tuple(a + b for a, b in zip(u, move, strict=True))
            for vector in (u, v):
                if vector not in laws:
                    laws[vector] = sampler_law(vector, coefficient)
            for p, q in zip(laws[u], laws[v], strict=True):
                worst = max(worst, log_ratio(p, q))
    assert worst <= charged, (worst, charged)
