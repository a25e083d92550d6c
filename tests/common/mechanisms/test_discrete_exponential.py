"""The exponential mechanism on the grid
(common/mechanisms/discrete_selection.py): its draws follow the exponential
mechanism's law, its neighbours' laws (the sampler's own integer weights)
stay within e^epsilon through the site's own charge, and it is accounted,
serialised and digested like the other selections. Its fixed work:
tests/common/mechanisms/test_fixed_work_exponential.py."""

from __future__ import annotations

import dataclasses
import json
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from privadapt.client.local_federation import LocalFederation
from privadapt.common.accounting.accountant import PrivacyAccountant
from privadapt.common.data.dataset import Dataset
from privadapt.common.errors import QueryRefusedError
from privadapt.common.federation import Query, ReleaseForm
from privadapt.common.kernels import get_kernel
from privadapt.common.mechanisms import (
    Adjacency,
    DiscreteExponentialMechanism,
    ExponentialMechanism,
    mechanism_from_dict,
    mechanism_to_dict,
)
from privadapt.common.mechanisms.discrete_selection import (
    exact_probabilities,
    sampler_probabilities,
)
from privadapt.common.noise.floating import SeededRandomBits
from privadapt.common.numerics.fixed_point import FixedPointCodec
from privadapt.common.secure.query_digest import query_digest
from privadapt.common.wire.messages import mechanism_from_proto, mechanism_to_proto

BITS = 16
STEP = 2.0**-BITS


@pytest.mark.parametrize("minimize", [True, False])
def test_draws_follow_the_exact_law(minimize):
    # Sensitivity 4 steps, epsilon 1: c = 1/8 per step of utility.
    mechanism = DiscreteExponentialMechanism(3.5 * STEP, 1.0, BITS, minimize)
    assert mechanism.grid_sensitivity == 4 and mechanism.coefficient == Fraction(1, 8)
    scores = np.array([0, 3, 8, 8, 20, 40, 200]) * STEP
    law = exact_probabilities(mechanism, scores)
    assert np.argmax(law) == (0 if minimize else 6)
    source = SeededRandomBits(11)
    draws = np.array([mechanism.select(scores, source) for _ in range(6000)])
    observed = np.bincount(draws, minlength=scores.size)
    expected = law * draws.size
    kept = expected > 5  # pool the far tail
    observed = np.append(observed[kept], observed[~kept].sum())
    expected = np.append(expected[kept], expected[~kept].sum())
    if expected[-1] == 0:
        assert observed[-1] == 0
        observed, expected = observed[:-1], expected[:-1]
    assert stats.chisquare(observed, expected).pvalue > 1e-3


def test_data_independent_scores_pick_a_maximiser_uniformly():
    mechanism = DiscreteExponentialMechanism(0.0, 1.0, BITS, minimize=False)
    source = SeededRandomBits(2)
    draws = [mechanism.select(np.array([1.0, 3.0, 3.0, 2.0]), source) for _ in range(400)]
    assert set(draws) == {1, 2} and 150 < draws.count(1) < 250


def test_a_candidate_far_behind_keeps_its_exact_positive_probability():
    """The float Gumbel sampler gives probability exactly 0 beyond ~86 scaled
    units; the exact law does not, so neighbours never differ by an
    impossible output."""
    mechanism = DiscreteExponentialMechanism(STEP, 2.0, BITS, minimize=False)
    law = exact_probabilities(mechanism, np.array([0.0, 200 * STEP]))
    assert 0 < law[0] == pytest.approx(math.exp(-200.0))


def test_accounted_as_the_exponential_mechanism():
    discrete = DiscreteExponentialMechanism(1.0, 0.3, BITS)
    float_em = ExponentialMechanism(1.0, 0.3)
    for delta in (0.0, 1e-6):
        ours = PrivacyAccountant().compose(discrete, 50).get_epsilon(delta)
        theirs = PrivacyAccountant().compose(float_em, 50).get_epsilon(delta)
        assert ours == pytest.approx(theirs, rel=1e-12)


def test_dict_wire_and_digest_cover_every_field():
    mechanism = DiscreteExponentialMechanism(0.5, 1.25, 30, False, True,
                                             Adjacency.ADD_REMOVE_ONE)
    assert mechanism_from_dict(json.loads(json.dumps(mechanism_to_dict(mechanism)))) \
        == mechanism
    assert mechanism_from_proto(mechanism_to_proto(mechanism)) == mechanism
    base = Query("j", "q", "validation_loss", {}, mechanism, fractional_bits=30,
                 form=ReleaseForm.PER_SITE)
    for change in ({"sensitivity": 0.6}, {"epsilon": 1.5}, {"fractional_bits": 31},
                   {"minimize": True}, {"monotone": False}):
        other = dataclasses.replace(mechanism, **change)
        assert query_digest(dataclasses.replace(base, mechanism=other), 1) \
            != query_digest(base, 1)


@pytest.mark.parametrize("fields", [
    {"fractional_bits": 53}, {"fractional_bits": 16.0}, {"epsilon": 0.0},
    {"monotone": True},  # monotone only under add/remove
])
def test_bad_parameters_are_refused(fields):
    data = {"kind": "discrete_exponential", "adjacency": "replace_one", "sensitivity": 1.0,
            "epsilon": 1.0, "fractional_bits": 16, "minimize": True, "monotone": False,
            **fields}
    with pytest.raises(ValueError):
        mechanism_from_dict(data)


DIM = 4
CANDIDATES = np.array([[1.0, -1.0, 0.5, 0.0], [0.0, 0.0, 0.0, 0.0], [3.0, 3.0, 3.0, 3.0],
                       [0.2, 0.1, -0.3, 0.4]])
SCORES = {"candidates": CANDIDATES, "loss": "logistic", "loss_bound": 4.0}


def data(num: int, seed: int) -> Dataset:
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(num, DIM))
    features /= np.maximum(1.0, np.linalg.norm(features, axis=1))[:, None]
    labels = np.where(rng.random(num) < 0.5, -1.0, 1.0)
    return Dataset(features, labels, tuple(f"x{i}" for i in range(DIM)))


def one_site(dataset: Dataset, bits: int = 32) -> LocalFederation:
    federation = LocalFederation.from_datasets([dataset], epsilon_cap=50.0, delta_cap=1e-6,
                                               noise_seed=3)
    federation.codec = FixedPointCodec(bits)
    return federation


def test_a_site_selection_is_charged_exactly_the_plan():
    with one_site(data(150, 0)) as federation:
        mechanism = DiscreteExponentialMechanism(4.0, 0.75, 32)
        for _ in range(4):
            federation.select("validation_loss", SCORES, mechanism)
        (spent,) = federation.privacy_spent(0.0).values()
        assert spent.job.epsilon == pytest.approx(3.0, rel=1e-12)
        assert all(m.epsilon == 0.75 and m.fractional_bits == 32 for m in spent.mechanisms)


def test_a_selection_on_another_grid_is_refused():
    with one_site(data(150, 0), bits=32) as federation:
        with pytest.raises(QueryRefusedError, match="exact on the grid 2\\^-16"):
            federation.select("validation_loss", SCORES,
                              DiscreteExponentialMechanism(4.0, 0.75, 16))
        assert federation.privacy_spent()[federation.sites[0].name].mechanisms == ()


@pytest.mark.parametrize("bits", [16, 32])
@pytest.mark.parametrize("seed", range(4))
def test_neighbours_laws_stay_within_e_to_the_epsilon(bits, seed):
    """Replace one record by a worst-case one (label flipped, far feature):
    the site's own charged mechanism on each neighbour's rounded scores gives
    laws (the ideal one, and the sampler's from its integer weights) whose
    ratio never exceeds e^epsilon, nor e^(epsilon + 2^-50) as charged."""
    base = data(60, seed)
    features, labels = base.features.copy(), base.labels.copy()
    features[0] = CANDIDATES[seed % 2] / max(1.0, np.linalg.norm(CANDIDATES[seed % 2]))
    labels[0] = -labels[0]
    neighbour = Dataset(features, labels, base.feature_names)
    kernel = get_kernel("validation_loss")
    params = kernel.Params.from_wire(SCORES, DIM)
    codec = FixedPointCodec(bits)
    with one_site(base, bits) as federation:
        site = federation.sites[0]
        query = Query("j", "q", "validation_loss", SCORES,
                      DiscreteExponentialMechanism(4.0, 1.0, bits), fractional_bits=bits,
                      form=ReleaseForm.PER_SITE)
        charged = site._admission.admit(query, 1).charged
    laws, sampled, steps = [], [], []
    for dataset in (base, neighbour):
        (scores,) = kernel.compute(dataset, params, {})
        rounded = codec.decode(codec.encode(scores))
        steps.append(np.array(charged.utility_steps(rounded)))
        laws.append(exact_probabilities(charged, rounded))
        sampled.append(sampler_probabilities(charged, rounded))
    assert np.max(np.abs(steps[0] - steps[1])) <= charged.grid_sensitivity
    ratio = np.max(np.abs(np.log(laws[0]) - np.log(laws[1])))
    assert ratio <= charged.epsilon * (1 + 1e-12)
    assert np.max(np.abs(np.log(sampled[0]) - np.log(sampled[1]))) \
        <= charged.pure_epsilon * (1 + 1e-12)
