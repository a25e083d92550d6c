"""SelectedAdaptation's candidates (server/algorithms/model_selection/candidates.py).

* A grid of the most private candidates (8), every adapter with its own
  settings, needs 8 chains, each a valid chain name, so it never reaches the
  16 a site keeps for one job; names differing only in how a number is
  written are one candidate and refused.
* ``ball_gd`` only adds a wire id at the end, builds noisy GD around the
  source-only model, and its ``shrink`` setting a free projected copy; bad
  settings are refused with the rule they break.
"""

from __future__ import annotations

import numpy as np
import pytest

from privadapt.common.kernels.reweighted_chains import MAX_CHAINS, check_chain
from privadapt.server.algorithms.base import InvalidParameterError
from privadapt.server.algorithms.gradient_descent.estimators import NoisyGD
from privadapt.server.algorithms.model_selection.candidates import (
    CANDIDATE_IDS,
    candidate_learner,
    candidate_models,
    candidate_names,
    parse_candidates,
)

GRID = ",".join(
    [f"pncnvx_adap_smooth:alpha=0.{i}:iterations=auto" for i in range(1, 5)]
    + [f"pncnvx_adap:penalty={i}.5:step_scale=2" for i in range(4)])


def test_the_largest_grid_needs_at_most_eight_valid_distinct_chains():
    specs = parse_candidates(GRID, "logistic")
    chains = [spec.chain for spec in specs]
    assert len(specs) == 8 and len(set(chains)) == 8 <= MAX_CHAINS
    assert all(check_chain(chain) == chain for chain in chains)
    with pytest.raises(InvalidParameterError):
        parse_candidates(GRID + ",noisy_gd", "logistic")


@pytest.mark.parametrize("pair", [("noisy_gd:iterations=50", "noisy_gd:iterations=+50"),
                                  ("noisy_gd:learning_rate=0.5", "noisy_gd:learning_rate=5e-1"),
                                  ("pncnvx_adap:alpha=0.2:mu=1", "pncnvx_adap:mu=1.0:alpha=.2")])
def test_one_setting_written_two_ways_is_refused_as_a_duplicate(pair):
    with pytest.raises(InvalidParameterError, match="twice"):
        parse_candidates(",".join(pair), "logistic")


def test_ball_gd_is_a_new_wire_id_after_every_existing_one():
    assert CANDIDATE_IDS[:7] == ("source_only", "noisy_gd", "pcnvx_adap", "pcnvx_adap_smooth",
                                 "pncnvx_adap", "pncnvx_adap_smooth", "public_constant")
    assert CANDIDATE_IDS[7] == "ball_gd"


def test_a_shrink_setting_adds_the_shrunk_copy_after_its_trained_model():
    spec, = parse_candidates("ball_gd:radius_factor=1:shrink=0.25", "squared")
    assert spec.settings == {"radius_factor": 1} and spec.shrink == 0.25
    assert spec.model_names == ("ball_gd:radius_factor=1", "ball_gd:radius_factor=1:shrink=0.25")
    plain, _ = parse_candidates("ball_gd, noisy_gd", "logistic")
    assert plain.shrink is None and plain.model_names == ("ball_gd",)
    ids = [CANDIDATE_IDS.index(n) for n in ("source_only", "ball_gd", "ball_gd", "noisy_gd")]
    assert candidate_names(np.array(ids), "ball_gd:shrink=0.5,noisy_gd") == [
        "source_only", "ball_gd", "ball_gd:shrink=0.5", "noisy_gd"]


@pytest.mark.parametrize("text,message", [
    ("ball_gd:shrink=1", r"shrink must be below radius_factor \(1\)"),
    ("ball_gd:radius_factor=0.2:shrink=0.25", r"shrink must be below radius_factor \(0.2\)"),
    ("ball_gd:shrink=0", r"shrink must be a number in \(0, inf\); got '0'"),
    ("ball_gd:shrink=a", r"shrink must be a number in \(0, inf\); got 'a'"),
    ("ball_gd:radius_factor=-1", r"radius_factor must be a number in \(0, inf\)"),
    ("ball_gd:shrink=0.1:shrink=0.2", "sets 'shrink' twice"),
    ("noisy_gd:shrink=0.2", "shrink .* is a setting of 'ball_gd' only"),
    ("ball_gd:alpha=0.2", r"ball_gd takes \['iterations', 'learning_rate', 'radius_factor', "
                          r"'shrink'\]"),
])
def test_a_bad_ball_setting_is_refused_naming_the_candidate_and_the_rule(text, message):
    with pytest.raises(InvalidParameterError, match=message):
        parse_candidates(text, "squared")


def test_ball_gd_builds_noisy_gd_around_the_source_only_model():
    spec, = parse_candidates("ball_gd:radius_factor=0.5:iterations=7", "squared")
    center = np.array([3.0, 4.0])
    settings = {"loss": "squared", "iterations": 100, "learning_rate": 2.0, "radius": 9.0,
                "clip_norm": 1.5, "calibration": "accountant"}
    learner = candidate_learner(spec, settings, 1.0, 1e-6, center=center)
    assert isinstance(learner, NoisyGD)
    assert learner.center is center and learner.average == "tail"
    assert learner.radius == 2.5 and learner.iterations == 7 and learner.clip_norm == 1.5
    with pytest.raises(InvalidParameterError, match="ball_gd needs center"):
        candidate_learner(spec, settings, 1.0, 1e-6)
    with pytest.raises(InvalidParameterError, match="has norm 0"):
        candidate_learner(spec, settings, 1.0, 1e-6, center=np.zeros(2))


def test_the_shrunk_copy_is_the_model_projected_towards_source_only():
    spec, = parse_candidates("ball_gd:shrink=0.25", "squared")
    center = np.array([3.0, 4.0])  # norm 5: the copy's ball has radius 1.25
    far, near = center + np.array([0.0, 2.0]), center + np.array([0.6, 0.0])
    trained, copy = candidate_models(spec, far, center)
    assert trained is far
    np.testing.assert_allclose(copy, center + np.array([0.0, 1.25]))
    np.testing.assert_array_equal(candidate_models(spec, near, center)[1], near)
    unshrunk, = parse_candidates("ball_gd", "squared")
    assert candidate_models(unshrunk, far, center) == [far]


def test_a_job_that_released_nothing_names_only_its_free_models():
    # SelectedAdaptation delivers source-only without training anything when
    # its release could not certify a gain: its result lists the free models
    # only, and the chosen index must not be read as a private candidate.
    ids = [CANDIDATE_IDS.index(n) for n in ("source_only", "public_constant")]
    assert candidate_names(np.array(ids), "ball_gd:radius_factor=1:shrink=0.25") == [
        "source_only", "public_constant"]
