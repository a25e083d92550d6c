"""Selection mechanisms as data: their fields, dict form, epsilon, how they
read under replace-one, how a site re-sensitises them, and what they refuse."""

import json
import math

import numpy as np
import pytest

from privadapt.common.mechanisms import (
    Adjacency,
    ExponentialMechanism,
    GeneralizedExponentialMechanism,
    ReportNoisyMin,
    SelectionMechanism,
    mechanism_from_dict,
    mechanism_to_dict,
)
from privadapt.common.noise.floating import SeededRandomBits

ADD_REMOVE = Adjacency.ADD_REMOVE_ONE
REPLACE = Adjacency.REPLACE_ONE

SELECTIONS = [
    ReportNoisyMin(1.0, 4.0),
    ReportNoisyMin(0.5, 2.0, minimize=False, monotone=True, adjacency=ADD_REMOVE),
    ExponentialMechanism(0.5, 0.2),
    ExponentialMechanism(2.0, 1.5, minimize=False, monotone=True, adjacency=ADD_REMOVE),
    GeneralizedExponentialMechanism((0.0, 1.0, 4.0), 0.5, 0.1),
    GeneralizedExponentialMechanism((2.0,), 0.5, 0.25, minimize=False, adjacency=ADD_REMOVE),
]


@pytest.mark.parametrize("mechanism", SELECTIONS, ids=lambda m: m.summary)
def test_selection_survives_a_json_round_trip(mechanism):
    text = json.dumps(mechanism_to_dict(mechanism))
    assert mechanism_from_dict(json.loads(text)) == mechanism


@pytest.mark.parametrize("mechanism", SELECTIONS, ids=lambda m: m.summary)
def test_selection_releases_an_index_never_a_sum(mechanism):
    assert isinstance(mechanism, SelectionMechanism)
    assert (mechanism.releases_index, mechanism.releases_kernel_sums) == (True, False)


@pytest.mark.parametrize("mechanism", SELECTIONS, ids=lambda m: m.summary)
def test_select_returns_a_candidate_index(mechanism):
    picked = mechanism.select(np.array([0.2, 0.1, 0.4]), SeededRandomBits(1))
    assert isinstance(picked, int) and 0 <= picked < 3


def test_dict_form_names_every_field():
    assert mechanism_to_dict(ReportNoisyMin(1.0, 4.0)) == {
        "kind": "report_noisy_laplace", "adjacency": "replace_one", "sensitivity": 1.0,
        "scale": 4.0, "minimize": True, "monotone": False}
    assert mechanism_to_dict(GeneralizedExponentialMechanism((0.0, 1.0), 0.5, 0.1)) == {
        "kind": "generalized_exponential", "adjacency": "replace_one",
        "sensitivities": [0.0, 1.0], "epsilon": 0.5, "beta": 0.1, "minimize": True}


@pytest.mark.parametrize(
    ("mechanism", "epsilon"),
    [
        (ReportNoisyMin(1.0, 4.0), 0.5),  # 2 Delta / b
        (ReportNoisyMin(1.0, 4.0, monotone=True, adjacency=ADD_REMOVE), 0.25),  # Delta / b
        (ExponentialMechanism(3.0, 0.7), 0.7),
        (GeneralizedExponentialMechanism((0.0, 5.0), 0.3, 0.1), 0.3),
        (ReportNoisyMin(0.0, 4.0), 0.0),
        (ExponentialMechanism(0.0, 0.7), 0.0),
        (GeneralizedExponentialMechanism((0.0, 0.0), 0.3, 0.1), 0.0),
    ],
)
def test_pure_epsilon_follows_from_the_fields(mechanism, epsilon):
    assert mechanism.pure_epsilon == pytest.approx(epsilon)
    assert mechanism.is_free == (epsilon == 0)


def test_exponential_coefficient_halves_without_monotonicity():
    assert ExponentialMechanism(0.5, 1.0).coefficient == 1.0
    assert ExponentialMechanism(0.5, 1.0, monotone=True, adjacency=ADD_REMOVE).coefficient == 2.0


@pytest.mark.parametrize(
    ("mechanism", "replace_one"),
    [
        (ReportNoisyMin(1.0, 4.0, adjacency=ADD_REMOVE), ReportNoisyMin(2.0, 4.0)),
        # A monotone add/remove vector of sensitivity Delta moves by at most
        # Delta, either way, when a record is replaced.
        (ReportNoisyMin(1.0, 4.0, monotone=True, adjacency=ADD_REMOVE), ReportNoisyMin(1.0, 4.0)),
        (ExponentialMechanism(1.0, 0.5, adjacency=ADD_REMOVE), ExponentialMechanism(2.0, 1.0)),
        (ExponentialMechanism(1.0, 0.5, monotone=True, adjacency=ADD_REMOVE),
         ExponentialMechanism(1.0, 1.0)),
        (GeneralizedExponentialMechanism((0.0, 1.0), 0.5, 0.1, adjacency=ADD_REMOVE),
         GeneralizedExponentialMechanism((0.0, 2.0), 1.0, 0.1)),
    ],
)
def test_replace_one_doubles_epsilon_and_keeps_the_randomisation(mechanism, replace_one):
    converted = mechanism.in_adjacency(REPLACE)
    assert converted == replace_one
    assert converted.pure_epsilon == pytest.approx(2 * mechanism.pure_epsilon)


def test_generalized_exponential_is_invariant_to_scaling_sensitivities_and_epsilon():
    losses = np.array([0.3, 0.9, -0.2])
    gem = GeneralizedExponentialMechanism((0.0, 1.0, 4.0), 0.5, 0.1)
    doubled = GeneralizedExponentialMechanism((0.0, 2.0, 8.0), 1.0, 0.1)
    np.testing.assert_allclose(gem.epsilon * gem.normalized_scores(losses),
                               doubled.epsilon * doubled.normalized_scores(losses))


def test_report_noisy_min_keeps_its_scale_for_the_sites_sensitivities():
    charged = ReportNoisyMin(1.0, 4.0).with_score_sensitivities((0.5, 3.0, 2.0), ADD_REMOVE)
    assert charged == ReportNoisyMin(3.0, 4.0, adjacency=ADD_REMOVE)  # the infinity norm


def test_exponential_mechanism_keeps_its_epsilon_for_the_sites_sensitivities():
    plan = ExponentialMechanism(1.0, 0.5, minimize=False)
    charged = plan.with_score_sensitivities((0.5, 3.0), REPLACE)
    assert charged == ExponentialMechanism(3.0, 0.5, minimize=False)


def test_monotonicity_comes_from_the_site_not_from_the_plan():
    plan = ReportNoisyMin(1.0, 4.0, monotone=True, adjacency=ADD_REMOVE)
    assert not plan.with_score_sensitivities((1.0,), ADD_REMOVE).monotone
    assert plan.with_score_sensitivities((1.0,), ADD_REMOVE, monotone=True).monotone


def test_generalized_exponential_takes_per_candidate_sensitivities():
    plan = GeneralizedExponentialMechanism((1.0, 1.0, 1.0), 0.5, 0.1)
    own = plan.with_score_sensitivities((0.0, 0.5, 2.0), REPLACE)
    assert own == GeneralizedExponentialMechanism((0.0, 0.5, 2.0), 0.5, 0.1)
    assert plan.with_score_sensitivities((2.0,), REPLACE).sensitivities == (2.0, 2.0, 2.0)
    with pytest.raises(ValueError, match="2 score sensitivities"):
        plan.with_score_sensitivities((1.0, 2.0), REPLACE)


@pytest.mark.parametrize(
    "build",
    [
        lambda: ReportNoisyMin(1.0, 4.0, monotone=True),  # replace-one
        lambda: ExponentialMechanism(1.0, 4.0, monotone=True, adjacency=REPLACE),
        lambda: ReportNoisyMin(1.0, 4.0).with_score_sensitivities((1.0,), REPLACE,
                                                                  monotone=True),
    ],
)
def test_monotone_scores_are_refused_under_replace_one(build):
    with pytest.raises(ValueError, match="add/remove adjacency only"):
        build()


@pytest.mark.parametrize(
    "data",
    [
        {"kind": "report_noisy_laplace", "adjacency": "replace_one", "sensitivity": 1.0,
         "scale": 0.0, "minimize": True, "monotone": False},
        {"kind": "report_noisy_laplace", "adjacency": "replace_one", "sensitivity": -1.0,
         "scale": 1.0, "minimize": True, "monotone": False},
        {"kind": "report_noisy_laplace", "adjacency": "replace_one", "sensitivity": 1.0,
         "scale": 1.0, "minimize": 1, "monotone": False},
        {"kind": "report_noisy_laplace", "adjacency": "replace_one", "sensitivity": 1.0,
         "scale": 1.0, "minimize": True},
        {"kind": "exponential", "adjacency": "replace_one", "sensitivity": "1",
         "epsilon": 1.0, "minimize": True, "monotone": False},
        {"kind": "exponential", "adjacency": "replace_one", "sensitivity": 1.0,
         "epsilon": math.inf, "minimize": True, "monotone": False},
        {"kind": "exponential", "adjacency": "replace_one", "sensitivity": 1.0,
         "epsilon": 0.0, "minimize": True, "monotone": False},
        {"kind": "exponential", "adjacency": "replace_one", "sensitivity": True,
         "epsilon": 1.0, "minimize": True, "monotone": False},
        {"kind": "generalized_exponential", "adjacency": "replace_one", "sensitivities": [],
         "epsilon": 1.0, "beta": 0.1, "minimize": True},
        {"kind": "generalized_exponential", "adjacency": "replace_one",
         "sensitivities": [1.0, math.nan], "epsilon": 1.0, "beta": 0.1, "minimize": True},
        {"kind": "generalized_exponential", "adjacency": "replace_one", "sensitivities": 1.0,
         "epsilon": 1.0, "beta": 0.1, "minimize": True},
        {"kind": "generalized_exponential", "adjacency": "replace_one", "sensitivities": "ab",
         "epsilon": 1.0, "beta": 0.1, "minimize": True},
        {"kind": "generalized_exponential", "adjacency": "replace_one", "sensitivities": [1.0],
         "epsilon": 1.0, "beta": 1.0, "minimize": True},
        {"kind": "generalized_exponential", "adjacency": "sideways", "sensitivities": [1.0],
         "epsilon": 1.0, "beta": 0.5, "minimize": True},
    ],
)
def test_malformed_selection_description_raises_value_error(data):
    with pytest.raises(ValueError):
        mechanism_from_dict(data)


@pytest.mark.parametrize(
    ("scores", "match"),
    [
        ([0.1, math.nan, 0.3], "NaN or infinite"),
        ([0.1, math.inf, 0.3], "NaN or infinite"),
        ([[0.1, 0.2, 0.3]], "shape"),
        ([], "at least one"),
        ([0.1, 0.2], "3 per-candidate"),
        ("abc", "array"),
    ],
)
def test_select_refuses_malformed_scores(scores, match):
    gem = GeneralizedExponentialMechanism((0.0, 1.0, 4.0), 0.5, 0.1)
    with pytest.raises(ValueError, match=match):
        gem.select(scores, SeededRandomBits(0))


def test_zero_sensitivity_exponential_picks_a_maximiser():
    mechanism = ExponentialMechanism(0.0, 1.0, minimize=False)
    source = SeededRandomBits(3)
    picks = {mechanism.select([0.5, 2.0, 2.0, -1.0], source) for _ in range(200)}
    assert picks == {1, 2}


def test_generalized_exponential_never_picks_a_dominated_constant():
    # Candidates 0 and 1 do not depend on the data (sensitivity 0) and 1 is
    # worse: its normalised score is infinite, its probability 0.
    mechanism = GeneralizedExponentialMechanism((0.0, 0.0, 1.0), 1.0, 0.1)
    source = SeededRandomBits(4)
    assert 1 not in {mechanism.select([0.0, 0.5, 0.2], source) for _ in range(500)}


def test_summary_names_the_mechanism_direction_and_epsilon():
    assert ReportNoisyMin(1.0, 4.0).summary == "report-noisy laplace arg-min eps=0.5"
    assert "arg-max" in ExponentialMechanism(1.0, 0.5, minimize=False).summary
    assert GeneralizedExponentialMechanism((1.0, 2.0), 0.5, 0.1).summary.startswith(
        "generalized-exponential arg-min eps=0.5 beta=0.1")
