"""Mechanisms know themselves: their dict form, how they read under another
adjacency, the noise they add, and the flags an accountant or a site reads
(privadapt.common.mechanisms). One behaviour per test."""

import json
import math

import numpy as np
import pytest
from scipy import stats

from privadapt.common.accounting.accountant import PrivacyAccountant
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
    mechanism_from_dict,
    mechanism_to_dict,
)
from privadapt.common.noise.floating import SeededRandomBits

ADD_REMOVE = Adjacency.ADD_REMOVE_ONE
REPLACE = Adjacency.REPLACE_ONE
SAMPLES = 40_000
ALPHA = 1e-3

ONE_OF_EACH_KIND = [
    GaussianMechanism((GaussianBlock(1.0, 2.5), GaussianBlock(0.0, 1e-3))),
    GaussianMechanism.single(0.5, 1.7, ADD_REMOVE, sampling_rate=0.01),
    LaplaceMechanism(2.0, 0.25, ADD_REMOVE),
    DiscreteLaplaceMechanism(2.0, 1024.5, 10, ADD_REMOVE),
    DistributedDiscreteGaussianMechanism(2.0, 1024.5, 3, 10, ADD_REMOVE),
    PureDpEvent(0.3),
    ZCdpEvent(0.125, ADD_REMOVE),
    NoNoise((0.0, 3.0)),
    ReportNoisyMin(1.0, 4.0, monotone=True, adjacency=ADD_REMOVE),
    DiscreteReportNoisyMin(1.0, 4096.0, 12, monotone=True, adjacency=ADD_REMOVE),
    ExponentialMechanism(0.5, 0.2, minimize=False),
    DiscreteExponentialMechanism(0.5, 0.2, 20, minimize=False),
    GeneralizedExponentialMechanism((0.0, 1.0, 4.0), 0.5, 0.1),
]
WITH_LOCAL_BLOCKS = GaussianMechanism(
    (GaussianBlock(1.0, 2.0),), ADD_REMOVE, local_blocks=(GaussianBlock(0.5, 3.0),)
)


def ks_pvalue(samples: np.ndarray, sigma: float) -> float:
    return stats.kstest(samples.ravel(), stats.norm(scale=sigma).cdf).pvalue


# --- the dict form and the kind table --------------------------------------------------


@pytest.mark.parametrize("mechanism", ONE_OF_EACH_KIND, ids=lambda m: m.kind)
def test_every_kind_survives_a_json_round_trip(mechanism):
    text = json.dumps(mechanism_to_dict(mechanism))
    assert mechanism_from_dict(json.loads(text)) == mechanism


def test_one_of_each_kind_covers_the_kind_table():
    assert {m.kind for m in ONE_OF_EACH_KIND} == set(MECHANISM_KINDS)


@pytest.mark.parametrize("mechanism", ONE_OF_EACH_KIND, ids=lambda m: m.kind)
def test_the_kind_table_maps_each_kind_to_its_class(mechanism):
    assert MECHANISM_KINDS[mechanism.kind] is type(mechanism)


def test_local_blocks_survive_a_json_round_trip():
    text = json.dumps(mechanism_to_dict(WITH_LOCAL_BLOCKS))
    assert mechanism_from_dict(json.loads(text)) == WITH_LOCAL_BLOCKS


def test_local_blocks_are_stored_under_their_own_key():
    assert mechanism_to_dict(WITH_LOCAL_BLOCKS) == {
        "kind": "gaussian", "adjacency": "add_remove_one",
        "blocks": [[1.0, 2.0]], "local_blocks": [[0.5, 3.0]],
    }


def test_gaussian_without_local_blocks_keeps_its_old_dict():
    data = mechanism_to_dict(GaussianMechanism((GaussianBlock(1.0, 2.0),)))
    assert data == {"kind": "gaussian", "adjacency": "replace_one", "blocks": [[1.0, 2.0]]}


def test_unknown_kind_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown mechanism kind 'cauchy'.*gaussian"):
        mechanism_from_dict({"kind": "cauchy", "adjacency": "replace_one"})


def test_sampled_gaussian_cannot_carry_local_blocks():
    with pytest.raises(ValueError, match="local blocks"):
        GaussianMechanism((GaussianBlock(1.0, 2.0),), ADD_REMOVE, 0.5,
                          local_blocks=(GaussianBlock(1.0, 2.0),))


# --- in_adjacency ----------------------------------------------------------------------


def test_in_the_same_adjacency_is_identity():
    mechanism = LaplaceMechanism(1.0, 2.0, ADD_REMOVE)
    assert mechanism.in_adjacency(ADD_REMOVE) is mechanism


def test_add_remove_gaussian_in_replace_one_doubles_sensitivity_keeps_sigma():
    mechanism = GaussianMechanism((GaussianBlock(1.0, 3.0), GaussianBlock(0.5, 2.0)), ADD_REMOVE)
    assert mechanism.in_adjacency(REPLACE) == GaussianMechanism(
        (GaussianBlock(2.0, 3.0), GaussianBlock(1.0, 2.0)), REPLACE
    )


def test_add_remove_gaussian_in_replace_one_doubles_local_blocks_too():
    assert WITH_LOCAL_BLOCKS.in_adjacency(REPLACE) == GaussianMechanism(
        (GaussianBlock(2.0, 2.0),), REPLACE, local_blocks=(GaussianBlock(1.0, 3.0),)
    )


def test_add_remove_laplace_in_replace_one_doubles_sensitivity():
    expressed = LaplaceMechanism(1.0, 4.0, ADD_REMOVE).in_adjacency(REPLACE)
    assert expressed == LaplaceMechanism(2.0, 4.0, REPLACE)
    assert expressed.epsilon == 0.5


def test_add_remove_pure_event_in_replace_one_doubles_epsilon():
    assert PureDpEvent(0.3, ADD_REMOVE).in_adjacency(REPLACE) == PureDpEvent(0.6, REPLACE)


def test_add_remove_zcdp_in_replace_one_quadruples_rho():
    assert ZCdpEvent(0.1, ADD_REMOVE).in_adjacency(REPLACE) == ZCdpEvent(0.4, REPLACE)


def test_add_remove_no_noise_in_replace_one_doubles_sensitivities():
    expressed = NoNoise((0.0, 1.5), ADD_REMOVE).in_adjacency(REPLACE)
    assert expressed == NoNoise((0.0, 3.0), REPLACE)


@pytest.mark.parametrize(
    "mechanism",
    [
        GaussianMechanism.single(1.0, 2.0, REPLACE),
        LaplaceMechanism(1.0, 2.0, REPLACE),
        PureDpEvent(1.0, REPLACE),
        ZCdpEvent(1.0, REPLACE),
        NoNoise((0.0,), REPLACE),
    ],
)
def test_replace_one_cannot_be_expressed_in_add_remove(mechanism):
    with pytest.raises(ValueError, match="cannot be accounted under"):
        mechanism.in_adjacency(ADD_REMOVE)


def test_sampled_release_cannot_be_expressed_in_replace_one():
    sampled = GaussianMechanism.single(1.0, 2.0, ADD_REMOVE, sampling_rate=0.1)
    with pytest.raises(ValueError, match="add/remove adjacency only"):
        sampled.in_adjacency(REPLACE)


# --- what a mechanism says about itself ------------------------------------------------


def test_local_blocks_count_in_the_noise_multiplier_as_trailing_blocks_do():
    trailing = GaussianMechanism((GaussianBlock(1.0, 2.0), GaussianBlock(0.5, 3.0)), ADD_REMOVE)
    assert WITH_LOCAL_BLOCKS.noise_multiplier == trailing.noise_multiplier
    assert WITH_LOCAL_BLOCKS.sensitivities == trailing.sensitivities


def test_local_blocks_account_as_trailing_blocks_do():
    trailing = GaussianMechanism((GaussianBlock(1.0, 2.0), GaussianBlock(0.5, 3.0)), ADD_REMOVE)
    explicit = PrivacyAccountant(REPLACE).compose(WITH_LOCAL_BLOCKS, 7).get_epsilon(1e-5)
    legacy = PrivacyAccountant(REPLACE).compose(trailing, 7).get_epsilon(1e-5)
    assert explicit == legacy


def test_noise_scales_cover_released_blocks_only():
    assert WITH_LOCAL_BLOCKS.noise_scales == (2.0,)


def test_with_sensitivities_takes_released_then_local_ones():
    charged = WITH_LOCAL_BLOCKS.with_sensitivities((4.0, 5.0), REPLACE)
    assert charged.blocks == (GaussianBlock(4.0, 2.0),)
    assert charged.local_blocks == (GaussianBlock(5.0, 3.0),)


@pytest.mark.parametrize(
    ("mechanism", "norm"),
    [(GaussianMechanism.single(1.0, 1.0), "l2"), (LaplaceMechanism(1.0, 1.0), "l1"),
     (NoNoise(), "l2")],
)
def test_noise_norm_is_the_norm_its_sensitivity_is_measured_in(mechanism, norm):
    assert mechanism.noise_norm == norm


@pytest.mark.parametrize("mechanism", ONE_OF_EACH_KIND, ids=lambda m: m.kind)
def test_only_kernel_mechanisms_release_kernel_sums(mechanism):
    assert mechanism.releases_kernel_sums == (
        mechanism.kind not in ("pure_dp", "zcdp") and not mechanism.releases_index)


@pytest.mark.parametrize(
    ("mechanism", "free", "non_private"),
    [
        (GaussianMechanism((GaussianBlock(0.0, 1.0),)), True, False),
        (GaussianMechanism.single(1.0, 1.0), False, False),
        (LaplaceMechanism(0.0, 1.0), True, False),
        (PureDpEvent(0.0), True, False),
        (ZCdpEvent(0.1), False, False),
        (NoNoise((0.0, 0.0)), True, False),
        (NoNoise((0.0, 1.0)), False, True),
    ],
)
def test_free_and_non_private_follow_from_the_fields(mechanism, free, non_private):
    assert (mechanism.is_free, mechanism.is_non_private) == (free, non_private)


@pytest.mark.parametrize(
    ("mechanism", "epsilon"),
    [(LaplaceMechanism(1.0, 4.0), 0.25), (PureDpEvent(0.3), 0.3),
     (GaussianMechanism.single(1.0, 1.0), math.inf), (ZCdpEvent(0.1), math.inf)],
)
def test_pure_epsilon_is_finite_for_pure_mechanisms_only(mechanism, epsilon):
    assert mechanism.pure_epsilon == epsilon


def test_laplace_noise_multiplier_is_scale_over_sensitivity():
    assert LaplaceMechanism(2.0, 5.0).noise_multiplier == 2.5


def test_no_noise_with_sensitivity_has_noise_multiplier_zero():
    assert NoNoise((1.0,)).noise_multiplier == 0.0 and math.isinf(NoNoise().noise_multiplier)


# --- the noise they add ----------------------------------------------------------------


def test_gaussian_share_has_variance_sigma_squared_over_honest_count():
    sigma, sites, tolerance = 2.0, 6, 2
    mechanism = GaussianMechanism.single(1.0, sigma)
    (share,) = mechanism.noise_shares([(SAMPLES,)], sites, tolerance, SeededRandomBits(7))
    assert ks_pvalue(share, sigma / math.sqrt(sites - tolerance)) > ALPHA


def test_each_released_block_gets_its_own_sigma():
    mechanism = GaussianMechanism((GaussianBlock(1.0, 1.0), GaussianBlock(1.0, 4.0)))
    small, large = mechanism.noise_shares([(SAMPLES,), (SAMPLES,)], 1, 0, SeededRandomBits(3))
    assert ks_pvalue(small, 1.0) > ALPHA and ks_pvalue(large, 4.0) > ALPHA


def test_noise_shares_have_the_requested_shapes():
    mechanism = LaplaceMechanism(1.0, 2.0)
    (share,) = mechanism.noise_shares([(3, 4)], 3, 1, SeededRandomBits(0))
    assert share.shape == (3, 4)


def test_no_noise_shares_are_zero():
    (share,) = NoNoise().noise_shares([(5,)], 3, 0, SeededRandomBits(0))
    assert share.dtype == np.float64 and not share.any()


def test_laplace_share_sums_to_laplace_noise_over_honest_sites():
    scale, sites, tolerance = 1.5, 4, 1
    source = SeededRandomBits(11)
    mechanism = LaplaceMechanism(1.0, scale)
    total = sum(mechanism.noise_shares([(SAMPLES,)], sites, tolerance, source)[0]
                for _ in range(sites - tolerance))
    assert stats.kstest(total, stats.laplace(scale=scale).cdf).pvalue > ALPHA


def test_local_blocks_get_full_sigma_noise_whatever_the_number_of_sites():
    (noise,) = WITH_LOCAL_BLOCKS.local_noise([(SAMPLES,)], SeededRandomBits(5))
    assert ks_pvalue(noise, 3.0) > ALPHA


def test_trailing_blocks_serve_as_local_blocks_for_older_mechanisms():
    trailing = GaussianMechanism((GaussianBlock(1.0, 2.0), GaussianBlock(0.5, 3.0)))
    (released,) = trailing.noise_shares([(SAMPLES,)], 1, 0, SeededRandomBits(4))
    (local,) = trailing.local_noise([(SAMPLES,)], SeededRandomBits(5))
    assert ks_pvalue(released, 2.0) > ALPHA and ks_pvalue(local, 3.0) > ALPHA


def test_laplace_refuses_local_blocks():
    with pytest.raises(ValueError, match="Gaussian noise only"):
        LaplaceMechanism(1.0, 1.0).local_noise([(3,)])
