"""Every mechanism states itself as dp-accounting's own event, and a real
site ledger's charges replayed through dp-accounting's PLD and RDP
accountants never cost more than the ledger reports."""

from __future__ import annotations

import math

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting import dp_event

from privadapt.client.ledger.privacy_ledger import PrivacyLedger
from privadapt.client.local_federation import LocalFederation
from privadapt.client.policy import SitePolicy
from privadapt.client.site import Site
from privadapt.common.accounting.accountant import AccountingMethod, PrivacyAccountant
from privadapt.common.accounting.rdp import DEFAULT_RDP_ORDERS
from privadapt.common.kernels import get_kernel
from privadapt.common.mechanisms import (
    MECHANISM_KINDS,
    Adjacency,
    DiscreteExponentialMechanism,
    DiscreteLaplaceMechanism,
    DiscreteReportNoisyMin,
    DistributedDiscreteGaussianMechanism,
    ExponentialMechanism,
    GaussianBlock,
    GaussianMechanism,
    GeneralizedExponentialMechanism,
    LaplaceMechanism,
    NoNoise,
    PureDpEvent,
    ReportNoisyMin,
    ZCdpEvent,
)
from privadapt.common.noise.floating import SeededRandomBits
from privadapt.common.numerics.fixed_point import FixedPointCodec
from privadapt.server.algorithms.frank_wolfe.dp_frank_wolfe import dp_frank_wolfe
from privadapt.server.algorithms.gradient_descent.noisy_gd import noisy_gd
from tests.conftest import synthetic_dataset

ADD_REMOVE = Adjacency.ADD_REMOVE_ONE
SHIFT = dpa.NeighboringRelation.ADD_OR_REMOVE_ONE  # the convention of to_dp_event
REPLACE = dpa.NeighboringRelation.REPLACE_ONE  # where dp-accounting reads randomized response
DELTA = 1e-5
GRID = 16  # a coarse grid: dp-accounting's discrete Laplace PLD enumerates ~Delta steps
DIM = 3

# One of each kind, and the event it must give.
EVENTS = [
    (GaussianMechanism.single(2.0, 3.0), dp_event.GaussianDpEvent(3.0)),
    (GaussianMechanism((GaussianBlock(1.0, 3.0), GaussianBlock(1.0, 4.0))),
     dp_event.GaussianDpEvent(2.4)),
    (GaussianMechanism.single(1.0, 2.0, ADD_REMOVE, 0.1),
     dp_event.PoissonSampledDpEvent(0.1, dp_event.GaussianDpEvent(2.0))),
    (LaplaceMechanism(2.0, 5.0), dp_event.LaplaceDpEvent(2.5)),
    (DiscreteLaplaceMechanism(1.0, 8.0, 2), dp_event.DiscreteLaplaceDpEvent(0.125, 5)),
    (NoNoise(), dp_event.NoOpDpEvent()),
    (NoNoise((1.0,)), dp_event.NonPrivateDpEvent()),
    (ZCdpEvent(0.3), dp_event.ZCDpEvent(0.3)),
]
PURE = [PureDpEvent(0.7), ReportNoisyMin(1.0, 4.0), DiscreteReportNoisyMin(1.0, 8.0, 2),
        ExponentialMechanism(1.0, 0.5), DiscreteExponentialMechanism(1.0, 0.5, 2),
        GeneralizedExponentialMechanism((1.0, 2.0), 0.5, 0.1)]


@pytest.mark.parametrize(("mechanism", "event"), EVENTS, ids=lambda m: type(m).__name__)
def test_a_mechanism_states_itself_as_dp_accountings_event(mechanism, event):
    got = mechanism.to_dp_event()
    assert type(got) is type(event)
    for name in ("noise_multiplier", "sensitivity", "noise_parameter", "rho",
                 "sampling_probability"):
        if hasattr(event, name):
            assert getattr(got, name) == pytest.approx(getattr(event, name), rel=1e-15)


def test_the_event_noise_multiplier_is_sigma_over_sensitivity():
    mechanism = GaussianMechanism.single(0.25, 7.0)
    assert mechanism.to_dp_event().noise_multiplier == mechanism.noise_multiplier == 7.0
    replace = GaussianMechanism.single(2.0, 3.0, ADD_REMOVE).in_adjacency(
        Adjacency.REPLACE_ONE)
    assert replace.to_dp_event().noise_multiplier == pytest.approx(1.5)  # shift doubled


@pytest.mark.parametrize("mechanism", PURE, ids=lambda m: type(m).__name__)
def test_a_pure_dp_release_is_the_randomized_response_pair_of_its_epsilon(mechanism):
    event = mechanism.to_dp_event()
    assert isinstance(event, dp_event.RandomizedResponseDpEvent) and event.num_buckets == 2
    p = event.noise_parameter
    epsilon = math.log((1 - p / 2) / (p / 2))
    assert mechanism.pure_epsilon <= epsilon <= mechanism.pure_epsilon * (1 + 1e-12)


def test_the_distributed_discrete_gaussian_is_kls_first_bound_as_zcdp():
    mechanism = DistributedDiscreteGaussianMechanism.for_noise_multiplier(1.0, 2.0, GRID, 3)
    event = mechanism.to_dp_event()
    assert isinstance(event, dp_event.ZCDpEvent)
    assert event.rho == pytest.approx(1 / (2 * mechanism.noise_multiplier**2), rel=1e-11)
    ours = PrivacyAccountant(method=AccountingMethod.RDP).compose(mechanism, 5)
    theirs = dpa.rdp.RdpAccountant(list(DEFAULT_RDP_ORDERS), SHIFT).compose(event, 5)
    assert ours.get_epsilon(DELTA) <= theirs.get_epsilon(DELTA) + 1e-9


def test_every_registered_kind_has_an_event():
    examples = [m for m, _ in EVENTS] + PURE + [
        DistributedDiscreteGaussianMechanism.for_noise_multiplier(1.0, 2.0, GRID, 3)]
    assert {m.kind for m in examples} == set(MECHANISM_KINDS)
    for mechanism in examples:
        assert isinstance(mechanism.to_dp_event(), dp_event.DpEvent)


# -- replaying a real ledger ----------------------------------------------------------


def _sites(tmp_path, count: int, accounting: str) -> list[Site]:
    sites = []
    for k in range(count):
        policy = SitePolicy(f"site-{k}", 50.0, DELTA, accounting=AccountingMethod(accounting))
        ledger = PrivacyLedger(tmp_path / f"site-{k}-{accounting}.db", policy, create=True)
        sites.append(Site(synthetic_dataset(80, DIM, k), policy, ledger, SeededRandomBits(k)))
    return sites


def _kernel_query(federation: LocalFederation, noise: str, multiplier: float) -> None:
    """One secure-sum query of the clipped gradient with the given noise."""
    kernel = get_kernel("linear_gradient")
    params = kernel.Params.from_wire(
        {"weights": np.zeros(DIM), "loss": "squared", "clip_norm": 2.0**-10}, DIM)
    mechanism = kernel.mechanism(params, multiplier, Adjacency.REPLACE_ONE, dim=DIM, noise=noise,
                                 fractional_bits=GRID, honest_shares=federation.num_sites)
    federation.query(kernel.name, params.to_wire(), mechanism)


def _replay(ledger: PrivacyLedger, relation, method: str):
    """dp-accounting's epsilon at the ledger's cap delta over the ledger's
    charges (as the ledger reads them: in its adjacency), and the events it
    does not support. PLD on a loss grid ten times finer than the ledger's, so
    that dp-accounting's own (pessimistic) discretisation stays below the
    1e-9 the figures are compared to. One event per charge, never one event
    with a count: dp-accounting 0.6's PLD accountant composes a randomized
    response event once whatever its count."""
    adjacency = ledger.policy.adjacency
    events = [c.mechanism.in_adjacency(adjacency).to_dp_event() for c in ledger.charges()]
    accountant = (dpa.pld.PLDAccountant(relation, 1e-5) if method == "pld"
                  else dpa.rdp.RdpAccountant(list(DEFAULT_RDP_ORDERS), relation))
    unsupported = [event for event in dict.fromkeys(events) if not accountant.supports(event)]
    if unsupported:
        return None, unsupported
    for event in events:
        accountant.compose(event)
    return accountant.get_epsilon(ledger.policy.delta_cap), []


def test_a_pld_ledger_of_sums_costs_at_least_its_replay(tmp_path):
    sites = _sites(tmp_path, 2, "pld")
    federation = LocalFederation(sites, codec=FixedPointCodec(GRID))
    noisy_gd(federation, dim=DIM, loss="squared", epsilon=1.0, delta=DELTA, iterations=3,
             learning_rate=0.5, radius=1.0, clip_norm=2.0**-10, calibration="accountant")
    _kernel_query(federation, "laplace", 2.0)
    _kernel_query(federation, "discrete_laplace", 3.0)
    for site in sites:
        kinds = {c.mechanism.kind for c in site.ledger.charges()}
        assert kinds == {"gaussian", "laplace", "discrete_laplace"}
        ledger_epsilon = site.ledger.spent().epsilon
        replayed, unsupported = _replay(site.ledger, SHIFT, "pld")
        assert not unsupported
        assert ledger_epsilon >= replayed - 1e-9
        assert ledger_epsilon - replayed < 1e-3  # the ledger's coarser loss grid, no more
        # dp-accounting's RDP accountant has no discrete Laplace case: it says so.
        _, unsupported = _replay(site.ledger, SHIFT, "rdp")
        assert [type(e) for e in unsupported] == [dp_event.DiscreteLaplaceDpEvent]


def test_an_rdp_ledger_with_discrete_gaussian_shares_costs_at_least_its_replay(tmp_path):
    sites = _sites(tmp_path, 2, "rdp")
    federation = LocalFederation(sites, codec=FixedPointCodec(GRID))
    noisy_gd(federation, dim=DIM, loss="squared", epsilon=1.0, delta=DELTA, iterations=3,
             learning_rate=0.5, radius=1.0, clip_norm=2.0**-10, calibration="accountant")
    _kernel_query(federation, "laplace", 2.0)
    _kernel_query(federation, "distributed_discrete_gaussian", 4.0)
    for site in sites:
        ledger_epsilon = site.ledger.spent().epsilon
        replayed, unsupported = _replay(site.ledger, SHIFT, "rdp")
        assert not unsupported
        assert ledger_epsilon >= replayed - 1e-9
        assert ledger_epsilon == pytest.approx(replayed, rel=1e-9)  # the same curves
        # No PLD of a sum of discrete Gaussians, in dp-accounting or in the ledger.
        _, unsupported = _replay(site.ledger, SHIFT, "pld")
        assert [type(e) for e in unsupported] == [dp_event.ZCDpEvent]


def _composed_pure_epsilon(epsilon: float, count: int, delta: float) -> float:
    """The exact epsilon at ``delta`` of ``count`` compositions of the tight
    pure ``epsilon``-DP pair: loss epsilon (2B - k), B binomial, inverted by
    bisection on its delta(epsilon')."""
    p = 1.0 / (1.0 + math.exp(-epsilon))

    def excess(target: float) -> float:
        return sum(math.comb(count, j) * p**j * (1 - p) ** (count - j)
                   * -math.expm1(target - epsilon * (2 * j - count))
                   for j in range(count + 1) if epsilon * (2 * j - count) > target) - delta

    low, high = 0.0, epsilon * count
    while high - low > 1e-13:
        low, high = ((low + high) / 2, high) if excess((low + high) / 2) > 0 \
            else (low, (low + high) / 2)
    return high


def test_a_single_holder_ledger_of_selections_costs_their_exact_composition(tmp_path):
    (site,) = _sites(tmp_path, 1, "pld")
    federation = LocalFederation([site], codec=FixedPointCodec(GRID))
    dp_frank_wolfe(federation, dim=DIM, radius=1.0, clip_norm=1.0, epsilon=1.0, delta=DELTA,
                   iterations=4, loss="squared", calibration="accountant", route="selection")
    charges = site.ledger.charges()
    assert {c.mechanism.kind for c in charges} == {"report_noisy_laplace"}
    step = charges[0].mechanism.in_adjacency(site.ledger.policy.adjacency).pure_epsilon
    exact = _composed_pure_epsilon(step, len(charges), DELTA)
    ledger = site.ledger.spent().epsilon
    assert ledger >= exact - 1e-9
    # Randomized response is read by dp-accounting under REPLACE_ONE only, its
    # loss rounded up to the PLD's grid: an upper estimate (by up to one grid
    # step a charge) that the ledger, whose losses sit on its grid exactly,
    # does not reach.
    replayed, unsupported = _replay(site.ledger, REPLACE, "pld")
    assert not unsupported
    assert exact - 1e-9 <= ledger <= replayed
    _, unsupported = _replay(site.ledger, SHIFT, "pld")
    assert {type(e) for e in unsupported} == {dp_event.RandomizedResponseDpEvent}


def test_a_replay_of_many_exponential_mechanisms_is_looser_than_the_ledger():
    # dp-accounting has no bounded-range event: the replay reads each step as
    # the pure epsilon-DP pair, the ledger also as epsilon-bounded-range.
    mechanism = ExponentialMechanism(1.0, 0.05)
    ledger = PrivacyAccountant().compose(mechanism, 400).get_epsilon(DELTA)
    replay = dpa.rdp.RdpAccountant(list(DEFAULT_RDP_ORDERS), REPLACE)
    assert ledger < replay.compose(mechanism.to_dp_event(), 400).get_epsilon(DELTA)
